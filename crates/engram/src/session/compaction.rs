//! A session's compactions: at the threshold, by hand (`session compact`, the agent's
//! `compact_history`) and at sleep; each recorded with its summaries and their lineage, the
//! task statement kept, and a manual one refused when it would not make the view smaller.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::Error;
use crate::compact::policy::{self, Ran};
use crate::compact::{CompactOptions, Kind, ViewMessage};
use crate::memory::{MemoryStore, NewEntry, Tier};
use crate::message::{Content, Role};
use crate::timestamp::{Timestamp, format_time, new_id};

use super::store::{LoggedMessage, NewCompaction, SummaryRecord};
use super::{Compaction, CompactionSummary, Session, Trigger};
use super::{encode_view, facts};

impl Session<'_> {
    /// Compacts the active log to `target` tokens and records it. When the target cannot be
    /// met, the limit is what must be kept plus a quarter of the target, at most the window.
    /// The session is unchanged when anything fails.
    ///
    /// The task statement (the log's first user message) stays in the view, verbatim or word
    /// for word inside a summary: when the pipeline would drop it, it is pinned, unless keeping
    /// it whole would leave the view above the compaction threshold (a task of most of the
    /// window), where the summary's key lines of it stand in.
    /// A manual compaction ([`Trigger::Manual`]) is recorded only when it makes the view
    /// smaller and keeps a summary of the messages it drops; otherwise the view is left as it
    /// is and [`Compaction::Unchanged`] says why.
    pub fn compact(
        &mut self,
        trigger: Trigger,
        target: usize,
        focus: Option<&str>,
    ) -> Result<Compaction, Error> {
        Ok(self.compact_with_facts(trigger, target, focus, None)?.0)
    }

    fn compact_with_facts(
        &mut self,
        trigger: Trigger,
        target: usize,
        focus: Option<&str>,
        facts_into: Option<&dyn MemoryStore>,
    ) -> Result<(Compaction, usize), Error> {
        let _slot = compaction_slot();
        self.refresh()?;
        let epoch = self.info.epoch;
        let log = self.log()?;
        if log.is_empty() {
            return Err(Error::NoMessages);
        }
        let log_end = log.last().map_or(0, |m| m.seq + 1);
        let tokens_before = self.view_tokens()?;
        let earlier = self.store.summaries(&self.info.id)?;
        let mut options = self.options.clone();
        options.query = focus.map(str::to_owned).or(options.query);
        if trigger == Trigger::Manual {
            // Asked for by hand, a compaction must save: its summary holds at most a quarter of
            // what it stands for.
            options.summary_share = Some(MANUAL_SUMMARY_SHARE);
        }
        // Incremental: the last model-written summary is merged with what leaves the view since.
        options.previous_summary = earlier.last().and_then(|s| {
            crate::compact::summarize::PreviousSummary::from_message_text(&s.text, s.covers.clone())
        });
        // Room for the summary's header, added after compaction: the header for the most it
        // could cover (every message of the log, at a depth past every earlier summary's).
        let widest = summary_header(
            earlier.iter().map(|s| s.depth).max().unwrap_or(0) + 1,
            log.len(),
            (crate::timestamp::now(), crate::timestamp::now()),
            log.first()
                .map(|m| m.id.as_str())
                .zip(log.last().map(|m| m.id.as_str())),
        );
        let header_room = self.counter.count_text(&widest) + 2;
        let window = self.info.window;
        let counter = &self.counter;
        let session_vectors = self.vectors();
        let vectors: Option<&dyn crate::embed::VectorStore> = Some(&session_vectors);
        // Within the target, else within what must be kept plus room for a summary, at most the
        // window; with why the target could not be met.
        let run = |options: &mut CompactOptions| {
            let attempt = policy::within_target(target, window, header_room, |budget| {
                options.budget = budget;
                crate::compact::compact_keeping_vectors(&log, &[], counter, options, vectors)
            });
            (attempt.result, attempt.missed_target)
        };
        let (result, mut missed_target) = run(&mut options);
        let mut compacted = result?;
        // The task statement stays: pinned when the pipeline dropped it, unless keeping it
        // verbatim would leave the view over the threshold (a task of most of the window): then
        // the digest's key lines of it stand in, and automatic compaction keeps working.
        let threshold = self.policy.trigger.threshold_tokens(window);
        if let Some(task) = dropped_task(&log, &compacted.messages) {
            let mut pinned = options.clone();
            pinned.pinned_ids.push(task.id.clone());
            if let (Ok(with_task), missed) = run(&mut pinned)
                && (with_task.report.tokens_after <= threshold
                    || with_task.report.tokens_after <= compacted.report.tokens_after)
            {
                compacted = with_task;
                options = pinned;
                missed_target = missed;
            }
        }
        let budget = options.budget + header_room;

        let at: HashMap<&str, Timestamp> =
            log.iter().map(|m| (m.id.as_str(), m.created_at)).collect();
        let now = crate::timestamp::now();
        let mut view = compacted.messages;
        let mut summaries = Vec::new();
        for v in view.iter_mut().filter(|v| v.kind == Kind::Summary) {
            let covers = v.source_ids.clone();
            let covered: HashSet<&str> = covers.iter().map(String::as_str).collect();
            let supersedes: Vec<&SummaryRecord> = earlier
                .iter()
                .filter(|s| s.covers.iter().all(|id| covered.contains(id.as_str())))
                .collect();
            let depth = supersedes.iter().map(|s| s.depth).max().unwrap_or(0) + 1;
            let times = covers.iter().filter_map(|id| at.get(id.as_str()).copied());
            let (from, to) = (
                times.clone().min().unwrap_or(now),
                times.max().unwrap_or(now),
            );
            let text = v.message.text().into_owned();
            let header = summary_header(
                depth,
                covers.len(),
                (from, to),
                covers
                    .first()
                    .map(String::as_str)
                    .zip(covers.last().map(String::as_str)),
            );
            v.message.content = Some(Content::Text(format!("{header}\n{text}")));
            summaries.push(SummaryRecord {
                id: new_id("sum"),
                session_id: self.info.id.clone(),
                compaction_id: 0,
                depth,
                covers,
                covers_summaries: supersedes.iter().map(|s| s.id.clone()).collect(),
                from,
                to,
                tokens: self.counter.count_message(&v.message).total(),
                text,
                created_at: now,
            });
        }
        let mut tokens_after = self
            .counter
            .count_messages(&view.iter().map(|v| v.message.clone()).collect::<Vec<_>>())
            .total();
        if tokens_after > budget {
            // The headers did not fit after all: send the summaries without them.
            for (v, s) in view
                .iter_mut()
                .filter(|v| v.kind == Kind::Summary)
                .zip(&summaries)
            {
                v.message.content = Some(Content::Text(s.text.clone()));
            }
            tokens_after = compacted.report.tokens_after;
        }
        if trigger == Trigger::Manual
            && let Some(reason) = manual_refusal(&log, &view, tokens_before, tokens_after)
        {
            let percent = 100.0 * tokens_before as f64 / window.max(1) as f64;
            let reason = match missed_target {
                _ if tokens_before <= target => format!(
                    "the view is at {percent:.0}% of the window ({tokens_before} tokens), already \
                     under the {target}-token target: compacting would not make it smaller; ask \
                     for a lower target to go further"
                ),
                Some(why) => {
                    format!(
                        "the target of {target} tokens cannot be met: {why}; nothing was compacted"
                    )
                }
                None => reason,
            };
            return Ok((
                Compaction::Unchanged {
                    tokens: tokens_before,
                    reason,
                },
                0,
            ));
        }

        // Sleep-time compaction: the key facts of what leaves the view go to working memory
        // first, with ids derived from the messages, so that a retry after a crash adds none
        // twice.
        let mut facts_extracted = 0;
        if let Some(memory) = facts_into {
            let in_view: HashSet<&str> = view
                .iter()
                .filter(|v| matches!(v.kind, Kind::Original | Kind::Recalled))
                .flat_map(|v| v.source_ids.iter().map(String::as_str))
                .collect();
            let summarized_before: HashSet<&str> = earlier
                .iter()
                .flat_map(|s| s.covers.iter().map(String::as_str))
                .collect();
            let leaving: Vec<&LoggedMessage> = log
                .iter()
                .filter(|m| {
                    !in_view.contains(m.id.as_str()) && !summarized_before.contains(m.id.as_str())
                })
                .collect();
            let entries = facts::extract(&log, &leaving)
                .into_iter()
                .map(|(message_id, n, fact)| NewEntry {
                    id: Some(format!("fact_{}_{message_id}_{n}", self.info.id)),
                    tier: Tier::Working,
                    content: self.for_memory(fact),
                    source: format!("session:{}", self.info.id),
                    session_id: Some(self.info.id.clone()),
                    created_at: now,
                    importance: 0.6,
                    metadata: json!({"type": "key_fact", "message_id": message_id}),
                    summary_of: Vec::new(),
                })
                .collect::<Vec<_>>();
            facts_extracted = memory.insert(&entries)?.inserted;
        }
        // The log is not read again: let it go before the view is encoded and stored (on a
        // long history it is the largest thing held, and the store reads the record back).
        drop(at);
        drop(log);

        let journal = summaries
            .iter()
            .map(|s| NewEntry {
                id: Some(format!("journal_{}", s.id)),
                tier: Tier::Journal,
                content: self.for_memory(s.text.clone()),
                source: "context_synthesis".into(),
                session_id: Some(self.info.id.clone()),
                created_at: now,
                importance: 0.7,
                metadata: json!({
                    "type": "context_synthesis",
                    "summary_id": s.id,
                    "depth": s.depth,
                    "compacted_count": s.covers.len(),
                    "compacted_at": format_time(now),
                    "original_token_count": tokens_before,
                    "summary_token_count": s.tokens,
                }),
                summary_of: s.covers.clone(),
            })
            .collect();
        let mut report = serde_json::to_value(&compacted.report).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut report {
            map.insert("tokens_after".into(), json!(tokens_after));
        }
        let record = self.store.record_compaction(&NewCompaction {
            session_id: self.info.id.clone(),
            expected_epoch: epoch,
            trigger: trigger.as_str().into(),
            strategy: compacted.report.strategy.into(),
            log_end,
            tokens_before,
            tokens_after,
            view: encode_view(&view),
            report,
            summaries,
            journal,
            created_at: now,
        })?;
        Ok((Compaction::Recorded(Box::new(record)), facts_extracted))
    }

    /// The agent's `compact_history` tool: everything but the last
    /// `preserveRecentMessages` messages is summarised (by the configured summarizer, else
    /// extractively), with the agent's own prompt if it gave one; the compaction is recorded
    /// and the tool result reports the measured reduction. The log keeps every message. When
    /// nothing changes (too few messages, nothing to gain, or recent messages to preserve that
    /// the window cannot hold) the result says why; only a failing store is an `Err`.
    pub fn compact_history(
        &mut self,
        args: &crate::tools::CompactHistoryArgs,
    ) -> Result<String, Error> {
        let active = self.log()?;
        let keep = args.preserve_recent_messages;
        if active.len() <= keep + 1 {
            return Ok(crate::tools::compact_history_result(0, keep, 0, 0));
        }
        let saved = self.options.clone();
        self.options.strategy = if self.options.summarizer.is_some() {
            crate::compact::Strategy::Summarize
        } else {
            crate::compact::Strategy::Extractive
        };
        // The messages the agent asked to keep stay, whatever they cost, with the tool calls
        // and results they belong with (a budget that cannot hold them fails the target; it
        // does not keep fewer); the window takes none beyond them.
        self.options
            .pinned_ids
            .extend(active[active.len() - keep..].iter().map(|m| m.id.clone()));
        drop(active);
        self.options.keep_recent = 0;
        self.options.preserve_window = false;
        if let Some(prompt) = &args.custom_prompt {
            self.options.prompt = Some(prompt.clone());
        }
        // The agent asked: compact even when the view fits (one token under its size is
        // enough to make the pipeline act), but never above the usual target.
        let target = self
            .policy
            .trigger
            .target_tokens(
                self.info.window,
                self.fixed_tokens()?,
                self.recent_tokens()?,
            )
            .min(self.view_tokens()?.saturating_sub(1))
            .max(1);
        let result = self.compact(Trigger::Manual, target, None);
        self.options = saved;
        let record = match result {
            Ok(Compaction::Recorded(record)) => record,
            Ok(Compaction::Unchanged { reason, .. }) => {
                return Ok(format!("No changes made: {reason}."));
            }
            // What the agent asked to keep does not fit the window: the agent can ask again
            // for less, so it is an answer for the agent, not a failure of the call.
            // In the agent's words: the pipeline's own ("the pinned messages") name how the
            // preserved messages were kept, not what the agent asked.
            Err(Error::CannotFit { required, .. }) => {
                return Ok(format!(
                    "No changes made: the last {keep} messages, with the system prompt and the \
                     tool calls and results they belong with, need {required} tokens, more than \
                     the window of {} tokens. Preserve fewer recent messages.",
                    self.info.window
                ));
            }
            Err(e) => return Err(e),
        };
        // What was actually done, read off the recorded view.
        let view = self.view()?;
        let task_id = self
            .log()?
            .into_iter()
            .find(|m| m.message.role == Role::User)
            .map(|m| m.id);
        let summarized: usize = view
            .messages
            .iter()
            .filter(|v| v.kind == Kind::Summary)
            .map(|v| v.source_ids.len())
            .sum();
        let preserved = view
            .messages
            .iter()
            .rev()
            .take_while(|v| v.kind == Kind::Original)
            .count();
        // The task statement pinned before the preserved tail (the pipeline would have
        // dropped it).
        let recent_start = view.messages.len() - preserved;
        let task_verbatim = view.messages[..recent_start].iter().any(|v| {
            v.kind == Kind::Original && task_id.as_ref().is_some_and(|t| v.source_ids.contains(t))
        });
        let mut text = crate::tools::compact_history_result(
            summarized,
            preserved,
            record.tokens_before,
            record.tokens_after,
        );
        if task_verbatim && summarized > 0 {
            text.push_str(" The task statement (the first user message) was kept verbatim.");
        }
        Ok(text)
    }

    /// Sleep-time compaction: when the view is above the sleep threshold
    /// (0.5 of the window), the key facts of what leaves the view are written to working
    /// memory, then the log is compacted down to the sleep target (0.3).
    pub fn sleep_compact(&mut self) -> Result<Option<CompactionSummary>, Error> {
        let tokens = self.view_tokens()?;
        let sleep = self.policy.sleep_trigger();
        let window = self.info.window;
        let mut automatic = Automatic {
            session: self,
            trigger: Trigger::Sleep,
        };
        let Ran::Compacted(result) = sleep.run(tokens, window, &mut automatic)? else {
            return Ok(None);
        };
        match result? {
            (Compaction::Recorded(record), facts) => {
                Ok(Some(CompactionSummary::of(&record, facts)))
            }
            (Compaction::Unchanged { .. }, _) => Ok(None),
        }
    }
}

