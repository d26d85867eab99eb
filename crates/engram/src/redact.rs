//! Secrets out of text that leaves for an LLM or enters memory: API keys, tokens, private keys,
//! passwords and connection strings become placeholders like `[REDACTED:api_key]`.
//!
//! The rules follow the families secret scanners know (provider key prefixes, JWTs, PEM blocks,
//! URLs with a password, `key = value` assignments, a password said in prose), each written so
//! that code and paths stay readable: an assignment whose value is code (`password = None`,
//! `secret = self.secret`, `key = get_key()`) is left alone, and only the secret itself is
//! replaced where a key name or a URL around it still reads. Redacting twice changes nothing.
//! What these rules replace on the dev data (36,350 messages of coding agents, support agents
//! and long chats) is measured by `cargo run --example redaction_scan`.

use std::ops::Range;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// A secret found in a text: what kind, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The placeholder's name: `private_key`, `api_key`, `jwt`, `bearer_token`, `basic_auth`,
    /// `aws_secret_key`, `connection_string`, `password`.
    pub kind: &'static str,
    /// The secret's bytes in the text (the value only, not the key name before it).
    pub range: Range<usize>,
}

/// One rule: a pattern, the group that holds the secret (0: the whole match) and, for the rules
/// that also match code, a check that says whether this match is a secret.
struct Rule {
    kind: &'static str,
    pattern: Regex,
    group: usize,
    accept: Accept,
}

/// Whether a match of a rule is a secret (given the match and the whole text).
type Accept = fn(&Captures<'_>, &str) -> bool;

fn always(_: &Captures<'_>, _: &str) -> bool {
    true
}

/// The rules, most specific first: a span one rule replaced is not looked at by later ones.
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rules: [(&str, &str, usize, Accept); 9] = [
        (
            "private_key",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
            0,
            always,
        ),
        // Keys whose prefix names their provider: OpenAI and Anthropic (sk-), Stripe, GitHub,
        // GitLab, Slack (tokens and webhooks), AWS access key ids, Google (API keys, OAuth
        // client secrets and tokens), Hugging Face, npm, PyPI, SendGrid, Twilio, Shopify,
        // DigitalOcean, Azure AD client secrets.
        (
            "api_key",
            concat!(
                r"\b(?:sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",
                r"|[sr]k_(?:live|test|prod)_[A-Za-z0-9]{16,}",
                r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,}",
                r"|glpat-[A-Za-z0-9_\-]{20,}",
                r"|xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-[0-9]-[A-Za-z0-9\-]{10,}",
                r"|hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}",
                r"|(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}",
                r"|AIza[0-9A-Za-z_\-]{35}|GOCSPX-[A-Za-z0-9_\-]{28}|ya29\.[0-9A-Za-z_\-]{20,}",
                r"|hf_[A-Za-z]{30,}|npm_[A-Za-z0-9]{36}|pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{40,}",
                r"|SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}|SK[0-9a-f]{32}",
                r"|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}|do[por]_v1_[a-f0-9]{64}",
                r"|[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34})\b",
            ),
            0,
            always,
        ),
        // A JSON Web Token: a header and a payload (both JSON, so both start `eyJ`), signed.
        (
            "jwt",
            r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
            0,
            always,
        ),
        (
            "bearer_token",
            r"(?i)\bbearer\s+[A-Za-z0-9_\-.=:+/~]{16,}",
            0,
            always,
        ),
        (
            "basic_auth",
            r"(?i)\bauthorization\b[\x22']?[ \t]*[:=][ \t]*[\x22']?basic[ \t]+([A-Za-z0-9+/]{8,}={0,2})",
            1,
            always,
        ),
        // A password in a URL (`postgres://app:s3cret@db/prod`), an Azure storage key or a
        // shared access signature: the secret goes, the rest of the address stays.
        (
            "connection_string",
            r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@\x22'<>]+:([^\s@/\x22'<>]{3,})@|\bAccountKey=([A-Za-z0-9+/=]{20,})|\b(?:SharedAccessSignature|sig)=([A-Za-z0-9%+/=]{20,})",
            0,
            url_password,
        ),
        // An AWS secret access key: 40 characters of base64 that mix upper case, lower case and
        // digits and hold a `/` or `+` (what a path or a hash does not), or any 40 after a key
        // name that says what it is.
        (
            "aws_secret_key",
            r"(?i:aws_?secret_?(?:access_?)?key|secret_?access_?key)[\x22']?[ \t]*[:=][ \t]*[\x22']?([A-Za-z0-9/+]{40})\b|(?:^|[^A-Za-z0-9/+=_.\-])([A-Za-z0-9/+]{40})\.?(?:$|[^A-Za-z0-9/+=_.\-])",
            0,
            aws_secret,
        ),
        // `password = value`, `DB_PASSWORD=value`, `"api_key": "value"`, `pwd: value`: the
        // whole value (quoted, everything between the quotes), unless it is code.
        (
            "password",
            concat!(
                r#"(?i)(?:^|[^A-Za-z0-9_.\-])([A-Za-z0-9_.\-]*?(?:pass(?:word|wd|phrase)|pwd|secret|token|api[_-]?key|private[_-]?key|access[_-]?key)[A-Za-z0-9_\-]*)"#,
                r#"["']?([ \t]*)(?::=|[:=])[ \t]*"#,
                r#"(?:"([^"\n]{3,})"|'([^'\n]{3,})'|`([^`\n]{3,})`|([^\s"'`,;]{4,}))"#,
            ),
            ASSIGNED_VALUE,
            assigned_secret,
        ),
        // A password in prose: "my password is swordfish", "the wifi password was hunter22",
        // "the password for the admin panel is \"Blue$ky-42\"", "my password's hunter2".
        (
            "password",
            concat!(
                r#"(?i)\b(?:(my|our|your|his|her|their|the)\s+(?:[a-z-]+\s+){0,2}?)?(?:password|passphrase|passcode|pin code)"#,
                r#"(?:\s+(?:for|of|to|on|at)(?:\s+[\w.@:/-]+){1,4}?)?"#,
                r#"(?:\s+(?:is|was|will be)\s*:?\s+|'s\s+|’s\s+)"#,
                r#"(?:["'“]([^"'”\n]{3,})["'”]|([^\s"'”]{3,}))"#,
            ),
            2,
            said_password,
        ),
    ];
    rules
        .into_iter()
        .map(|(kind, pattern, group, accept)| Rule {
            kind,
            pattern: Regex::new(pattern).expect("the redaction patterns are valid"),
            group,
            accept,
        })
        .collect()
});

