//! Reading a conversation from bytes: `{"messages": [...]}`, a bare JSON array, or JSONL.
//!
//! Parsing never panics and never guesses silently: every error names the line (and column),
//! the message index and the field. Line numbers are exact for all three forms: the parser keeps
//! each message's raw JSON slice and maps its offset back to a line.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::InputError;
use crate::message::{Message, type_name};

/// The input's layout, reported back so that output can mirror it if a caller wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// `{"messages": [...], ...}` (an OpenAI request body is one).
    Object,
    /// `[{...}, {...}]`.
    Array,
    /// One message per line.
    Jsonl,
}

/// A conversation as read from input: messages, tool definitions and any other top-level keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Conversation {
    /// The messages, in order.
    pub messages: Vec<Message>,
    /// Tool definitions (`"tools": [...]`), verbatim. They count against a budget.
    pub tools: Vec<Value>,
    /// Other top-level keys of an object input (`model`, `temperature`, ...), verbatim.
    pub extra: Map<String, Value>,
}

impl Conversation {
    /// A conversation of these messages, with no tools.
    pub fn new(messages: Vec<Message>) -> Self {
        Conversation {
            messages,
            ..Conversation::default()
        }
    }

    /// The `model` named in an object input (as an OpenAI request body carries it).
    pub fn model(&self) -> Option<&str> {
        self.extra.get("model").and_then(Value::as_str)
    }
}

/// Parses a conversation from raw bytes, detecting the format.
///
/// ```
/// let conversation = engram::parse_conversation(br#"{"messages": [{"role": "user", "content": "hi"}]}"#)?;
/// assert_eq!(conversation.messages.len(), 1);
/// # Ok::<(), engram::InputError>(())
/// ```
pub fn parse_conversation(bytes: &[u8]) -> Result<Conversation, InputError> {
    parse_conversation_with_format(bytes).map(|(c, _)| c)
}

/// Like [`parse_conversation`], also saying which format the input was in.
pub fn parse_conversation_with_format(
    bytes: &[u8],
) -> Result<(Conversation, InputFormat), InputError> {
    let text = decode_utf8(bytes)?;
    let lines = LineIndex::new(text);
    let trimmed = text.trim_start();
    let start = text.len() - trimmed.len();
    match trimmed.as_bytes().first() {
        None => Err(InputError::new(
            "the input is empty; expected {\"messages\": [...]}, a JSON array of messages, or JSONL",
        )),
        Some(b'[') => parse_array(text, &lines).map(|c| (c, InputFormat::Array)),
        Some(b'{') => {
            // One object (the wrapper, or a single message), or JSONL: a syntax error right
            // after the first complete value ("trailing characters") means several values.
            match serde_json::from_str::<Map<String, Value>>(text) {
                Ok(map) => parse_object(map, text, &lines).map(|c| (c, InputFormat::Object)),
                Err(e)
                    if e.classify() == serde_json::error::Category::Syntax && is_trailing(&e) =>
                {
                    parse_jsonl(text, &lines).map(|c| (c, InputFormat::Jsonl))
                }
                Err(e) => Err(json_error(&e)),
            }
        }
        Some(_) => {
            let (line, column) = lines.position(start);
            Err(InputError::new(
                "expected JSON: {\"messages\": [...]}, a JSON array of messages, or JSONL (one message object per line)",
            )
            .at_line(line, Some(column)))
        }
    }
}

/// Checks UTF-8, naming the line and column of the first invalid byte. A leading BOM is skipped.
fn decode_utf8(bytes: &[u8]) -> Result<&str, InputError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    std::str::from_utf8(bytes).map_err(|e| {
        let valid = e.valid_up_to();
        // The prefix up to `valid` is valid UTF-8 by definition.
        let prefix = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
        let line = prefix.matches('\n').count() + 1;
        let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        InputError::new(format!(
            "invalid UTF-8 at byte offset {valid}; engram reads UTF-8 JSON"
        ))
        .at_line(line, Some(column))
    })
}

fn is_trailing(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("trailing characters")
}

/// Turns a serde_json error into an input error with its line and column.
fn json_error(e: &serde_json::Error) -> InputError {
    use serde_json::error::Category;
    let full = e.to_string();
    // serde_json appends " at line L column C"; the place is reported separately.
    let what = full
        .rfind(" at line ")
        .map_or(full.as_str(), |i| &full[..i])
        .to_owned();
    let message = match e.classify() {
        Category::Eof => {
            format!("truncated JSON: the input ends in the middle of a value ({what})")
        }
        // serde_json says "unexpected end of hex escape" for a lone `\ud800`: say what it is.
        Category::Syntax if what.contains("hex escape") || what.contains("surrogate") => format!(
            "invalid JSON: {what} (a \\uD800-\\uDFFF escape is half of a UTF-16 surrogate pair and must be followed by the other half; alone it is not text)"
        ),
        Category::Syntax => format!("invalid JSON: {what}"),
        Category::Data => what,
        Category::Io => format!("could not read the input: {what}"),
    };
    let err = InputError::new(message);
    if e.line() > 0 {
        err.at_line(e.line(), Some(e.column()))
    } else {
        err
    }
}

