//! A view as the store keeps it: messages kept verbatim from the log as references to it, the
//! others whole with their provenance; and read back, checked against the log.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::Error;
use crate::compact::{Kind, ViewMessage};
use crate::message::Message;

use super::Session;

impl Session<'_> {
    pub(super) fn decode_view(&self, encoded: &Value) -> Result<Vec<ViewMessage>, Error> {
        let corrupt = |what: &str| {
            Error::Backend(format!(
                "session {}: a stored view is damaged ({what})",
                self.info.id
            ))
        };
        let Value::Array(items) = encoded else {
            return Err(corrupt("not an array"));
        };
        let refs: Vec<String> = items
            .iter()
            .filter_map(|v| v.get("ref").and_then(Value::as_str))
            .map(str::to_owned)
            .collect();
        let mut by_id: HashMap<String, Message> = HashMap::new();
        if !refs.is_empty() {
            for m in self.store.messages_by_id(&self.info.id, &refs)? {
                by_id.insert(m.id, m.message);
            }
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let kind = match item.get("kind").and_then(Value::as_str) {
                Some("original") => Kind::Original,
                Some("masked") => Kind::Masked,
                Some("summary") => Kind::Summary,
                Some("recalled") => Kind::Recalled,
                Some("status") => Kind::Status,
                _ => return Err(corrupt("unknown kind")),
            };
            if let Some(id) = item.get("ref").and_then(Value::as_str) {
                let message = by_id
                    .get(id)
                    .cloned()
                    .ok_or_else(|| corrupt(&format!("message {id} is not in the log")))?;
                out.push(ViewMessage {
                    message,
                    kind,
                    source_ids: vec![id.to_owned()],
                });
                continue;
            }
            let message = item
                .get("message")
                .cloned()
                .ok_or_else(|| corrupt("no message"))
                .and_then(|m| Message::from_stored(m).map_err(|e| corrupt(&e.to_string())))?;
            let source_ids = item
                .get("source_ids")
                .and_then(Value::as_array)
                .map(|ids| {
                    ids.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            out.push(ViewMessage {
                message,
                kind,
                source_ids,
            });
        }
        Ok(out)
    }
}

/// Encodes a view for storage: messages kept verbatim from the log become references to it
/// (`{"ref": id, "kind": ...}`), the others are stored whole with their provenance.
pub fn encode_view(view: &[ViewMessage]) -> Value {
    Value::Array(
        view.iter()
            .map(|v| {
                let mut item = Map::new();
                item.insert("kind".into(), json!(v.kind));
                let verbatim = matches!(v.kind, Kind::Original | Kind::Recalled)
                    && v.source_ids.len() == 1
                    && v.message.id.as_deref() == Some(v.source_ids[0].as_str());
                if verbatim {
                    item.insert("ref".into(), json!(v.source_ids[0]));
                } else {
                    item.insert("source_ids".into(), json!(v.source_ids));
                    item.insert("message".into(), v.message.to_value());
                }
                Value::Object(item)
            })
            .collect(),
    )
}
