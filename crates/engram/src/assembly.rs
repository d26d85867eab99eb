//! Budgeted context assembly: the system prompt enriched with relevant memory and
//! past learnings, summaries of older history, the evictable prefix filled newest first, a
//! protected fresh tail, and the new message.
//!
//! The classic context manager's defaults are kept (30,000 total; 2,000 each for the system
//! prompt and the tool definitions; memory 15% and learnings 5% of what remains; a fresh tail of
//! 16), plus a reserve for the model's reply. One rule differs from the classic one, on purpose:
//! it keeps the fresh tail "regardless of budget"; engram never exceeds the budget, so when the
//! tail itself does not fit, its oldest units give way (never the new message) and the report
//! says so. The classic rules stay available ([`ContextBuilder::seed_rules`]) for the Python
//! layer that reproduces the classic API (`engram.compat`).

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::compact::units;
use crate::count::TokenCounter;
use crate::message::{Content, Message};

/// The classic `TokenBudget`, plus a reserve for the reply.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenBudget {
    /// The whole window available to the request.
    pub total: usize,
    /// Planned for the system prompt (with memory and learnings it may use the memory and
    /// learnings shares too).
    pub system_reserve: usize,
    /// Planned for tool definitions.
    pub tool_definitions_reserve: usize,
    /// Share of what remains after the reserves for "## Relevant Memory".
    pub memory_fraction: f64,
    /// Share of what remains after the reserves for "## Past Learnings".
    pub learnings_fraction: f64,
    /// Messages at the end of the history kept first (whole units).
    pub fresh_tail_count: usize,
    /// Kept free for the model's reply.
    pub reply_reserve: usize,
}

impl Default for TokenBudget {
    fn default() -> Self {
        TokenBudget {
            total: 30_000,
            system_reserve: 2_000,
            tool_definitions_reserve: 2_000,
            memory_fraction: 0.15,
            learnings_fraction: 0.05,
            fresh_tail_count: 16,
            reply_reserve: 0,
        }
    }
}

impl TokenBudget {
    /// The classic defaults for a model's window, with `reply_reserve` kept free for the reply.
    pub fn for_window(window: usize, reply_reserve: usize) -> Self {
        TokenBudget {
            total: window,
            reply_reserve: reply_reserve.min(window / 2),
            ..TokenBudget::default()
        }
    }

    /// What remains after the reserves (the classic "available budget").
    pub fn available(&self) -> usize {
        self.total
            .saturating_sub(self.system_reserve)
            .saturating_sub(self.tool_definitions_reserve)
            .saturating_sub(self.reply_reserve)
    }

    /// Tokens for memory snippets.
    pub fn memory_tokens(&self) -> usize {
        (self.available() as f64 * self.memory_fraction) as usize
    }

    /// Tokens for learnings.
    pub fn learnings_tokens(&self) -> usize {
        (self.available() as f64 * self.learnings_fraction) as usize
    }
}

/// A summary of older history, as the summarisation subsystem stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSummary {
    /// How many summaries deep (a summary of summaries is depth 2).
    pub depth: u32,
    /// Messages it covers.
    pub messages: usize,
    /// When the first covered message was written (free text, an RFC 3339 date, say).
    pub from: String,
    /// When the last one was.
    pub to: String,
    /// The summary.
    pub text: String,
}

impl StoredSummary {
    /// The summary as a message with the classic header:
    /// `[Summary: depth d, n messages, covers t1 to t2]`.
    pub fn to_message(&self) -> Message {
        Message::system(format!(
            "{}\n{}",
            summary_header(self.depth, self.messages, &self.from, &self.to),
            self.text
        ))
    }
}

/// A summary's header line: `[Summary: depth d, n messages, covers t1 to t2]`.
pub fn summary_header(depth: u32, messages: usize, from: &str, to: &str) -> String {
    format!("[Summary: depth {depth}, {messages} messages, covers {from} to {to}]")
}

/// What went into the context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct AssemblyReport {
    /// Total tokens of the assembled context (exact).
    pub tokens: usize,
    /// The budget it had (total less the reply reserve).
    pub budget: usize,
    /// Memory snippets injected.
    pub memory_used: usize,
    /// Learnings injected.
    pub learnings_used: usize,
    /// Summaries inserted.
    pub summaries_used: usize,
    /// History messages kept.
    pub history_kept: usize,
    /// History messages dropped.
    pub history_dropped: usize,
    /// Fresh-tail messages that had to give way because the tail alone did not fit.
    pub fresh_tail_dropped: usize,
}

