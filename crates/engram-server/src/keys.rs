//! API keys: `tenant:key` lines, kept in memory only as SHA-256 hashes.

use std::collections::{BTreeSet, HashMap};

use sha2::{Digest, Sha256};

use crate::error::Error;

/// Tenants by the hash of their keys.
#[derive(Clone, Default)]
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], String>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the hashes either.
        f.debug_struct("ApiKeys")
            .field("keys", &self.by_hash.len())
            .finish()
    }
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A tenant name: letters, digits, `-` and `_`, at most 64 (it names a database file).
pub(crate) fn valid_tenant(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl ApiKeys {
    /// Reads `tenant:key` lines (blank lines and `#` comments skipped); `origin` names the
    /// source in errors, which give the line (never the key).
    pub fn parse(text: &str, origin: &str) -> Result<ApiKeys, Error> {
        let invalid = |line: Option<usize>, why: &str| Error::Invalid {
            setting: match line {
                Some(n) => format!("{origin}: line {n}"),
                None => origin.to_owned(),
            },
            why: why.to_owned(),
        };
        let mut keys = ApiKeys::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let Some((tenant, key)) = line.split_once(':') else {
                return Err(invalid(Some(n), "expected tenant:key"));
            };
            let (tenant, key) = (tenant.trim(), key.trim());
            if !valid_tenant(tenant) {
                return Err(invalid(
                    Some(n),
                    &format!("tenant {tenant:?} must be 1-64 letters, digits, '-' or '_'"),
                ));
            }
            if key.len() < 16 {
                return Err(invalid(
                    Some(n),
                    "the key is too short (at least 16 characters)",
                ));
            }
            if keys.by_hash.insert(hash(key), tenant.to_owned()).is_some() {
                return Err(invalid(
                    Some(n),
                    "this key is given twice (keys must be unique)",
                ));
            }
        }
        if keys.by_hash.is_empty() {
            return Err(invalid(None, "no keys (one tenant:key per line)"));
        }
        Ok(keys)
    }

    /// The tenant a key belongs to.
    pub fn tenant(&self, key: &str) -> Option<&str> {
        self.by_hash.get(&hash(key)).map(String::as_str)
    }

    /// The tenants.
    pub fn tenants(&self) -> BTreeSet<&str> {
        self.by_hash.values().map(String::as_str).collect()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_finds_by_hash_only() {
        let keys = ApiKeys::parse(
            "# teams\nacme:acme-secret-key-0001\n\nbeta: beta-secret-key-0002 \nacme:acme-secret-key-0003\n",
            "keys.txt",
        )
        .expect("valid");
        assert_eq!(keys.tenant("acme-secret-key-0001"), Some("acme"));
        assert_eq!(keys.tenant("beta-secret-key-0002"), Some("beta"));
        assert_eq!(keys.tenant("acme-secret-key-0003"), Some("acme"));
        assert_eq!(keys.tenant("nope"), None);
        assert_eq!(keys.len(), 3);
        assert!(!format!("{keys:?}").contains("secret"));
        let err = ApiKeys::parse("acme\n", "k").unwrap_err();
        assert_eq!(err.to_string(), "k: line 1: expected tenant:key");
        assert!(matches!(err, Error::Invalid { setting, .. } if setting == "k: line 1"));
        assert!(
            ApiKeys::parse("a/b:0123456789abcdef\n", "k")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        assert!(
            ApiKeys::parse("a:short\n", "k")
                .unwrap_err()
                .to_string()
                .contains("too short")
        );
        assert!(
            ApiKeys::parse("a:0123456789abcdef\nb:0123456789abcdef\n", "k")
                .unwrap_err()
                .to_string()
                .contains("line 2")
        );
        assert!(ApiKeys::parse("\n# none\n", "k").is_err());
    }
}
