//! The three wire formats the proxy speaks, a request read as engram understands it, and a
//! view written back into the caller's request.

use axum::body::Bytes;
use engram::Conversation;
use engram::compact::stable::SentView;
use serde_json::Value;

/// The three wire formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    OpenAi,
    Anthropic,
    /// OpenAI's Responses API (`instructions` and `input` items), to the OpenAI upstream.
    Responses,
}

impl Format {
    pub(super) fn wire(self) -> engram::offered::Wire {
        match self {
            Format::OpenAi => engram::offered::Wire::Chat,
            Format::Anthropic => engram::offered::Wire::Anthropic,
            Format::Responses => engram::offered::Wire::Responses,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
            Format::Responses => "responses",
        }
    }
}

/// The request as engram understands it.
pub(super) struct Parsed {
    pub(super) value: Value,
    pub(super) conversation: Conversation,
    pub(super) model: String,
    pub(super) max_tokens: Option<usize>,
    /// A Responses request's items and where each message came from (its conversation moved
    /// to `conversation`).
    pub(super) items: Option<engram::formats::responses::Items>,
    /// Where each message of an Anthropic request came from.
    pub(super) sources: engram::formats::anthropic::Sources,
}

/// The request as engram understands it, or why engram leaves it alone.
pub(super) fn parse(format: Format, body: &[u8]) -> Result<Parsed, String> {
    let not_parsed = |why: String| format!("not parsed ({why})");
    // A lone surrogate (a cut emoji) is the provider's to judge, not a reason to leave the
    // conversation uncompacted.
    let body = &*engram::input::mend_surrogates(body);
    let value: Value = serde_json::from_slice(body).map_err(|e| not_parsed(e.to_string()))?;
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| not_parsed("no `model`".into()))?
        .to_owned();
    let mut items = None;
    let mut sources = engram::formats::anthropic::Sources::default();
    let conversation = match format {
        Format::OpenAi => {
            engram::parse_conversation(body).map_err(|e| not_parsed(e.to_string()))?
        }
        Format::Anthropic => {
            let (conversation, read) = engram::formats::anthropic::read_request(&value)
                .map_err(|e| not_parsed(e.to_string()))?;
            sources = read;
            conversation
        }
        Format::Responses => {
            let mut read = engram::formats::responses::from_request(&value)
                .map_err(|e| not_parsed(e.to_string()))?;
            let conversation = std::mem::take(&mut read.conversation);
            items = Some(read);
            conversation
        }
    };
    let max_tokens = ["max_completion_tokens", "max_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_u64))
        .map(|n| n as usize);
    Ok(Parsed {
        value,
        conversation,
        model,
        max_tokens,
        items,
        sources,
    })
}

/// Why a request's conversation is the provider's to keep, not engram's to compact (a
/// Responses request's only), read without parsing the rest.
pub(super) fn provider_holds(format: Format, body: &[u8]) -> Option<&'static str> {
    if format != Format::Responses {
        return None;
    }
    let value: Value = serde_json::from_slice(body).ok()?;
    provider_state(&value)
}

/// Why a Responses request's conversation is the provider's to keep, not engram's to compact:
/// it continues a stored response or conversation, or asks the provider to store it.
fn provider_state(request: &Value) -> Option<&'static str> {
    let set = |key: &str| request.get(key).is_some_and(|v| !v.is_null());
    if set("previous_response_id") {
        Some("previous_response_id: the provider holds this conversation")
    } else if set("conversation") {
        Some("conversation: the provider holds this conversation")
    } else if request.get("store") == Some(&Value::Bool(true)) {
        Some("store: true: the provider keeps this conversation as sent")
    } else {
        None
    }
}

/// The request body with `view`'s messages in place of the caller's, in the caller's format;
/// every other key as the caller sent it. A caller's message unchanged goes upstream as the
/// caller sent it, every field in the caller's order; the same view renders to the same bytes,
/// so that a request that extends it repeats them.
pub(super) fn render(
    format: Format,
    parsed: &Parsed,
    view: &SentView,
    breakpoints: bool,
) -> Result<Vec<u8>, String> {
    let kept = &view.origins;
    let messages = &view.messages;
    let body = match format {
        Format::Responses => {
            let items = parsed
                .items
                .as_ref()
                .ok_or("a Responses request without items")?;
            let mut value = parsed.value.clone();
            value["input"] =
                Value::Array(engram::formats::responses::to_items(items, messages, kept));
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            if breakpoints {
                engram::breakpoints::mark(&mut value);
            }
            value
        }
        Format::OpenAi => {
            let original = parsed
                .value
                .get("messages")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut value = parsed.value.clone();
            value["messages"] =
                Value::Array(engram::compact::chat_messages(original, messages, kept));
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            if breakpoints {
                engram::breakpoints::mark(&mut value);
            }
            value
        }
        Format::Anthropic => {
            let mut value = engram::formats::anthropic::rewrite_request(
                &parsed.value,
                &parsed.conversation,
                &parsed.sources,
                messages.clone(),
                kept.clone(),
            )
            .map_err(|e| e.to_string())?;
            if let Some(offered) = &view.offered {
                offered.offer(&mut value, format.wire());
            }
            if breakpoints && !engram::formats::anthropic::has_cache_breakpoints(&parsed.value) {
                let lead = engram::message::leading_instructions(&view.messages);
                let head = (view.head > lead).then(|| {
                    engram::formats::anthropic::block_count(&view.messages[lead..view.head])
                });
                engram::formats::anthropic::mark_cache_breakpoints(&mut value, head);
            }
            value
        }
    };
    serde_json::to_vec(&body).map_err(|e| e.to_string())
}

/// A request sent as the caller sent it, with the breakpoints of its provider's cache marked
/// when the caller marked none and `enabled` (an Anthropic request, or a model that takes
/// OpenAI's explicit breakpoints: [`breakpoints_for`]); `None`: as it is.
pub(super) fn with_breakpoints(enabled: bool, format: Format, parsed: &Parsed) -> Option<Bytes> {
    if !enabled {
        return None;
    }
    let mut value = parsed.value.clone();
    let marked = match format {
        Format::Anthropic if !engram::formats::anthropic::has_cache_breakpoints(&parsed.value) => {
            engram::formats::anthropic::mark_cache_breakpoints(&mut value, None)
        }
        Format::Anthropic => 0,
        Format::OpenAi | Format::Responses => engram::breakpoints::mark(&mut value),
    };
    (marked > 0)
        .then(|| serde_json::to_vec(&value).ok().map(Bytes::from))
        .flatten()
}

/// Whether the proxy marks cache breakpoints on a request of `format` for `model`: on
/// Anthropic's route always (nothing is cached without one), on OpenAI's for the models that
/// take explicit breakpoints (the registry's `prompt_cache_breakpoints`); never with
/// `--cache-breakpoints off`.
pub(super) fn breakpoints_for(
    enabled: bool,
    format: Format,
    registry: &engram::ModelRegistry,
    model: &str,
) -> bool {
    enabled
        && (format == Format::Anthropic || registry.resolve(model).spec.prompt_cache_breakpoints)
}