/// The span of `caps`' secret: the first group from `group` on that matched (`0`: the first
/// group that matched, else the whole match). A value in quotes is whole; a bare value loses
/// the sentence punctuation after it, and an assigned one only what closes a bracket or a
/// sentence (`password: Sup3rS3cret!` keeps its `!`).
fn secret_span(caps: &Captures<'_>, group: usize, text: &str) -> Range<usize> {
    let m = if group == 0 {
        (1..caps.len())
            .find_map(|i| caps.get(i))
            .or_else(|| caps.get(0))
    } else {
        (group..caps.len()).find_map(|i| caps.get(i))
    }
    .expect("a rule's match has its secret's group");
    let mut value = &text[m.range()];
    if group > 0 {
        // A value in text that quotes code ends at an escape (`None:\n`).
        value = value.split('\\').next().unwrap_or_default();
    }
    let quoted = m.start() > 0
        && text[..m.start()].ends_with(['"', '\'', '`', '“'])
        && text[m.end()..].starts_with(['"', '\'', '`', '”']);
    let value = if quoted {
        value
    } else if group == ASSIGNED_VALUE {
        value.trim_end_matches(['.', ',', ')', ']', '}'])
    } else {
        value.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}'])
    };
    m.start()..m.start() + value.len()
}

/// The first of the assignment rule's value groups (the name is group 1, the spaces before
/// the sign group 2).
const ASSIGNED_VALUE: usize = 3;

fn url_password(caps: &Captures<'_>, text: &str) -> bool {
    let span = secret_span(caps, 0, text);
    let value = &text[span];
    !is_placeholder(value) && !names_itself(value)
}

