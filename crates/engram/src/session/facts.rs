//! Key-fact extraction, used before sleep-time compaction so that what leaves the
//! view is findable in working memory: tool results (cut to 200 characters, prefixed with the
//! tool's name), lines with fact keywords (verbatim), and user messages under 120 characters;
//! long assistant prose is skipped; identical facts are kept once.

use std::collections::{HashMap, HashSet};

use super::LoggedMessage;
use crate::compact::salient::FACT_KEYWORDS;
use crate::message::Role;

/// The key facts of `messages` (a subset of `log`, which gives the tool calls' names), as
/// `(message id, index within the message, fact)`.
pub fn extract(log: &[LoggedMessage], messages: &[&LoggedMessage]) -> Vec<(String, usize, String)> {
    let tool_names: HashMap<&str, &str> = log
        .iter()
        .flat_map(|m| m.message.calls())
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for m in messages {
        let text = m.message.text();
        let text = text.trim();
        let mut facts = Vec::new();
        match m.message.role {
            Role::Tool => {
                let name = m
                    .message
                    .tool_call_id()
                    .and_then(|id| tool_names.get(id))
                    .or(m.message.name().as_ref().map(|n| n as &str).as_ref())
                    .copied()
                    .unwrap_or("tool");
                let clipped: String = text.chars().take(200).collect();
                if !clipped.is_empty() {
                    facts.push(format!("[{name}] {clipped}"));
                }
            }
            Role::User if text.chars().count() < 120 && !text.is_empty() => {
                facts.push(text.to_owned());
            }
            _ => {
                for line in text.lines() {
                    let lower = line.to_lowercase();
                    if FACT_KEYWORDS.iter().any(|k| lower.contains(k)) {
                        facts.push(line.trim().to_owned());
                    }
                }
            }
        }
        for (n, fact) in facts.into_iter().enumerate() {
            if seen.insert(fact.clone()) {
                out.push((m.id.clone(), n, fact));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall};

    fn logged(seq: u64, message: Message) -> LoggedMessage {
        LoggedMessage {
            seq,
            id: format!("m{seq}"),
            created_at: 0,
            tokens: 1,
            message,
            abandoned: false,
        }
    }

    #[test]
    fn follows_seed_000s_rules() {
        let log = vec![
            logged(0, Message::user("Deploy the app to staging")),
            logged(
                1,
                Message::assistant_tool_calls(vec![ToolCall::function("c1", "shell", "{}")]),
            ),
            logged(
                2,
                Message::tool("c1", format!("47 files copied {}", "x".repeat(300))),
            ),
            logged(
                3,
                Message::assistant(format!(
                    "Long explanation {}\nResult: staging is up on port 8443",
                    "y".repeat(400)
                )),
            ),
            logged(4, Message::user("Deploy the app to staging")),
            logged(
                5,
                Message::user(format!("a long paste {}", "z".repeat(200))),
            ),
        ];
        let all: Vec<&LoggedMessage> = log.iter().collect();
        let facts: Vec<String> = extract(&log, &all).into_iter().map(|f| f.2).collect();
        assert_eq!(facts.len(), 3, "{facts:?}");
        assert_eq!(facts[0], "Deploy the app to staging");
        assert!(
            facts[1].starts_with("[shell] 47 files copied"),
            "{}",
            facts[1]
        );
        assert_eq!(facts[1].chars().count(), "[shell] ".len() + 200);
        assert_eq!(facts[2], "Result: staging is up on port 8443");
    }
}