/// Maps byte offsets to 1-based line and column numbers.
struct LineIndex<'a> {
    text: &'a str,
    newlines: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let newlines = text
            .bytes()
            .enumerate()
            .filter_map(|(i, b)| (b == b'\n').then_some(i))
            .collect();
        LineIndex { text, newlines }
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let line_index = self.newlines.partition_point(|&n| n < offset);
        let line_start = if line_index == 0 {
            0
        } else {
            self.newlines[line_index - 1] + 1
        };
        let column = self
            .text
            .get(line_start..offset)
            .map_or(1, |s| s.chars().count() + 1);
        (line_index + 1, column)
    }

    /// The position of a raw slice that borrows from the indexed text.
    fn position_of(&self, raw: &RawValue) -> (usize, usize) {
        let base = self.text.as_ptr() as usize;
        let at = raw.get().as_ptr() as usize;
        self.position(at.saturating_sub(base).min(self.text.len()))
    }
}

fn parse_array(text: &str, lines: &LineIndex<'_>) -> Result<Conversation, InputError> {
    let values: Vec<Value> = serde_json::from_str(text).map_err(|e| json_error(&e))?;
    Ok(Conversation::new(parse_messages(
        values,
        || serde_json::from_str::<Vec<&RawValue>>(text).unwrap_or_default(),
        lines,
    )?))
}

/// Validates message values in one pass. Only when one is invalid does `raws` re-read the
/// input as raw slices, to name the line and column where that message starts.
fn parse_messages<'t>(
    values: Vec<Value>,
    raws: impl FnOnce() -> Vec<&'t RawValue>,
    lines: &LineIndex<'t>,
) -> Result<Vec<Message>, InputError> {
    let mut messages = Vec::with_capacity(values.len());
    for (index, value) in values.into_iter().enumerate() {
        match Message::from_value(value) {
            Ok(m) => messages.push(m),
            Err(e) => {
                let e = e.at_index(index);
                return Err(match raws().get(index) {
                    Some(raw) => {
                        let (line, column) = lines.position_of(raw);
                        e.at_line(line, Some(column))
                    }
                    None => e,
                });
            }
        }
    }
    Ok(messages)
}

fn parse_object(
    mut map: Map<String, Value>,
    text: &str,
    lines: &LineIndex<'_>,
) -> Result<Conversation, InputError> {
    let Some(messages) = map.remove("messages") else {
        if map.contains_key("role") {
            // A single message object: JSONL of one line.
            return parse_jsonl(text, lines);
        }
        return Err(InputError::new(
            "expected an object with a `messages` list, like {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}",
        )
        .at_field("messages")
        .at_line(1, Some(1)));
    };
    // Where a top-level key's value starts, for errors only.
    let raw_entry = |key: &str| -> Option<&RawValue> {
        serde_json::Deserializer::from_str(text)
            .deserialize_map(OrderedRawMap)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, raw)| raw)
    };
    let place = |key: &str, e: InputError| match raw_entry(key) {
        Some(raw) => {
            let (line, column) = lines.position_of(raw);
            e.at_line(line, Some(column))
        }
        None => e,
    };
    let Value::Array(values) = messages else {
        return Err(place(
            "messages",
            InputError::new(format!(
                "expected a list of messages, found {}",
                type_name(&messages)
            ))
            .at_field("messages"),
        ));
    };
    let mut conversation = Conversation {
        messages: parse_messages(
            values,
            || {
                raw_entry("messages")
                    .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
                    .unwrap_or_default()
            },
            lines,
        )?,
        ..Conversation::default()
    };
    if let Some(tools) = map.remove("tools") {
        conversation.tools = parse_tools(tools).map_err(|e| place("tools", e))?;
    }
    conversation.extra = map;
    Ok(conversation)
}

fn parse_tools(value: Value) -> Result<Vec<Value>, InputError> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if !item.is_object() {
                    return Err(InputError::new(format!(
                        "expected a tool definition object, found {}",
                        type_name(item)
                    ))
                    .at_field(format!("tools[{i}]")));
                }
            }
            Ok(items)
        }
        other => Err(InputError::new(format!(
            "expected a list of tool definitions, found {}",
            type_name(&other)
        ))
        .at_field("tools")),
    }
}