fn aws_secret(caps: &Captures<'_>, _: &str) -> bool {
    if caps.get(1).is_some() {
        return true;
    }
    let Some(m) = caps.get(2) else { return false };
    let key = m.as_str();
    key.contains(['/', '+'])
        && key.bytes().any(|b| b.is_ascii_uppercase())
        && key.bytes().any(|b| b.is_ascii_lowercase())
        && key.bytes().any(|b| b.is_ascii_digit())
        // A path's or a name's letters change case once a word; a random key's, every other.
        && case_changes(key) >= 6
}

/// How often the case changes between two adjacent letters.
fn case_changes(text: &str) -> usize {
    text.as_bytes()
        .windows(2)
        .filter(|w| {
            w[0].is_ascii_alphabetic()
                && w[1].is_ascii_alphabetic()
                && w[0].is_ascii_uppercase() != w[1].is_ascii_uppercase()
        })
        .count()
}

/// Whether a key's name says its value is a secret: it holds `password`, `passwd`,
/// `passphrase` or `secret` (`PGPASSWORD`, `client_secret`), or ends in `pwd`, `token`, `apikey`,
/// `privatekey` or `accesskey`, separators and a number after it aside (`db_pwd`,
/// `GITHUB_TOKEN_2`, `x-api-key`). A name that only starts with one (`tokens`, `tokenizer`,
/// `token_type`, `max_tokens`) does not.
fn names_a_secret(name: &str) -> bool {
    let compact: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    // A number after the name counts one of several (`DB_PASSWORD_2`, `token1`).
    let compact = compact.trim_end_matches(|c: char| c.is_ascii_digit());
    ["password", "passwd", "passphrase", "secret"]
        .iter()
        .any(|w| compact.contains(w))
        || ["pwd", "token", "apikey", "privatekey", "accesskey"]
            .iter()
            .any(|w| compact.ends_with(w))
}

/// A value assigned to a secret's key is a secret unless it is code: a call or an index
/// (`get_key()`, `settings['PASSWORD']`), an attribute (`self.secret`), a keyword (`None`), a
/// variable named like the key (`password = raw_password`), a placeholder (`$SECRET`), or a
/// word of prose after a colon (`pwd: Shows the current directory`). A shell variable
/// (`DB_PASSWORD=P@ss.w0rd`) holds a value, never code.
fn assigned_secret(caps: &Captures<'_>, text: &str) -> bool {
    let Some(name) = caps.get(1) else {
        return false;
    };
    if !names_a_secret(name.as_str()) {
        return false;
    }
    let span = secret_span(caps, ASSIGNED_VALUE, text);
    let value = &text[span.clone()];
    if value.is_empty() || is_placeholder(value) || names_itself(value) {
        return false;
    }
    // A quoted value that starts or ends with a space is prose between code spans (`passwd=`
    // in function calls? The `db=`), and a keyword is code's "no value", quoted or not.
    if value.trim() != value || KEYWORDS.contains(&value.to_ascii_lowercase().as_str()) {
        return false;
    }
    let bare = caps.get(6).is_some();
    if !bare {
        return true;
    }
    let whole = caps.get(0).map_or("", |m| m.as_str());
    let shell = !name.as_str().bytes().any(|b| b.is_ascii_lowercase())
        && caps.get(2).is_some_and(|sp| sp.as_str().is_empty())
        && whole.contains(&format!("{}=", name.as_str()));
    if shell {
        return true;
    }
    let key = name.as_str().to_ascii_lowercase();
    let lower = value.to_ascii_lowercase();
    let identifier = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    let prose = whole.contains(':')
        && value.bytes().all(|b| b.is_ascii_alphabetic())
        && text[span.end..]
            .strip_prefix(' ')
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_alphabetic()));
    // The word that makes the key a secret's: a value that holds it too is a variable named
    // like the key (`password = raw_password`), not a password (`simplepass123`).
    let word = [
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "pwd",
        "key",
    ]
    .into_iter()
    .find(|w| key.contains(w));
    let code = value.contains(['(', '[', '{', '<', '>'])
        || KEYWORDS.contains(&lower.trim_end_matches(['.', ',', ':', ';', ')', ']', '}']))
        || (identifier
            && value.contains('.')
            && value.chars().next().is_some_and(char::is_alphabetic))
        || (identifier && word.is_some_and(|w| lower.contains(w)));
    !code && !prose
}

