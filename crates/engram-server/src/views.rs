//! The views the proxy sent upstream, by the caller messages each stands for.
//!
//! An agent resends its growing history: its next request starts with the messages of this one.
//! The proxy keeps each view it sent under the hash of those messages (within the tenant and the
//! wire format), so that the next request finds the view it builds on and goes upstream as that
//! view plus what is new, byte for byte ([`engram::compact::stable`]): the provider's prompt
//! cache then bills the repeated prefix at its cached price. Only the newest view of a
//! conversation is kept (a view replaces the one it extends), and the cache is bounded by views
//! and by bytes, the oldest going first. With `--store postgres://...` the views are kept in the
//! database instead, shared by every server on it ([`App::view_store`](crate::App)).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use engram::Message;
use engram::compact::stable::{SentView, ViewStore};

/// Most views kept, and most bytes of their messages' text.
const MAX_VIEWS: usize = 4_096;
const MAX_BYTES: usize = 256 << 20;

/// Views by the hash of the caller messages they stand for.
#[derive(Debug, Default)]
pub(crate) struct ViewCache {
    entries: HashMap<u128, (SentView, usize)>,
    order: VecDeque<u128>,
    bytes: usize,
}

impl ViewCache {
    /// The view standing for the longest prefix of a request (`prefixes[k]`: the hash of its
    /// first `k` messages, [`prefix_hashes`]).
    pub(crate) fn longest(&self, prefixes: &[u128]) -> Option<&SentView> {
        (1..prefixes.len()).rev().find_map(|k| {
            self.entries
                .get(&prefixes[k])
                .map(|(view, _)| view)
                .filter(|view| view.covers == k)
        })
    }

    /// Keeps `view` under `key`, forgetting `replaces` (the view it extends, if any).
    pub(crate) fn insert(&mut self, key: u128, view: SentView, replaces: Option<u128>) {
        if let Some(old) = replaces.filter(|r| *r != key)
            && let Some((_, size)) = self.entries.remove(&old)
        {
            self.bytes -= size;
        }
        let size = view.messages.iter().map(|m| m.text().len() + 64).sum();
        if let Some((_, old)) = self.entries.insert(key, (view, size)) {
            self.bytes -= old;
        }
        self.order.push_back(key);
        self.bytes += size;
        while self.entries.len() > MAX_VIEWS || self.bytes > MAX_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            // A key pushed again later is still in the order: only its newest place counts.
            if self.order.contains(&oldest) {
                continue;
            }
            if let Some((_, size)) = self.entries.remove(&oldest) {
                self.bytes -= size;
            }
        }
        if self.order.len() > 4 * MAX_VIEWS {
            let live = &self.entries;
            self.order.retain(|k| live.contains_key(k));
        }
    }
}

/// The views of one server, in its memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryViews(Mutex<ViewCache>);

impl ViewStore for MemoryViews {
    fn longest_view(&self, prefixes: &[u128]) -> Result<Option<SentView>, engram::Error> {
        let cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        Ok(cache.longest(prefixes).cloned())
    }

    fn keep_view(
        &self,
        key: u128,
        view: SentView,
        replaces: Option<u128>,
    ) -> Result<(), engram::Error> {
        let mut cache = self.0.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(key, view, replaces);
        Ok(())
    }
}

/// Feeds what serde writes into a hash.
struct HashWriter(xxhash_rust::xxh3::Xxh3);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The hashes of every prefix of `messages` within `scope` (the tenant and the format):
/// `out[k]` stands for the first `k` messages.
pub(crate) fn prefix_hashes(scope: &str, messages: &[Message]) -> Vec<u128> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut hash = xxhash_rust::xxh3::xxh3_128(scope.as_bytes());
    out.push(hash);
    for m in messages {
        let mut w = HashWriter(xxhash_rust::xxh3::Xxh3::new());
        w.0.update(&hash.to_le_bytes());
        // A message that serialises is hashed by its JSON; one that does not cannot match.
        if serde_json::to_writer(&mut w, m).is_err() {
            w.0.update(b"\0unserialisable");
        }
        hash = w.0.digest128();
        out.push(hash);
    }
    out
}
