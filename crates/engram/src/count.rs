//! Message-level token accounting, with a per-message cache.
//!
//! A conversation's count is `per_conversation + Σ message + tool definitions`, where a
//! message is `per_message + content + tool calls (+ name)`. With the defaults this is OpenAI's
//! published accounting and exactly the evaluation harness's
//! (`3 + Σ (4 + |content| + Σ |name + arguments|)`), plus the `name` field, which OpenAI counts
//! and the harness does not (so engram is never looser than either).
//!
//! Counting a message is the only expensive step, and it is done once: counts are cached by a
//! 128-bit hash of what is counted, so an agent that resends its growing history (through the
//! proxy, say) pays only for the new turn. [`TokenLedger`] gives the same guarantee without
//! hashing for a caller that appends to one history.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::input::Conversation;
use crate::message::{Message, ToolCall};
use crate::tokenize::Tokenizer;

/// Fixed per-message and per-conversation overheads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accounting {
    /// Tokens every message costs beyond its content (role and delimiters). Default 4.
    pub per_message: usize,
    /// Tokens a whole request costs beyond its messages (the reply's priming). Default 3.
    pub per_conversation: usize,
    /// Tokens a `name` field costs beyond its text. Default 1.
    pub per_name: usize,
}

impl Default for Accounting {
    fn default() -> Self {
        Accounting {
            per_message: 4,
            per_conversation: 3,
            per_name: 1,
        }
    }
}

/// Tokens used by one image part when its size is unknown: a 1024x1024 image at high detail
/// (85 base + 4 tiles x 170). Low-detail images cost the base 85.
pub const IMAGE_TOKENS_HIGH: usize = 765;
/// Tokens used by one low-detail image.
pub const IMAGE_TOKENS_LOW: usize = 85;

/// One message's count, by component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageCount {
    /// The content text (string content, or the text parts joined).
    pub content: usize,
    /// Tool calls: each call's `name + arguments`, counted as one string.
    pub tool_calls: usize,
    /// Parts that are not text (images at a fixed estimate, thinking text, other parts as JSON).
    pub other_parts: usize,
    /// The `name` field with its overhead.
    pub name: usize,
    /// The fixed per-message overhead.
    pub overhead: usize,
    /// True when part of the count is an estimate (images and unknown parts).
    pub estimated: bool,
}

impl MessageCount {
    /// Every component added up.
    pub fn total(&self) -> usize {
        self.content + self.tool_calls + self.other_parts + self.name + self.overhead
    }

    /// The content text plus tool-call names and arguments, without any overhead.
    pub fn content_tokens(&self) -> usize {
        self.content + self.tool_calls
    }
}

/// A conversation's count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConversationCount {
    /// Each message's count, in order.
    pub messages: Vec<MessageCount>,
    /// Tool definitions.
    pub tools: usize,
    /// The fixed per-conversation overhead.
    pub overhead: usize,
}

impl ConversationCount {
    /// The total: overhead, every message, tool definitions.
    pub fn total(&self) -> usize {
        self.overhead + self.tools + self.messages.iter().map(MessageCount::total).sum::<usize>()
    }

    /// The plain sum of content text and tool-call names and arguments, no overhead.
    pub fn content_tokens(&self) -> usize {
        self.messages.iter().map(MessageCount::content_tokens).sum()
    }

    /// True when any part is an estimate.
    pub fn estimated(&self) -> bool {
        self.messages.iter().any(|m| m.estimated)
    }
}

/// How many of the newest messages fit a limit (see [`TokenCounter::fit_newest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewestFit {
    /// How many messages, counted from the newest, fit.
    pub kept: usize,
    /// Their tokens (message totals only; no per-conversation overhead).
    pub tokens: usize,
}

/// Counts messages with a tokenizer and an accounting, caching each message's count.
#[derive(Debug)]
pub struct TokenCounter {
    tokenizer: Tokenizer,
    accounting: Accounting,
    cache: CountCache,
}

impl TokenCounter {
    /// Default cache size: message counts kept per generation (two generations are kept).
    pub const DEFAULT_CACHE_ENTRIES: usize = 64 * 1024;

    /// A counter with the default accounting and cache.
    pub fn new(tokenizer: Tokenizer) -> Self {
        TokenCounter {
            tokenizer,
            accounting: Accounting::default(),
            cache: CountCache::new(Self::DEFAULT_CACHE_ENTRIES),
        }
    }

