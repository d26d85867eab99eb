//! Summaries written by a model, through the [`Summarizer`] trait.
//!
//! The pipeline decides *what* to summarise (the messages that leave the view) and how many
//! tokens the summary may take; a [`Summarizer`] turns them into text. Real providers (OpenAI-
//! compatible servers, Anthropic, Ollama) implement it in `engram-llm`; [`DeterministicSummarizer`]
//! is a model-free implementation for tests and offline use. When a summarizer fails or writes
//! more than it may, the pipeline falls back to the extractive digest: a summary never breaks the
//! budget and never blocks compaction.

use std::fmt;

use crate::Error;
use crate::message::{Message, Role};

/// The compaction prompt, as a structured handoff: the sections an agent needs to carry
/// on, with identifiers kept exactly.
pub const DEFAULT_PROMPT: &str = "\
Summarize the conversation history below for an agent that will continue the work without seeing it.
Write these sections, each under its own heading, as short bullet points:
## Completed work
## Current state
## In-progress tasks
## Next steps
## Constraints
## Critical context
Keep file paths, function names, identifiers, error messages, ids and numbers exactly as written.
Quote the user's requests. Leave out greetings, small talk, step-by-step tool output and repetition.";

/// The sections a summary written with [`DEFAULT_PROMPT`] has.
pub const SECTIONS: [&str; 6] = [
    "## Completed work",
    "## Current state",
    "## In-progress tasks",
    "## Next steps",
    "## Constraints",
    "## Critical context",
];

/// The first line of a model-written summary in a view.
pub const SUMMARY_HEADER: &str = "[CONTEXT SUMMARY]";

/// What to summarise.
#[derive(Debug, Clone, Copy)]
pub struct SummaryRequest<'a> {
    /// The messages to summarise, oldest first. They are data, never instructions.
    pub messages: &'a [&'a Message],
    /// The instructions: [`DEFAULT_PROMPT`] or the caller's own.
    pub prompt: &'a str,
    /// What the summary should focus on, if the caller said.
    pub focus: Option<&'a str>,
    /// The most tokens the summary may have.
    pub max_tokens: usize,
    /// An earlier summary of the history before `messages`: the summarizer merges the new
    /// messages into it rather than summarising everything again.
    pub previous: Option<&'a str>,
}

/// An earlier summary of part of a conversation, offered to the next compaction so that it
/// merges the newly dropped messages into it (see [`SummaryRequest::previous`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousSummary {
    /// Its text, without [`SUMMARY_HEADER`].
    pub text: String,
    /// The ids of the messages it covers.
    pub covers: Vec<String>,
}

impl PreviousSummary {
    /// The previous summary in a model-written summary message's text (which starts with
    /// [`SUMMARY_HEADER`]); `None` for any other text (the extractive digest's, say).
    pub fn from_message_text(text: &str, covers: Vec<String>) -> Option<Self> {
        let text = text.strip_prefix(SUMMARY_HEADER)?;
        Some(PreviousSummary {
            text: text.trim().to_owned(),
            covers,
        })
    }
}

/// The instructions added when a previous summary is merged.
pub const MERGE_NOTE: &str = "A summary of the earlier history is given first, in <previous_summary>; the history after it follows, in <history>. Write one updated summary of both: keep what still holds, add what the new history adds, move finished tasks to completed work, and drop only what the new history shows is no longer true.";

impl<'a> SummaryRequest<'a> {
    /// A request with the default prompt and no focus and no previous summary.
    pub fn new(messages: &'a [&'a Message], max_tokens: usize) -> Self {
        SummaryRequest {
            messages,
            prompt: DEFAULT_PROMPT,
            focus: None,
            max_tokens,
            previous: None,
        }
    }

    /// The instructions with the merge note (when there is a previous summary) and the focus
    /// appended.
    pub fn instructions(&self) -> String {
        let mut out = self.prompt.to_owned();
        if self.previous.is_some() {
            out.push('\n');
            out.push_str(MERGE_NOTE);
        }
        if let Some(focus) = self.focus {
            out.push_str("\nFocus on: ");
            out.push_str(focus);
        }
        out
    }

    /// The history rendered as data (one `role: text` block per message, tool calls shown with
    /// their arguments), to be placed after the instructions.
    pub fn transcript(&self) -> String {
        let mut out = String::new();
        for m in self.messages {
            out.push_str(m.role.as_str());
            if let Some(name) = &m.name() {
                out.push_str(&format!(" ({name})"));
            }
            out.push_str(": ");
            out.push_str(&m.text());
            for call in m.calls() {
                out.push_str(&format!("\n  -> {}({})", call.name, call.arguments));
            }
            out.push('\n');
        }
        out
    }
}

/// Turns messages into a summary. Implementations are shared between threads.
pub trait Summarizer: Send + Sync + fmt::Debug {
    /// A short name for reports (`deterministic`, `openai:gpt-4o-mini`).
    fn name(&self) -> &str;

    /// Writes the summary text (without [`SUMMARY_HEADER`]).
    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, Error>;
}

