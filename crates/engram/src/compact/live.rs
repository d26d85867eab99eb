//! A conversation kept inside a window as it grows, in memory: a session without a store.
//!
//! Each new message is counted once and appended to the view: O(new turn). When the view
//! passes the policy's threshold ([`super::policy`]), the whole log (never the view: originals are
//! never lost) is compacted down to the target, so that the next turns do not compact again. The
//! policy's circuit breaker stops automatic compaction when it keeps firing without getting the
//! view under the threshold (a newest message that alone is near the window, say); manual
//! compaction with a focus still works.

use std::borrow::Cow;

pub use super::policy::TriggerPolicy;
use super::policy::{Compactable, Ran};
use super::{CompactOptions, CompactReport, Kind, ViewMessage, compact, policy};
use crate::Error;
use crate::count::TokenCounter;
use crate::input::Conversation;
use crate::message::Message;

/// What happened when a message was pushed ([`LiveContext::push`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Pushed {
    /// The view had room.
    Fits,
    /// The threshold was crossed and the log was compacted.
    Compacted(Box<CompactReport>),
    /// The threshold was crossed but the circuit breaker is open: nothing was done.
    BreakerOpen,
}

/// A growing conversation and its current view.
#[derive(Debug)]
pub struct LiveContext {
    counter: TokenCounter,
    window: usize,
    policy: TriggerPolicy,
    options: CompactOptions,
    log: Conversation,
    view: Vec<ViewMessage>,
    view_tokens: usize,
    failed_in_a_row: u32,
}

impl LiveContext {
    /// An empty conversation for a window of `window` tokens (tool definitions and the reply
    /// reserve are the caller's to subtract).
    pub fn new(counter: TokenCounter, window: usize) -> Self {
        let overhead = counter.accounting().per_conversation;
        LiveContext {
            counter,
            window,
            policy: TriggerPolicy::default(),
            options: CompactOptions::new(window),
            log: Conversation::default(),
            view: Vec::new(),
            view_tokens: overhead,
            failed_in_a_row: 0,
        }
    }

    /// Resumes an existing history: the log is the conversation, and the view is compacted to
    /// the target when the history is over the threshold.
    pub fn resume(
        counter: TokenCounter,
        window: usize,
        conversation: Conversation,
    ) -> Result<Self, Error> {
        let mut live = LiveContext::new(counter, window);
        live.log = conversation;
        let all = live.compact_all_fitting();
        let policy = live.policy;
        policy.run(all, window, &mut live)?;
        Ok(live)
    }

    /// Sets the view to the whole log and returns its tokens.
    fn compact_all_fitting(&mut self) -> usize {
        self.view = self
            .log
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| ViewMessage {
                message: m.clone(),
                kind: Kind::Original,
                source_ids: vec![m.id.clone().unwrap_or_else(|| i.to_string())],
            })
            .collect();
        self.view_tokens = self.counter.count_conversation(&self.log).total();
        self.view_tokens
    }

    /// The same context with another policy.
    #[must_use]
    pub fn with_policy(mut self, policy: TriggerPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The same context with other compaction options (the budget is set per compaction).
    #[must_use]
    pub fn with_options(mut self, options: CompactOptions) -> Self {
        self.options = options;
        self
    }

    /// Appends a message: counted once, added to the view, and the log compacted when the
    /// view passes the threshold.
    pub fn push(&mut self, message: Message) -> Result<Pushed, Error> {
        let tokens = self.counter.count_message(&message).total();
        let index = self.log.messages.len();
        let source_id = message.id.clone().unwrap_or_else(|| index.to_string());
        self.view.push(ViewMessage {
            message: message.clone(),
            kind: Kind::Original,
            source_ids: vec![source_id],
        });
        self.view_tokens += tokens;
        self.log.messages.push(message);
        let policy = self.policy;
        match policy.run(self.view_tokens, self.window, self)? {
            Ran::Sent => {
                self.failed_in_a_row = 0;
                Ok(Pushed::Fits)
            }
            Ran::BreakerOpen => Ok(Pushed::BreakerOpen),
            Ran::Compacted(report) => Ok(Pushed::Compacted(Box::new(report))),
        }
    }

    /// Compacts the log to the policy's target now, optionally serving a focus (a query).
    pub fn compact_now(&mut self, focus: Option<&str>) -> Result<CompactReport, Error> {
        let target =
            self.policy
                .target_tokens(self.window, self.fixed_tokens()?, self.recent_tokens()?);
        self.compact_within(target, focus)
    }

    fn compact_within(
        &mut self,
        target: usize,
        focus: Option<&str>,
    ) -> Result<CompactReport, Error> {
        let mut options = self.options.clone();
        options.query = focus.map(str::to_owned).or(options.query);
        let attempt = policy::within_target(target, self.window, 0, |budget| {
            options.budget = budget;
            compact(&self.log, &self.counter, &options)
        });
        let out = match attempt.result {
            Ok(out) => out,
            Err(e) => {
                self.failed_in_a_row += 1;
                return Err(e);
            }
        };
        self.view = out.messages;
        self.view_tokens = out.report.tokens_after;
        if self.policy.is_over(self.view_tokens, self.window) {
            self.failed_in_a_row += 1;
        } else {
            self.failed_in_a_row = 0;
        }
        Ok(out.report)
    }

    /// The view to send: what was pushed since the last compaction after its output, made well
    /// formed where a tool result has no call before it or a call no result
    /// ([`super::repair_view`], as compaction repairs its input; the log keeps what was pushed).
    pub fn view(&self) -> Cow<'_, [ViewMessage]> {
        match super::repair_view(&self.view) {
            Some((view, _)) => Cow::Owned(view),
            None => Cow::Borrowed(&self.view),
        }
    }

    /// The tokens of [`LiveContext::view`], exact.
    pub fn tokens(&self) -> usize {
        match self.view() {
            Cow::Borrowed(_) => self.view_tokens,
            Cow::Owned(view) => super::view_tokens(&self.counter, &view),
        }
    }

    /// Every message appended, in order (compaction never removes any).
    pub fn log(&self) -> &[Message] {
        &self.log.messages
    }
}

