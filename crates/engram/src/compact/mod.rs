//! Compaction: make a conversation fit a token budget without losing what the agent needs next.
//!
//! The pipeline works on *units* (a tool call with its results, or a single message) and gives
//! each older unit one of three fidelities: verbatim, masked (a tool output's head and tail
//! with a marker that says what was hidden and how to get it back), or dropped into a digest
//! (the `[Session context consolidated]` message, which keeps the lines that carry the
//! identifiers no longer visible elsewhere). When the caller says what the context must serve
//! (a query), the older units that match it best are recalled verbatim, or, when one is too
//! long to fit, cut to the lines that hold the query's words (`excerpt.rs`).
//!
//! Every step is a function of the messages, the counter and the options, with two calls out
//! that the options bring: a configured summarizer writes the summary, and with hybrid recall
//! the embedder (and the vector store, which keeps what it embedded) gives the set-aside units'
//! similarity to the query. Nothing is deleted from the caller's data (the output only
//! *selects* and *describes*), and every output message says which input messages it stands
//! for.
//!
//! Invariants, enforced here for every strategy:
//! 1. units are kept or dropped whole, after [`units::repair`] made the history well formed;
//! 2. leading system/developer messages are kept verbatim and first;
//! 3. the newest unit is kept verbatim and last;
//! 4. the output's exact count is at most the budget, or [`Error::CannotFit`] says why;
//! 5. every output message carries the source ids of what it stands for.

pub mod live;
pub mod policy;
pub mod salient;
pub mod stable;
pub mod summarize;
pub mod units;

mod digest;
mod excerpt;
mod mask;
pub use digest::HEADER as DIGEST_HEADER;
pub use mask::mask_newest_outputs;
mod options;
mod planner;
mod similar;
mod standing;
mod view;
pub mod write_back;

use std::time::Instant;

use serde_json::Value;

use crate::Error;
use crate::count::TokenCounter;
use crate::input::Conversation;
use crate::message::Message;

pub use options::{CompactOptions, CompactReport, Compacted, LoggedIds, Strategy};
use planner::{Item, Planner};
pub(crate) use view::view_tokens;
pub use view::{Kind, Origin, SourceIndex, ViewMessage, render, repair_view};
pub use write_back::{CallersFormat, chat_messages, write_back};

/// Compacts a conversation to `options.budget` tokens as counted by `counter`.
pub fn compact(
    conversation: &Conversation,
    counter: &TokenCounter,
    options: &CompactOptions,
) -> Result<Compacted, Error> {
    compact_messages(
        &conversation.messages,
        &conversation.tools,
        counter,
        options,
    )
}

/// [`compact`] on messages held by something else (a session's log rows, say), with the
/// conversation's tool definitions: no copy of the messages is made.
pub fn compact_messages<M: AsRef<Message>>(
    input: &[M],
    tools: &[Value],
    counter: &TokenCounter,
    options: &CompactOptions,
) -> Result<Compacted, Error> {
    compact_keeping_vectors(input, tools, counter, options, None)
}

