//! Where a store lives, as a URL names it: `sqlite:///ABS/PATH`, `sqlite://REL/PATH` or a plain
//! path for SQLite; `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` for PostgreSQL. Shown,
//! a location never carries its password.

use std::path::PathBuf;

/// Where a store's data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite database file (a server keeps its other tenants' files beside it).
    Sqlite(PathBuf),
    /// A PostgreSQL database (shared by every tenant, and by several servers).
    Postgres(String),
}

impl StoreLocation {
    /// Reads a store URL. A `postgres://` URL is refused, saying how to get it, when this
    /// build has no PostgreSQL (cargo feature `postgres`); so is any other scheme.
    pub fn parse(url: &str) -> Result<StoreLocation, engram::Error> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            if cfg!(feature = "postgres") {
                return Ok(StoreLocation::Postgres(url.to_owned()));
            }
            return Err(engram::Error::Rejected(format!(
                "{}: this engram was built without PostgreSQL (cargo feature `postgres`); rebuild with it or use sqlite:///PATH",
                redact_url(url)
            )));
        }
        let path = match url.strip_prefix("sqlite://") {
            Some(rest) => rest,
            None if url.contains("://") => {
                return Err(engram::Error::Rejected(format!(
                    "{url:?}: unknown scheme; expected sqlite:///PATH or postgres://USER@HOST/DATABASE"
                )));
            }
            None => url,
        };
        if path.is_empty() {
            return Err(engram::Error::Rejected(format!("{url:?}: no path")));
        }
        Ok(StoreLocation::Sqlite(PathBuf::from(path)))
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "{}", path.display()),
            StoreLocation::Postgres(url) => write!(f, "{}", redact_url(url)),
        }
    }
}

/// The URL with its password replaced, for messages and logs:
/// `postgres://user:password@host/db` is `postgres://user:***@host/db`.
pub fn redact_url(url: &str) -> String {
    let parts = url.split_once("://").and_then(|(scheme, rest)| {
        let (userinfo, host) = rest.split_once('@')?;
        let (user, _) = userinfo.split_once(':')?;
        Some(format!("{scheme}://{user}:***@{host}"))
    });
    parts.unwrap_or_else(|| url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls() {
        assert_eq!(
            StoreLocation::parse("sqlite:///var/lib/engram.db").expect("sqlite"),
            StoreLocation::Sqlite(PathBuf::from("/var/lib/engram.db"))
        );
        assert_eq!(
            StoreLocation::parse("data/e.db").expect("a path"),
            StoreLocation::Sqlite(PathBuf::from("data/e.db"))
        );
        let pg = StoreLocation::parse("postgres://me:secret@localhost/engram");
        if cfg!(feature = "postgres") {
            let pg = pg.expect("postgres");
            assert!(matches!(pg, StoreLocation::Postgres(_)));
            assert!(!pg.to_string().contains("secret"), "{pg}");
        } else {
            let e = pg.unwrap_err().to_string();
            assert!(
                e.contains("feature `postgres`") && !e.contains("secret"),
                "{e}"
            );
        }
        assert!(matches!(
            StoreLocation::parse("mysql://x"),
            Err(engram::Error::Rejected(_))
        ));
        assert!(StoreLocation::parse("sqlite://").is_err());
    }
}