/// The policy's loop runs on the log: the breaker counts the compactions in a row that left the
/// view over the threshold.
impl Compactable for LiveContext {
    type Compacted = CompactReport;

    fn failed_in_a_row(&self) -> Result<usize, Error> {
        Ok(self.failed_in_a_row as usize)
    }

    /// The tokens of what every compaction keeps in front ([`policy::fixed_head`]).
    fn fixed_tokens(&self) -> Result<usize, Error> {
        Ok(policy::fixed_head(&self.log.messages, &self.counter, self.window).tokens)
    }

    fn recent_tokens(&self) -> Result<usize, Error> {
        Ok(policy::recent_tokens(
            self.log.messages.iter(),
            &self.counter,
        ))
    }

    fn compact_to(&mut self, target: usize) -> Result<CompactReport, Error> {
        self.compact_within(target, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;

    fn counter() -> TokenCounter {
        TokenCounter::new(Tokenizer::chars_per_token(4))
    }

    #[test]
    fn compacts_at_the_threshold_down_to_the_target_and_keeps_the_log() {
        let mut live = LiveContext::new(counter(), 1000);
        live.push(Message::system("You are an agent."))
            .expect("push");
        let mut compactions = 0;
        for i in 0..200 {
            let text = format!(
                "turn {i}: edited src/module_{i}.rs and ran the tests; all passed. {}",
                "x".repeat(80)
            );
            match live.push(Message::user(text)).expect("push") {
                Pushed::Compacted(report) => {
                    compactions += 1;
                    assert!(report.tokens_after <= 600, "{}", report.tokens_after);
                }
                Pushed::Fits => {}
                Pushed::BreakerOpen => panic!("breaker opened on an ordinary history"),
            }
            assert!(live.tokens() <= 800, "{}", live.tokens());
            assert_eq!(live.view()[0].message.text(), "You are an agent.");
        }
        assert!((5..60).contains(&compactions), "{compactions}");
        assert_eq!(live.log().len(), 201);
        let recount: usize = live
            .view()
            .iter()
            .map(|v| live.counter.count_message(&v.message).total())
            .sum::<usize>()
            + 3;
        assert_eq!(recount, live.tokens());
    }

    #[test]
    fn the_view_sent_is_well_formed_whatever_was_pushed() {
        use crate::message::ToolCall;
        let mut live = LiveContext::new(counter(), 10_000);
        live.push(Message::user("Fix the build.")).expect("push");
        live.push(Message::tool("lost", "exit 0")).expect("push");
        live.push(Message::assistant_tool_calls(vec![ToolCall::function(
            "c1", "shell", "{}",
        )]))
        .expect("push");
        // The newest call stays open: its result is about to be pushed.
        assert_eq!(live.view().len(), 3);
        assert!(matches!(live.view(), Cow::Owned(_)));
        live.push(Message::user("Go on.")).expect("push");
        let view = live.view();
        let roles: Vec<&str> = view.iter().map(|v| v.message.role.as_str()).collect();
        assert_eq!(roles.join(" "), "user user assistant tool user");
        assert_eq!(view[3].kind, Kind::Status);
        assert_eq!(live.log().len(), 4);
        let recount: usize = view
            .iter()
            .map(|v| live.counter.count_message(&v.message).total())
            .sum::<usize>()
            + 3;
        assert_eq!(recount, live.tokens());
    }

    #[test]
    fn the_breaker_opens_when_compaction_cannot_help() {
        let mut live = LiveContext::new(counter(), 200);
        live.push(Message::system("s")).expect("push");
        // Each message alone is near the window: every compaction stays above the threshold.
        let big = "y".repeat(690);
        let mut outcomes = Vec::new();
        for _ in 0..6 {
            outcomes.push(live.push(Message::user(big.clone())).expect("push"));
        }
        assert!(matches!(outcomes[0], Pushed::Compacted(_)));
        assert!(
            matches!(outcomes.last(), Some(Pushed::BreakerOpen)),
            "{outcomes:?}"
        );
        // Manual compaction still works.
        assert!(live.compact_now(Some("y")).is_ok());
    }
}
