//! The conformance suites every store backend runs, each taking a factory of empty stores and
//! panicking with the failing check's name: [`memory::run`] for a
//! [`MemoryStore`](crate::memory::MemoryStore), [`session::run`] for a
//! [`SessionStore`](crate::session::SessionStore). The in-memory store runs them here; SQLite
//! and PostgreSQL in `engram-store`.

pub mod memory;
pub mod session;

/// A small deterministic generator (SplitMix64): random sessions and memories are the same on
/// every backend and every run, so a failure names a seed and a step that reproduce it.
pub(crate) struct Dice(pub(crate) u64);

impl Dice {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Panics when `got` differs from `expected`, showing where.
pub(crate) fn assert_same(got: &str, expected: &str, what: &str) {
    if got == expected {
        return;
    }
    let at = got
        .char_indices()
        .zip(expected.chars())
        .find(|((_, a), b)| a != b)
        .map_or(got.len().min(expected.len()), |((i, _), _)| i);
    let window = |s: &str| -> String {
        s.chars()
            .skip(s[..at.min(s.len())].chars().count().saturating_sub(200))
            .take(400)
            .collect()
    };
    panic!(
        "{what}: they differ at byte {at}\n got: ...{}...\nwant: ...{}...",
        window(got),
        window(expected)
    );
}