/// A session as the policy's loop sees it, for an automatic compaction: at the threshold
/// (after an append) or at sleep, when the key facts of what leaves the view go to working
/// memory first. What the compaction gives back is the caller's to report: an append reports
/// a compaction that could not be done instead of failing.
pub(super) struct Automatic<'a, 's> {
    pub(super) session: &'a mut Session<'s>,
    pub(super) trigger: Trigger,
}

impl policy::Compactable for Automatic<'_, '_> {
    type Compacted = Result<(Compaction, usize), Error>;

    /// At the threshold, the compactions of the log; sleep keeps no breaker.
    fn failed_in_a_row(&self) -> Result<usize, Error> {
        match self.trigger {
            Trigger::Threshold => self.session.failed_in_a_row(),
            _ => Ok(0),
        }
    }

    fn fixed_tokens(&self) -> Result<usize, Error> {
        self.session.fixed_tokens()
    }

    fn recent_tokens(&self) -> Result<usize, Error> {
        self.session.recent_tokens()
    }

    fn compact_to(&mut self, target: usize) -> Result<Self::Compacted, Error> {
        let facts_into = match self.trigger {
            Trigger::Sleep => Some(self.session.store as &dyn MemoryStore),
            _ => None,
        };
        Ok(self
            .session
            .compact_with_facts(self.trigger, target, None, facts_into))
    }
}

