//! A compaction written back into the caller's Anthropic request, by the rule every wire format
//! follows ([`write_back`]): a message engram kept goes back as the caller sent it, every field
//! in the caller's order (and so do the blocks of a message kept in part); a masked tool output
//! is the caller's `tool_result` block with only its content replaced; what engram wrote is in
//! Anthropic's form.
//!
//! Anthropic's messages are not engram's one for one: a user message of tool results and text
//! is read as several engram messages, and consecutive turns of one role merge when written.
//! So the reader's spans (which engram messages each caller message became) say when a run of
//! unchanged messages is a caller's message whole, and the writer's merge step joins the rest.

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::compact::{CallersFormat, Origin, write_back};
use crate::error::InputError;
use crate::input::Conversation;
use crate::message::{Message, Role, leading_instructions};

use super::{Sources, Turn, request_value, system_value, write_turns};

/// The caller's Anthropic request `original` (`read` and `sources`: its conversation and where
/// each message came from, as [`read_request`](super::read_request) read them; a bare list of
/// messages stands for a request of them alone) with `messages` (a compaction of it, each with
/// its [`Origin`] among `read`'s messages) in place of its own: an Anthropic request again, ready to send. What engram
/// kept unchanged goes as the caller wrote it, and every key engram does not model passes
/// through.
///
/// Anthropic wants the first message to be a user turn. When the kept history starts on an
/// assistant turn (a digest went into `system`), a user turn opens it and says where the earlier
/// conversation is: summarised in the system prompt, or left out.
pub fn rewrite_request(
    original: &Value,
    read: &Conversation,
    sources: &Sources,
    mut messages: Vec<Message>,
    mut origins: Vec<Origin>,
) -> Result<Value, InputError> {
    if origins.len() != messages.len() {
        origins = vec![Origin::New; messages.len()];
    }
    let leading = leading_instructions(&messages);
    if messages
        .get(leading)
        .is_some_and(|m| m.role == Role::Assistant)
    {
        let summarised = leading > leading_instructions(&read.messages);
        messages.insert(
            leading,
            Message::user(if summarised {
                "[The conversation before this point is summarised in the system prompt.]"
            } else {
                "[Earlier turns of this conversation were left out to fit the context window.]"
            }),
        );
        origins.insert(leading, Origin::New);
    }
    let listed;
    let original = match original {
        Value::Array(_) => {
            listed = json!({ "messages": original });
            &listed
        }
        _ => original,
    };
    let callers = Callers::new(original, read, sources);
    let system = match (&origins[..leading], original.get("system")) {
        ([Origin::Same(0)], Some(system)) if callers.sources.offset == 1 => Some(system.clone()),
        _ => system_value(&messages[..leading]),
    };
    let items = write_back(&callers, &messages, &origins);
    let turns = callers.turns(items, &messages, leading);
    let mut value = request_value(system, write_turns(turns)?, &read.tools, &read.extra);
    if let (Value::Object(out), Value::Object(original)) = (&mut value, original) {
        for (k, v) in original {
            if k != "messages" && k != "system" && !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(value)
}

/// The caller's request as [`write_back`] needs it: its messages as sent, and which of engram's
/// messages each became.
struct Callers<'a> {
    sent: &'a [Value],
    read: &'a Conversation,
    /// Where each of `read`'s messages came from (none when they do not describe `sent` and
    /// `read`: nothing then goes back as sent).
    sources: Cow<'a, Sources>,
}

/// One view message in the caller's format, before the merge step.
enum Item {
    /// The caller's message at this index of `read`, unchanged.
    Same(usize),
    /// The caller's `tool_result` block with its output replaced.
    Output(Value),
    /// A message engram wrote or changed, written in Anthropic's form.
    Written,
}

impl<'a> Callers<'a> {
    fn new(original: &'a Value, read: &'a Conversation, sources: &'a Sources) -> Self {
        let sent = original
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let describes =
            sources.spans.len() == sent.len() && sources.blocks.len() == read.messages.len();
        Callers {
            sent,
            read,
            sources: if describes {
                Cow::Borrowed(sources)
            } else {
                Cow::Owned(Sources::default())
            },
        }
    }

    /// The caller's message that engram message `i` was read from.
    fn containing(&self, i: usize) -> Option<usize> {
        let spans = &self.sources.spans;
        let j = spans.partition_point(|span| span.end <= i);
        spans.get(j).filter(|span| span.contains(&i)).map(|_| j)
    }

    /// The caller's blocks that engram's user-side message `i` (a text, a tool result) was read
    /// from, as sent; `None` for a message read from a string, or from the other side.
    fn blocks_of(&self, i: usize) -> Option<&'a [Value]> {
        let side = self.read.messages.get(i)?.role;
        if !matches!(side, Role::User | Role::Tool) {
            return None;
        }
        let blocks = self.sent[self.containing(i)?].get("content")?.as_array()?;
        blocks
            .get(self.sources.blocks.get(i)?.clone())
            .filter(|b| !b.is_empty())
    }

    /// The messages after the `leading` instructions as turns: a run of unchanged messages that
    /// is one caller message whole goes as that message.
    fn turns<'b>(&self, items: Vec<Item>, messages: &'b [Message], leading: usize) -> Vec<Turn<'b>>
    where
        'a: 'b,
    {
        let mut items: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let mut turns = Vec::with_capacity(items.len().saturating_sub(leading));
        let mut p = leading;
        while p < items.len() {
            let message = &messages[p];
            if let Some((j, len)) = self.whole_at(&items[p..]) {
                turns.push(Turn::Callers {
                    value: &self.sent[j],
                    message,
                    index: p,
                });
                p += len;
                continue;
            }
            let blocks = |blocks| Turn::Blocks {
                role: Role::User,
                blocks,
            };
            turns.push(match items[p].take() {
                Some(Item::Output(block)) => blocks(vec![block]),
                // Part of a caller's message kept while the rest is not: its blocks as sent.
                Some(Item::Same(i)) => match self.blocks_of(i) {
                    Some(sent) => blocks(sent.to_vec()),
                    None => Turn::Message { message, index: p },
                },
                _ => Turn::Message { message, index: p },
            });
            p += 1;
        }
        turns
    }

    /// The caller's message that `items` start with, whole and unchanged, and how many engram
    /// messages it was read as.
    fn whole_at(&self, items: &[Option<Item>]) -> Option<(usize, usize)> {
        let Some(Item::Same(first)) = items.first()? else {
            return None;
        };
        let j = self.containing(*first)?;
        let span = self.sources.spans[j].clone();
        let whole = span.start == *first
            && items.len() >= span.len()
            && span
                .clone()
                .zip(items)
                .all(|(i, item)| matches!(item, Some(Item::Same(s)) if *s == i));
        whole.then_some((j, span.len()))
    }
}