/// What [`memory_sections`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemorySections {
    /// "## Relevant Memory" and "## Past Learnings", each when something fits, separated by a
    /// blank line; empty when nothing fits.
    pub text: String,
    /// The indices of the memory snippets used.
    pub memory_used: Vec<usize>,
    /// The indices of the learnings used.
    pub learnings_used: Vec<usize>,
}

/// The memory sections, the one rule for assembled contexts and session contexts: memory
/// snippets (best first) as lines under "## Relevant Memory" within
/// [`TokenBudget::memory_tokens`], and at most five learnings as "- " lines under
/// "## Past Learnings" within [`TokenBudget::learnings_tokens`]. A snippet that does not fit is
/// skipped and the next one tried.
pub fn memory_sections(
    counter: &TokenCounter,
    budget: &TokenBudget,
    memory: &mut dyn Iterator<Item = &str>,
    learnings: &mut dyn Iterator<Item = &str>,
) -> MemorySections {
    let mut out = MemorySections::default();
    let mut lines = Vec::new();
    let mut used = 0;
    for (i, snippet) in memory.enumerate() {
        let tokens = counter.count_text(snippet) + 1;
        if used + tokens > budget.memory_tokens() {
            continue;
        }
        used += tokens;
        lines.push(snippet.trim().to_owned());
        out.memory_used.push(i);
    }
    if !lines.is_empty() {
        out.text = format!("## Relevant Memory\n{}", lines.join("\n"));
    }
    let mut lines = Vec::new();
    let mut used = 0;
    for (i, learning) in learnings.take(5).enumerate() {
        let tokens = counter.count_text(learning) + 3;
        if used + tokens > budget.learnings_tokens() {
            continue;
        }
        used += tokens;
        lines.push(format!("- {}", learning.trim()));
        out.learnings_used.push(i);
    }
    if !lines.is_empty() {
        if !out.text.is_empty() {
            out.text.push_str("\n\n");
        }
        out.text.push_str("## Past Learnings\n");
        out.text.push_str(&lines.join("\n"));
    }
    out
}

/// Builds contexts under a [`TokenBudget`].
#[derive(Debug)]
pub struct ContextBuilder<'c> {
    counter: &'c TokenCounter,
    budget: TokenBudget,
    seed: Option<SeedCount>,
}

/// How the classic rules ([`ContextBuilder::seed_rules`]) count a message: by its text
/// alone, at least 1 token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedCount {
    /// The classic estimate: characters divided by 4, rounded down.
    Characters,
    /// The counter's exact count of the text.
    Exact,
}

/// The parts of a request, as the classic `build_messages` takes them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Parts<'a> {
    /// The base system prompt.
    pub system: &'a str,
    /// The new message (normally the user's request).
    pub new_message: Option<&'a Message>,
    /// The conversation so far, oldest first.
    pub history: &'a [Message],
    /// Retrieved memory snippets, best first.
    pub memory_results: &'a [String],
    /// Lessons from earlier runs, best first (at most 5 are used).
    pub learnings: &'a [String],
    /// Tool definitions (they count against the budget).
    pub tool_definitions: &'a [serde_json::Value],
    /// Summaries of older history, oldest first.
    pub summaries: &'a [StoredSummary],
}

impl<'c> ContextBuilder<'c> {
    /// A builder counting with `counter`.
    pub fn new(counter: &'c TokenCounter, budget: TokenBudget) -> Self {
        ContextBuilder {
            counter,
            budget,
            seed: None,
        }
    }

    /// The classic rules, for code written against the classic API (the classic Python API,
    /// `engram.compat`), with messages counted as `count` says: the reserves stay reserved whatever the
    /// system prompt and the tools use, so the history has `available - memory - learnings`
    /// with the new message; the fresh tail is kept whole "regardless of budget", so the
    /// context may exceed it (the report's `tokens` says by how much); memory is cut to its
    /// share and the learnings come all or none. Tool calls still stay with their results.
    /// `None` (the default): engram's rules, which never exceed the budget.
    pub fn seed_rules(mut self, count: Option<SeedCount>) -> Self {
        self.seed = count;
        self
    }

