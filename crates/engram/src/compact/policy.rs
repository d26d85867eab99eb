//! When to compact and to how much: the one policy that sessions, the proxy, the CLI, Python,
//! Node and [`LiveContext`](super::live::LiveContext) call.
//!
//! Every decision is measured against one quantity, the **limit**: the tokens a context may hold,
//! which is the model's window less the room the caller keeps for the reply. A session keeps no
//! room (its limit is the window; the threshold's headroom is the reply's room); the proxy keeps
//! the room its request asks for (`max_tokens`); a one-off compaction with no budget given keeps
//! [`reply_room`].
//!
//! [`TriggerPolicy::run`] is the one loop every caller runs before it sends a context (a
//! session's append and its sleep, the proxy's view of a conversation, a [`LiveContext`](super::live::LiveContext),
//! the AI SDK's prompt), each telling it what it needs through [`Compactable`]: under the
//! threshold the context is sent as it is; over it, it is compacted to
//! [`TriggerPolicy::target_tokens`], unless the circuit breaker is open (compactions in a row
//! that did not get under the threshold); each compaction runs [`within_target`], which falls
//! back to what must be kept plus room for a summary when the target is too small for it.
//!
//! # How deep: the bill
//!
//! Providers bill a prompt's repeated prefix at a fraction `r` of the price (0.1 for Anthropic and
//! OpenAI's newer models). A compaction keeps a fixed head `H` (the instructions, the task: see
//! [`fixed_head`]) and rewrites what follows it, `S - H` tokens billed whole once; then each turn
//! adds `g` tokens and rereads the view at `r` until it passes the threshold `T`, for
//! `(T - S) / g` turns. Per turn the bill is
//!
//! ```text
//! c(S) = g + r (S + T) / 2 + (1 - r) (S - H) g / (T - S)
//! ```
//!
//! and both terms that depend on `S` grow with it: a deeper cut costs less to rewrite, is cheaper
//! to reread and buys more turns of pure extension. The cheapest depth is therefore the deepest
//! that recall allows, and that floor is measured, not derived: by default a compaction keeps its
//! fixed head and [`TAIL_SHARE`] of the room that head leaves in the limit (on the dev
//! trajectories the share below which the identifiers an agent's next step uses start to go,
//! `scripts/bench_cache.py`, docs/benchmarks-history.md), but no more than the room its last
//! [`RECENT_STEPS`] steps take when that is less: what an agent's next step draws on is its last
//! few steps, whatever the window, and a large window is no reason to reread more of the old
//! ones on every turn. Half the share is kept at least, for the summary of a long history. A
//! configured `target` is a share of the limit, as it always was.

use crate::Error;

/// The share of the limit the task statement may take and still be kept whole, in front, by
/// every compaction; a larger one is cut to its ask by the digest.
pub const TASK_SHARE: f64 = 0.25;

/// What a compaction keeps besides its fixed head, as a share of the room that head leaves in
/// the limit, when no target is configured (see the module's documentation).
pub const TAIL_SHARE: f64 = 0.25;

/// The steps (an assistant message and what follows it up to the next) whose room bounds what a
/// compaction keeps besides its fixed head ([`TriggerPolicy::target_tokens`]): on the dev
/// trajectories, four in five of the identifiers an agent's next step reuses were last said
/// within its last six steps (mini-SWE-agent 0.79, SWE-agent 0.99); the rest are in the work
/// ledger, the summary or one search of the history away.
pub const RECENT_STEPS: usize = 6;

/// The tokens of the last [`RECENT_STEPS`] steps of `messages`: from the sixth assistant message
/// from the end (from the start when there are fewer) to the end, counted from the end.
pub fn recent_tokens<'m>(
    messages: impl DoubleEndedIterator<Item = &'m crate::message::Message>,
    counter: &crate::count::TokenCounter,
) -> usize {
    let mut steps = 0;
    let mut tokens = 0;
    for m in messages.rev() {
        tokens += counter.count_message(m).total();
        if m.role == crate::message::Role::Assistant {
            steps += 1;
            if steps == RECENT_STEPS {
                break;
            }
        }
    }
    tokens
}