/// [`compact_messages`], keeping hybrid recall's vectors in `vectors` (a session's store, so
/// that its messages are embedded once however many compactions read them): each text's
/// vector is read from there when kept, else embedded and kept.
pub fn compact_keeping_vectors<M: AsRef<Message>>(
    input: &[M],
    tools: &[Value],
    counter: &TokenCounter,
    options: &CompactOptions,
    vectors: Option<&dyn crate::embed::VectorStore>,
) -> Result<Compacted, Error> {
    let started = Instant::now();
    if input.is_empty() {
        return Err(Error::NoMessages);
    }
    let (repaired, repairs) = units::repair(input);
    let items: Vec<Item<'_>> = repaired
        .into_iter()
        .map(|(message, index)| Item {
            message,
            input: index,
            logged: options
                .logged_ids
                .zip(index)
                .map(|(ids, i)| ids.position(i)),
        })
        .collect();
    let instructions_end = items
        .iter()
        .take_while(|i| i.message.role.is_instruction())
        .count();
    // A head the caller fixed stands first as the instructions do; never the newest message.
    let head_end = items
        .iter()
        .take_while(|i| i.input.is_some_and(|at| at < options.head))
        .count()
        .min(items.len().saturating_sub(1));
    let pinned_end = instructions_end.max(head_end);
    let mut older: Vec<units::Unit> = units::units(&items[pinned_end..]);
    for u in &mut older {
        u.start += pinned_end;
        u.end += pinned_end;
    }
    let newest = older.pop();
    let accounting = counter.accounting();
    let tools_tokens = counter.count_tools(tools);
    let overhead = accounting.per_conversation + tools_tokens;
    let pinned_tokens: usize = items[..pinned_end]
        .iter()
        .map(|i| counter.count_message(&i.message).total())
        .sum();
    let newest_tokens: usize = newest.map_or(0, |u| {
        items[u.start..u.end]
            .iter()
            .map(|i| counter.count_message(&i.message).total())
            .sum()
    });
    // Messages the caller pinned, later in the history: kept verbatim with their unit. An
    // instruction given partway through (a developer message; an Anthropic system message
    // among the messages) is one: the model must still see it.
    let is_pinned = |item: &Item<'_>| {
        item.input.is_some()
            && (item.message.extra().get("pinned") == Some(&Value::Bool(true))
                || item.message.role == crate::message::Role::Developer
                || (!options.pinned_ids.is_empty() && {
                    let id = item.source_id();
                    options.pinned_ids.iter().any(|p| *p == id)
                }))
    };
    // Split in place: a long history has a unit per message or two.
    let mut pinned_units: Vec<units::Unit> = Vec::new();
    older.retain(|u| {
        let pinned = items[u.start..u.end].iter().any(is_pinned);
        if pinned {
            pinned_units.push(*u);
        }
        !pinned
    });
    let older = older.as_slice();
    let pinned_mid_tokens: usize = pinned_units
        .iter()
        .flat_map(|u| items[u.start..u.end].iter())
        .map(|i| counter.count_message(&i.message).total())
        .sum();
    let required = overhead + pinned_tokens + newest_tokens + pinned_mid_tokens;
    if required > options.budget {
        let mut parts = Vec::new();
        if pinned_tokens > 0 {
            parts.push(format!("the system prompt ({pinned_tokens} tokens)"));
        }
        if pinned_mid_tokens > 0 {
            parts.push(format!("the pinned messages ({pinned_mid_tokens} tokens)"));
        }
        if newest_tokens > 0 {
            parts.push(format!("the newest message ({newest_tokens} tokens)"));
        }
        if tools_tokens > 0 {
            parts.push(format!("the tool definitions ({tools_tokens} tokens)"));
        }
        parts.push(format!(
            "the overhead ({} tokens)",
            accounting.per_conversation
        ));
        return Err(Error::CannotFit {
            budget: options.budget,
            required,
            over: required - options.budget,
            what: parts.join(", "),
        });
    }
    let free = options.budget - required;

    // Everything fits: nothing to do (beyond repairs).
    let fit = counter.fit_newest(
        &items[pinned_end..items.len() - newest.map_or(0, |u| u.len())],
        free + pinned_mid_tokens,
    );
    let older_messages: usize = older.iter().chain(&pinned_units).map(|u| u.len()).sum();
    let all_fit = fit.kept == older_messages;

    let mut plan = Planner {
        items: &items,
        counter,
        options,
        report: CompactReport {
            strategy: options.strategy.as_str(),
            budget: options.budget,
            tokens_before: 0,
            tokens_before_estimated: false,
            tokens_after: 0,
            steps: Vec::new(),
            messages_before: input.len(),
            messages_after: 0,
            messages_removed: 0,
            masked: 0,
            deduplicated: 0,
            recalled: 0,
            excerpted: 0,
            summarized: 0,
            summary_tokens: 0,
            summarizer: None,
            recall_embedder: None,
            summary_fallback: None,
            summary_previous: None,
            repaired: repairs.orphan_results.len() + repairs.unanswered_calls.len(),
            duration_ms: 0.0,
        },
    };

    let middle = if all_fit {
        plan.whole(older)
    } else {
        // The planner decides; recall by meaning embeds the units it sets aside in between.
        let window = plan.window(older, free);
        let similar = window
            .recalls()
            .then(|| similar::to_query(&items, &older[..window.first_kept], options, vectors))
            .flatten();
        plan.select(older, free, window, similar)
    };
    let removed = removed_count(
        input.len(),
        &items,
        pinned_end,
        &middle,
        &pinned_units,
        newest,
    );
    let middle = with_pinned(middle, &pinned_units, &items, &plan);

    let mut view: Vec<ViewMessage> = items[..pinned_end]
        .iter()
        .map(|i| plan.original(i))
        .collect();
    view.extend(middle);
    if let Some(u) = newest {
        view.extend(items[u.start..u.end].iter().map(|i| plan.original(i)));
    }

    let mut report = plan.report;
    let after: usize = overhead
        + view
            .iter()
            .map(|v| counter.count_message(&v.message).total())
            .sum::<usize>();
    report.tokens_after = after;
    report.messages_after = view.len();
    report.messages_removed = removed;
    let (before, estimated) = tokens_before(input, counter, &fit, overhead);
    report.tokens_before = before;
    report.tokens_before_estimated = estimated;
    report.duration_ms = started.elapsed().as_secs_f64() * 1e3;
    debug_assert!(after <= options.budget, "{after} > {}", options.budget);
    Ok(Compacted {
        messages: view,
        report,
    })
}