    /// Assembles the context: the enriched system prompt, the summaries that fit, the evictable
    /// history filled newest first (stopping at the first unit that does not fit), the fresh
    /// tail, and the new message.
    pub fn build(&self, parts: &Parts<'_>) -> Result<(Vec<Message>, AssemblyReport), Error> {
        if let Some(count) = self.seed {
            return Ok(self.build_by_the_seed(parts, count));
        }
        let budget = self.budget.total.saturating_sub(self.budget.reply_reserve);
        let mut report = AssemblyReport {
            budget,
            ..AssemblyReport::default()
        };
        let count = |m: &Message| self.counter.count_message(m).total();

        // The system prompt with memory and learnings, each within its share.
        let mut system = parts.system.to_owned();
        let sections = memory_sections(
            self.counter,
            &self.budget,
            &mut parts.memory_results.iter().map(String::as_str),
            &mut parts.learnings.iter().map(String::as_str),
        );
        if !sections.text.is_empty() {
            system.push_str("\n\n");
            system.push_str(&sections.text);
        }
        report.memory_used = sections.memory_used.len();
        report.learnings_used = sections.learnings_used.len();
        let system = (!system.is_empty()).then(|| Message::system(system));

        let fixed = self.counter.accounting().per_conversation
            + self.counter.count_tools(parts.tool_definitions)
            + system.as_ref().map_or(0, count)
            + parts.new_message.map_or(0, count);
        if fixed > budget {
            return Err(Error::NoRoom {
                required: fixed,
                budget,
            });
        }
        let mut room = budget - fixed;

        let (repaired, all_units, tail_start_unit) =
            history_units(parts.history, self.budget.fresh_tail_count);
        let history = repaired.as_slice();
        let unit_tokens =
            |u: &units::Unit| -> usize { history[u.start..u.end].iter().map(count).sum() };
        // The tail newest first; if it does not fit, its oldest units give way.
        let mut kept_tail = 0;
        for u in all_units[tail_start_unit..].iter().rev() {
            let t = unit_tokens(u);
            if t > room {
                break;
            }
            room -= t;
            kept_tail += 1;
        }
        let tail_units = &all_units[all_units.len() - kept_tail..];
        report.fresh_tail_dropped = all_units[tail_start_unit..all_units.len() - kept_tail]
            .iter()
            .map(units::Unit::len)
            .sum();

        // Summaries, if they fit, before the evictable prefix.
        let mut summaries = Vec::new();
        for s in parts.summaries {
            let m = s.to_message();
            let t = count(&m);
            if t <= room {
                room -= t;
                summaries.push(m);
            }
        }
        report.summaries_used = summaries.len();

        // The evictable prefix, newest first, stopping at the first unit that does not fit.
        let evictable = &all_units[..tail_start_unit];
        let mut kept_prefix = 0;
        if kept_tail == all_units.len() - tail_start_unit {
            for u in evictable.iter().rev() {
                let t = unit_tokens(u);
                if t > room {
                    break;
                }
                room -= t;
                kept_prefix += 1;
            }
        }
        let prefix_units = &evictable[evictable.len() - kept_prefix..];

        let mut out: Vec<Message> = Vec::new();
        out.extend(system);
        out.extend(summaries);
        for u in prefix_units.iter().chain(tail_units) {
            out.extend(history[u.start..u.end].iter().cloned());
        }
        report.history_kept = prefix_units
            .iter()
            .chain(tail_units)
            .map(units::Unit::len)
            .sum();
        report.history_dropped = history.len() - report.history_kept;
        out.extend(parts.new_message.cloned());
        report.tokens = self.counter.count_messages(&out).total()
            + self.counter.count_tools(parts.tool_definitions);
        debug_assert!(report.tokens <= budget);
        Ok((out, report))
    }

