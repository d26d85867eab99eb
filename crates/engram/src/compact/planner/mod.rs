//! The planner: which fidelity each unit of the repaired history gets (verbatim, masked,
//! recalled, or into the digest), newest first, within the budget.

use std::collections::{HashMap, HashSet};

use crate::count::TokenCounter;
use crate::message::{Content, Message, Role};

use super::mask::mask_text;
use super::options::{CompactOptions, CompactReport, Strategy};
use super::view::{Kind, ViewMessage};
use super::{digest, excerpt, units};
use crate::retrieval;
use retrieval::Ranking;

mod summary;

/// A message of the repaired history with where it came from.
pub(super) struct Item<'a> {
    pub(super) message: units::RepairedMessage<'a>,
    /// The input index, `None` for a note engram added.
    pub(super) input: Option<usize>,
    /// The message's place in a log, when the caller names messages by it
    /// ([`CompactOptions::logged_ids`]).
    pub(super) logged: Option<usize>,
}

impl std::borrow::Borrow<Message> for Item<'_> {
    fn borrow(&self) -> &Message {
        &self.message
    }
}

impl Item<'_> {
    /// The input message's id, or its index when it has none; empty for a note engram added.
    /// Made on demand: most messages never need it, and a string per message is a large share
    /// of a long history's memory.
    pub(super) fn source_id(&self) -> std::borrow::Cow<'_, str> {
        match self.input {
            None => std::borrow::Cow::Borrowed(""),
            Some(i) => self
                .message
                .id
                .as_deref()
                .map_or_else(|| i.to_string().into(), Into::into),
        }
    }

    /// The id the agent's tools know the message by, which markers and digests name: its own
    /// id, else its place in the log the caller names ([`CompactOptions::logged_ids`]), else
    /// [`Item::source_id`].
    pub(super) fn shown_id(&self) -> std::borrow::Cow<'_, str> {
        match (self.input, &self.message.id, self.logged) {
            (Some(_), None, Some(p)) => format!("m{p}").into(),
            _ => self.source_id(),
        }
    }
}

/// A unit's version for the view, and what it costs.
pub(super) struct Version {
    pub(super) messages: Vec<ViewMessage>,
    pub(super) tokens: usize,
    /// Tool outputs masked (not counting duplicates replaced by a pointer).
    pub(super) masked: usize,
}

/// What [`Planner::window`] decided, for [`Planner::select`] to go on from.
pub(super) struct Window {
    /// Outputs repeated later, by unit, each with the pointer that replaces it.
    replaced: HashMap<usize, String>,
    recall: bool,
    digest: bool,
    mask: bool,
    recall_budget: usize,
    ledger_reserve: usize,
    window_budget: usize,
    /// The tokens the window takes.
    used: usize,
    /// The units kept, newest first: (unit index, version, masked).
    taken: Vec<(usize, Version, bool)>,
    /// The oldest unit the window keeps; the units before it are set aside.
    pub(super) first_kept: usize,
}

impl Window {
    /// True when recall will rank the units set aside: only then are their similarities of
    /// meaning wanted.
    pub(super) fn recalls(&self) -> bool {
        self.recall && self.first_kept > 0
    }
}

pub(super) struct Planner<'a> {
    pub(super) items: &'a [Item<'a>],
    pub(super) counter: &'a TokenCounter,
    pub(super) options: &'a CompactOptions,
    pub(super) report: CompactReport,
}