/// "My password is X": X is a secret unless it is a word that describes a password ("correct",
/// "required", "None" in code). Without a possessive ("the password is X"), only a value with a
/// digit or a symbol counts, which a word of prose does not have; a value in quotes always
/// does.
fn said_password(caps: &Captures<'_>, text: &str) -> bool {
    let span = secret_span(caps, 2, text);
    let value = &text[span];
    let lower = value.to_ascii_lowercase();
    if value.len() < 4
        || is_placeholder(value)
        || names_itself(value)
        || KEYWORDS.contains(&lower.as_str())
    {
        return false;
    }
    if DESCRIPTIONS.contains(&lower.as_str())
        || ["ed", "ing", "ly", "ble"]
            .iter()
            .any(|end| lower.ends_with(end))
    {
        return false;
    }
    let quoted = caps.get(2).is_some();
    let possessive = caps
        .get(1)
        .is_some_and(|p| !p.as_str().eq_ignore_ascii_case("the"));
    quoted || possessive || value.bytes().any(|b| !b.is_ascii_alphabetic())
}

/// Values that say they stand for a secret rather than being one: `password`, `mypassword`,
/// `secret`, `your-api-key`, `changeme`, `fake-key`.
fn names_itself(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    [
        "password",
        "passwd",
        "secret",
        "changeme",
        "example",
        "placeholder",
        "dummy",
        "fake",
    ]
    .iter()
    .any(|w| lower.contains(w))
        || lower.starts_with("your")
}

/// Values that are not secrets but names for one: variables, templates, masks.
fn is_placeholder(value: &str) -> bool {
    value.starts_with(['$', '{', '<', '%', '*', '[', '('])
        || value
            .bytes()
            .all(|b| b == b'x' || b == b'X' || b == b'*' || b == b'.')
}

/// Code's words for "no value".
const KEYWORDS: [&str; 10] = [
    "none",
    "null",
    "nil",
    "true",
    "false",
    "undefined",
    "self",
    "this",
    "os.environ",
    "env",
];

/// Words that say something about a password rather than being one.
const DESCRIPTIONS: [&str; 34] = [
    "incorrect",
    "correct",
    "wrong",
    "invalid",
    "valid",
    "required",
    "missing",
    "empty",
    "blank",
    "same",
    "different",
    "strong",
    "weak",
    "secure",
    "insecure",
    "long",
    "short",
    "unique",
    "optional",
    "mandatory",
    "sensitive",
    "case-sensitive",
    "secret",
    "private",
    "public",
    "fine",
    "okay",
    "good",
    "here",
    "there",
    "below",
    "above",
    "still",
    "also",
];

/// The secrets in `text`, in order, none overlapping.
pub fn findings(text: &str) -> Vec<Finding> {
    let mut found: Vec<Finding> = Vec::new();
    for rule in RULES.iter() {
        if !rule.pattern.is_match(text) {
            continue;
        }
        for caps in rule.pattern.captures_iter(text) {
            if !(rule.accept)(&caps, text) {
                continue;
            }
            let range = secret_span(&caps, rule.group, text);
            if range.is_empty()
                || found
                    .iter()
                    .any(|f| f.range.start < range.end && range.start < f.range.end)
            {
                continue;
            }
            found.push(Finding {
                kind: rule.kind,
                range,
            });
        }
    }
    found.sort_by_key(|f| f.range.start);
    found
}