impl CallersFormat for Callers<'_> {
    type Item = Item;

    fn same(&self, index: usize, out: &mut Vec<Item>) {
        out.push(Item::Same(index));
    }

    fn with_output(&self, index: usize, text: &str) -> Option<Item> {
        let [block] = self.blocks_of(index)? else {
            return None;
        };
        let mut block = block.clone();
        let fields = block
            .as_object_mut()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
        fields.insert("content".into(), Value::String(text.to_owned()));
        Some(Item::Output(block))
    }

    fn written(&self, _from: Option<usize>, _message: &Message, out: &mut Vec<Item>) {
        out.push(Item::Written);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::anthropic::read_request;

    /// Every message of `conversation` as the view, unchanged.
    fn unchanged(conversation: &Conversation) -> (Vec<Message>, Vec<Origin>) {
        let n = conversation.messages.len();
        (
            conversation.messages.clone(),
            (0..n).map(Origin::Same).collect(),
        )
    }

    /// Claude Code's requests carry system messages among the messages (instructions given
    /// partway through), with `context_management`, `output_config` and adaptive thinking:
    /// read as instructions in place, written back where they were, byte for byte.
    #[test]
    fn system_messages_among_the_messages_stay_where_they_are() {
        let request = json!({
            "model": "claude-opus-5-5", "max_tokens": 128000,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix the build."}]},
                {"role": "system", "content": [{"type": "text", "text": "# Environment\nPrimary working directory: /w"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "error: x"}]},
                {"role": "system", "content": "Remember: run the tests before you finish."},
                {"role": "system", "content": [{"type": "text", "text": "A second note."}]}
            ],
            "thinking": {"type": "adaptive", "display": "omitted"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "medium"}
        });
        let (conversation, sources) = read_request(&request).expect("parses");
        let roles: Vec<Role> = conversation.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Developer,
                Role::Assistant,
                Role::Tool,
                Role::Developer,
                Role::Developer
            ]
        );
        let (messages, origins) = unchanged(&conversation);
        let back =
            rewrite_request(&request, &conversation, &sources, messages, origins).expect("writes");
        assert_eq!(back, request, "the request goes back as sent");
        // Without its preceding user turn, an instruction is said in a user turn instead (and
        // the next one follows that turn).
        let (mut messages, mut origins) = unchanged(&conversation);
        messages.remove(4);
        origins.remove(4);
        let written =
            rewrite_request(&request, &conversation, &sources, messages, origins).expect("writes");
        let roles: Vec<&str> = written["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(roles, ["user", "system", "assistant", "user", "system"]);
        assert!(
            written["messages"][3]
                .to_string()
                .contains("[developer] Remember"),
            "{written}"
        );
    }

    #[test]
    fn kept_messages_go_back_as_the_caller_sent_them() {
        // Key order of the caller's own, a block with an extra key, a tool result and a text
        // in one user message.
        let original = json!({
            "system": [{"text": "Be careful.", "type": "text", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"content": "fix it", "role": "user"},
                {"role": "assistant", "content": [
                    {"text": "Looking.", "type": "text"},
                    {"type": "tool_use", "id": "t1", "name": "sh", "input": {"b": 1, "a": 2}}
                ]},
                {"role": "user", "content": [
                    {"tool_use_id": "t1", "type": "tool_result", "content": "a long output", "is_error": false},
                    {"text": "and then?", "type": "text"}
                ]}
            ]
        });
        let (conversation, sources) = read_request(&original).expect("reads");
        let (messages, origins) = unchanged(&conversation);
        assert_eq!(messages.len(), 5, "the last user message is read as two");
        let written = rewrite_request(
            &original,
            &conversation,
            &sources,
            messages.clone(),
            origins.clone(),
        )
        .expect("writes");
        for key in ["system", "messages"] {
            assert_eq!(
                written[key].to_string(),
                original[key].to_string(),
                "{key} byte for byte"
            );
        }
        let canonical = super::super::to_anthropic(&conversation).expect("writes");
        assert_ne!(
            canonical["messages"].to_string(),
            original["messages"].to_string(),
            "engram's own form differs in key order"
        );

        // A masked output: the caller's block with only its content replaced; the messages
        // around it and the text block beside it as sent.
        let (mut masked, mut masked_origins) = (messages.clone(), origins.clone());
        masked[3] = Message::tool("t1", "[output masked]");
        masked_origins[3] = Origin::Edited(3);
        let written = rewrite_request(&original, &conversation, &sources, masked, masked_origins)
            .expect("writes");
        for i in 0..2 {
            assert_eq!(
                written["messages"][i].to_string(),
                original["messages"][i].to_string()
            );
        }
        let last = &written["messages"][2];
        assert_eq!(
            last["content"][0].to_string(),
            json!({"tool_use_id": "t1", "type": "tool_result", "content": "[output masked]", "is_error": false}).to_string()
        );
        assert_eq!(
            last["content"][1].to_string(),
            original["messages"][2]["content"][1].to_string(),
            "the text beside it as sent"
        );
        assert_eq!(written["messages"].as_array().map(Vec::len), Some(3));

        // A turn engram wrote after a caller's message of its role joins it, as the API
        // would: the caller's blocks, then engram's.
        let joined = vec![
            messages[0].clone(),
            messages[1].clone(),
            Message::user("[note]"),
        ];
        let written = rewrite_request(
            &original,
            &conversation,
            &sources,
            joined,
            vec![Origin::Same(0), Origin::Same(1), Origin::New],
        )
        .expect("writes");
        assert_eq!(
            written["system"].to_string(),
            original["system"].to_string()
        );
        assert_eq!(
            written["messages"],
            json!([{"role": "user", "content": [
                {"type": "text", "text": "fix it"},
                {"type": "text", "text": "[note]"}
            ]}])
        );

        // What engram wrote keeps engram's form.
        let written = rewrite_request(
            &original,
            &conversation,
            &sources,
            vec![Message::system("a summary"), Message::user("fix it now")],
            vec![Origin::New, Origin::Edited(1)],
        )
        .expect("writes");
        assert_eq!(written["system"], "a summary");
        assert_eq!(
            written["messages"],
            json!([{"role": "user", "content": "fix it now"}])
        );
    }

    /// The system prompt is read before every message whatever the key order, and the
    /// messages still go back as sent.
    #[test]
    fn the_system_prompt_may_come_after_the_messages() {
        let original = json!({
            "messages": [{"role": "user", "content": [{"text": "hi", "type": "text"}]}],
            "system": "Be brief."
        });
        let (conversation, sources) = read_request(&original).expect("reads");
        assert_eq!(conversation.messages[0].role, Role::System);
        let (messages, origins) = unchanged(&conversation);
        let back =
            rewrite_request(&original, &conversation, &sources, messages, origins).expect("writes");
        assert_eq!(
            back["messages"].to_string(),
            original["messages"].to_string()
        );
        assert_eq!(back["system"], original["system"]);
    }
}