/// When to compact, as shares of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TriggerPolicy {
    /// Compact when the context passes this share of the limit (0.8).
    pub threshold: f64,
    /// Compact down to this share of the limit; `None` (the default): the depth the bill asks
    /// for, the fixed head and [`TAIL_SHARE`] of the room it leaves, or the room of the last
    /// [`RECENT_STEPS`] steps when that is less ([`TriggerPolicy::target_tokens`]).
    pub target: Option<f64>,
    /// Stop compacting automatically after this many compactions in a row that did not get
    /// the context under the threshold (0: never stop).
    pub max_failed_compactions: u32,
}

impl Default for TriggerPolicy {
    fn default() -> Self {
        TriggerPolicy {
            threshold: 0.8,
            target: None,
            max_failed_compactions: 3,
        }
    }
}

/// What [`TriggerPolicy::run`] did with a context about to be sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Ran<T> {
    /// Under the threshold: sent as it is.
    Sent,
    /// Over the threshold, but the circuit breaker is open: compacting again would not help,
    /// so it is sent as it is until a manual compaction.
    BreakerOpen,
    /// Over the threshold: compacted, with what the compaction gave back.
    Compacted(T),
}

/// A context the policy runs on ([`TriggerPolicy::run`]): what each caller tells the one loop.
/// The head and the breaker's count are asked only over the threshold (a session reads them
/// from its store).
pub trait Compactable {
    /// What one compaction gives back.
    type Compacted;

    /// How many automatic compactions in a row left the context over the threshold (0 for a
    /// caller that keeps no record of them: its breaker never opens).
    fn failed_in_a_row(&self) -> Result<usize, Error> {
        Ok(0)
    }

    /// The tokens of the context's fixed head ([`fixed_head`]).
    fn fixed_tokens(&self) -> Result<usize, Error>;

    /// The tokens of the context's last steps ([`recent_tokens`]).
    fn recent_tokens(&self) -> Result<usize, Error>;

    /// Compacts the context to `target` tokens (through [`within_target`]).
    fn compact_to(&mut self, target: usize) -> Result<Self::Compacted, Error>;
}

impl TriggerPolicy {
    /// The tokens above which a context of this limit is compacted.
    pub fn threshold_tokens(&self, limit: usize) -> usize {
        (self.threshold * limit as f64) as usize
    }

    /// The tokens a compaction aims for (at least 1), for a context whose fixed head holds
    /// `fixed` tokens ([`fixed_head`]) and whose last steps `recent` ([`recent_tokens`]): the
    /// configured share of the limit, else the fixed head and [`TAIL_SHARE`] of the room it
    /// leaves, or the room of the last steps when that is less (but at least half the share),
    /// never above the threshold.
    pub fn target_tokens(&self, limit: usize, fixed: usize, recent: usize) -> usize {
        let tokens = match self.target {
            Some(share) => (share * limit as f64) as usize,
            None => {
                let fixed = fixed.min(limit);
                let share = (TAIL_SHARE * (limit - fixed) as f64) as usize;
                (fixed + share.min(recent.max(share / 2))).min(self.threshold_tokens(limit))
            }
        };
        tokens.max(1)
    }

    /// True when a context of `tokens` should be compacted.
    pub fn is_over(&self, tokens: usize, limit: usize) -> bool {
        tokens > self.threshold_tokens(limit)
    }

    /// True when the last `max_failed_compactions` automatic compactions, `failed_in_a_row`,
    /// all left the context over the threshold: compacting again would not help, so automatic
    /// compaction waits for a manual one.
    pub fn breaker_open(&self, failed_in_a_row: usize) -> bool {
        let n = self.max_failed_compactions as usize;
        n > 0 && failed_in_a_row >= n
    }

    /// The one policy loop: what is done with `context`, of `tokens` tokens, before it is sent
    /// within `limit`. Under the threshold it is sent as it is; over it, it is compacted to the
    /// target for its fixed head, unless its failed compactions in a row have opened the
    /// breaker.
    pub fn run<C: Compactable + ?Sized>(
        &self,
        tokens: usize,
        limit: usize,
        context: &mut C,
    ) -> Result<Ran<C::Compacted>, Error> {
        if !self.is_over(tokens, limit) {
            return Ok(Ran::Sent);
        }
        if self.breaker_open(context.failed_in_a_row()?) {
            return Ok(Ran::BreakerOpen);
        }
        let target = self.target_tokens(limit, context.fixed_tokens()?, context.recent_tokens()?);
        context.compact_to(target).map(Ran::Compacted)
    }

