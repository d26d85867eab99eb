//! A session's context for the model: its view, or the log compacted for a tighter budget, a
//! query or long-term memory, without changing the session.

use crate::Error;
use crate::compact::{CompactOptions, CompactReport, Compacted, Kind, ViewMessage};
use crate::message::Message;

use super::Session;
use super::compaction::dropped_task;
use super::store::LoggedMessage;

impl Session<'_> {
    /// A context for the model. Without a budget or a query, the current view. With either,
    /// the whole active log compacted for them (the budget defaults to the window), without
    /// changing the session: what a caller with a tighter budget or a question needs now. The
    /// task statement stays in it as in the session's compactions, while it fits the budget.
    pub fn context(&self, budget: Option<usize>, query: Option<&str>) -> Result<Compacted, Error> {
        self.within_window(budget)?;
        if budget.is_none() && query.is_none() {
            let view = self.view()?;
            let messages_before = view.messages.len();
            // The log keeps what it was given, a tool result whose call it never got or a call
            // it got no result for among them; what is sent is repaired, as compaction repairs
            // its input, and the repairs counted again for the tokens.
            let (messages, repaired, tokens_after) =
                match crate::compact::repair_view(&view.messages) {
                    None => (view.messages, 0, view.tokens),
                    Some((messages, repaired)) => {
                        let tokens = crate::compact::view_tokens(&self.counter, &messages);
                        (messages, repaired, tokens)
                    }
                };
            let report = CompactReport {
                strategy: "view",
                budget: self.info.window,
                tokens_before: view.tokens,
                tokens_after,
                messages_before,
                messages_after: messages.len(),
                repaired,
                ..CompactReport::default()
            };
            return Ok(Compacted { messages, report });
        }
        let log = self.log()?;
        if log.is_empty() {
            // Nothing to compact: the (empty) context, not an error.
            return Ok(Compacted {
                messages: Vec::new(),
                report: CompactReport {
                    strategy: "view",
                    budget: budget.unwrap_or(self.info.window),
                    ..CompactReport::default()
                },
            });
        }
        let mut options = self.options.clone();
        options.budget = budget.unwrap_or(self.info.window);
        options.query = query.map(str::to_owned);
        self.compact_for_context(&log, &options, &self.vectors())
    }

    /// A budget larger than the session's window is a mistake to report, not a context the
    /// model cannot take.
    fn within_window(&self, budget: Option<usize>) -> Result<(), Error> {
        match budget {
            Some(b) if b > self.info.window => Err(Error::Rejected(format!(
                "`budget`: {b} tokens is more than the session's window of {} tokens; ask for at most the window (or no budget: the window)",
                self.info.window
            ))),
            _ => Ok(()),
        }
    }

    /// The log compacted for a context, the task statement pinned when the pipeline dropped
    /// it and keeping it still fits the budget, as the session's own compactions keep it.
    fn compact_for_context(
        &self,
        log: &[LoggedMessage],
        options: &CompactOptions,
        vectors: &dyn crate::embed::VectorStore,
    ) -> Result<Compacted, Error> {
        let compact = |options: &CompactOptions| {
            crate::compact::compact_keeping_vectors(log, &[], &self.counter, options, Some(vectors))
        };
        let out = compact(options)?;
        Ok(match dropped_task(log, &out.messages) {
            Some(task) => {
                let mut pinned = options.clone();
                pinned.pinned_ids.push(task.id.clone());
                compact(&pinned).unwrap_or(out)
            }
            None => out,
        })
    }

    /// A context with what long-term memory holds on the topic: the query, else the newest
    /// user message. The ten best working and episodic entries and the five best learnings are
    /// searched in the session's store and served by [`Session::context_with_memory`], after
    /// the parts of the session's timeline that carry the topic (at most five, in time order,
    /// each dated: the path of the topic through the history).
    pub fn context_recalling(
        &self,
        budget: Option<usize>,
        query: Option<&str>,
    ) -> Result<Compacted, Error> {
        use crate::memory::Tier;
        self.within_window(budget)?;
        let topic = match query {
            Some(q) => q.to_owned(),
            None => self
                .log()?
                .iter()
                .rev()
                .find(|m| m.message.role == crate::Role::User)
                .map(|m| m.message.text().into_owned())
                .unwrap_or_default(),
        };
        let hits = |tiers: Vec<Tier>, limit: usize| {
            Ok::<_, Error>(
                self.store
                    .search(&crate::memory::SearchQuery {
                        tiers,
                        ..crate::memory::SearchQuery::new(topic.clone(), limit)
                    })?
                    .into_iter()
                    .map(|h| h.entry)
                    .collect::<Vec<_>>(),
            )
        };
        let relevant = hits(vec![Tier::Working, Tier::Episodic], 10)?;
        let learnings = hits(vec![Tier::Learning], 5)?;
        // The path of the topic through this session's history: the parts of its timeline
        // that carry it, in time order, before the entries.
        let mut lines: Vec<(String, Vec<String>)> = match self.timeline()? {
            Some(timeline) => {
                let mut found = timeline.search(&topic, TIMELINE_LINES);
                found.sort_by_key(|&(i, _)| i);
                found
                    .into_iter()
                    .map(|(i, _)| {
                        let part = &timeline.parts[i];
                        (part.render(), part.sources.clone())
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        lines.extend(entry_lines(&relevant));
        self.context_with_lines(budget, query, lines, entry_lines(&learnings))
    }

    /// A context with long-term memory: the sections of [`crate::assembly::memory_sections`]
    /// ("## Relevant Memory" within 15% of the budget, "## Past Learnings", at most 5, within 5%)
    /// in a system message
    /// after the session's own system prompt, and the log compacted into what is left. Sections
    /// that do not fit are left out; the budget (default: the target share of the window, as
    /// the view would be) is never exceeded.
    pub fn context_with_memory(
        &self,
        budget: Option<usize>,
        query: Option<&str>,
        memory: &[crate::memory::MemoryEntry],
        learnings: &[crate::memory::MemoryEntry],
    ) -> Result<Compacted, Error> {
        self.context_with_lines(budget, query, entry_lines(memory), entry_lines(learnings))
    }

    /// [`Session::context_with_memory`] over lines, each with the ids it stands for.
    fn context_with_lines(
        &self,
        budget: Option<usize>,
        query: Option<&str>,
        memory: Vec<(String, Vec<String>)>,
        learnings: Vec<(String, Vec<String>)>,
    ) -> Result<Compacted, Error> {
        let budget = budget.unwrap_or(self.info.window);
        // The classic shares (15% and 5%) of the whole budget, with no reserves: the session's
        // own system prompt and its history are compacted into what the sections leave.
        let shares = crate::assembly::TokenBudget {
            system_reserve: 0,
            tool_definitions_reserve: 0,
            ..crate::assembly::TokenBudget::for_window(budget, 0)
        };
        let sections = crate::assembly::memory_sections(
            &self.counter,
            &shares,
            &mut memory.iter().map(|(line, _)| line.as_str()),
            &mut learnings.iter().map(|(line, _)| line.as_str()),
        );
        let ids: Vec<String> = (sections.memory_used.iter().map(|&i| &memory[i].1))
            .chain(sections.learnings_used.iter().map(|&i| &learnings[i].1))
            .flatten()
            .cloned()
            .collect();
        let text = sections.text;
        let note = (!text.is_empty()).then(|| Message::system(text));
        let note_tokens = note
            .as_ref()
            .map_or(0, |m| self.counter.count_message(m).total());
        let log = self.log()?;
        let mut options = self.options.clone();
        options.query = query.map(str::to_owned);
        options.budget = budget.saturating_sub(note_tokens).max(1);
        let vectors = self.vectors();
        let compact = |options: &CompactOptions| self.compact_for_context(&log, options, &vectors);
        let mut out = match compact(&options) {
            Err(Error::CannotFit { .. }) if note.is_some() => {
                // What must be kept leaves no room for memory: send it without.
                options.budget = budget;
                return compact(&options);
            }
            other => other?,
        };
        if let Some(note) = note {
            let at = out
                .messages
                .iter()
                .take_while(|v| v.message.role.is_instruction() && v.kind == Kind::Original)
                .count();
            out.messages.insert(
                at,
                ViewMessage {
                    message: note,
                    kind: Kind::Recalled,
                    source_ids: ids,
                },
            );
            out.report.tokens_after += note_tokens;
            out.report.messages_after += 1;
        }
        out.report.budget = budget;
        Ok(out)
    }
}

/// The parts of the session's timeline a context with memory shows at most.
const TIMELINE_LINES: usize = 5;

/// Memory entries as lines of a context (one line each), each with the entry's id.
fn entry_lines(entries: &[crate::memory::MemoryEntry]) -> Vec<(String, Vec<String>)> {
    entries
        .iter()
        .map(|e| (e.content.trim().replace('\n', " "), vec![e.id.clone()]))
        .collect()
}
