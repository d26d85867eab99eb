//! When to compact and to how much: the one policy that sessions, the proxy, the CLI, Python and
//! [`LiveContext`](super::live::LiveContext) call.
//!
//! Every decision is measured against one quantity, the **limit**: the tokens a context may hold,
//! which is the model's window less the room the caller keeps for the reply. A session keeps no
//! room (its limit is the window; the threshold's headroom is the reply's room); the proxy keeps
//! the room its request asks for (`max_tokens`); a one-off compaction with no budget given keeps
//! [`reply_room`].
//!
//! - [`TriggerPolicy::is_over`]: compact when the context passes `threshold` of the limit;
//! - [`TriggerPolicy::target_tokens`]: compact down to `target` of it;
//! - [`TriggerPolicy::breaker_open`]: stop compacting automatically after compactions in a row
//!   that did not get under the threshold;
//! - [`within_target`]: compact within the target, else within what must be kept plus room for a
//!   summary, at most the limit.

use super::CompactError;

/// When to compact, as shares of the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TriggerPolicy {
    /// Compact when the context passes this share of the limit (0.8).
    pub threshold: f64,
    /// Compact down to this share of the limit (0.6), leaving room for the next turns.
    pub target: f64,
    /// Stop compacting automatically after this many compactions in a row that did not get
    /// the context under the threshold (0: never stop).
    pub max_failed_compactions: u32,
}

impl Default for TriggerPolicy {
    fn default() -> Self {
        TriggerPolicy {
            threshold: 0.8,
            target: 0.6,
            max_failed_compactions: 3,
        }
    }
}

impl TriggerPolicy {
    /// The tokens above which a context of this limit is compacted.
    pub fn threshold_tokens(&self, limit: usize) -> usize {
        (self.threshold * limit as f64) as usize
    }

    /// The tokens a compaction aims for (at least 1).
    pub fn target_tokens(&self, limit: usize) -> usize {
        ((self.target * limit as f64) as usize).max(1)
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

/// The budget of a compaction when the caller gives none: the window less [`reply_room`].
pub fn default_budget(window: usize, max_output: usize) -> usize {
    window - reply_room(window, max_output)
}

/// The target of a compaction a caller asks for by hand (`requested`, positive and at most the
/// limit), else the policy's target. The error (the same on every surface) does not name the
/// field: each surface names it its own way (`--target`, `"target"`).
pub fn requested_target(
    requested: Option<usize>,
    limit: usize,
    trigger: &TriggerPolicy,
) -> Result<usize, String> {
    match requested {
        Some(0) => Err("must be a positive number of tokens".to_owned()),
        Some(t) if t > limit => Err(format!(
            "{t} is larger than the session's window ({limit} tokens)"
        )),
        Some(t) => Ok(t),
        None => Ok(trigger.target_tokens(limit)),
    }
}

/// A compaction tried within the target, and why the target could not be met when it could not.
#[derive(Debug)]
pub struct Attempt<T> {
    /// The compaction's outcome (within the target, or within the fallback budget).
    pub result: Result<T, CompactError>,
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
    mut compact: impl FnMut(usize) -> Result<T, CompactError>,
) -> Attempt<T> {
    match compact(target.saturating_sub(reserve).max(1)) {
        Err(CompactError::CannotFit { required, what, .. }) if target < limit => {
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
        assert_eq!(p.target_tokens(10_000), 6_000);
        assert_eq!(p.target_tokens(0), 1);
        assert_eq!(default_budget(128_000, 16_384), 128_000 - 16_384);
        assert_eq!(
            default_budget(8_000, 8_000),
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

    #[test]
    fn a_requested_target_is_positive_and_within_the_window() {
        let p = TriggerPolicy::default();
        assert_eq!(requested_target(None, 10_000, &p), Ok(6_000));
        assert_eq!(requested_target(Some(500), 10_000, &p), Ok(500));
        assert!(
            requested_target(Some(0), 10_000, &p)
                .unwrap_err()
                .contains("positive")
        );
        let e = requested_target(Some(10_001), 10_000, &p).unwrap_err();
        assert!(
            e.contains("larger than the session's window (10000 tokens)"),
            "{e}"
        );
    }

    #[test]
    fn the_fallback_is_what_must_be_kept_plus_room_for_a_summary() {
        let cannot = |required: usize| CompactError::CannotFit {
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
