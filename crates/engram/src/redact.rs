//! Secrets out of text that leaves for an LLM or enters memory: API keys, bearer tokens,
//! private keys and passwords in common formats become placeholders like `[REDACTED:api_key]`.

use std::sync::LazyLock;

use regex::Regex;

/// What each pattern catches, with the placeholder's name.
static PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        (
            "private_key",
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
        ),
        // Provider keys: OpenAI / Anthropic (sk-...), GitHub, Slack, AWS access keys, Google.
        (
            "api_key",
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{35})",
        ),
        ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9_\-\.=:+/]{16,}"),
        (
            "password",
            r#"(?i)\b(password|passwd|pwd|secret|api[_-]?key|access[_-]?token)(["']?\s*[:=]\s*["']?)[^\s"',;]{4,}"#,
        ),
    ]
    .into_iter()
    .filter_map(|(name, pattern)| Regex::new(pattern).ok().map(|r| (name, r)))
    .collect()
});

/// Replaces the secrets in `text`; returns the new text and how many were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let mut out = text.to_owned();
    let mut count = 0;
    for (name, pattern) in PATTERNS.iter() {
        if !pattern.is_match(&out) {
            continue;
        }
        let replaced = pattern.replace_all(&out, |caps: &regex::Captures<'_>| {
            count += 1;
            if *name == "password" {
                // Keep the key name, so the text still reads.
                format!("{}{}[REDACTED:{name}]", &caps[1], &caps[2])
            } else {
                format!("[REDACTED:{name}]")
            }
        });
        out = replaced.into_owned();
    }
    (out, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_secrets_become_placeholders() {
        let text = "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123\n\
                    curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig' https://x\n\
                    db password: hunter22 and token ghp_abcdefghijklmnopqrstuvwxyz0123456789\n\
                    -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n\
                    aws AKIAIOSFODNN7EXAMPLE; the file src/lib.rs has 47 lines";
        let (out, n) = redact(text);
        assert_eq!(n, 6, "{out}");
        for secret in [
            "sk-proj-abc",
            "eyJhbGci",
            "hunter22",
            "ghp_abc",
            "MIIEpAIB",
            "AKIAIOSF",
        ] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
        assert!(out.contains("password: [REDACTED:password]"), "{out}");
        assert!(
            out.contains("src/lib.rs has 47 lines"),
            "ordinary text stays"
        );
        assert_eq!(redact("nothing secret in src/main.rs").1, 0);
    }
}