/// The log's task statement (its first user message) when `view` does not keep it.
pub(super) fn dropped_task<'l>(
    log: &'l [LoggedMessage],
    view: &[ViewMessage],
) -> Option<&'l LoggedMessage> {
    log.iter()
        .find(|m| m.message.role == Role::User)
        .filter(|task| !keeps_task(view, task))
}

/// True when `view` keeps the task statement `task`: verbatim, or word for word inside a
/// summary. A task without text (an image, say) counts as kept when a summary stands for it.
fn keeps_task(view: &[ViewMessage], task: &LoggedMessage) -> bool {
    let text = task.message.text();
    let text = text.trim();
    view.iter().any(|v| {
        let stands_for = v.source_ids.contains(&task.id);
        match v.kind {
            Kind::Original | Kind::Recalled => stands_for,
            Kind::Summary => stands_for && (text.is_empty() || v.message.text().contains(text)),
            Kind::Masked | Kind::Status => false,
        }
    })
}

/// Why a manual compaction to `view` should not be recorded, if it should not: it would not
/// make the view smaller, or it would drop messages with no summary standing for them.
fn manual_refusal(
    log: &[LoggedMessage],
    view: &[ViewMessage],
    tokens_before: usize,
    tokens_after: usize,
) -> Option<String> {
    if tokens_after >= tokens_before {
        return Some(format!(
            "compacting would not make the view smaller ({tokens_before} -> {tokens_after} tokens)"
        ));
    }
    let traced: HashSet<&str> = view
        .iter()
        .flat_map(|v| v.source_ids.iter().map(String::as_str))
        .collect();
    let untraced = log
        .iter()
        .filter(|m| !traced.contains(m.id.as_str()))
        .count();
    if untraced > 0 && !view.iter().any(|v| v.kind == Kind::Summary) {
        return Some(format!(
            "it would drop {} with no room left for a summary of them",
            crate::plural(untraced, "message", "messages")
        ));
    }
    None
}