    /// The same counter with another accounting.
    #[must_use]
    pub fn with_accounting(mut self, accounting: Accounting) -> Self {
        self.accounting = accounting;
        self.cache = CountCache::new(self.cache.capacity);
        self
    }

    /// The same counter with a cache of `entries` per generation (0 disables caching).
    #[must_use]
    pub fn with_cache_entries(mut self, entries: usize) -> Self {
        self.cache = CountCache::new(entries);
        self
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The accounting.
    pub fn accounting(&self) -> Accounting {
        self.accounting
    }

    /// Counts a text.
    pub fn count_text(&self, text: &str) -> usize {
        self.tokenizer.count(text)
    }

    /// Counts one message, from the cache when it was counted before.
    pub fn count_message(&self, message: &Message) -> MessageCount {
        let key = message_key(message);
        if let Some(hit) = self.cache.get(key) {
            return hit;
        }
        let count = self.count_message_uncached(message);
        self.cache.insert(key, count);
        count
    }

    fn count_message_uncached(&self, message: &Message) -> MessageCount {
        MessageCount {
            content: self.tokenizer.count(&message.text()),
            ..self.count_all_but_content(message)
        }
    }

    /// Everything in a message but its text content: tool calls, name, other parts, overhead.
    fn count_all_but_content(&self, message: &Message) -> MessageCount {
        let mut count = MessageCount {
            tool_calls: message.calls().iter().map(|c| self.count_call(c)).sum(),
            overhead: self.accounting.per_message,
            ..MessageCount::default()
        };
        if let Some(name) = &message.name() {
            count.name = self.accounting.per_name + self.tokenizer.count(name);
        }
        for part in message.non_text_parts() {
            let (tokens, estimated) = self.count_part(part);
            count.other_parts += tokens;
            count.estimated |= estimated;
        }
        count
    }

    fn count_call(&self, call: &ToolCall) -> usize {
        if call.arguments.is_empty() {
            return self.tokenizer.count(&call.name);
        }
        let mut s = String::with_capacity(call.name.len() + call.arguments.len());
        s.push_str(&call.name);
        s.push_str(&call.arguments);
        self.tokenizer.count(&s)
    }

    /// A non-text part: images at a fixed estimate, thinking blocks by their text, anything else
    /// by its JSON text.
    fn count_part(&self, part: &Map<String, Value>) -> (usize, bool) {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "image_url" | "image" | "input_image" => {
                let low = part
                    .get("image_url")
                    .and_then(|u| u.get("detail"))
                    .or_else(|| part.get("detail"))
                    .and_then(Value::as_str)
                    == Some("low");
                (
                    if low {
                        IMAGE_TOKENS_LOW
                    } else {
                        IMAGE_TOKENS_HIGH
                    },
                    true,
                )
            }
            "thinking" => {
                let text = part.get("thinking").and_then(Value::as_str).unwrap_or("");
                (self.tokenizer.count(text), false)
            }
            _ => {
                let json = Value::Object(part.clone()).to_string();
                (self.tokenizer.count(&json), true)
            }
        }
    }

    /// Counts tool definitions (each one's JSON text). Their JSON is more verbose than the form
    /// the providers render them in, so this errs on the safe side.
    pub fn count_tools(&self, tools: &[Value]) -> usize {
        tools
            .iter()
            .map(|t| self.tokenizer.count(&t.to_string()))
            .sum()
    }

    /// Counts every message, in order.
    pub fn count_messages(&self, messages: &[Message]) -> ConversationCount {
        ConversationCount {
            messages: messages.iter().map(|m| self.count_message(m)).collect(),
            tools: 0,
            overhead: self.accounting.per_conversation,
        }
    }

    /// Counts messages and tool definitions.
    pub fn count_conversation(&self, conversation: &Conversation) -> ConversationCount {
        ConversationCount {
            tools: self.count_tools(&conversation.tools),
            ..self.count_messages(&conversation.messages)
        }
    }

