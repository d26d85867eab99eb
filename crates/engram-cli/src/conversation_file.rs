//! Reading a conversation from a file or standard input, in OpenAI or Anthropic format.

use std::io::{IsTerminal, Read};
use std::path::Path;

use engram::{Conversation, InputError, Message};
use serde_json::Value;

use crate::cli::InputFormatArg;
use crate::user_error;

/// The most a conversation input may hold. A real history is megabytes (a million-token window
/// is about 4 MB of text); the cap keeps a wrong file (`/dev/zero`, a disk image) from taking
/// the machine's memory.
pub(crate) const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Reads the raw bytes of `file` (`None` or `-`: standard input), at most [`MAX_INPUT_BYTES`].
///
/// Reading stops early when the input does not start like JSON (`{` or `[` after whitespace):
/// the parser then reports what it found, without engram first reading the rest of it.
pub(crate) fn read_bytes(file: Option<&Path>) -> anyhow::Result<Vec<u8>> {
    let (name, reader, size): (String, Box<dyn Read>, u64) = match file {
        Some(path) if path != Path::new("-") => {
            let f = std::fs::File::open(path)
                .map_err(|e| user_error!("cannot read {}: {e}", path.display()))?;
            let size = f.metadata().map_or(0, |m| m.len());
            (path.display().to_string(), Box::new(f), size)
        }
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(user_error!(
                    "no input: pass a conversation file, or pipe one into standard input (engram count conversation.json)"
                ));
            }
            ("standard input".to_owned(), Box::new(stdin), 0)
        }
    };
    read_capped(reader, size, MAX_INPUT_BYTES).map_err(|e| match e {
        ReadError::TooLarge => user_error!(
            "{name} is larger than {} MiB, the most engram reads as one conversation; is it the right file? (split a longer history into several conversations)",
            MAX_INPUT_BYTES >> 20
        ),
        ReadError::Io(e) => user_error!("cannot read {name}: {e}"),
    })
}

#[derive(Debug)]
enum ReadError {
    TooLarge,
    Io(std::io::Error),
}

/// Reads `reader` to its end, at most `cap` bytes; `size` is the expected length (0: unknown),
/// so that a file is read into one allocation of its size.
fn read_capped(mut reader: impl Read, size: u64, cap: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::with_capacity(size.min(cap) as usize + 1);
    let mut chunk = vec![0u8; 1 << 16];
    // Whether the input was seen to start like JSON.
    let mut looks_like_json = false;
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => {
                // Growing by doubling can leave half the buffer unused.
                if bytes.capacity() > bytes.len() + bytes.len() / 8 {
                    bytes.shrink_to_fit();
                }
                return Ok(bytes);
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        if (bytes.len() + n) as u64 > cap {
            return Err(ReadError::TooLarge);
        }
        let seen = bytes.len();
        bytes.extend_from_slice(&chunk[..n]);
        if !looks_like_json {
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            if bytes.len() < BOM.len() && BOM.starts_with(&bytes) {
                continue;
            }
            let from = seen.max(if bytes.starts_with(BOM) { BOM.len() } else { 0 });
            match bytes[from..].iter().find(|b| !b.is_ascii_whitespace()) {
                Some(b'{' | b'[') => looks_like_json = true,
                Some(_) => return Ok(bytes),
                None => {}
            }
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
    Ok(parse_request(bytes, format)?.0)
}

/// Parses a conversation as [`parse`] does, and keeps an Anthropic request's own JSON (what a
/// compaction is written back into, so that an Anthropic request stays one).
pub(crate) fn parse_request(
    bytes: &[u8],
    format: InputFormatArg,
) -> Result<(Conversation, Option<Value>), InputError> {
    match format {
        InputFormatArg::Auto => engram::formats::anthropic::parse_request(bytes),
        InputFormatArg::Openai => Ok((engram::parse_conversation(bytes)?, None)),
        InputFormatArg::Anthropic => {
            let value = json_of(bytes)?;
            Ok((
                engram::formats::anthropic::from_anthropic(&value)?,
                Some(value),
            ))
        }
    }
}

/// A conversation without its messages, and its messages one at a time: a caller that needs
/// each message once (counting) holds one parsed message beside the input, not all of them.
pub(crate) fn parse_streamed(
    bytes: &[u8],
    format: InputFormatArg,
) -> Result<(Conversation, Messages<'_>), InputError> {
    if let Some(value) = anthropic_request(bytes, format)? {
        let mut conversation = engram::formats::anthropic::from_anthropic(&value)?;
        let messages = std::mem::take(&mut conversation.messages);
        return Ok((conversation, Box::new(messages.into_iter().map(Ok))));
    }
    let (conversation, stream) = engram::stream_conversation(bytes)?;
    Ok((conversation, Box::new(stream)))
}

/// Messages parsed one at a time; the stream ends after the first error.
pub(crate) type Messages<'a> = Box<dyn Iterator<Item = Result<Message, InputError>> + 'a>;

/// The input's JSON when it is to be read as an Anthropic request: always with `--format
/// anthropic`, when it looks like one with `auto`.
fn anthropic_request(bytes: &[u8], format: InputFormatArg) -> Result<Option<Value>, InputError> {
    match format {
        InputFormatArg::Openai => Ok(None),
        InputFormatArg::Auto => Ok(engram::formats::anthropic::detect(bytes)),
        InputFormatArg::Anthropic => json_of(bytes).map(Some),
    }
}

/// The input as JSON; invalid JSON is reported with its line and column, as the OpenAI reader
/// reports it.
fn json_of(bytes: &[u8]) -> Result<Value, InputError> {
    serde_json::from_slice(bytes).map_err(|e| {
        InputError::new(format!("invalid JSON: {e}")).at_line(e.line(), Some(e.column()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_stops_at_the_cap_and_at_input_that_is_not_json() {
        let zeros = std::io::repeat(0).take(10 << 20);
        let bytes = read_capped(zeros, 0, 1 << 20).expect("stops early");
        assert!(bytes.len() <= 1 << 16, "{}", bytes.len());

        let json = std::io::repeat(b'[').take(3 << 20);
        assert!(matches!(
            read_capped(json, 0, 1 << 20),
            Err(ReadError::TooLarge)
        ));

        let small = br#"  {"messages": []}"#;
        assert_eq!(read_capped(&small[..], 0, 1 << 20).expect("reads"), small);
    }
}