/// How many input messages the view does not hold verbatim (dropped, masked, or standing in a
/// digest), counted by place: ids may repeat in a caller's input, so a kept message's id does
/// not say which of its namesakes was kept. `middle` is [`Planner::select`]'s, each message
/// with its unit's first item; a verbatim one is the first not yet counted item of the same id
/// from there.
fn removed_count(
    inputs: usize,
    items: &[Item<'_>],
    pinned_end: usize,
    middle: &[(usize, ViewMessage)],
    pinned: &[units::Unit],
    newest: Option<units::Unit>,
) -> usize {
    let mut kept = vec![false; inputs];
    let whole = items[..pinned_end].iter().chain(
        pinned
            .iter()
            .chain(&newest)
            .flat_map(|u| &items[u.start..u.end]),
    );
    for at in whole.filter_map(|i| i.input) {
        kept[at] = true;
    }
    for (start, v) in middle {
        if !matches!(v.kind, Kind::Original | Kind::Recalled) {
            continue;
        }
        for id in &v.source_ids {
            let namesake = items[*start..].iter().find_map(|i| {
                i.input
                    .filter(|&at| !kept[at] && i.source_id() == id.as_str())
            });
            if let Some(at) = namesake {
                kept[at] = true;
            }
        }
    }
    kept.iter().filter(|k| !**k).count()
}

/// Puts pinned units into the middle of the view in their chronological places (after the
/// digest, which stands before everything it summarises), by the input positions that
/// [`Planner::select`] gives: ids may repeat in a caller's input, so they cannot say where a
/// message stood.
fn with_pinned(
    middle: Vec<(usize, ViewMessage)>,
    pinned: &[units::Unit],
    items: &[Item<'_>],
    plan: &Planner<'_>,
) -> Vec<ViewMessage> {
    let mut out: Vec<ViewMessage> = Vec::with_capacity(middle.len() + pinned.len());
    let mut rest = middle.into_iter().peekable();
    while let Some((_, v)) = rest.next_if(|(_, v)| v.kind == Kind::Summary) {
        out.push(v);
    }
    for unit in pinned {
        while let Some((_, v)) = rest.next_if(|(at, _)| *at < unit.start) {
            out.push(v);
        }
        out.extend(items[unit.start..unit.end].iter().map(|i| plan.original(i)));
    }
    out.extend(rest.map(|(_, v)| v));
    out
}

/// The input's tokens: exact where the fill counted them, chars/4 for the rest.
fn tokens_before<M: AsRef<Message>>(
    messages: &[M],
    counter: &TokenCounter,
    fit: &crate::count::NewestFit,
    overhead: usize,
) -> (usize, bool) {
    let total_chars: usize = messages.iter().map(|m| m.as_ref().text().len()).sum();
    if total_chars < 256 * 1024 {
        let counted: usize = messages
            .iter()
            .map(|m| counter.count_message(m.as_ref()).total())
            .sum();
        return (overhead + counted, false);
    }
    let split = messages.len().saturating_sub(fit.kept + 1);
    let estimate: usize = messages[..split]
        .iter()
        .map(|m| {
            let m = m.as_ref();
            counter.accounting().per_message
                + (m.text().chars().count()
                    + m.calls()
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>())
                .div_ceil(4)
        })
        .sum();
    let exact: usize = messages[split..]
        .iter()
        .map(|m| counter.count_message(m.as_ref()).total())
        .sum();
    (overhead + estimate + exact, split > 0)
}

#[cfg(test)]
mod tests {
    use super::planner::recall_share_for;
    use super::*;
    use crate::retrieval::RecallProfile;
    use crate::tokenize::Tokenizer;

    #[test]
    fn recall_takes_more_of_the_budget_the_longer_the_history_and_the_more_its_sessions() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Up to 8 times the free budget: the configured share.
        assert!(close(recall_share_for(0.8, 0, 1000, 0), 0.8));
        assert!(close(recall_share_for(0.8, 8_000, 1000, 0), 0.8));
        // Halfway to 24 times: the rest is five eighths of what it was.
        assert!(close(
            recall_share_for(0.8, 16_000, 1000, 0),
            1.0 - 0.2 * 0.625
        ));
        // From 24 times on: a quarter of the rest.
        assert!(close(recall_share_for(0.8, 24_000, 1000, 0), 0.95));
        assert!(close(recall_share_for(0.8, 1_000_000, 1000, 0), 0.95));
        // A caller's share is kept in proportion, and never leaves 0..=1.
        assert!(close(recall_share_for(0.0, 24_000, 1000, 0), 0.75));
        assert!(close(recall_share_for(1.0, 24_000, 1000, 0), 1.0));
        assert!(close(recall_share_for(0.8, 24_000, 0, 0), 0.95));
        let mut last = 0.0;
        for history in (0..40_000).step_by(500) {
            let s = recall_share_for(0.5, history, 1000, 0);
            assert!(s >= last && s <= 1.0, "{history}: {s}");
            last = s;
        }
        // Up to 4 sessions: by length alone. From 12 on: a quarter of the rest, however short.
        assert!(close(recall_share_for(0.8, 0, 1000, 4), 0.8));
        assert!(close(recall_share_for(0.8, 0, 1000, 8), 1.0 - 0.2 * 0.625));
        assert!(close(recall_share_for(0.8, 0, 1000, 12), 0.95));
        assert!(close(recall_share_for(0.8, 0, 1000, 500), 0.95));
        // The two rises do not add up: the larger one counts.
        assert!(close(
            recall_share_for(0.8, 16_000, 1000, 8),
            1.0 - 0.2 * 0.625
        ));
        assert!(close(recall_share_for(0.8, 24_000, 1000, 8), 0.95));
    }

    #[test]
    fn a_history_of_many_sessions_leaves_the_recent_window_less() {
        // The same 48 turns, every one about the garden, in 12 sessions or in 3; the history is
        // about twice the budget, too short for its length to matter.
        let kinds = |sessions: usize| {
            let mut messages = vec![Message::system("You are a helpful companion.")];
            for k in 0..48 {
                if k % (48 / sessions) == 0 {
                    messages.push(Message::system(format!(
                        "[Session {} - 3 May, 2023]",
                        k / (48 / sessions)
                    )));
                }
                messages.push(Message::user(format!(
                    "The garden grew a little more, {k}."
                )));
            }
            messages.push(Message::user("How is the garden?"));
            let out = compact_asked_last(messages, 400);
            let count = |kind: Kind| out.messages.iter().filter(|m| m.kind == kind).count();
            (count(Kind::Recalled), count(Kind::Original))
        };
        let (recalled_few, recent_few) = kinds(3);
        let (recalled_many, recent_many) = kinds(12);
        assert!(
            recalled_many > recalled_few && recent_many < recent_few,
            "12 sessions: {recalled_many} recalled, {recent_many} recent; \
             3 sessions: {recalled_few} recalled, {recent_few} recent"
        );
    }

    #[test]
    fn a_dated_heading_lends_to_its_session_first_turn() {
        // Twelve sessions, a month each; each opens with news that shares no word with the
        // question, then small talk. The question names a month: its session's heading
        // matches, and lends to the turn after it.
        let months = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for (i, month) in months.iter().enumerate() {
            messages.push(Message::system(format!(
                "[Session {} - 1:00 pm on 3 {month}, 2023]",
                i + 1
            )));
            let news = if *month == "August" {
                "Since we last talked I started mentoring kids at the local school.".to_owned()
            } else {
                format!("Since we last talked I repainted room {i} of the house.")
            };
            messages.push(Message::user(news).with_id(format!("news-{month}")));
            for k in 0..4 {
                messages.push(Message::assistant(format!(
                    "That sounds lovely, tell me more {k}."
                )));
                messages.push(Message::user(format!("Sure, it went fine overall {k}.")));
            }
        }
        messages.push(Message::user("What was going on in August 2023?"));
        let out = compact_asked_last(messages, 300);
        let text: Vec<String> = out
            .messages
            .iter()
            .map(|m| m.message.text().into_owned())
            .collect();
        assert!(
            text.iter().any(|t| t.contains("mentoring kids")),
            "{text:#?}"
        );
        assert!(
            !text.iter().any(|t| t.contains("repainted room 3 ")),
            "another month's news stays out: {text:#?}"
        );
    }

    /// `messages` compacted to `budget` (four characters a token) with the newest message, the
    /// question, as the query.
    fn compact_asked_last(messages: Vec<Message>, budget: usize) -> Compacted {
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        let mut options = CompactOptions::new(budget);
        options.query = messages.last().map(|m| m.text().into_owned());
        compact(&Conversation::new(messages), &counter, &options).expect("compacts")
    }

    /// A chat with one long turn that answers the question and one short turn that shares a
    /// single word with it; the rest is small talk, both sides saying lines of the same
    /// middling length.
    fn chat_with_one_long_answer() -> Vec<Message> {
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for k in 0..30 {
            let (user, assistant) = (
                format!("Nothing much today, I read a while {k}."),
                format!("Quiet day in, read a novel too {k}."),
            );
            messages.push(Message::user(user));
            messages.push(Message::assistant(assistant));
            if k == 10 {
                messages.push(
                    Message::user(
                        "For the garden party by the old stone wall we baked a lemon cake, \
                         three trays of scones and a pot of plum jam, and my aunt brought \
                         her famous cherry pie; everyone stayed until the lanterns were lit \
                         and the neighbours sang until midnight.",
                    )
                    .with_id("answer"),
                );
                messages.push(Message::assistant("What a wonderful evening."));
            }
            if k == 20 {
                messages.push(Message::user("The garden was green.").with_id("one-word"));
                messages.push(Message::assistant("Lovely."));
            }
        }
        messages.push(Message::user(
            "What did we bake for the garden party by the old stone wall?",
        ));
        messages
    }

    #[test]
    fn a_long_match_pays_for_the_room_it_takes() {
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        // 110 tokens leave recall room for the long answer or the one-word match, not both.
        let kept = |cost: f64| {
            let messages = chat_with_one_long_answer();
            let mut options = CompactOptions::new(110);
            options.query = messages.last().map(|m| m.text().into_owned());
            options.embedder = None;
            options.recall.cost = cost;
            let out = compact(&Conversation::new(messages), &counter, &options).expect("compacts");
            out.messages
                .iter()
                .filter_map(|m| m.message.id.clone())
                .collect::<Vec<_>>()
        };
        // By score alone, the long turn that shares most of the question's words.
        assert_eq!(kept(0.0), ["answer"]);
        // Its length counts against it (six times a typical turn): the short match goes first.
        assert_eq!(kept(RecallProfile::default().cost), ["one-word"]);
    }
    /// An agent's run whose old test log is where an error was printed, followed by `turns`
    /// short exchanges; with `noted`, a note soon after the log names the error again.
    fn run_with_a_long_log(turns: usize, noted: bool) -> Vec<Message> {
        use crate::message::ToolCall;
        let mut log: Vec<String> = (0..60)
            .map(|k| format!("test suite::case_{k} ... ok"))
            .collect();
        log[41] =
            "test suite::tokenizer ... FAILED: unterminated string literal at src/lexer.rs:88"
                .into();
        let mut messages = vec![
            Message::system("You are a coding agent."),
            Message::user("Make the test suite pass."),
            Message::assistant_tool_calls(vec![ToolCall::function(
                "c1",
                "shell",
                "{\"command\": \"cargo test\"}",
            )]),
            Message::tool("c1", log.join("\n")).with_id("log"),
        ];
        for k in 0..turns {
            if noted && k == 2 {
                messages
                    .push(Message::user("The unterminated string literal again.").with_id("note"));
            }
            messages.push(Message::user(format!("Note {k}: keep going.")));
            messages.push(Message::assistant(format!("Continuing with step {k}.")));
        }
        messages.push(Message::user(
            "Which unterminated string literal failed, and where?",
        ));
        messages
    }

    /// [`run_with_a_long_log`] compacted to `budget` for its last question, with `read_history`.
    fn compact_the_run(messages: Vec<Message>, budget: usize) -> Compacted {
        compact_the_run_with(messages, CompactOptions::new(budget))
    }

    fn compact_the_run_with(messages: Vec<Message>, mut options: CompactOptions) -> Compacted {
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        options.query = messages.last().map(|m| m.text().into_owned());
        options.read_tool = Some("read_history".into());
        compact(&Conversation::new(messages), &counter, &options).expect("compacts")
    }

    #[test]
    fn a_recalled_output_too_long_for_the_budget_keeps_its_lines_about_the_query() {
        let messages = run_with_a_long_log(30, false);
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        let whole = counter.count_message(&messages[3]).total();
        assert!(whole > 300, "the log alone is over the budget: {whole}");
        let out = compact_the_run(messages, 300);
        assert!(out.report.tokens_after <= 300);
        assert_eq!(out.report.excerpted, 1);
        assert!(out.report.steps.contains(&"excerpt"));
        let at = out
            .messages
            .iter()
            .position(|m| m.source_ids == ["log"])
            .expect("the log is excerpted");
        let excerpt = &out.messages[at];
        assert_eq!(excerpt.kind, Kind::Masked);
        assert_eq!(
            excerpt.message.text(),
            "[EXCERPT - engram kept 1 of 60 lines and sentences of message log, those with the \
             query's words; read_history ids=[log] returns it whole]\n\
             test suite::tokenizer ... FAILED: unterminated string literal at src/lexer.rs:88"
        );
        // Its call comes with it.
        assert_eq!(out.messages[at - 1].message.calls()[0].id, "c1");
        assert_eq!(out.messages[at].message.tool_call_id(), Some("c1"));
    }

    #[test]
    fn an_output_that_misses_what_is_left_is_cut_from_what_remains() {
        // At 600 tokens the log fits recall's budget, but not after the note that ranks above
        // it; the turns after the note do not take what is left. By words alone: with the
        // built-in meaning, "keep going" turns that stand a little above the rest in meaning
        // take the room first (a known weakness of the small static model on agent logs).
        let lexical = |budget| {
            let mut options = CompactOptions::new(budget);
            options.embedder = None;
            compact_the_run_with(run_with_a_long_log(200, true), options)
        };
        let out = lexical(600);
        let kinds = |out: &Compacted, id: &str| {
            out.messages
                .iter()
                .filter(|m| m.source_ids == [id])
                .map(|m| m.kind)
                .collect::<Vec<_>>()
        };
        assert_eq!(kinds(&out, "note"), [Kind::Recalled]);
        assert_eq!(kinds(&out, "log"), [Kind::Masked]);
        assert_eq!(out.report.excerpted, 1);
        // With room for it whole, it is recalled whole.
        let out = lexical(700);
        assert_eq!(out.report.excerpted, 0);
        assert_eq!(kinds(&out, "log"), [Kind::Recalled]);
    }

    #[test]
    fn a_standing_instruction_set_aside_stays_in_view_whatever_the_query_asks() {
        // A long chat; early on the user sets two rules, one of them twice. The last question
        // shares no word with either.
        let chat = |rules: bool| {
            let mut messages = vec![Message::system("You are a helpful assistant.")];
            for k in 0..60 {
                messages.push(Message::user(format!("Plan for week {k}: gym, groceries.")));
                messages.push(Message::assistant(format!("Week {k} sounds balanced.")));
                if rules && k == 3 {
                    messages.push(
                        Message::user("Always give dates as MM/DD/YYYY when we plan.")
                            .with_id("dates"),
                    );
                    messages
                        .push(Message::user("Never book anything before 9 AM.").with_id("early"));
                }
                if rules && k == 20 {
                    messages.push(
                        Message::user("always give dates as MM/DD/YYYY when we plan")
                            .with_id("dates again"),
                    );
                }
            }
            messages.push(Message::user("When is the dentist appointment?"));
            messages
        };
        let kept = |out: &Compacted| -> Vec<String> {
            out.messages
                .iter()
                .filter_map(|m| m.message.id.clone())
                .collect()
        };
        // By words alone: the rule about dates is near a question about "when" in meaning.
        let asked = |messages: Vec<Message>, budget| {
            let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
            let mut options = CompactOptions::new(budget);
            options.embedder = None;
            options.query = messages.last().map(|m| m.text().into_owned());
            compact(&Conversation::new(messages), &counter, &options).expect("compacts")
        };
        let out = asked(chat(true), 300);
        assert!(out.report.tokens_after <= 300);
        // Each rule once, its newest saying, in its place in the history.
        assert_eq!(kept(&out), ["early", "dates again"]);
        // Without a query nothing is recalled, rules included.
        let counter = TokenCounter::new(Tokenizer::chars_per_token(4));
        let out = compact(
            &Conversation::new(chat(true)),
            &counter,
            &CompactOptions::new(300),
        )
        .expect("compacts");
        assert!(kept(&out).is_empty(), "{:?}", kept(&out));
        // The rules take at most their share of recall's budget: with room for one, the newest
        // comes back alone.
        let out = asked(chat(true), 200);
        assert_eq!(kept(&out), ["dates again"]);
    }

    #[test]
    fn a_compound_the_query_writes_as_one_word_finds_it_written_as_two() {
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for k in 0..30 {
            messages.push(Message::user(format!("Quiet day {k}, I read a novel.")));
            messages.push(Message::assistant(format!("Sounds restful {k}.")));
            if k == 12 {
                messages.push(
                    Message::user("We drove along the coast on our road trip.")
                        .with_id("road trip"),
                );
                messages.push(Message::assistant("What a view that must have been."));
            }
        }
        messages.push(Message::user("Where did they go on the roadtrip?"));
        let kept: Vec<_> = compact_asked_last(messages, 60)
            .messages
            .iter()
            .filter_map(|m| m.message.id.clone())
            .collect();
        assert_eq!(kept, ["road trip"]);
    }

    #[test]
    fn a_match_brings_the_turn_that_leads_into_it() {
        // A chat between Evan and Sam: early on Evan leads into his news, Sam asks, and Evan
        // names it; the rest is small talk, each of Evan's turns matching his name alone.
        let said = |name: &str, text: &str| {
            let mut m = if name == "Evan" {
                Message::user(text)
            } else {
                Message::assistant(text)
            };
            m.set_name(Some(name.into()));
            m
        };
        let mut messages = vec![Message::system("You are a helpful companion.")];
        for k in 0..30 {
            messages.push(said("Evan", &format!("Quiet day {k}, I read a little.")));
            messages.push(said("Sam", &format!("Sounds restful, day {k}.")));
            if k == 3 {
                messages.push(
                    said("Evan", "Something big happened two weeks ago, guess what!")
                        .with_id("lead-in"),
                );
                messages.push(said("Sam", "Oh no, what happened?"));
                messages.push(
                    said("Evan", "Work got so stressful that I took a week off.").with_id("news"),
                );
                messages.push(said("Sam", "Take good care of yourself."));
            }
        }
        let recalled = |question: &str| {
            let mut asked = messages.clone();
            asked.push(said("Sam", question));
            let ids: Vec<String> = compact_asked_last(asked, BUDGET)
                .messages
                .iter()
                .filter_map(|m| m.message.id.clone())
                .collect();
            ids
        };
        const BUDGET: usize = 150;
        // However the question is put, the turn that names the stress is recalled, and the
        // lead-in two turns before it with it: a match lends to the turns around it.
        for question in [
            "Summarize everything Evan has told me about his stress.",
            "Evan's stress: recap it for me.",
            "Why was Evan stressed?",
        ] {
            let ids = recalled(question);
            assert!(ids.iter().any(|id| id == "news"), "{question}: {ids:?}");
            assert!(ids.iter().any(|id| id == "lead-in"), "{question}: {ids:?}");
        }
    }

    #[test]
    fn a_source_id_names_a_message_by_its_id_else_by_its_index() {
        let messages = vec![
            Message::system("s"),
            Message::user("u").with_id("1"),
            Message::assistant("a"),
        ];
        let index = SourceIndex::new(&messages);
        assert_eq!(index.get("0"), Some(0));
        // "1" is message 1's own id; "2" is message 2's index (it has no id).
        assert_eq!(index.get("1"), Some(1));
        assert_eq!(index.get("2"), Some(2));
        assert_eq!(index.get("3"), None);
        let view = |message: Message, kind: Kind, id: &str| ViewMessage {
            message,
            kind,
            source_ids: vec![id.into()],
        };
        assert_eq!(
            index.unchanged(&view(Message::assistant("a"), Kind::Original, "2")),
            Some(2)
        );
        assert_eq!(
            index.unchanged(&view(Message::assistant("[masked]"), Kind::Masked, "2")),
            None
        );
        assert_eq!(
            index.unchanged(&view(Message::assistant("b"), Kind::Original, "2")),
            None
        );
    }
}