    /// How many of the newest messages fit in `limit` tokens, counted newest first and stopping
    /// at the first that does not fit. A message that cannot fit is not counted to its end, so a
    /// caller never pays for text it will drop.
    pub fn fit_newest<M: std::borrow::Borrow<Message>>(
        &self,
        messages: &[M],
        limit: usize,
    ) -> NewestFit {
        let mut fit = NewestFit { kept: 0, tokens: 0 };
        for message in messages.iter().rev().map(|m| m.borrow()) {
            let remaining = limit - fit.tokens;
            match self.count_message_till_limit(message, remaining) {
                Some(n) => {
                    fit.kept += 1;
                    fit.tokens += n;
                }
                None => break,
            }
        }
        fit
    }

    /// A message's total if it is at most `limit`; `None` otherwise, possibly without counting
    /// all of it. Full counts come from (and go to) the cache.
    pub fn count_message_till_limit(&self, message: &Message, limit: usize) -> Option<usize> {
        let key = message_key(message);
        if let Some(hit) = self.cache.get(key) {
            return (hit.total() <= limit).then_some(hit.total());
        }
        let fixed = self.accounting.per_message;
        let text = message.text();
        // Stop early only on the dominant cost, the content; the rest is small and counted fully.
        let content = self
            .tokenizer
            .count_till_limit(&text, limit.checked_sub(fixed)?)?;
        let count = MessageCount {
            content,
            ..self.count_all_but_content(message)
        };
        self.cache.insert(key, count);
        (count.total() <= limit).then_some(count.total())
    }
}

/// Appends messages to one history, counting each once: the cost of a new turn does not grow
/// with the history.
#[derive(Debug, Clone, Default)]
pub struct TokenLedger {
    counts: Vec<MessageCount>,
    messages_total: usize,
}

impl TokenLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        TokenLedger::default()
    }

    /// Counts `message` and adds it; returns its count.
    pub fn push(&mut self, counter: &TokenCounter, message: &Message) -> MessageCount {
        let count = counter.count_message(message);
        self.counts.push(count);
        self.messages_total += count.total();
        count
    }

    /// Forgets the messages from `len` on.
    pub fn truncate(&mut self, len: usize) {
        for c in self.counts.drain(len.min(self.counts.len())..) {
            self.messages_total -= c.total();
        }
    }

    /// Each message's count.
    pub fn counts(&self) -> &[MessageCount] {
        &self.counts
    }

    /// The messages' tokens, without per-conversation overhead.
    pub fn messages_total(&self) -> usize {
        self.messages_total
    }

    /// The total as it would be sent: messages plus the per-conversation overhead.
    pub fn total(&self, accounting: Accounting) -> usize {
        self.messages_total + accounting.per_conversation
    }
}