/// Replaces the secrets in `text`; returns the new text and how many were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let found = findings(text);
    if found.is_empty() {
        return (text.to_owned(), 0);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in &found {
        out.push_str(&text[at..f.range.start]);
        out.push_str("[REDACTED:");
        out.push_str(f.kind);
        out.push(']');
        at = f.range.end;
    }
    out.push_str(&text[at..]);
    (out, found.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The secret of each family, in the context it is usually met in.
    const SECRETS: [(&str, &str, &str); 24] = [
        (
            "api_key",
            "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123",
            "sk-proj-abc",
        ),
        (
            "api_key",
            "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345",
            "sk-ant-api03",
        ),
        (
            "bearer_token",
            "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig' https://x",
            "eyJhbGci",
        ),
        (
            "api_key",
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 here",
            "ghp_abc",
        ),
        (
            "private_key",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "MIIEpAIB",
        ),
        ("api_key", "aws AKIAIOSFODNN7EXAMPLE; ok", "AKIAIOSF"),
        (
            "aws_secret_key",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtn",
        ),
        (
            "aws_secret_key",
            "the secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY, keep it",
            "wJalrXUtn",
        ),
        ("password", "my password is hunter2", "hunter2"),
        ("password", "My email password is swordfish.", "swordfish"),
        ("password", "db password: hunter22 and more", "hunter22"),
        (
            "password",
            r#"{"client_secret": "d8f7a6s5d4f3g2h1"}"#,
            "d8f7a6s5",
        ),
        (
            "api_key",
            "GOOGLE_API_KEY=AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
            "AIzaSyA1",
        ),
        (
            "api_key",
            "client secret GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz12",
            "GOCSPX-",
        ),
        (
            "private_key",
            r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----\n"}"#,
            "MIIEvQ",
        ),
        (
            "connection_string",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycGx5d2FsZG8=;EndpointSuffix=core.windows.net",
            "Zm9vYmFy",
        ),
        (
            "api_key",
            "azure client secret abc8Q~AbCdEfGhIjKlMnOpQrStUvWxYz0123456",
            "8Q~AbCd",
        ),
        (
            "api_key",
            "SLACK_BOT_TOKEN=xoxb-123456789012-1234567890123-AbCdEfGhIjKl",
            "xoxb-",
        ),
        (
            "api_key",
            "post to https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX now",
            "T00000000/B0",
        ),
        (
            "api_key",
            "stripe sk_live_51Habcdefghijklmnopqrstuv",
            "sk_live_51H",
        ),
        (
            "jwt",
            "id_token=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dGhpcyBpcyBhIHNpZ25hdHVyZQ",
            "eyJzdWIi",
        ),
        (
            "connection_string",
            "DATABASE_URL=postgres://app:s3cr3t-pw@db.internal:5432/prod",
            "s3cr3t-pw",
        ),
        (
            "connection_string",
            "mysql://root:hunter2@localhost/test",
            "hunter2",
        ),
        (
            "basic_auth",
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "dXNlcjpw",
        ),
    ];

    #[test]
    fn every_family_becomes_a_placeholder() {
        for (kind, text, secret) in SECRETS {
            let (out, n) = redact(text);
            assert!(n >= 1, "{kind}: nothing found in {text:?}");
            assert!(!out.contains(secret), "{kind}: {secret} leaked: {out}");
            assert!(
                out.contains(&format!("[REDACTED:{kind}]")),
                "{kind}: {text:?} -> {out}"
            );
            assert_eq!(
                redact(&out),
                (out.clone(), 0),
                "redacting twice changes nothing"
            );
        }
    }

    #[test]
    fn the_words_around_a_secret_stay() {
        let (out, _) = redact("db password: hunter22 and postgres://app:pw12345@db/prod");
        assert_eq!(
            out,
            "db password: [REDACTED:password] and postgres://app:[REDACTED:connection_string]@db/prod"
        );
        assert_eq!(
            redact("my password is hunter2.").0,
            "my password is [REDACTED:password]."
        );
    }

    #[test]
    fn code_paths_and_hashes_are_not_secrets() {
        for text in [
            "def login(self, username, password=None):",
            "password = settings_dict['PASSWORD']",
            "secret = self.secret",
            "password = make_password(raw_password)",
            "secret = new_secret",
            "password = password\n",
            "accessToken = responseData['token']",
            "if password is None:\n    return",
            "if password is not None:",
            "Make sure that your password is correct.",
            "the password is required",
            "password:\n            try:",
            "pwd: Shows the current directory",
            "api_key = os.environ['OPENAI_API_KEY']",
            "password = \"$DB_PASSWORD\"",
            "commit 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed it",
            "see astropy/io/fits/tests/data/test0.fits and sympy/physics/quantum/tests",
            "django/contrib/auth/migrations/0011Update/proxy",
            "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "the file src/lib.rs has 47 lines",
            "http://localhost:8000/api/v1/items",
            "git@github.com:user/repo.git",
            "aws s3 cp s3://bucket/key ./out",
        ] {
            assert_eq!(
                redact(text),
                (text.to_owned(), 0),
                "{text:?} is not a secret"
            );
        }
    }

    /// Passwords in the forms people write them, each with the whole secret gone.
    #[test]
    fn passwords_in_every_common_form_are_redacted_whole() {
        for (text, secret) in [
            ("DB_PASSWORD=P@ssw0rd!2026", "P@ssw0rd!2026"),
            ("db_password = simplepass123", "simplepass123"),
            ("export PGPASSWORD=s3cr3t-Value", "s3cr3t-Value"),
            ("pwd: Hunter2hunter", "Hunter2hunter"),
            ("db_pwd=Tr0ub4dor&3", "Tr0ub4dor&3"),
            (
                "the password for the admin panel is \"Blue$ky-42\"",
                "Blue$ky-42",
            ),
            ("my password's hunter2", "hunter2"),
            ("password: Sup3rS3cret!", "Sup3rS3cret!"),
            ("GITHUB_TOKEN=abc123def456", "abc123def456"),
            ("auth_token: 'q9w8e7r6t5'", "q9w8e7r6t5"),
            (
                r#"{"password": "correct horse battery staple"}"#,
                "correct horse battery staple",
            ),
            ("x-api-key: zz-91-aa-82-bb", "zz-91-aa-82-bb"),
            ("client_secret=\"d8f7 a6s5\"", "d8f7 a6s5"),
        ] {
            let (out, n) = redact(text);
            assert!(n >= 1, "nothing found in {text:?}");
            assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            assert_eq!(
                redact(&out),
                (out.clone(), 0),
                "twice changes nothing: {out}"
            );
        }
        assert_eq!(
            redact("password: Sup3rS3cret!").0,
            "password: [REDACTED:password]"
        );
    }

    #[test]
    fn names_that_only_start_like_a_secret_are_not_secrets() {
        for text in [
            "max_tokens=4096",
            "\"prompt_tokens\": 1234",
            "tokenizer = \"o200k_base\"",
            "\"token_type\": \"bearer\"",
            "\"eos_token\": \"<|endoftext|>\"",
            "token = next_token",
            "token = tokenizer.encode(text)",
            "tokens: 512 of 4,096",
        ] {
            assert_eq!(
                redact(text),
                (text.to_owned(), 0),
                "{text:?} is not a secret"
            );
        }
    }

    proptest::proptest! {
        /// No `name=value` survives whose name says it holds a secret, in any of the forms an
        /// assignment takes.
        #[test]
        fn no_assigned_secret_survives(
            prefix in "(db|DB|app|APP|my|x|PG|admin|)",
            word in "(password|PASSWORD|passwd|Pwd|pwd|secret|SECRET|token|Token|TOKEN)",
            suffix in "(|_1|2)",
            sep in 0usize..6,
            value in "[A-Za-z0-9!@#%^&*+=_-]{5,24}",
        ) {
            proptest::prop_assume!(value.bytes().any(|b| b.is_ascii_digit()));
            proptest::prop_assume!(!names_itself(&value) && !is_placeholder(&value));
            let joiner = if prefix.is_empty() || suffix.is_empty() && word.len() < 4 { "" } else { "_" };
            let name = format!("{prefix}{joiner}{word}{suffix}");
            let text = match sep {
                0 => format!("{name}={value}"),
                1 => format!("{name} = {value}"),
                2 => format!("{name}: {value}"),
                3 => format!("{name}=\"{value}\""),
                4 => format!("\"{name}\": \"{value}\""),
                _ => format!("set {name}='{value}' now"),
            };
            let (out, n) = redact(&text);
            proptest::prop_assert!(n >= 1, "nothing found in {:?}", text);
            proptest::prop_assert!(!out.contains(&value), "{:?} -> {:?}", text, out);
        }
    }
}