    /// The target of a compaction retried after the upstream refused what was sent, `sent`
    /// tokens, as too long (our count was too low for it): half the usual target, at most three
    /// quarters of what was sent.
    pub fn retry_target(&self, limit: usize, fixed: usize, recent: usize, sent: usize) -> usize {
        (self.target_tokens(limit, fixed, recent) / 2)
            .min(sent * 3 / 4)
            .max(1)
    }
}

/// The messages every compaction keeps in front, byte for byte, and their tokens: the leading
/// instructions, and the task statement (the first user message, when something follows it)
/// while it fits [`TASK_SHARE`] of the limit.
pub fn fixed_head(
    messages: &[crate::message::Message],
    counter: &crate::count::TokenCounter,
    limit: usize,
) -> FixedHead {
    let instructions = crate::message::leading_instructions(messages);
    let mut tokens: usize = messages[..instructions]
        .iter()
        .map(|m| counter.count_message(m).total())
        .sum();
    let task = messages
        .get(instructions)
        .filter(|m| m.role == crate::message::Role::User && instructions + 1 < messages.len())
        .map(|m| counter.count_message(m).total())
        .filter(|&t| t <= (TASK_SHARE * limit as f64) as usize);
    if let Some(t) = task {
        tokens += t;
    }
    FixedHead {
        messages: instructions + usize::from(task.is_some()),
        task_whole: task.is_some(),
        tokens,
    }
}

/// What [`fixed_head`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedHead {
    /// How many leading messages it is.
    pub messages: usize,
    /// True when the task statement is among them.
    pub task_whole: bool,
    /// Their tokens.
    pub tokens: usize,
}

/// The room kept for the reply when a caller gives no budget: the model's maximum output, at
/// most a quarter of the window.
pub fn reply_room(window: usize, max_output: usize) -> usize {
    max_output.min(window / 4)
}

/// The tokens a request's context may hold: the window less the room for the reply (what the
/// request asks for, else [`reply_room`]), that room at most half the window.
pub fn request_limit(window: usize, max_output: usize, asked: Option<usize>) -> usize {
    let reserve = asked
        .unwrap_or_else(|| reply_room(window, max_output))
        .min(window / 2);
    window.saturating_sub(reserve)
}

/// The target of a compaction a caller asks for by hand (`requested`, positive and at most the
/// limit), else the policy's target for a fixed head of `fixed` tokens. The error (the same on
/// every surface) does not name the field: each surface names it its own way (`--target`,
/// `"target"`).
pub fn requested_target(
    requested: Option<usize>,
    limit: usize,
    fixed: usize,
    recent: usize,
    trigger: &TriggerPolicy,
) -> Result<usize, Error> {
    use crate::Error::OutOfRange;
    match requested {
        Some(0) => Err(OutOfRange("must be a positive number of tokens".to_owned())),
        Some(t) if t > limit => Err(OutOfRange(format!(
            "{t} is larger than the session's window ({limit} tokens)"
        ))),
        Some(t) => Ok(t),
        None => Ok(trigger.target_tokens(limit, fixed, recent)),
    }
}

/// A compaction tried within the target, and why the target could not be met when it could not.
#[derive(Debug)]
pub struct Attempt<T> {
    /// The compaction's outcome (within the target, or within the fallback budget).
    pub result: Result<T, Error>,
    /// Why the target could not be met, when the fallback budget was used.
    pub missed_target: Option<String>,
}