/// The cache key of a message: a hash of exactly what is counted, with separators that cannot
/// occur in JSON text fields' boundaries ambiguously (lengths are hashed too).
fn message_key(message: &Message) -> u128 {
    let mut h = Xxh3::new();
    let mut field = |tag: u8, s: &str| {
        h.update(&[tag]);
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    field(b'c', &message.text());
    for call in message.calls() {
        field(b'n', &call.name);
        field(b'a', &call.arguments);
    }
    if let Some(name) = &message.name() {
        field(b'N', name);
    }
    for part in message.non_text_parts() {
        field(b'p', &Value::Object(part.clone()).to_string());
    }
    h.digest128()
}

/// A bounded cache in two generations: lookups hit either; when the young one is full it
/// becomes the old one and the previous old one is dropped. O(1), no per-entry bookkeeping, and
/// entries in use keep being promoted, so a long-running proxy keeps its hot histories.
#[derive(Debug)]
struct CountCache {
    capacity: usize,
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<u128, MessageCount>,
    old: HashMap<u128, MessageCount>,
}

impl CountCache {
    fn new(capacity: usize) -> Self {
        CountCache {
            capacity,
            generations: Mutex::new(Generations::default()),
        }
    }

    fn get(&self, key: u128) -> Option<MessageCount> {
        if self.capacity == 0 {
            return None;
        }
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = g.young.get(&key) {
            return Some(*hit);
        }
        let hit = g.old.remove(&key)?;
        Self::insert_locked(&mut g, self.capacity, key, hit);
        Some(hit)
    }

    fn insert(&self, key: u128, count: MessageCount) {
        if self.capacity == 0 {
            return;
        }
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        Self::insert_locked(&mut g, self.capacity, key, count);
    }

    fn insert_locked(g: &mut Generations, capacity: usize, key: u128, count: MessageCount) {
        if g.young.len() >= capacity {
            g.old = std::mem::take(&mut g.young);
        }
        g.young.insert(key, count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::TextTokenizer;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// One token per byte, recording how many bytes it was asked to count.
    #[derive(Debug, Default)]
    struct Metered {
        bytes: AtomicUsize,
    }

    impl TextTokenizer for Arc<Metered> {
        fn name(&self) -> &str {
            "metered"
        }
        fn count(&self, text: &str) -> usize {
            self.bytes.fetch_add(text.len(), Ordering::Relaxed);
            text.len()
        }
        fn is_exact(&self) -> bool {
            true
        }
    }

    fn metered() -> (TokenCounter, Arc<Metered>) {
        let meter = Arc::new(Metered::default());
        let counter = TokenCounter::new(Tokenizer::new(Arc::new(meter.clone())));
        (counter, meter)
    }

    #[test]
    fn accounting_matches_the_harness_formula() {
        let (counter, _) = metered();
        let messages = vec![
            Message::system("abc"),
            Message::assistant_tool_calls(vec![ToolCall::function("c1", "ls", "{}")]),
            Message::tool("c1", "xy"),
        ];
        let count = counter.count_messages(&messages);
        // 3 + (4+3) + (4+len("ls{}")) + (4+2)
        assert_eq!(count.total(), 3 + 7 + 8 + 6);
        assert_eq!(count.content_tokens(), 3 + 4 + 2);
    }

    #[test]
    fn name_and_images_are_counted() {
        let (counter, _) = metered();
        let mut m = Message::user("hi");
        m.set_name(Some("bob".into()));
        assert_eq!(counter.count_message(&m).total(), 4 + 2 + 1 + 3);
        let with_image = Message::from_value(serde_json::json!({
            "role": "user",
            "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "x", "detail": "low"}}]
        }))
        .expect("valid");
        let c = counter.count_message(&with_image);
        assert_eq!(
            (c.content, c.other_parts, c.estimated),
            (3, IMAGE_TOKENS_LOW, true)
        );
    }

    #[test]
    fn a_cached_message_is_not_counted_again() {
        let (counter, meter) = metered();
        let history: Vec<Message> = (0..100)
            .map(|i| Message::user(format!("turn {i}")))
            .collect();
        counter.count_messages(&history);
        let before = meter.bytes.load(Ordering::Relaxed);
        let mut grown = history.clone();
        grown.push(Message::user("the new turn"));
        counter.count_messages(&grown);
        let after = meter.bytes.load(Ordering::Relaxed);
        assert_eq!(after - before, "the new turn".len());
    }

    #[test]
    fn ledger_push_costs_only_the_new_turn() {
        let (counter, meter) = metered();
        let counter = counter.with_cache_entries(0);
        let mut ledger = TokenLedger::new();
        for i in 0..50 {
            ledger.push(&counter, &Message::user(format!("turn {i}")));
        }
        let before = meter.bytes.load(Ordering::Relaxed);
        ledger.push(&counter, &Message::user("new"));
        assert_eq!(meter.bytes.load(Ordering::Relaxed) - before, 3);
        let all: usize = ledger.counts().iter().map(MessageCount::total).sum();
        assert_eq!(ledger.messages_total(), all);
        ledger.truncate(10);
        assert_eq!(ledger.counts().len(), 10);
        assert_eq!(
            ledger.messages_total(),
            ledger
                .counts()
                .iter()
                .map(MessageCount::total)
                .sum::<usize>()
        );
    }

    #[test]
    fn fit_newest_stops_at_the_first_misfit() {
        let (counter, _) = metered();
        let messages = vec![
            Message::user("a".repeat(10)),
            Message::user("b".repeat(1000)),
            Message::user("c".repeat(10)),
            Message::user("d".repeat(10)),
        ];
        let fit = counter.fit_newest(&messages, 40);
        assert_eq!(
            fit,
            NewestFit {
                kept: 2,
                tokens: 28
            }
        );
        let fit = counter.fit_newest(&messages, 10_000);
        assert_eq!(fit.kept, 4);
        assert_eq!(fit.tokens, counter.count_messages(&messages).total() - 3);
    }

    #[test]
    fn cache_stays_bounded() {
        let cache = CountCache::new(4);
        for k in 0..100u128 {
            cache.insert(k, MessageCount::default());
        }
        let g = cache.generations.lock().expect("lock");
        assert!(g.young.len() <= 4 && g.old.len() <= 4);
    }
}
