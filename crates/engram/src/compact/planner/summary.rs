//! What the units set aside become: the summary by the configured summarizer when there is
//! one and it fits, and the work ledger of what they did, appended to the summary or digest.

use std::collections::HashSet;

use crate::message::Message;

use super::{Item, Planner};
use crate::compact::options::{CompactReport, Strategy};
use crate::compact::{digest, summarize, units};

impl Planner<'_> {
    /// The work ledger of `units` but those in `skip` (the recalled: they are in view), or
    /// `None` when it records nothing.
    pub(super) fn ledger_of(
        &self,
        units: &[units::Unit],
        skip: &HashSet<usize>,
    ) -> Option<crate::ledger::Ledger> {
        let mut ledger = crate::ledger::Ledger::default();
        for (_, unit) in units
            .iter()
            .enumerate()
            .filter(|(ui, _)| !skip.contains(ui))
        {
            for item in &self.items[unit.start..unit.end] {
                if let Some(input) = item.input {
                    ledger.add_message(&item.message, item.logged.unwrap_or(input));
                }
            }
        }
        (!ledger.is_empty()).then_some(ledger)
    }

    /// The ledger's text within `room` tokens, with its tokens (and the separator's before
    /// it); `None` when not even its newest file fits.
    pub(super) fn render_ledger(
        &self,
        ledger: &crate::ledger::Ledger,
        room: usize,
    ) -> Option<(String, usize)> {
        let separator = self.counter.count_text("\n\n");
        let mut max_chars = room * 4;
        while max_chars >= 60 {
            let text = ledger.render(max_chars);
            let tokens = self.counter.count_text(&text) + separator;
            if tokens <= room {
                // A heading alone names nothing.
                let names_something = text.lines().skip(1).any(|l| !l.starts_with("Search the"));
                return names_something.then_some((text, tokens));
            }
            max_chars = max_chars * room / tokens * 9 / 10;
        }
        None
    }

    /// `built` with the ledger's text after its own.
    pub(super) fn with_ledger(&self, built: &digest::Built, ledger: &str) -> digest::Built {
        let text = format!("{}\n\n{ledger}", built.message.text());
        let message = Message::system(text);
        digest::Built {
            tokens: self.counter.count_message(&message).total(),
            message,
            source_ids: built.source_ids.clone(),
        }
    }

    /// A summary by the configured summarizer, when there is one and its summary fits;
    /// otherwise `None`, with the reason in the report.
    pub(super) fn summary(
        &mut self,
        sources: &[&Item<'_>],
        budget: usize,
        dropped: &[units::Unit],
    ) -> Option<digest::Built> {
        let Some(summarizer) = self.options.summarizer.as_ref() else {
            if self.options.strategy == Strategy::Summarize {
                self.report.summary_fallback =
                    Some("no summarizer is configured; the extractive digest was used".into());
            }
            return None;
        };
        if !matches!(self.options.strategy, Strategy::Auto | Strategy::Summarize) {
            return None;
        }
        let header_tokens = self
            .counter
            .count_message(&Message::system(format!("{}\n", summarize::SUMMARY_HEADER)))
            .total();
        // Incremental: an earlier summary whose messages all leave the view again is merged
        // with what was dropped since, not summarised again from the messages.
        let previous = self.options.previous_summary.as_ref().filter(|p| {
            let covers: HashSet<&str> = p.covers.iter().map(String::as_str).collect();
            let leaving: HashSet<std::borrow::Cow<'_, str>> = dropped
                .iter()
                .flat_map(|u| self.items[u.start..u.end].iter())
                .map(|i| i.source_id())
                .filter(|id| covers.contains(id.as_ref()))
                .collect();
            !covers.is_empty() && leaving.len() == covers.len()
        });
        let covered: HashSet<&str> = previous
            .map(|p| p.covers.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let fresh: Vec<&Item<'_>> = sources
            .iter()
            .copied()
            .filter(|i| !covered.contains(i.source_id().as_ref()))
            .collect();
        let messages: Vec<&Message> = fresh.iter().map(|i| i.message.as_ref()).collect();
        let request = summarize::SummaryRequest {
            messages: &messages,
            prompt: self
                .options
                .prompt
                .as_deref()
                .unwrap_or(summarize::DEFAULT_PROMPT),
            focus: self.options.focus.as_deref(),
            max_tokens: budget.saturating_sub(header_tokens),
            previous: previous.map(|p| p.text.as_str()),
        };
        let fallback = |report: &mut CompactReport, reason: String| {
            report.summary_fallback = Some(reason);
            None
        };
        let text = match previous {
            Some(p) if messages.is_empty() => p.text.clone(),
            _ => match summarizer.summarize(&request) {
                Ok(text) if !text.trim().is_empty() => text,
                Ok(_) => {
                    return fallback(
                        &mut self.report,
                        format!("{} returned an empty summary", summarizer.name()),
                    );
                }
                Err(e) => return fallback(&mut self.report, e.to_string()),
            },
        };
        let message = Message::system(format!("{}\n{}", summarize::SUMMARY_HEADER, text.trim()));
        let tokens = self.counter.count_message(&message).total();
        if tokens > budget {
            return fallback(
                &mut self.report,
                format!(
                    "{}'s summary has {tokens} tokens; {budget} were available",
                    summarizer.name()
                ),
            );
        }
        self.report.summarizer = Some(summarizer.name().to_owned());
        self.report.summary_previous = previous.map(|_| {
            if messages.is_empty() {
                "reused"
            } else {
                "merged"
            }
        });
        let mut source_ids: Vec<String> = previous.map(|p| p.covers.clone()).unwrap_or_default();
        source_ids.extend(
            fresh
                .iter()
                .map(|i| i.source_id().into_owned())
                .filter(|s| !s.is_empty()),
        );
        Some(digest::Built {
            message,
            tokens,
            source_ids,
        })
    }
}