    /// [`ContextBuilder::build`] by the classic arithmetic ([`ContextBuilder::seed_rules`]).
    fn build_by_the_seed(
        &self,
        parts: &Parts<'_>,
        count: SeedCount,
    ) -> (Vec<Message>, AssemblyReport) {
        let b = &self.budget;
        let tokens = |text: &str| -> usize {
            match count {
                SeedCount::Characters => text.chars().count() / 4,
                SeedCount::Exact => self.counter.count_text(text),
            }
            .max(1)
        };
        let message_tokens = |m: &Message| tokens(&m.text());
        let mut report = AssemblyReport {
            budget: b.total,
            ..AssemblyReport::default()
        };

        // Memory cut to its share; at most five learnings, all of them or none.
        let mut system = parts.system.to_owned();
        if !parts.memory_results.is_empty() {
            let mut memory = parts.memory_results.join("\n");
            if tokens(&memory) > b.memory_tokens() {
                memory = memory.chars().take(b.memory_tokens() * 4).collect();
            }
            system.push_str("\n\n## Relevant Memory\n");
            system.push_str(&memory);
            report.memory_used = parts.memory_results.len();
        }
        let learnings: Vec<String> = parts
            .learnings
            .iter()
            .take(5)
            .map(|l| format!("- {l}"))
            .collect();
        let learnings = learnings.join("\n");
        if !learnings.is_empty() && tokens(&learnings) <= b.learnings_tokens() {
            system.push_str("\n\n## Past Learnings\n");
            system.push_str(&learnings);
            report.learnings_used = parts.learnings.len().min(5);
        }
        let history_budget = b
            .available()
            .saturating_sub(b.memory_tokens())
            .saturating_sub(b.learnings_tokens());

        // The fresh tail (whole units), kept whatever it costs, then the summaries that fit,
        // then the evictable prefix newest first until one does not fit.
        let (repaired, all_units, tail_start) = history_units(parts.history, b.fresh_tail_count);
        let history = repaired.as_slice();
        let unit_tokens =
            |u: &units::Unit| -> usize { history[u.start..u.end].iter().map(message_tokens).sum() };
        let mut used = parts.new_message.map_or(0, message_tokens)
            + all_units[tail_start..]
                .iter()
                .map(unit_tokens)
                .sum::<usize>();
        let mut summaries = Vec::new();
        for s in parts.summaries {
            let m = s.to_message();
            let t = message_tokens(&m);
            if used + t <= history_budget {
                used += t;
                summaries.push(m);
            }
        }
        report.summaries_used = summaries.len();
        let mut remaining = history_budget.saturating_sub(used);
        let mut prefix_start = tail_start;
        while prefix_start > 0 {
            let t = unit_tokens(&all_units[prefix_start - 1]);
            if t > remaining {
                break;
            }
            remaining -= t;
            prefix_start -= 1;
        }
        let kept_from = all_units
            .get(prefix_start)
            .map_or(history.len(), |u| u.start);
        let mut out: Vec<Message> = Vec::new();
        if !system.is_empty() {
            out.push(Message::system(system));
        }
        out.extend(summaries);
        out.extend(history[kept_from..].iter().cloned());
        out.extend(parts.new_message.cloned());
        report.history_kept = history.len() - kept_from;
        report.history_dropped = kept_from;
        report.tokens = self.counter.count_messages(&out).total()
            + self.counter.count_tools(parts.tool_definitions);
        (out, report)
    }
}

/// The history repaired as compaction repairs it (orphan results and unanswered calls), its
/// tool-call units, and the first unit of its fresh tail: the last `fresh` messages, widened to
/// whole units.
fn history_units(history: &[Message], fresh: usize) -> (Vec<Message>, Vec<units::Unit>, usize) {
    let repaired: Vec<Message> = units::repair_closed(history)
        .0
        .into_iter()
        .map(|(m, _)| m.into_owned())
        .collect();
    let all_units = units::units(&repaired);
    let mut tail_start = all_units.len();
    while tail_start > 0 && repaired.len() - all_units[tail_start - 1].start <= fresh {
        tail_start -= 1;
    }
    (repaired, all_units, tail_start)
}

