//! Budgeted assembly as a binding asks for it (`build_context`): the budget's fields and the
//! parts, each checked, so that a misspelt field is an error naming it rather than a default.

use serde::Deserialize;
use serde_json::Value;

use super::{from_json, positive, share, unknown_field};
use crate::Error;
use crate::assembly::{Parts, StoredSummary, TokenBudget};
use crate::message::Message;

/// A budget as a caller gives it: the fields of [`TokenBudget`] it names (a null names none),
/// over `start`. A key that is no field of the budget is an error naming it; the total must be
/// positive and the shares between 0 and 1.
pub fn budget_over(start: TokenBudget, given: Value) -> Result<TokenBudget, Error> {
    let Ok(Value::Object(mut merged)) = serde_json::to_value(start) else {
        unreachable!("a budget is an object of numbers")
    };
    match given {
        Value::Null => {}
        Value::Object(map) => {
            if let Some(e) = unknown_field::<TokenBudget>(map.keys()) {
                return Err(e);
            }
            merged.extend(map.into_iter().filter(|(_, v)| !v.is_null()));
        }
        // Not an object: the one error every request gives for that.
        other => return from_json(other),
    }
    let budget: TokenBudget = from_json(Value::Object(merged))?;
    positive("total", Some(budget.total))?;
    share("memory_fraction", Some(budget.memory_fraction))?;
    share("learnings_fraction", Some(budget.learnings_fraction))?;
    Ok(budget)
}

/// The parts of a context as a caller sends them. `new_message` is text (a user message) or a
/// message; `history` a list of messages, OpenAI's or Anthropic's; `memory_results` and
/// `learnings` texts (or objects with `content`); `summaries` texts or objects with `text`
/// (and `depth`, `messages`, `from`, `to`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct PartsRequest {
    /// The base system prompt.
    pub system: Option<String>,
    /// The new message: text (a user message) or a message.
    pub new_message: Option<Value>,
    /// The conversation so far, oldest first.
    pub history: Option<Value>,
    /// Retrieved memory, best first.
    pub memory_results: Option<Value>,
    /// Lessons from earlier runs, best first.
    pub learnings: Option<Value>,
    /// Tool definitions (they count against the budget).
    pub tool_definitions: Option<Value>,
    /// Summaries already made of older history.
    pub summaries: Option<Value>,
}

/// The parts, read: what [`Parts`] borrows.
#[derive(Debug, Clone, Default)]
pub struct AssemblyParts {
    /// The base system prompt.
    pub system: String,
    /// The new message.
    pub new_message: Option<Message>,
    /// The conversation so far.
    pub history: Vec<Message>,
    /// Retrieved memory.
    pub memory_results: Vec<String>,
    /// Lessons from earlier runs.
    pub learnings: Vec<String>,
    /// Tool definitions.
    pub tool_definitions: Vec<Value>,
    /// Summaries of older history.
    pub summaries: Vec<StoredSummary>,
}

impl AssemblyParts {
    /// The parts as the assembler takes them.
    pub fn parts(&self) -> Parts<'_> {
        Parts {
            system: &self.system,
            new_message: self.new_message.as_ref(),
            history: &self.history,
            memory_results: &self.memory_results,
            learnings: &self.learnings,
            tool_definitions: &self.tool_definitions,
            summaries: &self.summaries,
        }
    }
}

/// An error in one part, named as the part ("history: message 0, ...").
fn in_part(part: &str, message: impl std::fmt::Display) -> Error {
    Error::invalid("", format!("{part}: {message}"))
}

impl PartsRequest {
    /// Reads the parts from a JSON object; a field that is no part is an error naming it.
    pub fn from_value(value: Value) -> Result<Self, Error> {
        from_json(value)
    }