/// Compacts within `target` tokens, else, when what must be kept does not fit in it, within
/// what must be kept plus a quarter of the target for a summary of the rest, at most `limit`
/// (not the whole limit: that would leave the context over the threshold again). `reserve`
/// tokens are kept out of either budget for what the caller adds afterwards (a summary header).
///
/// `compact` runs the compaction with a budget.
pub fn within_target<T>(
    target: usize,
    limit: usize,
    reserve: usize,
    mut compact: impl FnMut(usize) -> Result<T, Error>,
) -> Attempt<T> {
    match compact(target.saturating_sub(reserve).max(1)) {
        Err(Error::CannotFit { required, what, .. }) if target < limit => {
            let budget = (required + target / 4)
                .min(limit)
                .saturating_sub(reserve)
                .max(required.min(limit))
                .max(1);
            // Said of the target, not of the budget inside it (the caller names the target).
            let mut why = format!("{what} need {required} tokens on their own");
            if required <= target {
                why.push_str(&format!(
                    ", and {reserve} more are kept for the summaries' headers"
                ));
            }
            Attempt {
                result: compact(budget),
                missed_target: Some(why),
            }
        }
        result => Attempt {
            result,
            missed_target: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_targets_are_shares_of_the_limit() {
        let p = TriggerPolicy::default();
        assert_eq!(p.threshold_tokens(10_000), 8_000);
        assert!(!p.is_over(8_000, 10_000));
        assert!(p.is_over(8_001, 10_000));
        let shares = TriggerPolicy {
            target: Some(0.6),
            ..p
        };
        assert_eq!(
            shares.target_tokens(10_000, 2_000, 500),
            6_000,
            "a share of the limit"
        );
        assert_eq!(shares.target_tokens(0, 0, 0), 1);
        // By default, the fixed head and a quarter of the room it leaves, at most the threshold.
        let many = usize::MAX;
        assert_eq!(p.target_tokens(10_000, 2_000, many), 2_000 + 2_000);
        assert_eq!(p.target_tokens(10_000, 0, many), 2_500);
        assert_eq!(p.target_tokens(10_000, 9_000, many), 8_000);
        assert_eq!(p.target_tokens(0, 0, 0), 1);
        // No more than the room the last steps take when they take less; half the quarter at
        // least, for the summary of what is set aside.
        assert_eq!(p.target_tokens(10_000, 2_000, 1_500), 2_000 + 1_500);
        assert_eq!(p.target_tokens(10_000, 2_000, 300), 2_000 + 1_000);
        assert_eq!(p.target_tokens(10_000, 2_000, 3_000), 2_000 + 2_000);
        assert_eq!(request_limit(128_000, 16_384, None), 128_000 - 16_384);
        assert_eq!(
            request_limit(8_000, 8_000, None),
            6_000,
            "at most a quarter for the reply"
        );
    }

    #[test]
    fn the_breaker_opens_after_failed_compactions_in_a_row() {
        let p = TriggerPolicy::default();
        assert!(!p.breaker_open(2), "two of three");
        assert!(p.breaker_open(3));
        let never = TriggerPolicy {
            max_failed_compactions: 0,
            ..p
        };
        assert!(!never.breaker_open(0));
        assert!(!never.breaker_open(5));
    }

    /// A context that records what the loop asked of it.
    struct Fake {
        failed: usize,
        asked_head: std::cell::Cell<bool>,
        targets: Vec<usize>,
    }

    impl Compactable for Fake {
        type Compacted = usize;
        fn failed_in_a_row(&self) -> Result<usize, Error> {
            Ok(self.failed)
        }
        fn fixed_tokens(&self) -> Result<usize, Error> {
            self.asked_head.set(true);
            Ok(2_000)
        }
        fn recent_tokens(&self) -> Result<usize, Error> {
            Ok(5_000)
        }
        fn compact_to(&mut self, target: usize) -> Result<usize, Error> {
            self.targets.push(target);
            Ok(target)
        }
    }

    #[test]
    fn the_loop_sends_compacts_or_waits() {
        let p = TriggerPolicy::default();
        let fake = |failed| Fake {
            failed,
            asked_head: Default::default(),
            targets: Vec::new(),
        };
        let mut under = fake(5);
        assert_eq!(p.run(8_000, 10_000, &mut under).unwrap(), Ran::Sent);
        assert!(under.targets.is_empty());
        assert!(
            !under.asked_head.get(),
            "the head is counted only to compact"
        );
        let mut over = fake(2);
        assert_eq!(
            p.run(8_001, 10_000, &mut over).unwrap(),
            Ran::Compacted(4_000),
            "the fixed head and a quarter of the room it leaves"
        );
        assert_eq!(over.targets, [4_000]);
        let mut stuck = fake(3);
        assert_eq!(p.run(8_001, 10_000, &mut stuck).unwrap(), Ran::BreakerOpen);
        assert!(stuck.targets.is_empty(), "nothing compacted");
        assert_eq!(p.retry_target(10_000, 2_000, 5_000, 9_000), 2_000);
        assert_eq!(p.retry_target(10_000, 2_000, 5_000, 2_000), 1_500);
    }

    #[test]
    fn the_fixed_head_is_the_instructions_and_a_task_that_fits() {
        let counter = crate::count::TokenCounter::new(crate::Tokenizer::chars_per_token(4));
        let system = crate::message::Message::system("You are a coding agent.");
        let task = crate::message::Message::user("Fix the parser.");
        let turn = crate::message::Message::assistant("Looking.");
        let tokens = |m: &crate::message::Message| counter.count_message(m).total();
        let messages = [system.clone(), task.clone(), turn.clone()];
        let head = fixed_head(&messages, &counter, 1_000);
        assert_eq!((head.messages, head.task_whole), (2, true));
        assert_eq!(head.tokens, tokens(&system) + tokens(&task));
        // A task larger than its share is not kept whole; nor is a newest message.
        let head = fixed_head(&messages, &counter, 10);
        assert_eq!((head.messages, head.task_whole), (1, false));
        let head = fixed_head(&messages[..2], &counter, 1_000);
        assert_eq!((head.messages, head.task_whole), (1, false));
    }

    #[test]
    fn the_last_steps_start_at_the_sixth_assistant_message_from_the_end() {
        let counter = crate::count::TokenCounter::new(crate::Tokenizer::chars_per_token(4));
        let mut messages = vec![
            crate::message::Message::system("You are a coding agent."),
            crate::message::Message::user("Fix the parser."),
        ];
        let head = |m: &[crate::message::Message]| {
            m.iter()
                .map(|m| counter.count_message(m).total())
                .sum::<usize>()
        };
        // Fewer steps than six: all of it.
        messages.push(crate::message::Message::assistant("Looking."));
        assert_eq!(recent_tokens(messages.iter(), &counter), head(&messages));
        for i in 0..8 {
            messages.push(crate::message::Message::user(format!("output {i}")));
            messages.push(crate::message::Message::assistant(format!("step {i}")));
        }
        messages.push(crate::message::Message::user("the newest output"));
        // Six assistant messages from the end, and what follows each.
        let start = messages.len() - 12;
        assert_eq!(messages[start].role, crate::message::Role::Assistant);
        assert_eq!(
            recent_tokens(messages.iter(), &counter),
            head(&messages[start..])
        );
    }

    #[test]
    fn a_requested_target_is_positive_and_within_the_window() {
        let p = TriggerPolicy::default();
        assert_eq!(requested_target(None, 10_000, 2_000, 5_000, &p), Ok(4_000));
        assert_eq!(requested_target(Some(500), 10_000, 2_000, 0, &p), Ok(500));
        assert!(
            requested_target(Some(0), 10_000, 0, 0, &p)
                .unwrap_err()
                .to_string()
                .contains("positive")
        );
        let e = requested_target(Some(10_001), 10_000, 0, 0, &p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("larger than the session's window (10000 tokens)"),
            "{e}"
        );
    }

    #[test]
    fn the_fallback_is_what_must_be_kept_plus_room_for_a_summary() {
        let cannot = |required: usize| Error::CannotFit {
            budget: 0,
            required,
            over: 0,
            what: "the newest message".into(),
        };
        let mut budgets = Vec::new();
        let attempt = within_target(6_000, 10_000, 40, |b| {
            budgets.push(b);
            if b < 7_000 { Err(cannot(7_000)) } else { Ok(b) }
        });
        assert_eq!(attempt.result.expect("fits"), 8_500 - 40);
        assert_eq!(budgets, [5_960, 8_460]);
        // Said of the target, never of the budget inside it (5,960 is nobody's number).
        assert_eq!(
            attempt.missed_target.as_deref(),
            Some("the newest message need 7000 tokens on their own")
        );
        let attempt = within_target(6_000, 10_000, 40, |b| {
            if b < 5_990 { Err(cannot(5_990)) } else { Ok(b) }
        });
        assert_eq!(
            attempt.missed_target.as_deref(),
            Some(
                "the newest message need 5990 tokens on their own, and 40 more are kept for \
                 the summaries' headers"
            )
        );

        // At most the limit; never less than what must be kept (within the limit).
        let attempt = within_target(6_000, 10_000, 40, |b| {
            if b < 9_990 { Err(cannot(9_990)) } else { Ok(b) }
        });
        assert_eq!(attempt.result.expect("fits"), 9_990);

        // The target is the limit: nothing to fall back to.
        let attempt = within_target(10_000, 10_000, 0, |_| Err::<usize, _>(cannot(20_000)));
        assert!(attempt.result.is_err() && attempt.missed_target.is_none());
    }
}
