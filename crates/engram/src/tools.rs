//! What the agent itself sees (seed 004): status updates that tell it how full its context is,
//! and a `compact_history` tool it can call.

use serde_json::{Value, json};

use crate::message::Message;

/// The tool's name, in OpenAI and Anthropic tool definitions.
pub const COMPACT_HISTORY: &str = "compact_history";

const DESCRIPTION: &str = "Compacts the message history by summarizing older messages to reduce token usage. The most recent messages are kept unchanged; nothing is deleted from the session's log.";

/// The parameters' JSON schema.
fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "preserveRecentMessages": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
                "description": "Number of recent messages to preserve unchanged",
            },
            "customPrompt": {
                "type": "string",
                "description": "Optional custom prompt for the summarization",
            },
        },
        "additionalProperties": false,
    })
}

/// The tool in OpenAI's format (`tools: [...]` of a chat completion request).
pub fn compact_history_tool_openai() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": COMPACT_HISTORY,
            "description": DESCRIPTION,
            "parameters": parameters(),
        },
    })
}

/// The tool in Anthropic's format.
pub fn compact_history_tool_anthropic() -> Value {
    json!({
        "name": COMPACT_HISTORY,
        "description": DESCRIPTION,
        "input_schema": parameters(),
    })
}

/// The tool call's arguments, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactHistoryArgs {
    /// Messages kept unchanged (1 to 50, default 10).
    pub preserve_recent_messages: usize,
    /// Instructions for the summary instead of the default handoff prompt.
    pub custom_prompt: Option<String>,
}

impl Default for CompactHistoryArgs {
    fn default() -> Self {
        CompactHistoryArgs {
            preserve_recent_messages: 10,
            custom_prompt: None,
        }
    }
}

impl CompactHistoryArgs {
    /// Reads the call's `arguments` (a JSON string, as OpenAI sends them, or an object, as
    /// Anthropic does); the error names the field, for the tool result the agent reads.
    pub fn parse(arguments: &Value) -> Result<Self, String> {
        let parsed;
        let map = match arguments {
            Value::String(s) if s.trim().is_empty() => return Ok(Self::default()),
            Value::String(s) => {
                parsed = serde_json::from_str::<Value>(s)
                    .map_err(|e| format!("the arguments are not JSON: {e}"))?;
                &parsed
            }
            other => other,
        };
        let Value::Object(map) = map else {
            if map.is_null() {
                return Ok(Self::default());
            }
            return Err("the arguments must be an object".into());
        };
        let mut args = Self::default();
        for (key, value) in map {
            match key.as_str() {
                "preserveRecentMessages" => {
                    args.preserve_recent_messages = value
                        .as_u64()
                        .filter(|n| (1..=50).contains(n))
                        .ok_or("`preserveRecentMessages` must be a whole number from 1 to 50")?
                        as usize;
                }
                "customPrompt" => match value {
                    Value::Null => {}
                    Value::String(s) if s.trim().is_empty() => {}
                    Value::String(s) => args.custom_prompt = Some(s.clone()),
                    _ => return Err("`customPrompt` must be a string".into()),
                },
                other => {
                    return Err(format!(
                        "unknown argument `{other}`; expected preserveRecentMessages, customPrompt"
                    ));
                }
            }
        }
        Ok(args)
    }
}

/// The tool result the agent reads after a compaction (seed 004's text, with the measured
/// reduction in tokens rather than characters).
pub fn compact_history_result(
    messages_compacted: usize,
    preserved: usize,
    tokens_before: usize,
    tokens_after: usize,
) -> String {
    if messages_compacted == 0 {
        return "Not enough messages to compact. No changes made.".into();
    }
    let reduction = if tokens_before > 0 {
        (100.0 * (1.0 - tokens_after as f64 / tokens_before as f64)).round() as i64
    } else {
        0
    };
    format!(
        "Successfully compacted {} into a summary, preserving the {} most recent {}. Reduced message history size by approximately {reduction}% ({tokens_before} -> {tokens_after} tokens).",
        crate::plural(messages_compacted, "message", "messages"),
        preserved,
        if preserved == 1 {
            "message"
        } else {
            "messages"
        }
    )
}

/// Something the agent has running, listed in a status update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// Its id.
    pub id: String,
    /// What it is.
    pub description: String,
}

/// A status update's content (seed 004).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Status {
    /// Tokens in the context now.
    pub total_tokens: usize,
    /// The model's window.
    pub max_tokens: usize,
    /// What the session has cost so far, in USD.
    pub cost_usd: f64,
    /// Sections of running things (`Sub-Agents`, `Shell Processes`, `Browser Sessions`), each
    /// listed as `Active {name}: n`; empty sections are left out.
    pub activities: Vec<(String, Vec<Activity>)>,
}

impl Status {
    /// The share of the window in use, in percent.
    pub fn percent(&self) -> u32 {
        if self.max_tokens == 0 {
            return 0;
        }
        (100.0 * self.total_tokens as f64 / self.max_tokens as f64).round() as u32
    }

