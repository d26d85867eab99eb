//! Compaction that keeps a provider's prompt cache warm.
//!
//! Providers bill a repeated prompt prefix at a fraction of the price, and any change at a
//! place of the prompt makes everything after it new again. An agent resends its growing
//! history; between two compactions, what goes upstream must therefore be the previous request
//! plus what is new, byte for byte, and a compaction must keep as long a prefix as it can.
//!
//! A view sent upstream ([`SentView`]) has a **head** that later requests keep byte for byte:
//! the system prompt, the task statement (the first user message, whole while it fits its
//! share of the limit) and the summaries, in that order; then a **tail** of the caller's
//! messages. A request whose view stays under the threshold is the previous view with the new
//! messages after it ([`Next::Extended`]). Over the threshold, the tail is compacted behind the
//! head: what leaves it is summarised in a new block appended after the earlier ones, which
//! stay as they were ([`Next::Compacted`]). Only when the summaries outgrow their share are they
//! merged, by compacting the whole history again.
//!
//! The proxy keeps each view it sent by the caller messages it stands for; a session keeps its
//! view in its store.

use super::policy::{Compactable, Ran, TriggerPolicy, fixed_head};
use super::{CompactOptions, CompactReport, Kind, Origin, ViewMessage, compact};
use crate::Error;
use crate::count::TokenCounter;
use crate::input::Conversation;
use crate::message::Message;

/// The share of the limit the summary blocks of a head may take before they are merged into
/// one: a merge rewrites the whole prefix, so blocks are merged rarely.
pub const SUMMARIES_SHARE: f64 = 0.15;

/// The share of the free budget one summary block behind the head may take.
pub const BLOCK_SHARE: f64 = 0.3;

/// The share of the free budget the digest of a compaction that starts the head anew may take:
/// it becomes the head's summary, which every later request rereads from the cache, and its key
/// lines hold more of what the next steps use, per token, than older turns verbatim.
pub const HEAD_DIGEST_SHARE: f64 = 0.7;

/// What a block behind the head adds to its target for the work ledger of what leaves, at most
/// this share of the limit: behind a head of summaries the target may leave no room at all, and
/// the files and failures that leave must still be named.
pub const BLOCK_LEDGER_SHARE: f64 = 0.05;

/// A view sent upstream, as the next request builds on it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SentView {
    /// What was sent, in the core's message form.
    pub messages: Vec<Message>,
    /// Where each message comes from among the caller's messages (`Same(i)`: the caller's
    /// message `i` as it was sent; `Edited(i)`: it, masked; `New`: a summary).
    pub origins: Vec<Origin>,
    /// How many of the caller's messages the view stands for: a request that starts with them
    /// builds on it.
    pub covers: usize,
    /// How many leading messages are the head: the instructions, the task and the summaries,
    /// which every later request keeps byte for byte until the summaries are merged.
    pub head: usize,
    /// engram's history tools the view offers the model (under these names), once offered:
    /// they stay in every later request, so that its prefix stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered: Option<crate::tools::Offered>,
}

impl SentView {
    /// The tokens of the view with `tools`, as `counter` counts what is sent.
    pub fn tokens(&self, counter: &TokenCounter, tools: &[serde_json::Value]) -> usize {
        counter.accounting().per_conversation
            + counter.count_tools(tools)
            + self
                .messages
                .iter()
                .map(|m| counter.count_message(m).total())
                .sum::<usize>()
    }
}

/// Where the views sent upstream are kept, by the hash of the caller messages each stands for
/// (see the proxy): a process's memory, or a store several servers share, so that a request
/// that lands on another server builds on the same view and the same summaries.
pub trait ViewStore: Send + Sync {
    /// The view standing for the longest prefix of a request: `prefixes[k]` is the key of its
    /// first `k` messages, and a view found under it must stand for `k` messages.
    fn longest_view(&self, prefixes: &[u128]) -> Result<Option<SentView>, Error>;
    /// Keeps `view` under `key`, forgetting the view kept under `replaces` (the one it extends).
    fn keep_view(&self, key: u128, view: SentView, replaces: Option<u128>) -> Result<(), Error>;
}

impl<T: ViewStore + ?Sized> ViewStore for &T {
    fn longest_view(&self, prefixes: &[u128]) -> Result<Option<SentView>, Error> {
        (**self).longest_view(prefixes)
    }

    fn keep_view(&self, key: u128, view: SentView, replaces: Option<u128>) -> Result<(), Error> {
        (**self).keep_view(key, view, replaces)
    }
}