/// A model-free summarizer with the default prompt's sections, for tests and offline use: the
/// user's requests under "In-progress tasks" (the last one) and "Completed work" (the others),
/// tool calls made under "Current state", and lines with fact keywords under "Critical context".
/// The same input always gives the same summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeterministicSummarizer;

impl Summarizer for DeterministicSummarizer {
    fn name(&self) -> &str {
        "deterministic"
    }

    fn summarize(&self, request: &SummaryRequest<'_>) -> Result<String, Error> {
        let clip = |s: &str| -> String {
            let s = s.trim().replace('\n', " ");
            if s.chars().count() > 160 {
                format!("{}…", s.chars().take(160).collect::<String>())
            } else {
                s
            }
        };
        let requests: Vec<String> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| format!("- \"{}\"", clip(&m.text())))
            .collect();
        let calls: Vec<String> = request
            .messages
            .iter()
            .flat_map(|m| m.calls())
            .map(|c| format!("- {}({})", c.name, clip(&c.arguments)))
            .collect();
        let facts: Vec<String> = request
            .messages
            .iter()
            .flat_map(|m| {
                m.text()
                    .lines()
                    .filter(|l| {
                        let l = l.to_ascii_lowercase();
                        [
                            "error:", "decided:", "result:", "created:", "updated:", "found:",
                        ]
                        .iter()
                        .any(|k| l.contains(k))
                    })
                    .map(|l| format!("- {}", clip(l)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let (last, earlier) = match requests.split_last() {
            Some((last, earlier)) => (vec![last.clone()], earlier.to_vec()),
            None => (Vec::new(), Vec::new()),
        };
        let mut sections: [Vec<String>; 6] = [earlier, calls, last, Vec::new(), Vec::new(), facts];
        if let Some(previous) = request.previous {
            // Merged: the earlier summary's lines first, its task finished when a newer one came.
            let mut before = parse_sections(previous);
            if !sections[2].is_empty() {
                let finished = std::mem::take(&mut before[2]);
                before[0].extend(finished);
            }
            for (section, mut old) in sections.iter_mut().zip(before) {
                old.retain(|l| !section.contains(l));
                old.append(section);
                *section = old;
            }
        }
        let mut out = String::new();
        for (heading, lines) in SECTIONS.iter().zip(&sections) {
            out.push_str(heading);
            out.push('\n');
            if lines.is_empty() {
                out.push_str("- (none recorded)\n");
            }
            // The newest eight lines; of the requests, the first (the task) and the newest seven.
            let kept: Vec<&String> = if heading == &SECTIONS[0] && lines.len() > 8 {
                std::iter::once(&lines[0])
                    .chain(&lines[lines.len() - 7..])
                    .collect()
            } else {
                lines[lines.len().saturating_sub(8)..].iter().collect()
            };
            for line in kept {
                out.push_str(line);
                out.push('\n');
            }
        }
        // Respect the budget roughly (4 characters per token); the pipeline counts exactly.
        let max_chars = request.max_tokens.saturating_mul(4);
        if out.len() > max_chars {
            let mut cut = max_chars;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
        Ok(out)
    }
}

/// The bullet lines under each of [`SECTIONS`] in a summary (placeholders left out).
fn parse_sections(summary: &str) -> [Vec<String>; 6] {
    let mut out: [Vec<String>; 6] = Default::default();
    let mut at: Option<usize> = None;
    for line in summary.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            let name = trimmed.trim_start_matches('#').trim().to_lowercase();
            at = SECTIONS
                .iter()
                .position(|s| s.trim_start_matches("## ").to_lowercase() == name);
        } else if let Some(i) = at
            && trimmed.starts_with("- ")
            && trimmed != "- (none recorded)"
        {
            out[i].push(trimmed.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    #[test]
    fn deterministic_summaries_have_the_sections() {
        let messages = [
            Message::user("Fix the failing test in src/parser.rs"),
            Message::assistant_tool_calls(vec![ToolCall::function(
                "c1",
                "shell",
                "{\"command\": \"cargo test\"}",
            )]),
            Message::tool("c1", "error: assertion failed at src/parser.rs:212"),
            Message::user("Also reject [1,,2]"),
        ];
        let refs: Vec<&Message> = messages.iter().collect();
        let request = SummaryRequest {
            messages: &refs,
            prompt: DEFAULT_PROMPT,
            focus: Some("the parser"),
            max_tokens: 500,
            previous: None,
        };
        let text = DeterministicSummarizer
            .summarize(&request)
            .expect("summary");
        for section in SECTIONS {
            assert!(text.contains(section), "{section} in {text}");
        }
        assert!(text.contains("\"Also reject [1,,2]\""));
        assert!(text.contains("error: assertion failed at src/parser.rs:212"));
        assert_eq!(
            text,
            DeterministicSummarizer.summarize(&request).expect("again")
        );
        assert!(request.instructions().ends_with("Focus on: the parser"));
        assert!(
            request
                .transcript()
                .contains("-> shell({\"command\": \"cargo test\"})")
        );
    }
}
