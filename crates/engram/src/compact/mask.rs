//! A tool output's masked form: its head and tail around a marker that says what was hidden and
//! how to read it back.

use crate::count::TokenCounter;

/// Lines kept from the start and the end of a masked output.
const MASK_HEAD_LINES: usize = 4;
const MASK_TAIL_LINES: usize = 2;
const MASK_LINE_CHARS: usize = 160;

/// A tool output's masked form: its first and last lines around the archived-output
/// marker, which names the tool, the call, the size and where the original is. `None` when the
/// output is too short for masking to save anything.
pub(super) fn mask_text(
    text: &str,
    tool: &str,
    call_id: &str,
    reads_back: &str,
    counter: &TokenCounter,
) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let tokens = counter.count_text(text);
    if tokens < 60 {
        return None;
    }
    let clip = |l: &str| -> String {
        if l.chars().count() > MASK_LINE_CHARS {
            let cut: String = l.chars().take(MASK_LINE_CHARS).collect();
            format!("{cut}…")
        } else {
            l.to_owned()
        }
    };
    let (head, tail) = if lines.len() > MASK_HEAD_LINES + MASK_TAIL_LINES {
        (
            &lines[..MASK_HEAD_LINES],
            &lines[lines.len() - MASK_TAIL_LINES..],
        )
    } else {
        (&lines[..lines.len().min(2)], &[][..])
    };
    let hidden_lines = lines.len() - head.len() - tail.len();
    let mut out: Vec<String> = head.iter().map(|l| clip(l)).collect();
    out.push(format!(
        "[TOOL OUTPUT ARCHIVED - search history for details] engram masked {hidden_lines} of {} lines ({tokens} tokens) of `{tool}` output, call {call_id}{reads_back}",
        lines.len()
    ));
    out.extend(tail.iter().map(|l| clip(l)));
    let masked = out.join("\n");
    (counter.count_text(&masked) < tokens).then_some(masked)
}

/// `messages` with the newest tool outputs masked: the results after the last assistant
/// message, each to its head and tail around a marker that names its message (its id, else
/// `m<position>`) and, through `reads_back` (given that id), the way to read it whole. The last
/// resort for a request whose instructions, task and newest message alone are over its budget:
/// the model still sees what the output began and ended with, and can read the rest. `None`
/// when there is no such output, or masking saves nothing.
pub fn mask_newest_outputs(
    messages: &[crate::message::Message],
    counter: &TokenCounter,
    reads_back: &dyn Fn(&str) -> String,
) -> Option<Vec<crate::message::Message>> {
    use crate::message::{Content, Role};
    let last_call = messages.iter().rposition(|m| m.role == Role::Assistant)?;
    let names: std::collections::HashMap<&str, &str> = messages[last_call]
        .calls()
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str()))
        .collect();
    let mut out = messages.to_vec();
    let mut masked = 0;
    for (i, m) in messages.iter().enumerate().skip(last_call + 1) {
        if m.role != Role::Tool {
            continue;
        }
        let call = m.tool_call_id().unwrap_or_default();
        let id = m.id.clone().unwrap_or_else(|| format!("m{i}"));
        let tool = names.get(call).copied().unwrap_or("tool");
        if let Some(text) = mask_text(&m.text(), tool, call, &reads_back(&id), counter) {
            out[i].content = Some(Content::Text(text));
            masked += 1;
        }
    }
    (masked > 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolCall};

    #[test]
    fn the_newest_outputs_are_masked_with_their_way_back() {
        let counter = TokenCounter::new(crate::Tokenizer::chars_per_token(4));
        let long: String = (0..200)
            .map(|i| format!("line {i} of the build log\n"))
            .collect();
        let messages = vec![
            Message::system("You are an agent."),
            Message::user("Fix the build."),
            Message::assistant_tool_calls(vec![ToolCall::function(
                "c1",
                "bash",
                "{\"cmd\": \"make\"}",
            )]),
            Message::tool("c1", long.clone()),
        ];
        let out =
            mask_newest_outputs(&messages, &counter, &|id| format!("; read {id}")).expect("masked");
        let text = out[3].text();
        assert!(text.contains("line 0 of the build log"), "{text}");
        assert!(text.contains("line 199 of the build log"), "{text}");
        assert!(text.contains("`bash` output, call c1; read m3"), "{text}");
        assert!(counter.count_text(&text) < counter.count_text(&long) / 10);
        assert_eq!(out[..3], messages[..3]);
        // Nothing after the last call: nothing to mask.
        assert!(mask_newest_outputs(&messages[..3], &counter, &|_| String::new()).is_none());
    }
}