    /// The parts, each read and checked.
    pub fn resolve(self) -> Result<AssemblyParts, Error> {
        let new_message = match self.new_message {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Message::user(s)),
            Some(v) => Some(Message::from_value(v).map_err(|e| in_part("new_message", e))?),
        };
        let history = match self.history {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => {
                crate::formats::anthropic::parse_request(v.to_string().as_bytes())
                    .map_err(|e| in_part("history", e))?
                    .0
                    .messages
            }
        };
        Ok(AssemblyParts {
            system: self.system.unwrap_or_default(),
            new_message,
            history,
            memory_results: texts("memory_results", self.memory_results)?,
            learnings: texts("learnings", self.learnings)?,
            tool_definitions: match self.tool_definitions {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(t)) => t,
                Some(_) => return Err(in_part("tool_definitions", "must be a list")),
            },
            summaries: summaries(self.summaries)?,
        })
    }
}

/// A list of texts, each a string or an object with `content`.
fn texts(part: &str, value: Option<Value>) -> Result<Vec<String>, Error> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::invalid("", format!("{part} must be a list"))),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) => Ok(s),
            Value::Object(m) => m
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    in_part(
                        &format!("{part}[{i}]"),
                        "expected a string or an object with `content`",
                    )
                }),
            _ => Err(in_part(&format!("{part}[{i}]"), "expected a string")),
        })
        .collect()
}

/// The summaries already made, each a string (depth 1) or an object with `text`.
fn summaries(value: Option<Value>) -> Result<Vec<StoredSummary>, Error> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::invalid("", "summaries must be a list")),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(text) => Ok(StoredSummary {
                depth: 1,
                messages: 0,
                from: String::new(),
                to: String::new(),
                text,
            }),
            Value::Object(m) => {
                let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                let number = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
                let text = m
                    .get("text")
                    .or_else(|| m.get("content"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| in_part(&format!("summaries[{i}]"), "needs `text`"))?;
                Ok(StoredSummary {
                    depth: number("depth").max(1) as u32,
                    messages: number("messages"),
                    from: field("from"),
                    to: field("to"),
                    text: text.to_owned(),
                })
            }
            _ => Err(in_part(
                &format!("summaries[{i}]"),
                "expected a string or an object",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_misspelt_budget_field_is_named_not_ignored() {
        let e = budget_over(TokenBudget::default(), json!({"totl": 2_000})).unwrap_err();
        assert_eq!(e.field().unwrap_or_default(), "totl");
        assert!(e.why().unwrap_or_default().contains("`total`"), "{e}");
        let e = budget_over(TokenBudget::default(), json!({"memory_fraction": 1.5})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`memory_fraction`: must be between 0 and 1, not 1.5"
        );
        let e = budget_over(TokenBudget::default(), json!({"total": 0})).unwrap_err();
        assert_eq!(e.to_string(), "`total`: must be positive");
        let b = budget_over(
            TokenBudget::default(),
            json!({"total": 900, "reply_reserve": 10, "system_reserve": null}),
        )
        .unwrap();
        assert_eq!(
            (
                b.total,
                b.reply_reserve,
                b.fresh_tail_count,
                b.system_reserve
            ),
            (900, 10, 16, 2_000)
        );
    }

    #[test]
    fn parts_are_read_and_their_mistakes_name_the_part() {
        let e = PartsRequest::from_value(json!({"histroy": []})).unwrap_err();
        assert_eq!(e.field().unwrap_or_default(), "histroy");
        let e = PartsRequest::from_value(json!({"history": [{"role": "robot", "content": "x"}]}))
            .unwrap()
            .resolve()
            .unwrap_err();
        assert!(e.why().unwrap_or_default().starts_with("history: "), "{e}");
        let parts = PartsRequest::from_value(json!({
            "system": "s",
            "new_message": "q",
            "memory_results": ["a", {"content": "b"}],
            "summaries": ["x", {"text": "y", "depth": 2}],
        }))
        .unwrap()
        .resolve()
        .unwrap();
        assert_eq!(parts.memory_results, ["a", "b"]);
        assert_eq!(parts.summaries[1].depth, 2);
        assert_eq!(
            parts.parts().new_message.map(|m| m.text().into_owned()),
            Some("q".to_owned())
        );
        let e = PartsRequest::from_value(json!({"learnings": [3]}))
            .unwrap()
            .resolve()
            .unwrap_err();
        assert_eq!(
            e.why().unwrap_or_default(),
            "learnings[0]: expected a string"
        );
    }
}