/// A turn to compact a session: at most one compaction per core runs at once in a process.
/// Compaction is CPU-bound, so more at once finish no sooner, and each holds its session's
/// whole log: eight concurrent appends that each trigger one would hold eight logs.
fn compaction_slot() -> CompactionSlot {
    static SLOTS: std::sync::OnceLock<(std::sync::Mutex<usize>, std::sync::Condvar, usize)> =
        std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (std::sync::Mutex::new(0), std::sync::Condvar::new(), cores)
    });
    let (busy, freed, cores) = slots;
    let mut running = busy.lock().unwrap_or_else(|p| p.into_inner());
    while *running >= *cores {
        running = freed.wait(running).unwrap_or_else(|p| p.into_inner());
    }
    *running += 1;
    CompactionSlot(slots)
}

struct CompactionSlot(&'static (std::sync::Mutex<usize>, std::sync::Condvar, usize));

impl Drop for CompactionSlot {
    fn drop(&mut self) {
        let (busy, freed, _) = self.0;
        *busy.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        freed.notify_one();
    }
}

/// The most of what a summary stands for that it may hold in a compaction asked for by hand
/// (`engram session compact`, the agent's `compact_history`).
pub const MANUAL_SUMMARY_SHARE: f64 = 0.25;

/// A recorded summary's header: `[Summary: depth d, n messages, covers t1 to t2]`,
/// then how to get the originals back (the agent's history tool), when it covers ids.
fn summary_header(
    depth: u32,
    messages: usize,
    (from, to): (Timestamp, Timestamp),
    ids: Option<(&str, &str)>,
) -> String {
    let mut header = crate::assembly::summary_header(
        depth,
        messages,
        &crate::timestamp::format_minute(from),
        &crate::timestamp::format_minute(to),
    );
    if let Some((first, last)) = ids {
        header.push_str(&format!(
            "\n(read_history from={first} to={last} returns the originals)"
        ));
    }
    header
}
