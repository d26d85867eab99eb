//! Reading a conversation from a file or standard input, in OpenAI or Anthropic format.

use std::io::{IsTerminal, Read};
use std::path::Path;

use anyhow::Context;
use engram::{Conversation, InputError};
use serde_json::Value;

use crate::cli::InputFormatArg;
use crate::user_error;

/// Reads the raw bytes of `file` (`None` or `-`: standard input).
pub(crate) fn read_bytes(file: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    match file {
        Some(path) if path != Path::new("-") => {
            std::fs::read(path).map_err(|e| user_error!("cannot read {}: {e}", path.display()))
        }
        _ => {
            let mut stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(user_error!(
                    "no input: pass a conversation file, or pipe one into standard input (engram count conversation.json)"
                ));
            }
            let mut bytes = Vec::new();
            stdin
                .read_to_end(&mut bytes)
                .context("reading standard input")?;
            Ok(bytes)
        }
    }
}

/// A line reader over `file` (`-`: standard input), for inputs too large to hold at once.
pub(crate) fn open_lines(file: &Path) -> anyhow::Result<Box<dyn std::io::BufRead + Send>> {
    if file == Path::new("-") {
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Err(user_error!(
                "no input: pass a file, or pipe JSONL into standard input"
            ));
        }
        return Ok(Box::new(std::io::BufReader::new(stdin)));
    }
    let f = std::fs::File::open(file)
        .map_err(|e| user_error!("cannot read {}: {e}", file.display()))?;
    Ok(Box::new(std::io::BufReader::with_capacity(1 << 20, f)))
}

/// Parses a conversation, detecting Anthropic requests when asked to.
pub(crate) fn parse(bytes: &[u8], format: InputFormatArg) -> Result<Conversation, InputError> {
    let anthropic = match format {
        InputFormatArg::Openai => false,
        InputFormatArg::Anthropic => true,
        InputFormatArg::Auto => looks_like_anthropic(bytes),
    };
    if anthropic {
        // The OpenAI parser's checks (UTF-8, syntax with line numbers) come first.
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            InputError::new(format!("invalid JSON: {e}")).at_line(e.line(), Some(e.column()))
        })?;
        engram::anthropic::from_anthropic(&value)
    } else {
        engram::parse_conversation(bytes)
    }
}

/// An object with a top-level `system` key, or with `tool_use` / `tool_result` blocks.
fn looks_like_anthropic(bytes: &[u8]) -> bool {
    // Cheap pre-filter, so that a large OpenAI input is not parsed twice: an Anthropic request
    // has a `"system":` key or tool_use / tool_result blocks somewhere in its text.
    let has = |needle: &[u8]| memchr::memmem::find(bytes, needle).is_some();
    if !(has(b"\"system\":")
        || has(b"\"system\" :")
        || has(b"\"tool_use\"")
        || has(b"\"tool_result\""))
    {
        return false;
    }
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(bytes) else {
        return false;
    };
    if map.contains_key("system") {
        return true;
    }
    map.get("messages")
        .and_then(Value::as_array)
        .is_some_and(|messages| {
            messages.iter().any(|m| {
                m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|blocks| {
                        blocks.iter().any(|b| {
                            matches!(
                                b.get("type").and_then(Value::as_str),
                                Some("tool_use" | "tool_result")
                            )
                        })
                    })
            })
        })
}
