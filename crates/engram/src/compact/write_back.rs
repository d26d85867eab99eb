//! How a compacted view goes back to the caller in the caller's own format: the one rule every
//! front that rewrites a caller's list follows (the proxy's chat and Responses routes, the AI
//! SDK middleware). A message the view keeps unchanged goes back exactly as the caller sent it,
//! every field in the caller's order, so that a request that extends the last one repeats its
//! bytes; a tool output engram masked goes back as the caller's own item with only its output
//! replaced, where the format can say that; anything else (a summary, a digest, a note, a message
//! engram changed otherwise) is written by the format.

use serde_json::Value;

use crate::message::{Message, Role};

use super::Origin;

/// A format's three ways of writing one message of a view ([`write_back`]).
pub trait CallersFormat {
    /// What the format writes: a JSON item, or a step of a plan the front applies.
    type Item;
    /// The caller's own item(s) for their message `index`, as sent; nothing for a message the
    /// list does not hold (the Responses API's `instructions`).
    fn same(&self, index: usize, out: &mut Vec<Self::Item>);
    /// The caller's own item for their tool output `index`, with only its output replaced by
    /// `text`; `None` when the format cannot say it so (the message is then written anew).
    fn with_output(&self, index: usize, text: &str) -> Option<Self::Item>;
    /// A message engram wrote (`from`: `None`) or changed (`from`: the caller's message), in the
    /// format.
    fn written(&self, from: Option<usize>, message: &Message, out: &mut Vec<Self::Item>);
}

/// The view `messages`, each with its [`Origin`] among the caller's messages, in `format`.
pub fn write_back<F: CallersFormat>(
    format: &F,
    messages: &[Message],
    origins: &[Origin],
) -> Vec<F::Item> {
    let mut out = Vec::with_capacity(messages.len());
    for (message, origin) in messages.iter().zip(origins) {
        match *origin {
            Origin::Same(i) => format.same(i, &mut out),
            Origin::Edited(i) => {
                let masked = (message.role == Role::Tool)
                    .then(|| format.with_output(i, &message.text()))
                    .flatten();
                match masked {
                    Some(item) => out.push(item),
                    None => format.written(Some(i), message, &mut out),
                }
            }
            Origin::New => format.written(None, message, &mut out),
        }
    }
    out
}

/// A chat completions request's `messages` (engram's own message format) with `messages` in
/// place of the caller's `original` ones, by [`write_back`]: a masked tool message is the
/// caller's with only its `content` replaced.
pub fn chat_messages(original: &[Value], messages: &[Message], origins: &[Origin]) -> Vec<Value> {
    write_back(&Chat(original), messages, origins)
}

/// A chat completions request's `messages` as the caller's format of [`write_back`].
struct Chat<'a>(&'a [Value]);

impl CallersFormat for Chat<'_> {
    type Item = Value;

    fn same(&self, index: usize, out: &mut Vec<Value>) {
        out.extend(self.0.get(index).cloned());
    }

    fn with_output(&self, index: usize, text: &str) -> Option<Value> {
        let mut message = self.0.get(index)?.clone();
        message
            .as_object_mut()?
            .insert("content".into(), Value::String(text.to_owned()));
        Some(message)
    }

    fn written(&self, _from: Option<usize>, message: &Message, out: &mut Vec<Value>) {
        out.push(message.to_value());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format whose items say which rule wrote them.
    struct Labels;

    impl CallersFormat for Labels {
        type Item = String;
        fn same(&self, index: usize, out: &mut Vec<String>) {
            out.push(format!("caller {index}"));
        }
        fn with_output(&self, index: usize, text: &str) -> Option<String> {
            (index != 9).then(|| format!("caller {index} output {text}"))
        }
        fn written(&self, from: Option<usize>, message: &Message, out: &mut Vec<String>) {
            out.push(format!("written {from:?} {}", message.text()));
        }
    }

    #[test]
    fn a_chat_message_goes_back_as_the_caller_sent_it() {
        use serde_json::json;
        let original = [
            json!({"content": "be brief", "role": "system"}),
            json!({"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "long output"}),
        ];
        let messages = [
            Message::system("be brief"),
            Message::system("summary"),
            Message::tool("c1", "[masked]"),
        ];
        let origins = [Origin::Same(0), Origin::New, Origin::Edited(1)];
        let out = chat_messages(&original, &messages, &origins);
        // The caller's own bytes, its key order kept.
        assert_eq!(out[0].to_string(), original[0].to_string());
        assert_eq!(out[1], messages[1].to_value());
        assert_eq!(
            out[2],
            json!({"role": "tool", "tool_call_id": "c1", "name": "bash", "content": "[masked]"})
        );
    }

    #[test]
    fn each_message_is_written_by_where_it_comes_from() {
        let messages = [
            Message::system("rules"),
            Message::system("summary"),
            Message::tool("call_1", "[masked]"),
            Message::tool("call_2", "[masked]"),
            Message::user("shortened"),
        ];
        let origins = [
            Origin::Same(0),
            Origin::New,
            Origin::Edited(4),
            Origin::Edited(9),
            Origin::Edited(6),
        ];
        assert_eq!(
            write_back(&Labels, &messages, &origins),
            [
                "caller 0",
                "written None summary",
                "caller 4 output [masked]",
                "written Some(9) [masked]",
                "written Some(6) shortened",
            ]
        );
    }
}
