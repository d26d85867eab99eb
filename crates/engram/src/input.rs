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
    let (mut conversation, stream) = stream_conversation(bytes)?;
    let format = stream.format();
    let mut messages = Vec::with_capacity(stream.size_hint().1.unwrap_or(0));
    for message in stream {
        messages.push(message?);
    }
    // JSONL grows the list by doubling: give back what is unused.
    if messages.capacity() > messages.len() + messages.len() / 8 {
        messages.shrink_to_fit();
    }
    conversation.messages = messages;
    Ok((conversation, format))
}

/// Reads a conversation's top-level keys and returns its messages as a stream.
///
/// The returned conversation has no messages; the stream parses them one at a time, so that
/// a caller that does not need them all at once (counting, appending in batches) holds one
/// message beside the input rather than the whole parsed history. The stream yields the same
/// messages and errors, with the same places, as [`parse_conversation`]; it stops after the
/// first error.
pub fn stream_conversation(bytes: &[u8]) -> Result<(Conversation, MessageStream<'_>), InputError> {
    let text = decode_utf8(bytes)?;
    let lines = LineIndex::new(text);
    let trimmed = text.trim_start();
    let start = text.len() - trimmed.len();
    match trimmed.as_bytes().first() {
        None => Err(InputError::new(
            "the input is empty; expected {\"messages\": [...]}, a JSON array of messages, or JSONL",
        )),
        Some(b'[') => {
            let raws: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| json_error(&e))?;
            Ok((
                Conversation::default(),
                MessageStream::raw(raws, lines, InputFormat::Array),
            ))
        }
        Some(b'{') => {
            // One object (the wrapper, or a single message), or JSONL: a syntax error right
            // after the first complete value ("trailing characters") means several values.
            match serde_json::from_str::<RawEntries<'_>>(text) {
                Ok(RawEntries(entries)) => parse_object(entries, text, lines),
                Err(e)
                    if e.classify() == serde_json::error::Category::Syntax && is_trailing(&e) =>
                {
                    Ok((Conversation::default(), MessageStream::jsonl(text, lines)))
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

/// The messages of an input, parsed one at a time: see [`stream_conversation`].
pub struct MessageStream<'a> {
    lines: LineIndex<'a>,
    source: Source<'a>,
    format: InputFormat,
    /// The index of the next message.
    index: usize,
    done: bool,
}

enum Source<'a> {
    /// The raw slices of a JSON array's elements.
    Raw(std::vec::IntoIter<&'a RawValue>),
    /// JSONL text, and the byte offset and 0-based number of the next line.
    Lines {
        text: &'a str,
        offset: usize,
        line_no: usize,
    },
}

impl<'a> MessageStream<'a> {
    fn raw(raws: Vec<&'a RawValue>, lines: LineIndex<'a>, format: InputFormat) -> Self {
        MessageStream {
            lines,
            source: Source::Raw(raws.into_iter()),
            format,
            index: 0,
            done: false,
        }
    }

    fn jsonl(text: &'a str, lines: LineIndex<'a>) -> Self {
        MessageStream {
            lines,
            source: Source::Lines {
                text,
                offset: 0,
                line_no: 0,
            },
            format: InputFormat::Jsonl,
            index: 0,
            done: false,
        }
    }

    /// The input's layout.
    pub fn format(&self) -> InputFormat {
        self.format
    }

    fn next_raw(&mut self, raw: &'a RawValue) -> Result<Message, InputError> {
        let index = self.index;
        let lines = &self.lines;
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| {
            // The slice is valid JSON syntax; what is left are escapes the raw scan does not
            // decode (a lone surrogate). Its place is relative to the slice.
            let (line, column) = lines.position_of(raw);
            let err = json_error(&e);
            let (l, c) = if e.line() <= 1 {
                (line, column + e.column().saturating_sub(1))
            } else {
                (line + e.line() - 1, e.column())
            };
            InputError {
                line: Some(l),
                column: Some(c),
                ..err
            }
            .at_index(index)
        })?;
        Message::from_value(value).map_err(|e| {
            let (line, column) = lines.position_of(raw);
            e.at_index(index).at_line(line, Some(column))
        })
    }

    /// The next non-blank JSONL line as a message, or `None` at the end.
    fn next_line(&mut self) -> Option<Result<Message, InputError>> {
        let Source::Lines {
            text,
            offset,
            line_no,
        } = &mut self.source
        else {
            return None;
        };
        while *offset <= text.len() {
            let rest = &text[*offset..];
            let line = rest.split('\n').next().unwrap_or("");
            let this_line = *line_no;
            *offset += line.len() + 1;
            *line_no += 1;
            if line.trim().is_empty() {
                continue;
            }
            let index = self.index;
            let value: Value = match serde_json::from_str(line) {
                Ok(value) => value,
                Err(e) => {
                    let err = json_error(&e);
                    return Some(Err(InputError {
                        line: Some(this_line + 1),
                        column: Some(e.column()),
                        ..err
                    }
                    .at_index(index)));
                }
            };
            if value.get("messages").is_some() && value.get("role").is_none() {
                return Some(Err(InputError::new(
                    "this line is a whole conversation, not a message; JSONL input has one message per line (for one conversation, pass its {\"messages\": [...]} object)",
                )
                .at_line(this_line + 1, None)));
            }
            let leading = line.len() - line.trim_start().len();
            let column = line[..leading].chars().count() + 1;
            return Some(
                Message::from_value(value)
                    .map_err(|e| e.at_index(index).at_line(this_line + 1, Some(column))),
            );
        }
        None
    }
}

impl Iterator for MessageStream<'_> {
    type Item = Result<Message, InputError>;

    /// At most the elements left of an array input; unknown for JSONL.
    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.source {
            Source::Raw(_) if self.done => (0, Some(0)),
            Source::Raw(raws) => (0, Some(raws.len())),
            Source::Lines { .. } => (0, None),
        }
    }

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = match &mut self.source {
            Source::Raw(raws) => {
                let raw = raws.next()?;
                Some(self.next_raw(raw))
            }
            Source::Lines { .. } => self.next_line(),
        };
        match &next {
            Some(Ok(_)) => self.index += 1,
            Some(Err(_)) | None => self.done = true,
        }
        next
    }
}