/// What to send for a request.
#[derive(Debug, Clone)]
pub enum Next {
    /// Under the threshold with nothing compacted before: the request as the caller sent it.
    AsSent,
    /// The previous view and the new messages after it: nothing rewritten.
    Extended(SentView),
    /// Compacted: the head kept (or, when the summaries were merged, rebuilt) and the tail
    /// compacted behind it.
    Compacted(SentView, Box<CompactReport>),
}

/// How a request is compacted: the policy, the limit it is measured against, and the options
/// (summarizer, strategy) of each compaction; `target` overrides the policy's target.
#[derive(Debug, Clone)]
pub struct Stable<'a> {
    /// When to compact and to how much.
    pub trigger: TriggerPolicy,
    /// The tokens the request may hold (the window less the reply's room).
    pub limit: usize,
    /// The options each compaction runs with (its budget and head are set here).
    pub options: &'a CompactOptions,
}

impl Stable<'_> {
    /// What to send for `conversation`, whose first `previous.covers` messages are the ones
    /// `previous` (the view sent for this conversation's last request) stood for.
    pub fn next(
        &self,
        previous: Option<&SentView>,
        conversation: &Conversation,
        counter: &TokenCounter,
    ) -> Result<Next, Error> {
        let tools = &conversation.tools;
        let messages = &conversation.messages;
        let previous = previous.filter(|p| p.covers <= messages.len());
        let extended = previous.map(|p| extend(p, messages));
        let tokens = match &extended {
            Some(view) => view.tokens(counter, tools),
            None => counter.count_conversation(conversation).total(),
        };
        // The proxy keeps no breaker: a request it cannot bring under the threshold goes as
        // small as it could make it.
        let mut request = Request {
            stable: self,
            previous,
            conversation,
            counter,
        };
        match self.trigger.run(tokens, self.limit, &mut request)? {
            Ran::Compacted(next) => Ok(next),
            Ran::Sent | Ran::BreakerOpen => match extended {
                None => Ok(Next::AsSent),
                Some(view) if super::units::repair(&view.messages).1 == Default::default() => {
                    Ok(Next::Extended(view))
                }
                // A view whose new messages broke a tool call's pairing is compacted (repaired)
                // all the same.
                Some(_) => {
                    let target = self.trigger.target_tokens(
                        self.limit,
                        request.fixed_tokens()?,
                        request.recent_tokens()?,
                    );
                    request.compact_to(target)
                }
            },
        }
    }

    /// `conversation` compacted to `target`: behind the head of `previous` while its summaries
    /// fit their share; else the whole history again.
    fn compact_request(
        &self,
        previous: Option<&SentView>,
        conversation: &Conversation,
        counter: &TokenCounter,
        target: usize,
    ) -> Result<Next, Error> {
        if let Some(p) = previous.filter(|p| p.head > 0)
            && summaries_tokens(p, counter) <= (SUMMARIES_SHARE * self.limit as f64) as usize
        {
            return self.behind_head(p, conversation, counter, target);
        }
        let (view, report) = self.rebuild(conversation, counter, target)?;
        Ok(Next::Compacted(view, report))
    }

    /// The whole history compacted to `target`, the instructions and the task (when it fits
    /// its share) first as the head: a compaction that starts the cached prefix anew (the
    /// summaries merged, or a retry harder after the upstream refused a request as too long).
    pub fn rebuild(
        &self,
        conversation: &Conversation,
        counter: &TokenCounter,
        target: usize,
    ) -> Result<(SentView, Box<CompactReport>), Error> {
        let messages = &conversation.messages;
        let fixed = fixed_head(messages, counter, self.limit);
        // Without the task whole, only the instructions lead (as in any compaction), and the
        // digest keeps the task's ask.
        let head = if fixed.task_whole { fixed.messages } else { 0 };
        let ids = super::LoggedIds { first: 0, at: 0 };
        let compacted = self.compact(conversation, head, false, ids, counter, target)?;
        let origins = Origin::of_view(messages, &compacted.messages);
        Ok((
            view_of(compacted.messages, origins, fixed.messages, messages.len()),
            Box::new(compacted.report),
        ))
    }

    /// The tail of `previous` and the new messages compacted behind its head.
    fn behind_head(
        &self,
        previous: &SentView,
        conversation: &Conversation,
        counter: &TokenCounter,
        target: usize,
    ) -> Result<Next, Error> {
        let messages = &conversation.messages;
        // Where the previous view's tail starts among the caller's messages.
        let start = previous.origins[previous.head..]
            .iter()
            .find_map(|o| match o {
                Origin::Same(i) | Origin::Edited(i) => Some(*i),
                Origin::New => None,
            })
            .unwrap_or(previous.covers);
        let head = &previous.messages[..previous.head];
        let input = Conversation {
            messages: head.iter().chain(&messages[start..]).cloned().collect(),
            tools: conversation.tools.clone(),
            extra: conversation.extra.clone(),
        };
        // The tail's messages are named by their places among the caller's.
        let ids = super::LoggedIds {
            first: previous.head,
            at: start,
        };
        let compacted = self.compact(&input, previous.head, true, ids, counter, target)?;
        // Origins among the input, then among the caller's messages.
        let origins = Origin::of_view(&input.messages, &compacted.messages)
            .into_iter()
            .map(|o| match o {
                Origin::Same(i) if i < previous.head => previous.origins[i],
                Origin::Edited(i) if i < previous.head => previous.origins[i],
                Origin::Same(i) => Origin::Same(start + i - previous.head),
                Origin::Edited(i) => Origin::Edited(start + i - previous.head),
                Origin::New => Origin::New,
            })
            .collect();
        Ok(Next::Compacted(
            view_of(compacted.messages, origins, previous.head, messages.len()),
            Box::new(compacted.report),
        ))
    }

    /// One compaction of `input` with its first `head` messages fixed, within the target (or,
    /// when what must stay is larger, within what must stay and room for a summary); a `block`
    /// behind a head of summaries takes at most [`BLOCK_SHARE`], a digest that starts the head
    /// anew up to [`HEAD_DIGEST_SHARE`].
    fn compact(
        &self,
        input: &Conversation,
        head: usize,
        block: bool,
        ids: super::LoggedIds,
        counter: &TokenCounter,
        target: usize,
    ) -> Result<super::Compacted, Error> {
        // A block behind the head gets room for the ledger of what it sets aside, on top of
        // its target (never past the threshold).
        let target = if block {
            let cap = (BLOCK_LEDGER_SHARE * self.limit as f64) as usize;
            let ledger =
                crate::ledger::Ledger::of(&input.messages[head.min(input.messages.len())..], 0);
            let extra = if ledger.is_empty() {
                0
            } else {
                counter.count_text(&ledger.render(cap * 4)).min(cap)
            };
            (target + extra)
                .min(self.trigger.threshold_tokens(self.limit))
                .max(target)
        } else {
            target
        };
        super::policy::within_target(target, self.limit, 0, |budget| {
            let mut options = self.options.clone();
            options.budget = budget;
            options.head = head;
            options.logged_ids = Some(ids);
            options.digest_share = if block {
                options.digest_share.min(BLOCK_SHARE)
            } else {
                options.digest_share.max(HEAD_DIGEST_SHARE)
            };
            compact(input, counter, &options)
        })
        .result
    }
}

