//! A tool output's masked form: its head and tail around a marker that says what was hidden and
//! how to read it back.

use crate::count::TokenCounter;

/// Lines kept from the start and the end of a masked output.
const MASK_HEAD_LINES: usize = 4;
const MASK_TAIL_LINES: usize = 2;
const MASK_LINE_CHARS: usize = 160;

/// A tool output's masked form: its first and last lines around seed 002's archived-output
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