impl Planner<'_> {
    pub(super) fn original(&self, item: &Item<'_>) -> ViewMessage {
        ViewMessage {
            message: Message::clone(&item.message),
            kind: if item.input.is_some() {
                Kind::Original
            } else {
                Kind::Status
            },
            source_ids: match item.source_id() {
                id if id.is_empty() => Vec::new(),
                id => vec![id.into_owned()],
            },
        }
    }

    fn tokens(&self, messages: &[ViewMessage]) -> usize {
        messages
            .iter()
            .map(|v| self.counter.count_message(&v.message).total())
            .sum()
    }

    /// Whether `unit` starts a session: it opens with a heading, a short system line that
    /// names a date or a time ([`crate::retrieval::is_heading`]), as a chat log's sessions do.
    fn starts_session(&self, unit: &units::Unit) -> bool {
        let first = &self.items[unit.start].message;
        first.role == Role::System && crate::retrieval::is_heading(&first.text())
    }

    fn full(&self, unit: units::Unit) -> Version {
        let messages: Vec<ViewMessage> = self.items[unit.start..unit.end]
            .iter()
            .map(|i| self.original(i))
            .collect();
        Version {
            tokens: self.tokens(&messages),
            messages,
            masked: 0,
        }
    }

    /// Recall's share of `free` for these older units: [`CompactOptions::recall_share`], and more
    /// for a history many times the budget or of many sessions (a unit that starts with a
    /// system message starts one, as in a chat log). Measured on the dev conversations:
    /// LongMemEval-S (about 60 times a 2,048-token budget) and LoCoMo (19 to 32 sessions) need
    /// the larger share to reach evidence spread over sessions, while LongMemEval's short
    /// conversations (about 3 times, at most 5 sessions) lose evidence the recent window held
    /// if recall takes more (docs/benchmarks-history.md).
    fn recall_share(&self, older: &[units::Unit], free: usize) -> f64 {
        // Four characters a token: an estimate is enough for a ratio, and counting every
        // message of a long history exactly would cost more than ranking it.
        let chars: usize = older
            .iter()
            .flat_map(|u| &self.items[u.start..u.end])
            .map(|i| i.message.text().len())
            .sum();
        let sessions = older.iter().filter(|u| self.starts_session(u)).count();
        recall_share_for(self.options.recall_share, chars / 4, free, sessions)
    }

    /// The middle of the view when every older unit fits whole.
    pub(super) fn whole(&self, older: &[units::Unit]) -> Vec<(usize, ViewMessage)> {
        older
            .iter()
            .flat_map(|u| self.full(*u).messages.into_iter().map(|v| (u.start, v)))
            .collect()
    }

    /// The first decision of a plan for `free` tokens: the budget's split, and the newest-first
    /// window of units kept (masked where the strategy masks). The units before the window are
    /// set aside; [`Planner::select`] decides what of them recall brings back and what the digest
    /// says, given their similarities of meaning to the query (made in between, when recall is
    /// by meaning: [`Window::recalls`]).
    pub(super) fn window(&mut self, older: &[units::Unit], free: usize) -> Window {
        let strategy = self.options.strategy;
        let dedupe = matches!(strategy, Strategy::Auto | Strategy::Dedupe);
        let mask = matches!(strategy, Strategy::Auto | Strategy::Mask);
        let digest = matches!(
            strategy,
            Strategy::Auto | Strategy::Extractive | Strategy::Summarize
        );
        let recall = strategy == Strategy::Auto && self.options.query.is_some();

        let replaced = if dedupe {
            self.duplicates(older)
        } else {
            HashMap::new()
        };
        if !replaced.is_empty() {
            self.report.steps.push("dedupe");
            self.report.deduplicated = replaced.len();
        }
        let keep_full = if mask {
            self.recent_outputs(older, self.options.mask_keep_last)
        } else {
            HashSet::new()
        };

        // Budget split: the digest and recall take shares of the free budget, but only what
        // they use; the newest-first window takes the rest.
        let recall_budget = if recall {
            (free as f64 * self.recall_share(older, free)) as usize
        } else {
            0
        };
        let digest_reserve = if digest {
            ((free - recall_budget) as f64 * self.options.digest_share) as usize
        } else {
            0
        };
        // The ledger of what may leave, with room of its own: the window does not take it.
        let ledger_reserve = if digest {
            self.ledger_of(older, &HashSet::new())
                .and_then(|l| {
                    let room = free - recall_budget;
                    let share = (LEDGER_SHARE * room as f64) as usize;
                    self.render_ledger(&l, share.max(SUMMARY_FLOOR.min(room)))
                })
                .map_or(0, |(_, tokens)| tokens)
        } else {
            0
        };
        let mut window_budget =
            (free - recall_budget - digest_reserve).saturating_sub(ledger_reserve);
        if matches!(strategy, Strategy::Extractive | Strategy::Summarize) {
            // The last `keep_recent` messages, whatever they cost, then the digest.
            window_budget = free - digest_reserve.min(free / 2);
        }

        // Newest-first window.
        let mut taken: Vec<(usize, Version, bool)> = Vec::new(); // (unit index, version, masked)
        let mut used = 0;
        let mut recent_messages = 0;
        for (ui, unit) in older.iter().enumerate().rev() {
            if matches!(strategy, Strategy::Extractive | Strategy::Summarize) {
                let enough = if self.options.preserve_window {
                    recent_messages >= 20 && used as f64 >= 0.2 * self.options.budget as f64
                } else {
                    recent_messages >= self.options.keep_recent
                };
                if enough {
                    break;
                }
            }
            let wants_mask = mask && !keep_full.contains(&ui);
            let version = self.version(*unit, &replaced, wants_mask);
            if used + version.tokens > window_budget {
                break;
            }
            used += version.tokens;
            recent_messages += unit.len();
            let masked = version.masked > 0;
            taken.push((ui, version, masked));
        }
        let first_kept = taken.last().map_or(older.len(), |(ui, _, _)| *ui);
        Window {
            replaced,
            recall,
            digest,
            mask,
            recall_budget,
            ledger_reserve,
            window_budget,
            used,
            taken,
            first_kept,
        }
    }

    /// The middle of the view (between pinned messages and the newest unit) for `free` tokens,
    /// each message with the position in the input of the unit it comes from (the digest's: 0):
    /// the `window` kept, what recall brings back of the units before it (their similarities of
    /// meaning to the query `similar`, when recall is by meaning), and the digest of the rest.
    pub(super) fn select(
        &mut self,
        older: &[units::Unit],
        free: usize,
        window: Window,
        similar: Option<super::similar::Similar>,
    ) -> Vec<(usize, ViewMessage)> {
        let Window {
            replaced,
            recall,
            digest,
            mask,
            recall_budget,
            ledger_reserve,
            window_budget,
            mut used,
            mut taken,
            first_kept,
        } = window;
        let dropped = &older[..first_kept];

        // Recall: the dropped units that best serve the query, verbatim.
        let mut recalled: Vec<(usize, Version)> = Vec::new();
        if recall && !dropped.is_empty() {
            let query = self.options.query.as_deref().unwrap_or_default();
            let budget = recall_budget + (window_budget - used);
            let mut recall_used = 0;
            let query_terms = retrieval::query_terms(query);
            let profile = &self.options.recall;
            // The user's standing instructions set aside come back first, newest first, each
            // rule once, within a share of recall's budget: they govern every later answer
            // whatever the query asks (`super::standing`).
            let mut standing: HashSet<usize> = HashSet::new();
            let mut rules: HashSet<String> = HashSet::new();
            let allowance = (budget as f64 * STANDING_SHARE) as usize;
            for (ui, unit) in dropped.iter().enumerate().rev() {
                let Some(rule) = self.items[unit.start..unit.end]
                    .iter()
                    .find_map(|i| super::standing::instruction(&i.message))
                else {
                    continue;
                };
                if !rules.insert(rule) {
                    continue;
                }
                let version = self.version(*unit, &replaced, false);
                if recall_used + version.tokens <= allowance {
                    recall_used += version.tokens;
                    standing.insert(ui);
                    recalled.push((ui, version));
                }
            }
            let retrieval::Ordered {
                fused,
                words_only,
                locality,
            } = self.rank(dropped, query, &query_terms, similar.as_ref());
            // Each ranked unit's recalled version, made once (a unit is in both rankings with
            // hybrid recall).
            let mut versions: HashMap<usize, Version> = HashMap::new();
            for &(ui, _) in fused.iter().chain(words_only.iter().flatten()) {
                if let std::collections::hash_map::Entry::Vacant(slot) = versions.entry(ui) {
                    slot.insert(self.version(dropped[ui], &replaced, false));
                }
            }
            // What each unit would take in the view: itself, or for one longer than the whole
            // budget, which recall shows cut to its lines about the query, that excerpt.
            let wanted: HashSet<String> = query_terms.iter().cloned().collect();
            let shown: HashMap<usize, usize> = versions
                .iter()
                .map(|(&ui, v)| {
                    let tokens = if v.tokens > budget {
                        self.excerpt(dropped[ui], &wanted, budget)
                            .map_or(v.tokens, |cut| cut.tokens)
                    } else {
                        v.tokens
                    };
                    (ui, tokens)
                })
                .collect();
            let typical = retrieval::typical_tokens(fused.iter().map(|(ui, _)| shown[ui]));
            let by_value = |order: Ranking| {
                let mut ranked: Ranking = order
                    .into_iter()
                    .map(|(ui, score)| {
                        (
                            ui,
                            retrieval::value(
                                score,
                                shown[&ui],
                                typical,
                                profile.cost,
                                locality[ui],
                            ),
                        )
                    })
                    .collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
                ranked
            };
            let fused = by_value(fused);
            // How many units the budget holds: hybrid recall's merge counts a place past it for
            // less.
            let mean = fused
                .iter()
                .map(|(ui, _)| versions[ui].tokens as f64)
                .sum::<f64>()
                / fused.len().max(1) as f64;
            let holds = budget as f64 / mean.max(1.0);
            let ranked = match words_only {
                Some(words) => {
                    retrieval::fuse_ranks(&fused, &by_value(words), holds, profile.fuse_depth)
                }
                None => fused,
            };
            // A unit longer than the whole budget is cut to what carries the query in its
            // place; one that only did not fit in what was left waits for what is left at the
            // end, if the ranking placed it inside the budget (before a unit that fitted).
            let mut too_long: Vec<usize> = Vec::new();
            let mut ranked_inside = 0;
            for (ui, _) in ranked {
                let Some(version) = versions.remove(&ui) else {
                    continue;
                };
                if standing.contains(&ui) {
                    continue;
                }
                let version = if version.tokens > budget {
                    match self.excerpt(dropped[ui], &wanted, budget - recall_used) {
                        Some(cut) => {
                            self.report.excerpted += 1;
                            cut
                        }
                        None => continue,
                    }
                } else {
                    version
                };
                if recall_used + version.tokens <= budget {
                    recall_used += version.tokens;
                    recalled.push((ui, version));
                    ranked_inside = too_long.len();
                } else {
                    too_long.push(ui);
                }
            }
            too_long.truncate(ranked_inside);
            for ui in too_long {
                let room = budget - recall_used;
                if let Some(version) = self.excerpt(dropped[ui], &wanted, room) {
                    recall_used += version.tokens;
                    self.report.excerpted += 1;
                    recalled.push((ui, version));
                }
            }
            recalled.sort_by_key(|(ui, _)| *ui);
            if !recalled.is_empty() {
                self.report.steps.push("recall");
                self.report.recalled = recalled.len();
            }
            if self.report.excerpted > 0 {
                self.report.steps.push("excerpt");
            }
            used += recall_used;
        }

        // Digest of what is neither in the window nor recalled.
        let recalled_units: HashSet<usize> = recalled.iter().map(|(ui, _)| *ui).collect();
        let mut summary: Option<ViewMessage> = None;
        if digest && !dropped.is_empty() {
            let visible: Vec<&Message> = taken
                .iter()
                .flat_map(|(_, v, _)| v.messages.iter().map(|m| &m.message))
                .chain(
                    recalled
                        .iter()
                        .flat_map(|(_, v)| v.messages.iter().map(|m| &m.message)),
                )
                .chain(
                    self.items
                        .iter()
                        .filter(|i| i.message.role.is_instruction())
                        .take(1)
                        .map(|i| i.message.as_ref()),
                )
                // A fixed head stays in view: what it says need not be said again.
                .chain(
                    self.items
                        .iter()
                        .take_while(|i| i.input.is_some_and(|at| at < self.options.head))
                        .map(|i| i.message.as_ref()),
                )
                .collect();
            // The digest holds at most part of the budget, so it reads only the most recent
            // dropped material (16 times what it can hold), plus the task statement: on a
            // history of millions of tokens, older lines would rarely win a place anyway.
            let limit = (free.saturating_sub(used) * 4 * 16).max(256 * 1024);
            let mut read = 0usize;
            let mut sources: Vec<&Item<'_>> = Vec::new();
            for (_, unit) in dropped
                .iter()
                .enumerate()
                .rev()
                .filter(|(ui, _)| !recalled_units.contains(ui))
            {
                if read > limit {
                    break;
                }
                for item in self.items[unit.start..unit.end].iter().rev() {
                    if item.input.is_some() {
                        read += item.message.text().len();
                        sources.push(item);
                    }
                }
            }
            // The task statement, when it was dropped and not recalled whole (a fixed head
            // holds it, when there is one).
            if self.options.head == 0
                && let Some(task) = self.items.iter().find(|i| i.message.role == Role::User)
                && !sources.iter().any(|s| std::ptr::eq(*s, task))
                && dropped.iter().enumerate().any(|(ui, u)| {
                    !recalled_units.contains(&ui)
                        && self.items[u.start..u.end]
                            .iter()
                            .any(|i| std::ptr::eq(i, task))
                })
            {
                sources.push(task);
            }
            sources.reverse();
            let mut budget = free.saturating_sub(used);
            if let Some(share) = self.options.summary_share {
                // A summary asked to stay smaller than what it stands for.
                let replaced: usize = sources
                    .iter()
                    .map(|i| self.counter.count_message(&i.message).total())
                    .sum();
                budget = budget.min(((share * replaced as f64) as usize).max(SUMMARY_FLOOR));
            }
            // The work ledger of what leaves the view comes first: it is exact, and what the
            // agent needs to go on (the files, the failures still open, its plan).
            let ledger = self.ledger_of(dropped, &recalled_units).and_then(|l| {
                let share = (LEDGER_SHARE * budget as f64) as usize;
                let room = share.max(ledger_reserve).max(SUMMARY_FLOOR.min(budget));
                self.render_ledger(&l, room.min(budget))
            });
            let whole = budget;
            let budget = budget.saturating_sub(ledger.as_ref().map_or(0, |(_, t)| *t));
            // The digest reads what the ledger names as not yet seen, so its lines may repeat a
            // path: counting the ledger as seen cost the trajectories 0.023 of their context
            // recall (docs/benchmarks.md, "What an agent pays through the proxy").
            let built = match self.summary(&sources, budget, dropped) {
                Some(built) => Some(("summarize", built)),
                None => digest::build(
                    &sources,
                    &visible,
                    self.counter,
                    budget,
                    self.options.head == 0,
                    self.options.read_tool.as_deref(),
                )
                .map(|built| ("extractive", built)),
            };
            // Joined, the texts may count a few tokens more than apart: what does not fit the
            // room goes without the ledger.
            let mut ledgered = ledger.is_some();
            let built = match (built, ledger) {
                (built, None) => built,
                (Some((step, built)), Some((text, _))) => {
                    let joined = self.with_ledger(&built, &text);
                    if joined.tokens <= whole {
                        Some((step, joined))
                    } else {
                        ledgered = false;
                        Some((step, built))
                    }
                }
                (None, Some((text, _))) => {
                    let message = Message::system(text);
                    let tokens = self.counter.count_message(&message).total();
                    let source_ids = dropped
                        .iter()
                        .flat_map(|u| self.items[u.start..u.end].iter())
                        .filter(|i| i.input.is_some())
                        .map(|i| i.source_id().into_owned())
                        .collect();
                    (tokens <= whole).then_some((
                        "ledger",
                        digest::Built {
                            tokens,
                            message,
                            source_ids,
                        },
                    ))
                }
            };
            if let Some((step, built)) = built {
                self.report.steps.push(step);
                if ledgered && step != "ledger" {
                    self.report.steps.push("ledger");
                }
                self.report.summarized = built.source_ids.len();
                self.report.summary_tokens = built.tokens;
                used += built.tokens;
                summary = Some(ViewMessage {
                    message: built.message,
                    kind: Kind::Summary,
                    source_ids: built.source_ids,
                });
            }
        }

        // Spend what is left on the masked outputs, newest first.
        if mask {
            for (ui, version, masked) in taken.iter_mut() {
                if !*masked {
                    continue;
                }
                let full = self.version(older[*ui], &replaced, false);
                if used - version.tokens + full.tokens <= free {
                    used = used - version.tokens + full.tokens;
                    *version = full;
                    *masked = false;
                }
            }
        }
        let masked = taken.iter().filter(|(_, _, m)| *m).count();
        if masked > 0 {
            self.report.steps.push("mask");
            self.report.masked = taken.iter().map(|(_, v, _)| v.masked).sum();
        }
        if first_kept > 0 {
            self.report.steps.push("truncate");
        }

        let mut out = Vec::new();
        out.extend(summary.map(|s| (0, s)));
        for (ui, version) in recalled {
            let at = older[ui].start;
            out.extend(version.messages.into_iter().map(|mut v| {
                if v.kind == Kind::Original {
                    v.kind = Kind::Recalled;
                }
                (at, v)
            }));
        }
        for (ui, version, _) in taken.into_iter().rev() {
            let at = older[ui].start;
            out.extend(version.messages.into_iter().map(|v| (at, v)));
        }
        out
    }

    /// Indices (into `older`) of the units holding the last `n` tool outputs.
    fn recent_outputs(&self, older: &[units::Unit], n: usize) -> HashSet<usize> {
        let mut out = HashSet::new();
        let mut seen = 0;
        for (ui, unit) in older.iter().enumerate().rev() {
            if seen >= n {
                break;
            }
            let outputs = self.items[unit.start..unit.end]
                .iter()
                .filter(|i| i.message.role == Role::Tool && i.input.is_some())
                .count();
            if outputs > 0 {
                out.insert(ui);
                seen += outputs;
            }
        }
        out
    }

    /// Older tool outputs repeated later (same text, or same tool and arguments): item index →
    /// the call id of the newer copy.
    fn duplicates(&self, older: &[units::Unit]) -> HashMap<usize, String> {
        let mut newest_by_text: HashMap<u64, String> = HashMap::new();
        let mut newest_by_call: HashMap<(String, String), String> = HashMap::new();
        let mut out = HashMap::new();
        // Only units that may enter the window matter: the newest `4 x budget` tokens' worth
        // of text (at least 256 KB).
        let limit = (self.options.budget * 16).max(256 * 1024);
        let mut read = 0usize;
        for unit in older.iter().rev() {
            if read > limit {
                break;
            }
            read += self.items[unit.start..unit.end]
                .iter()
                .map(|i| i.message.text().len())
                .sum::<usize>();
            let calls: HashMap<&str, (&str, &str)> = self.items[unit.start..unit.end]
                .iter()
                .flat_map(|i| i.message.calls())
                .map(|c| (c.id.as_str(), (c.name.as_str(), c.arguments.as_str())))
                .collect();
            for index in (unit.start..unit.end).rev() {
                let item = &self.items[index];
                if item.message.role != Role::Tool || item.input.is_none() {
                    continue;
                }
                let text = item.message.text();
                if text.len() < 200 {
                    continue; // Short outputs are cheaper than a pointer to them.
                }
                let id = item
                    .message
                    .tool_call_id()
                    .map(str::to_owned)
                    .unwrap_or_default();
                let hash = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
                let call_key = calls
                    .get(id.as_str())
                    .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()));
                if let Some(newer) = newest_by_text.get(&hash) {
                    out.insert(index, newer.clone());
                } else if let Some(newer) = call_key.as_ref().and_then(|k| newest_by_call.get(k)) {
                    out.insert(index, newer.clone());
                }
                newest_by_text.entry(hash).or_insert_with(|| id.clone());
                if let Some(k) = call_key {
                    newest_by_call.entry(k).or_insert(id);
                }
            }
        }
        out
    }

    /// How a marker says the original of message `id` comes back: `; read_history ids=[id]
    /// returns it whole` with the agent's read tool, nothing without one.
    fn reads_back(&self, id: &str) -> String {
        match &self.options.read_tool {
            Some(tool) => format!("; {tool} ids=[{id}] returns it whole"),
            None => String::new(),
        }
    }

    /// A unit's version: duplicates replaced, and tool outputs masked when asked.
    fn version(
        &self,
        unit: units::Unit,
        replaced: &HashMap<usize, String>,
        masked: bool,
    ) -> Version {
        let names: HashMap<&str, &str> = self.items[unit.start..unit.end]
            .iter()
            .flat_map(|i| i.message.calls())
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        let masked_outputs = std::cell::Cell::new(0);
        let messages: Vec<ViewMessage> = (unit.start..unit.end)
            .map(|index| {
                let item = &self.items[index];
                let mut view = self.original(item);
                if item.message.role != Role::Tool || item.input.is_none() {
                    return view;
                }
                let id = item.message.tool_call_id().unwrap_or("?");
                let tool = item
                    .message
                    .name()
                    .or_else(|| names.get(id).copied())
                    .unwrap_or("tool");
                if let Some(newer) = replaced.get(&index) {
                    view.message.content = Some(Content::Text(format!(
                        "[TOOL OUTPUT ARCHIVED - search history for details] `{tool}` output of call {id} is identical to, or superseded by, the output of call {newer} below{}",
                        self.reads_back(&item.shown_id())
                    )));
                    view.kind = Kind::Masked;
                } else if masked
                    && let Some(text) =
                        mask_text(
                            &item.message.text(),
                            tool,
                            id,
                            &self.reads_back(&item.shown_id()),
                            self.counter,
                        )
                {
                    view.message.content = Some(Content::Text(text));
                    view.kind = Kind::Masked;
                    masked_outputs.set(masked_outputs.get() + 1);
                }
                view
            })
            .collect();
        Version {
            tokens: self.tokens(&messages),
            masked: masked_outputs.get(),
            messages,
        }
    }

    /// `unit` cut to what carries the query ([`excerpt::Matches::cut`]) within `room` tokens: each of its
    /// messages that has sentences with the query's words (`wanted`) keeps only those, after a
    /// marker that says how to read it whole, and the others stay as they are. As many sentences
    /// as fit, halving the number a message may keep until the unit fits; `None` when none of
    /// its messages has such a sentence or even one sentence each does not fit. The unit's
    /// messages, roles and tool calls stay, so a call keeps its result.
    fn excerpt(&self, unit: units::Unit, wanted: &HashSet<String>, room: usize) -> Option<Version> {
        if room < EXCERPT_ROOM {
            return None;
        }
        let items = &self.items[unit.start..unit.end];
        let texts: Vec<_> = items.iter().map(|item| item.message.text()).collect();
        // Each message's sentences with the query's words, found once.
        let matches: Vec<Option<excerpt::Matches<'_>>> = items
            .iter()
            .zip(&texts)
            .map(|(item, text)| {
                (item.input.is_some() && !item.message.role.is_instruction())
                    .then(|| excerpt::Matches::of(text, wanted))
                    .flatten()
            })
            .collect();
        let mut most = usize::MAX;
        loop {
            // The most sentences any one message kept.
            let mut kept = 0;
            let mut messages = Vec::with_capacity(unit.len());
            for (item, matches) in items.iter().zip(&matches) {
                let mut view = self.original(item);
                if let Some(cut) = matches.as_ref().and_then(|m| m.cut(most, wanted)) {
                    let id = item.shown_id();
                    let marker = excerpt::marker(&cut, &id, &self.reads_back(&id));
                    view.message.content = Some(Content::Text(format!("{marker}\n{}", cut.text)));
                    view.kind = Kind::Masked;
                    kept = kept.max(cut.kept);
                }
                messages.push(view);
            }
            if kept == 0 {
                return None;
            }
            let tokens = self.tokens(&messages);
            if tokens <= room {
                return Some(Version {
                    messages,
                    tokens,
                    masked: 0,
                });
            }
            if kept == 1 {
                return None;
            }
            most = kept / 2;
        }
    }

    /// `dropped` unit indices with their scores for `query` (its searched words `terms`), best
    /// match first; with hybrid recall, the order by words alone as well (the two are merged by
    /// their places, see [`retrieval::fuse_ranks`]); and each unit's locality, which the value of
    /// its room reads ([`retrieval::Ordered`]), given their similarities of meaning to the
    /// query (`similar`, one per unit of `dropped`).
    fn rank(
        &mut self,
        dropped: &[units::Unit],
        query: &str,
        terms: &[String],
        similar: Option<&super::similar::Similar>,
    ) -> retrieval::Ordered {
        let profile = &self.options.recall;
        let wanted: HashSet<&str> = terms.iter().map(String::as_str).collect();
        let mut lengths: Vec<usize> = Vec::with_capacity(dropped.len());
        let speaker = |u: &units::Unit| {
            self.items[u.start..u.end]
                .iter()
                .find_map(|i| i.message.name())
        };
        let mut text = String::new();
        let documents: Vec<Vec<String>> = dropped
            .iter()
            .map(|u| {
                text.clear();
                for item in &self.items[u.start..u.end] {
                    retrieval::push_meaning_text(&item.message, &mut text);
                }
                let (mut terms, joined) = retrieval::terms_and_joined(&text, |first| {
                    wanted.iter().any(|q| q.starts_with(first))
                });
                lengths.push(terms.len());
                terms.extend(joined.into_iter().filter(|j| wanted.contains(j.as_str())));
                terms
            })
            .collect();
        let traits = retrieval::Traits {
            asks: dropped
                .iter()
                .map(|u| {
                    self.items[u.start..u.end]
                        .iter()
                        .any(|i| i.message.text().contains('?'))
                })
                .collect(),
            headings: dropped.iter().map(|u| self.starts_session(u)).collect(),
            speakers: dropped.iter().map(speaker).collect(),
            voices: dropped
                .iter()
                .map(|u| retrieval::voice(speaker(u), self.items[u.start].message.role))
                .collect(),
            lengths,
        };
        let mut bm25 = retrieval::Bm25::default();
        for (terms, &len) in documents.into_iter().zip(&traits.lengths) {
            bm25.add(terms, len);
        }
        let similar = similar.map(|similar| {
            self.report.recall_embedder = Some(similar.embedder.clone());
            similar.scores.as_slice()
        });
        retrieval::order(&bm25, terms, &traits, query, similar, profile)
    }
}