/// One request as the policy's loop sees it: the caller's conversation and the view sent for
/// its last request.
struct Request<'s, 'a> {
    stable: &'s Stable<'a>,
    previous: Option<&'s SentView>,
    conversation: &'s Conversation,
    counter: &'s TokenCounter,
}

impl Compactable for Request<'_, '_> {
    type Compacted = Next;

    fn fixed_tokens(&self) -> Result<usize, Error> {
        let messages = &self.conversation.messages;
        Ok(fixed_head(messages, self.counter, self.stable.limit).tokens)
    }

    fn recent_tokens(&self) -> Result<usize, Error> {
        Ok(super::policy::recent_tokens(
            self.conversation.messages.iter(),
            self.counter,
        ))
    }

    fn compact_to(&mut self, target: usize) -> Result<Next, Error> {
        self.stable
            .compact_request(self.previous, self.conversation, self.counter, target)
    }
}

/// `previous` with the caller's messages after those it stands for.
fn extend(previous: &SentView, messages: &[Message]) -> SentView {
    let mut out = previous.clone();
    out.messages
        .extend(messages[previous.covers..].iter().cloned());
    out.origins
        .extend((previous.covers..messages.len()).map(Origin::Same));
    out.covers = messages.len();
    out
}

/// The tokens of the summaries in a view's head (what follows the instructions and the task).
fn summaries_tokens(view: &SentView, counter: &TokenCounter) -> usize {
    view.messages[..view.head]
        .iter()
        .zip(&view.origins)
        .filter(|(_, o)| **o == Origin::New)
        .map(|(m, _)| counter.count_message(m).total())
        .sum()
}

