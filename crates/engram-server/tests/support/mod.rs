//! What the server's test files share: a schema of their own on the PostgreSQL test server.

#![allow(dead_code)]

/// The PostgreSQL test server (`ENGRAM_TEST_POSTGRES`, else the local one).
pub(crate) fn pg_url() -> String {
    std::env::var("ENGRAM_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A new schema on the test server and the URL that uses it; `None` (SKIPPED) when no server
/// answers outside CI.
pub(crate) fn pg_schema(name: &str) -> Option<(String, String)> {
    let schema = format!(
        "engram_test_{name}_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    );
    let created = std::thread::spawn({
        let schema = schema.clone();
        move || {
            postgres::Client::connect(&pg_url(), postgres::NoTls)
                .and_then(|mut c| c.batch_execute(&format!("CREATE SCHEMA {schema}")))
        }
    })
    .join()
    .expect("thread");
    match created {
        Ok(()) => {}
        Err(e) => {
            engram_testkit::skip_or_fail_in_ci(
                "postgres",
                &format!("no PostgreSQL at {} ({e})", pg_url()),
            );
            return None;
        }
    }
    let sep = if pg_url().contains('?') { '&' } else { '?' };
    Some((
        format!("{}{sep}options=-c%20search_path%3D{schema}", pg_url()),
        schema,
    ))
}