/// The fewest tokens an excerpt is tried in ([`Planner::excerpt`]): its marker alone takes about
/// 35, so in less room none fits, and a long history is not cut unit by unit once the budget is
/// spent.
const EXCERPT_ROOM: usize = 40;

/// The share of recall's budget the user's standing instructions set aside may take
/// ([`super::standing`]): an eighth holds a dozen one-line rules at a 2,048-token budget and
/// leaves the rest to what the query needs; a rule that would go past it is left out, and an
/// older one that fits still comes back.
const STANDING_SHARE: f64 = 0.125;

/// The tokens a summary held to a share of what it stands for
/// ([`CompactOptions::summary_share`]) may take however little that is.
pub(super) const SUMMARY_FLOOR: usize = 200;
/// The share of the room left after recall that the work ledger may take, set aside before the
/// recent window takes its part, and the share of a summary's room it may take: the exact
/// record of files, failures and plan comes first (what an agent cannot find again without
/// knowing to look), and the prose or key lines of what was said keep at least half.
const LEDGER_SHARE: f64 = 0.5;

/// Recall's share of `free` tokens for a history of `history` tokens in `sessions` sessions,
/// given the configured `share`. The rest (the digest and the recent window) shrinks linearly,
/// to a quarter of it, as the history grows from 8 to 24 times `free`, or as it spans from 4 to
/// 12 sessions, whichever shrinks it more: the newest session is then a small part of the
/// history, and the answer is more likely in one that only recall reaches.
pub(super) fn recall_share_for(share: f64, history: usize, free: usize, sessions: usize) -> f64 {
    const FROM: f64 = 8.0;
    const FULL: f64 = 24.0;
    const FROM_SESSIONS: f64 = 4.0;
    const FULL_SESSIONS: f64 = 12.0;
    let share = share.clamp(0.0, 1.0);
    let times = history as f64 / free.max(1) as f64;
    let by_length = ((times - FROM) / (FULL - FROM)).clamp(0.0, 1.0);
    let by_sessions =
        ((sessions as f64 - FROM_SESSIONS) / (FULL_SESSIONS - FROM_SESSIONS)).clamp(0.0, 1.0);
    let grown = by_length.max(by_sessions);
    1.0 - (1.0 - share) * (1.0 - 0.75 * grown)
}