fn parse_jsonl(text: &str, lines: &LineIndex<'_>) -> Result<Conversation, InputError> {
    let mut messages = Vec::new();
    let mut offset = 0;
    for (line_no, line) in text.split('\n').enumerate() {
        let line_start = offset;
        offset += line.len() + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let index = messages.len();
        let value: Value = serde_json::from_str(line).map_err(|e| {
            let err = json_error(&e);
            InputError {
                line: Some(line_no + 1),
                column: Some(e.column()),
                ..err
            }
            .at_index(index)
        })?;
        if value.get("messages").is_some() && value.get("role").is_none() {
            return Err(InputError::new(
                "this line is a whole conversation, not a message; JSONL input has one message per line (for one conversation, pass its {\"messages\": [...]} object)",
            )
            .at_line(line_no + 1, None));
        }
        let leading = line.len() - line.trim_start().len();
        let (_, column) = lines.position(line_start + leading);
        let message = Message::from_value(value)
            .map_err(|e| e.at_index(index).at_line(line_no + 1, Some(column)))?;
        messages.push(message);
    }
    Ok(Conversation::new(messages))
}

/// Deserializes a JSON object into its entries in order, values left raw (borrowed).
struct OrderedRawMap;

impl<'de> Visitor<'de> for OrderedRawMap {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = access.next_entry::<String, &'de RawValue>()? {
            entries.push((key, value));
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(input: &str) -> InputError {
        parse_conversation(input.as_bytes()).expect_err("should fail")
    }

    #[test]
    fn a_lone_surrogate_escape_is_named_for_what_it_is() {
        for input in [
            r#"[{"role": "user", "content": "\ud800"}]"#,
            r#"[{"role": "user", "content": "\ud800x"}]"#,
        ] {
            let err = parse_conversation(input.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("surrogate pair"), "{input}: {err}");
            assert_eq!(err.line, Some(1), "{err}");
        }
    }

    #[test]
    fn accepts_three_formats() {
        let obj = r#"{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}"#;
        let (c, f) = parse_conversation_with_format(obj.as_bytes()).expect("object");
        assert_eq!(
            (c.messages.len(), c.tools.len(), f),
            (1, 1, InputFormat::Object)
        );
        assert_eq!(c.model(), Some("gpt-4o"));

        let arr = r#"[{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]"#;
        let (c, f) = parse_conversation_with_format(arr.as_bytes()).expect("array");
        assert_eq!((c.messages.len(), f), (2, InputFormat::Array));

        let jsonl = "{\"role\": \"system\", \"content\": \"s\"}\n\n{\"role\": \"user\", \"content\": \"hi\"}\n";
        let (c, f) = parse_conversation_with_format(jsonl.as_bytes()).expect("jsonl");
        assert_eq!((c.messages.len(), f), (2, InputFormat::Jsonl));

        let single = r#"{"role": "user", "content": "hi"}"#;
        let (c, _) = parse_conversation_with_format(single.as_bytes()).expect("single");
        assert_eq!(c.messages.len(), 1);
    }

    #[test]
    fn errors_name_line_index_and_field() {
        let e = err(
            "{\"messages\": [\n  {\"role\": \"user\", \"content\": \"a\"},\n  {\"role\": \"robot\", \"content\": \"b\"}\n]}",
        );
        assert_eq!(
            (e.line, e.index, e.field.as_deref()),
            (Some(3), Some(1), Some("role"))
        );
        assert!(
            e.to_string()
                .starts_with("line 3, column 3, message 1, field `role`:"),
            "{e}"
        );

        let e = err(
            "{\"role\": \"user\", \"content\": \"a\"}\n{\"role\": \"tool\", \"content\": \"b\"}\n",
        );
        assert_eq!(
            (e.line, e.index, e.field.as_deref()),
            (Some(2), Some(1), Some("tool_call_id"))
        );

        let e = err("[{\"role\": \"user\", \"content\": {\"x\": 1}}]");
        assert_eq!((e.index, e.field.as_deref()), (Some(0), Some("content")));
    }

    #[test]
    fn truncated_and_invalid_inputs() {
        let e = err("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"");
        assert!(e.message.starts_with("truncated JSON"), "{e}");
        assert_eq!(e.line, Some(1));

        let e = err("{\"role\": \"user\", \"content\": \"a\"}\n{\"role\": \"user\", \"content\": ");
        assert_eq!((e.line, e.index), (Some(2), Some(1)));
        assert!(e.message.starts_with("truncated JSON"), "{e}");

        let e = parse_conversation(b"[{\"role\": \"user\", \"content\": \"a\xff\"}]")
            .expect_err("utf8");
        assert!(e.message.contains("invalid UTF-8"), "{e}");
        assert_eq!(e.column, Some(32));

        let e = err("   ");
        assert!(e.message.contains("empty"), "{e}");
        let e = err("hello");
        assert!(e.message.contains("expected JSON"), "{e}");
        let e = err("{\"msgs\": []}");
        assert_eq!(e.field.as_deref(), Some("messages"));
        let e = err("{\"messages\": 3}");
        assert_eq!(e.field.as_deref(), Some("messages"));
        let e = err("{\"messages\": [], \"tools\": [1]}");
        assert_eq!(e.field.as_deref(), Some("tools[0]"));
    }
}