    /// The message to insert (a system message, seed 004's format).
    pub fn to_message(&self) -> Message {
        let mut lines = vec![
            "--- STATUS UPDATE ---".to_owned(),
            format!(
                "Token Usage: {}/{} ({}%)",
                self.total_tokens,
                self.max_tokens,
                self.percent()
            ),
            format!("Cost So Far: ${:.4}", self.cost_usd),
        ];
        for (name, items) in &self.activities {
            lines.push(String::new());
            lines.push(format!("Active {name}: {}", items.len()));
            lines.extend(
                items
                    .iter()
                    .map(|a| format!("- {}: {}", a.id, a.description)),
            );
        }
        lines.push(String::new());
        lines.push(format!(
            "If token usage is high (>70%), consider using the '{COMPACT_HISTORY}' tool to reduce context size."
        ));
        lines.push("--- END STATUS ---".to_owned());
        Message::system(lines.join("\n"))
    }
}

/// When to send a status update: every `every` turns, and whenever usage crosses one of the
/// thresholds upwards (seed 004 sends one every 5 turns and suggests compacting above 70%).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSchedule {
    /// Turns between updates.
    pub every: usize,
    /// Shares of the window that trigger an update when crossed upwards.
    pub thresholds: Vec<f64>,
    turns: usize,
    last_share: f64,
}

impl Default for StatusSchedule {
    fn default() -> Self {
        StatusSchedule {
            every: 5,
            thresholds: vec![0.5, 0.7, 0.8, 0.9],
            turns: 0,
            last_share: 0.0,
        }
    }
}

impl StatusSchedule {
    /// The same rule for a stored session, without state: true when `added` user turns took
    /// the session to `turns` past a multiple of `every`, or the context went from
    /// `tokens_before` to `tokens_after` across one of the thresholds.
    pub fn due_between(
        &self,
        turns: usize,
        added: usize,
        tokens_before: usize,
        tokens_after: usize,
        max_tokens: usize,
    ) -> bool {
        let every = self.every.max(1);
        if added > 0 && turns / every > turns.saturating_sub(added) / every {
            return true;
        }
        if max_tokens == 0 {
            return false;
        }
        let (before, after) = (
            tokens_before as f64 / max_tokens as f64,
            tokens_after as f64 / max_tokens as f64,
        );
        self.thresholds.iter().any(|&t| before < t && after >= t)
    }

    /// Call once per turn with the context's size; true when an update is due now.
    pub fn due(&mut self, total_tokens: usize, max_tokens: usize) -> bool {
        self.turns += 1;
        let share = if max_tokens == 0 {
            0.0
        } else {
            total_tokens as f64 / max_tokens as f64
        };
        let crossed = self
            .thresholds
            .iter()
            .any(|&t| self.last_share < t && share >= t);
        self.last_share = share;
        if crossed || self.turns >= self.every.max(1) {
            self.turns = 0;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_update_has_the_seeds_content() {
        let status = Status {
            total_tokens: 91_000,
            max_tokens: 128_000,
            cost_usd: 0.4213,
            activities: vec![(
                "Shell Processes".into(),
                vec![Activity {
                    id: "sh1".into(),
                    description: "cargo test".into(),
                }],
            )],
        };
        let text = status.to_message().text().into_owned();
        assert_eq!(
            text,
            "--- STATUS UPDATE ---\nToken Usage: 91000/128000 (71%)\nCost So Far: $0.4213\n\nActive Shell Processes: 1\n- sh1: cargo test\n\nIf token usage is high (>70%), consider using the 'compact_history' tool to reduce context size.\n--- END STATUS ---"
        );
    }

    #[test]
    fn updates_come_every_n_turns_and_on_crossing_a_threshold() {
        let mut s = StatusSchedule::default();
        let due: Vec<bool> = [10, 20, 30, 40, 45, 46, 72, 73, 74, 75, 76, 95]
            .iter()
            .map(|&used| s.due(used, 100))
            .collect();
        assert_eq!(
            due,
            [
                false, false, false, false, true, false, true, false, false, false, false, true
            ]
        );
    }

    #[test]
    fn tool_definitions_and_arguments() {
        let openai = compact_history_tool_openai();
        assert_eq!(openai["function"]["name"], "compact_history");
        let props = &openai["function"]["parameters"]["properties"];
        assert_eq!(props["preserveRecentMessages"]["default"], 10);
        assert_eq!(props["preserveRecentMessages"]["maximum"], 50);
        assert_eq!(
            compact_history_tool_anthropic()["input_schema"],
            openai["function"]["parameters"]
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!("{\"preserveRecentMessages\": 4}")),
            Ok(CompactHistoryArgs {
                preserve_recent_messages: 4,
                custom_prompt: None
            })
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!({"customPrompt": "keep the SQL"}))
                .map(|a| (a.preserve_recent_messages, a.custom_prompt)),
            Ok((10, Some("keep the SQL".to_owned())))
        );
        assert_eq!(
            CompactHistoryArgs::parse(&json!("")),
            Ok(CompactHistoryArgs::default())
        );
        for bad in [
            json!({"preserveRecentMessages": 0}),
            json!({"preserveRecentMessages": 51}),
            json!({"preserveRecentMessages": "ten"}),
            json!({"customPrompt": 3}),
            json!({"preserve": 3}),
            json!("{not json"),
        ] {
            let err = CompactHistoryArgs::parse(&bad).expect_err("refused");
            assert!(!err.is_empty());
        }
        assert_eq!(
            compact_history_result(40, 10, 10_000, 2_500),
            "Successfully compacted 40 messages into a summary, preserving the 10 most recent messages. Reduced message history size by approximately 75% (10000 -> 2500 tokens)."
        );
        assert_eq!(
            compact_history_result(0, 10, 100, 100),
            "Not enough messages to compact. No changes made."
        );
    }
}