impl std::fmt::Debug for MessageStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStream")
            .field("format", &self.format)
            .field("index", &self.index)
            .finish_non_exhaustive()
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
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        LineIndex { text }
    }

    /// The 1-based line and column of a byte offset. It scans the text up to the offset: it is
    /// only asked for an error's place (a table of every line's start would cost 8 bytes per
    /// line of input, for the whole parse).
    fn position(&self, offset: usize) -> (usize, usize) {
        let before = self
            .text
            .as_bytes()
            .get(..offset)
            .unwrap_or(self.text.as_bytes());
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |n| n + 1);
        let line = before.iter().filter(|&&b| b == b'\n').count();
        let column = self
            .text
            .get(line_start..offset)
            .map_or(1, |s| s.chars().count() + 1);
        (line + 1, column)
    }

    /// The position of a raw slice that borrows from the indexed text.
    fn position_of(&self, raw: &RawValue) -> (usize, usize) {
        let base = self.text.as_ptr() as usize;
        let at = raw.get().as_ptr() as usize;
        self.position(at.saturating_sub(base).min(self.text.len()))
    }
}

/// An object input: the wrapper (`messages` and other keys), or a single message.
fn parse_object<'a>(
    entries: Vec<(String, &'a RawValue)>,
    text: &'a str,
    lines: LineIndex<'a>,
) -> Result<(Conversation, MessageStream<'a>), InputError> {
    let place = |raw: &RawValue, e: InputError| {
        let (line, column) = lines.position_of(raw);
        e.at_line(line, Some(column))
    };
    // A repeated key counts once, with its last value (as a JSON object map reads it).
    let Some(messages) = entries
        .iter()
        .rev()
        .find(|(k, _)| k == "messages")
        .map(|(_, r)| *r)
    else {
        if entries.iter().any(|(k, _)| k == "role") {
            // A single message object: JSONL of one line.
            return Ok((Conversation::default(), MessageStream::jsonl(text, lines)));
        }
        return Err(InputError::new(
            "expected an object with a `messages` list, like {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}",
        )
        .at_field("messages")
        .at_line(1, Some(1)));
    };
    let raws: Vec<&RawValue> = serde_json::from_str(messages.get()).map_err(|_| {
        let found = serde_json::from_str::<Value>(messages.get())
            .map_or("something else", |v| type_name(&v));
        place(
            messages,
            InputError::new(format!("expected a list of messages, found {found}"))
                .at_field("messages"),
        )
    })?;
    let mut conversation = Conversation::default();
    for (key, raw) in entries {
        if key == "messages" {
            continue;
        }
        // The slice was read as JSON already: this parse cannot fail on syntax.
        let value: Value = serde_json::from_str(raw.get()).map_err(|e| json_error(&e))?;
        if key == "tools" {
            conversation.tools = parse_tools(value).map_err(|e| place(raw, e))?;
        } else {
            conversation.extra.insert(key, value);
        }
    }
    Ok((
        conversation,
        MessageStream::raw(raws, lines, InputFormat::Object),
    ))
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

/// A JSON object's entries in order, values left raw (borrowed from the input).
struct RawEntries<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for RawEntries<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(OrderedRawMap).map(RawEntries)
    }
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

/// `bytes` (JSON) with every lone UTF-16 surrogate escape (`\ud800` without its pair, or a
/// second half alone) written as the replacement character `\ufffd`: JavaScript strings may
/// hold one (a cut emoji), providers take it, and a strict parser refuses the whole document.
/// Borrowed when there is none.
pub fn mend_surrogates(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let hex = |at: usize| -> Option<u16> {
        let digits = bytes.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let escape = |at: usize| -> Option<u16> {
        (bytes.get(at) == Some(&b'\\') && bytes.get(at + 1) == Some(&b'u'))
            .then(|| hex(at + 2))
            .flatten()
    };
    let mut lone: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match escape(i) {
            Some(0xD800..=0xDBFF) => {
                if matches!(escape(i + 6), Some(0xDC00..=0xDFFF)) {
                    i += 12;
                } else {
                    lone.push(i);
                    i += 6;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                lone.push(i);
                i += 6;
            }
            Some(_) => i += 6,
            // Any other escape is two bytes (`\\`, `\"`, `\n`, ...).
            None => i += 2,
        }
    }
    if lone.is_empty() {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut out = bytes.to_vec();
    for at in lone {
        out[at..at + 6].copy_from_slice(b"\\ufffd");
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod surrogate_tests {
    use super::mend_surrogates;

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        let text = br#"{"a": "x\ud800y", "b": "\ud83d\ude00", "c": "\\ud800", "d": "\udc00"}"#;
        let mended = mend_surrogates(text);
        let value: serde_json::Value = serde_json::from_slice(&mended).expect("parses");
        assert_eq!(value["a"], "x\u{fffd}y");
        assert_eq!(value["b"], "\u{1f600}");
        assert_eq!(value["c"], "\\ud800", "an escaped backslash is no escape");
        assert_eq!(value["d"], "\u{fffd}");
        assert!(matches!(
            mend_surrogates(br#"{"ok": "\u00e9"}"#),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