/// A compacted view with its origins: its head is the `fixed` messages kept first and the
/// summary the compaction wrote right after them, if it wrote one.
fn view_of(
    messages: Vec<ViewMessage>,
    origins: Vec<Origin>,
    fixed: usize,
    covers: usize,
) -> SentView {
    let fixed = fixed.min(messages.len());
    let summary = messages.get(fixed).is_some_and(|v| v.kind == Kind::Summary);
    SentView {
        head: fixed + usize::from(summary),
        messages: messages.into_iter().map(|v| v.message).collect(),
        origins,
        covers,
        offered: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;

    fn counter() -> TokenCounter {
        TokenCounter::new(Tokenizer::chars_per_token(4))
    }

    /// An agent's history: a system prompt, a task, then turns of a command and its long output.
    fn history(turns: usize) -> Vec<Message> {
        let mut out = vec![
            Message::system("You are a coding agent."),
            Message::user(
                "Fix the failing test in src/parser/lexer.rs: tokens after a comment are lost.",
            ),
        ];
        for i in 0..turns {
            out.push(Message::assistant(format!(
                "run step {i}: cat src/mod_{i}.rs"
            )));
            out.push(Message::user(format!(
                "output of step {i} for src/mod_{i}.rs\n{}",
                "line of output ".repeat(40)
            )));
        }
        out
    }

    fn conversation(messages: &[Message]) -> Conversation {
        Conversation {
            messages: messages.to_vec(),
            ..Conversation::default()
        }
    }

    /// Turn by turn, every request that does not compact extends the previous one, a
    /// compaction keeps the head it had (the system prompt, the task, the earlier summaries),
    /// and the task goes up whole in every request.
    #[test]
    fn requests_extend_the_previous_one_and_compactions_keep_the_head() {
        let counter = counter();
        let options = CompactOptions::new(1);
        let stable = Stable {
            trigger: TriggerPolicy::default(),
            limit: 4_000,
            options: &options,
        };
        let all = history(120);
        let mut previous: Option<SentView> = None;
        let (mut compactions, mut extended) = (0, 0);
        for t in 4..all.len() {
            let conversation = conversation(&all[..t]);
            let next = stable
                .next(previous.as_ref(), &conversation, &counter)
                .expect("fits");
            let view = match next {
                Next::AsSent => {
                    assert!(previous.is_none());
                    continue;
                }
                Next::Extended(view) => {
                    let p = previous.as_ref().expect("a previous view");
                    assert_eq!(view.messages[..p.messages.len()], p.messages[..]);
                    extended += 1;
                    view
                }
                Next::Compacted(view, _) => {
                    if let Some(p) = &previous
                        && p.head > 0
                    {
                        let kept = view.messages.starts_with(&p.messages[..p.head]);
                        assert!(kept || view.head <= 3, "the head stays, or was merged");
                    }
                    compactions += 1;
                    view
                }
            };
            assert!(view.tokens(&counter, &[]) <= 4_000, "under the limit");
            assert_eq!(view.messages[0], all[0]);
            assert_eq!(view.messages[1], all[1], "the task whole, second");
            assert_eq!(view.messages.last(), all[..t].last());
            previous = Some(view);
        }
        assert!(compactions >= 3, "{compactions}");
        assert!(
            extended > compactions * 3,
            "{extended} extended, {compactions} compacted"
        );
    }

    /// A task larger than its share of the limit is not kept whole: the digest keeps its ask.
    #[test]
    fn a_task_too_large_for_its_share_is_cut_by_the_digest() {
        let counter = counter();
        let options = CompactOptions::new(1);
        let stable = Stable {
            trigger: TriggerPolicy::default(),
            limit: 2_000,
            options: &options,
        };
        let mut all = history(40);
        all[1] = Message::user(format!(
            "Fix the parser.\n{}",
            "detail of the task ".repeat(150)
        ));
        let next = stable
            .next(None, &conversation(&all), &counter)
            .expect("fits");
        let Next::Compacted(view, _) = next else {
            panic!("over the threshold: compacted")
        };
        assert_ne!(view.messages[1], all[1]);
        assert!(
            view.messages
                .iter()
                .any(|m| m.text().contains("Fix the parser."))
        );
    }
}
