//! Times and ids as every store keeps them: milliseconds since the epoch, RFC 3339 text, and
//! time-ordered ids. [`memory`](crate::memory) and [`session`](crate::session) build on it; it
//! depends on neither.

use crate::Error;

/// Milliseconds since the Unix epoch, UTC.
pub type Timestamp = i64;

/// The current time.
pub fn now() -> Timestamp {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as Timestamp
}

/// Parses an RFC 3339 time (`2026-11-21T07:00:00Z`).
pub fn parse_time(s: &str) -> Result<Timestamp, Error> {
    let t = time::OffsetDateTime::parse(s.trim(), &time::format_description::well_known::Rfc3339)
        .map_err(|e| {
        Error::Malformed(format!(
            "{s:?} is not an RFC 3339 time like 2026-11-21T07:00:00Z ({e})"
        ))
    })?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as Timestamp)
}

/// Formats a timestamp as RFC 3339 (UTC, milliseconds).
pub fn format_time(t: Timestamp) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| t.to_string())
}

/// Formats a timestamp to the minute, for a model to read: `2026-11-21 07:00 UTC`. Always
/// the same width, so the text it is in costs the same tokens whatever the time.
pub fn format_minute(t: Timestamp) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t) * 1_000_000) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute()
        ),
        Err(_) => t.to_string(),
    }
}

/// Serializes a timestamp as RFC 3339 (every time in every API has this one form).
pub fn serialize_time<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_time(*t))
}

/// A new id: time-ordered and unique within the process.
pub fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}_{:x}{:06x}{:04x}",
        now(),
        std::process::id() & 0xff_ffff,
        n & 0xffff
    )
}