/// The text of a system message built by [`ContextBuilder`], for callers that need it alone.
pub fn system_text(messages: &[Message]) -> Option<&str> {
    match messages.first() {
        Some(Message {
            content: Some(Content::Text(s)),
            role,
            ..
        }) if role.is_instruction() => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Role, ToolCall};
    use crate::tokenize::Tokenizer;

    fn counter() -> TokenCounter {
        TokenCounter::new(Tokenizer::chars_per_token(4))
    }

    #[test]
    fn seed_defaults() {
        let b = TokenBudget::default();
        assert_eq!(b.available(), 26_000);
        assert_eq!(b.memory_tokens(), 3_900);
        assert_eq!(b.learnings_tokens(), 1_300);
        assert_eq!(b.fresh_tail_count, 16);
    }

    #[test]
    fn enriches_the_system_prompt_and_fills_newest_first() {
        let counter = counter();
        let history: Vec<Message> = (0..40)
            .map(|i| Message::user(format!("message {i} {}", "x".repeat(200))))
            .collect();
        let memory = vec!["User previously asked about deploying to Kubernetes.".to_owned()];
        let learnings: Vec<String> = (0..7).map(|i| format!("lesson {i}")).collect();
        let summaries = [StoredSummary {
            depth: 2,
            messages: 45,
            from: "2024-01-15".into(),
            to: "2024-01-16".into(),
            text: "The user worked on a Kubernetes deployment.".into(),
        }];
        let new = Message::user("What next?");
        let budget = TokenBudget {
            total: 3_000,
            system_reserve: 100,
            tool_definitions_reserve: 100,
            ..TokenBudget::default()
        };
        let (out, report) = ContextBuilder::new(&counter, budget)
            .build(&Parts {
                system: "You are helpful.",
                new_message: Some(&new),
                history: &history,
                memory_results: &memory,
                learnings: &learnings,
                summaries: &summaries,
                ..Parts::default()
            })
            .expect("fits");
        let system = system_text(&out).expect("system");
        assert!(
            system.contains(
                "## Relevant Memory\nUser previously asked about deploying to Kubernetes."
            )
        );
        assert!(system.contains("## Past Learnings\n- lesson 0"));
        assert_eq!(report.learnings_used, 5, "at most 5 learnings");
        assert!(
            out[1]
                .text()
                .starts_with("[Summary: depth 2, 45 messages, covers 2024-01-15 to 2024-01-16]")
        );
        assert_eq!(out.last(), Some(&new));
        assert!(report.tokens <= 3_000);
        // Newest first: what is kept is a suffix of the history.
        let kept: Vec<&Message> = out[2..out.len() - 1].iter().collect();
        assert_eq!(kept.len(), report.history_kept);
        assert_eq!(kept.last().copied(), history.last());
        assert!(report.history_kept >= 16);
        assert_eq!(report.fresh_tail_dropped, 0);
    }

    #[test]
    fn the_tail_gives_way_rather_than_the_budget_and_units_stay_whole() {
        let counter = counter();
        let mut history = vec![Message::user("start")];
        for i in 0..10 {
            history.push(Message::assistant_tool_calls(vec![ToolCall::function(
                format!("c{i}"),
                "f",
                "{}",
            )]));
            history.push(Message::tool(format!("c{i}"), "y".repeat(400)));
        }
        let budget = TokenBudget {
            total: 700,
            system_reserve: 0,
            tool_definitions_reserve: 0,
            ..TokenBudget::default()
        };
        let (out, report) = ContextBuilder::new(&counter, budget)
            .build(&Parts {
                system: "s",
                history: &history,
                ..Parts::default()
            })
            .expect("fits");
        assert!(report.tokens <= 700);
        assert!(report.fresh_tail_dropped > 0);
        assert_eq!(
            out[1].role,
            Role::Assistant,
            "a kept tool result comes with its call"
        );
        let err = ContextBuilder::new(
            &counter,
            TokenBudget {
                total: 10,
                ..budget
            },
        )
        .build(&Parts {
            system: &"z".repeat(400),
            ..Parts::default()
        })
        .expect_err("too small");
        assert!(err.to_string().contains("need"));
    }

    #[test]
    fn the_seed_mode_keeps_the_whole_tail_over_budget_and_drops_the_prefix() {
        let counter = counter();
        let history: Vec<Message> = (0..20)
            .map(|i| Message::user(format!("m{i} {}", "y".repeat(400))))
            .collect();
        let budget = TokenBudget {
            total: 700,
            system_reserve: 0,
            tool_definitions_reserve: 0,
            ..TokenBudget::default()
        };
        let parts = Parts {
            system: "s",
            history: &history,
            ..Parts::default()
        };
        let (_, strict) = ContextBuilder::new(&counter, budget)
            .build(&parts)
            .expect("fits");
        assert!(strict.tokens <= 700 && strict.fresh_tail_dropped > 0);
        let (out, seed) = ContextBuilder::new(&counter, budget)
            .seed_rules(Some(SeedCount::Characters))
            .build(&parts)
            .expect("fits");
        assert_eq!(
            seed.history_kept, 16,
            "the tail whole, nothing of the prefix"
        );
        assert_eq!(seed.fresh_tail_dropped, 0);
        assert!(seed.tokens > 700, "over the budget, as the seed allows");
        assert_eq!(out[1], history[4]);
    }
}
