//! The answers the fronts return, built once: a compaction's document and the request written
//! back, a created session, a session's context.

use serde_json::{Map, Value};

use crate::compact::Compacted;
use crate::input::Conversation;
use crate::session::Session;
use crate::tokenize::Tokenizer;

/// The answer to a [`CompactRequest`](super::CompactRequest): the request's other keys (model, temperature, ...) pass
/// through, so that a compacted OpenAI request body is a request body again; then `messages`
/// (`plain`: without provenance), the request's `tools`, and the `report` with the tokenizer
/// that counted.
pub fn compaction_document(
    conversation: &Conversation,
    compacted: &Compacted,
    tokenizer: &Tokenizer,
    plain: bool,
) -> Map<String, Value> {
    let mut doc = Map::new();
    for (key, value) in &conversation.extra {
        doc.insert(key.clone(), value.clone());
    }
    doc.insert("messages".into(), messages_value(compacted, plain));
    if !conversation.tools.is_empty() {
        doc.insert("tools".into(), Value::Array(conversation.tools.clone()));
    }
    let mut report = report_value(compacted);
    report.insert("tokenizer".into(), Value::from(tokenizer.id()));
    report.insert("exact".into(), Value::from(tokenizer.is_exact()));
    doc.insert("report".into(), Value::Object(report));
    doc
}

/// A compacted conversation written back as the request its caller sends next: an Anthropic
/// request (`anthropic`, the request as read) keeps Anthropic's shape, with the digest in
/// `system` ([`crate::formats::anthropic::rewrite_request`]); anything else is the OpenAI body of
/// [`compaction_document`], plain and without its report.
pub fn compacted_request(
    conversation: &Conversation,
    anthropic: Option<&Value>,
    compacted: &Compacted,
    tokenizer: &Tokenizer,
) -> Result<Value, crate::InputError> {
    match anthropic {
        // A one-shot compaction (`engram compact`, the bindings): where each message came from
        // is read again here, once.
        Some(original) => crate::formats::anthropic::rewrite_request(
            original,
            conversation,
            &crate::formats::anthropic::read_request(original)?.1,
            compacted
                .messages
                .iter()
                .map(|v| v.message.clone())
                .collect(),
            crate::compact::Origin::of_view(&conversation.messages, &compacted.messages),
        ),
        None => {
            let mut doc = compaction_document(conversation, compacted, tokenizer, true);
            doc.remove("report");
            Ok(Value::Object(doc))
        }
    }
}

/// The answer to a [`NewSessionRequest`](super::NewSessionRequest): the created session's info,
/// with the [`NewSessionRequest::model_warning`](super::NewSessionRequest::model_warning) as `warning` when there is one.
pub fn created_session_document(session: &Session<'_>, warning: Option<String>) -> Value {
    let mut info = serde_json::to_value(session.info()).unwrap_or_default();
    if let Some(warning) = warning {
        info["warning"] = Value::String(warning);
    }
    info
}

/// The answer to a [`ContextRequest`](super::ContextRequest): `messages` (`plain`: without provenance) and the
/// `report`, naming the session, its window and its tokenizer.
pub fn context_document(
    session: &Session<'_>,
    compacted: &Compacted,
    plain: bool,
) -> Map<String, Value> {
    let mut report = report_value(compacted);
    report.insert("session_id".into(), Value::from(session.info().id.as_str()));
    report.insert("window".into(), Value::from(session.info().window));
    report.insert(
        "tokenizer".into(),
        Value::from(session.counter().tokenizer().id()),
    );
    let mut doc = Map::new();
    doc.insert("messages".into(), messages_value(compacted, plain));
    doc.insert("report".into(), Value::Object(report));
    doc
}

fn messages_value(compacted: &Compacted, plain: bool) -> Value {
    Value::Array(
        compacted
            .messages
            .iter()
            .map(|m| m.to_value(plain))
            .collect(),
    )
}

fn report_value(compacted: &Compacted) -> Map<String, Value> {
    match serde_json::to_value(&compacted.report) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}
