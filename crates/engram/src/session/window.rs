//! What fills a session's window, by kind: the numbers behind the inspector's context-window
//! bar, computed once here so that every front shows the same ones.

use serde::Serialize;

use super::Session;
use crate::Error;
use crate::compact::Kind;
use crate::compact::policy;

/// How the window is used, in tokens of the session's tokenizer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowUse {
    /// The session's window.
    pub window: usize,
    /// The room the model's reply needs (its maximum output, at most a quarter of the window).
    pub reply_reserve: usize,
    /// A view above this many tokens is compacted.
    pub threshold: usize,
    /// A compaction brings the view down to this many tokens.
    pub target: usize,
    /// The view's tokens (the sum of `parts`).
    pub used: usize,
    /// What is left after the view and the reply's room (0 when they overrun the window).
    pub free: usize,
    /// The view's tokens by kind, always in this order: `pinned` (the leading system
    /// messages), `summary`, `masked`, `original`, `recalled`, `note` (engram's notes), and
    /// `overhead` (the conversation's own, counted once).
    pub parts: Vec<WindowPart>,
    /// The view's messages.
    pub messages: usize,
}

/// One kind's share of the view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WindowPart {
    /// The kind.
    pub kind: &'static str,
    /// Its tokens.
    pub tokens: usize,
    /// Its messages.
    pub messages: usize,
}

/// The kinds of [`WindowUse::parts`], in order.
pub const KINDS: [&str; 7] = [
    "pinned", "summary", "masked", "original", "recalled", "note", "overhead",
];

impl Session<'_> {
    /// How the window is used now; `max_output` is the model's maximum output (the registry's).
    pub fn window_use(&self, max_output: usize) -> Result<WindowUse, Error> {
        let view = self.view()?;
        let recent = policy::recent_tokens(view.messages.iter().map(|v| &v.message), &self.counter);
        let mut parts: Vec<WindowPart> = KINDS
            .iter()
            .map(|&kind| WindowPart {
                kind,
                tokens: 0,
                messages: 0,
            })
            .collect();
        let mut leading = true;
        let mut counted = 0;
        for v in &view.messages {
            leading &= v.message.role.is_instruction() && v.kind == Kind::Original;
            let slot = if leading {
                0
            } else {
                match v.kind {
                    Kind::Summary => 1,
                    Kind::Masked => 2,
                    Kind::Original => 3,
                    Kind::Recalled => 4,
                    Kind::Status => 5,
                }
            };
            let tokens = self.counter.count_message(&v.message).total();
            parts[slot].tokens += tokens;
            parts[slot].messages += 1;
            counted += tokens;
        }
        // The conversation's own overhead, and whatever else the recorded count holds.
        parts[6].tokens = view.tokens.saturating_sub(counted);
        let used = parts.iter().map(|p| p.tokens).sum();
        let window = self.info.window;
        let reply_reserve = policy::reply_room(window, max_output);
        let trigger = &self.policy.trigger;
        Ok(WindowUse {
            window,
            reply_reserve,
            threshold: trigger.threshold_tokens(window),
            target: trigger.target_tokens(window, self.fixed_tokens()?, recent),
            used,
            free: window.saturating_sub(used + reply_reserve),
            parts,
            messages: view.messages.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::in_memory::InMemoryStore;
    use crate::message::Message;
    use crate::registry::ModelRegistry;
    use crate::session::{Session, new_session};

    #[test]
    fn the_parts_add_up_to_the_view() {
        let store = InMemoryStore::new();
        let registry = ModelRegistry::builtin();
        let new = new_session(&registry, "gpt-4o", Some(2_000), 0);
        let mut session = Session::create(&store, &new).unwrap();
        session
            .append(vec![Message::system("You are an agent.")])
            .unwrap();
        for i in 0..40 {
            session
                .append(vec![Message::user(format!(
                    "turn {i}: {}",
                    "words ".repeat(40)
                ))])
                .unwrap();
        }
        let usage = session.window_use(16_384).unwrap();
        assert_eq!(usage.used, session.view_tokens().unwrap());
        assert_eq!(usage.reply_reserve, 500, "a quarter of the window at most");
        assert_eq!(usage.parts.len(), super::KINDS.len());
        assert!(usage.parts[0].tokens > 0, "the system prompt is pinned");
        assert!(usage.parts[1].messages > 0, "compacted: a summary");
        assert_eq!(
            usage.free,
            usage
                .window
                .saturating_sub(usage.used + usage.reply_reserve)
        );
        assert!(usage.target < usage.threshold && usage.threshold < usage.window);
    }
}
