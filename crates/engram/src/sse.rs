//! Server-sent events, as a provider streams a reply: a body read back into its events' data.

use serde_json::Value;

/// One server-sent event: its data as JSON.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// The event's `data:` lines joined, read as JSON; `None` when they are not JSON.
    pub(crate) data: Option<Value>,
}

/// The data of one event's text: its `data:` lines joined by newlines (empty for a comment or
/// a keep-alive).
pub(crate) fn data_of(event: &str) -> String {
    event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim_start)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The events of a server-sent events body, in order.
pub(crate) fn events(body: &[u8]) -> Vec<Event> {
    let text = String::from_utf8_lossy(body).replace("\r\n", "\n");
    let mut events = Vec::new();
    let mut rest = text.as_str();
    while !rest.is_empty() {
        let (raw, next) = match rest.find("\n\n") {
            Some(at) => (&rest[..at + 2], &rest[at + 2..]),
            None => (rest, ""),
        };
        let data = data_of(raw);
        events.push(Event {
            data: serde_json::from_str(&data).ok(),
        });
        rest = next;
    }
    events
}
