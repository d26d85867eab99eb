//! Headings: the short system lines that start the sessions of a log and name their time (a
//! chat log's `[Session 2 - 1:14 pm on 25 May, 2023]`). Recall reads a log's sessions from
//! them, `search_history` too, and a session's timeline names its parts by them; any other
//! system message (a system prompt, engram's own status lines and digests) starts nothing.

use crate::message::{Message, Role};

/// The longest heading, in characters: a chat log's `[Session 12 - 1:14 pm on 25 May, 2023]`
/// is about forty.
const HEADING_CHARS: usize = 120;

/// Whether `m` is a heading: a system message ([`is_heading`]).
pub(crate) fn is_heading_message(m: &Message) -> bool {
    m.role == Role::System && is_heading(&m.text())
}

/// Whether the text of a system message is a heading that starts a session: one short line that
/// names a date or a time (a chat log's `[Session 2 - 1:14 pm on 25 May, 2023]`). A one-line
/// system prompt ("You are a helpful assistant.") names none and is not one, nor are engram's
/// own status lines and digests.
pub(crate) fn is_heading(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty()
        && text.chars().count() <= HEADING_CHARS
        && !text.contains('\n')
        && names_a_time(text)
}

/// Whether `text` names a date or a time: a numeric date or time (`2023/05/21`, `19:50`), a
/// year (1900 to 2099), a weekday, or a month's name (or its three letters) beside a number
/// (`8 May`, `May 2023`: "may" alone is a verb).
fn names_a_time(text: &str) -> bool {
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    const WEEKDAYS: [&str; 7] = [
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ];
    let numeric = text.as_bytes().windows(3).any(|w| {
        w[0].is_ascii_digit() && matches!(w[1], b'/' | b':' | b'-' | b'.') && w[2].is_ascii_digit()
    });
    if numeric {
        return true;
    }
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let number = |i: Option<&String>| i.is_some_and(|w| w.bytes().all(|b| b.is_ascii_digit()));
    words.iter().enumerate().any(|(i, w)| {
        let year = w.len() == 4 && w.parse::<u32>().is_ok_and(|y| (1900..2100).contains(&y));
        let month = MONTHS
            .iter()
            .any(|m| m == w || (w.len() == 3 && m.starts_with(w.as_str())));
        let beside_a_number = number(words.get(i + 1)) || i > 0 && number(words.get(i - 1));
        year || WEEKDAYS.contains(&w.as_str()) || month && beside_a_number
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_name_a_date_or_a_time() {
        for yes in [
            "[Session 1 - 1:56 pm on 8 May, 2023]",
            "[Session sf8b19e94f2 - 2023/05/21 (Sun) 19:50]",
            "Tuesday",
            "May 2023",
            "3 Jan",
        ] {
            assert!(names_a_time(yes), "{yes}");
        }
        for no in [
            "You are a helpful assistant.",
            "You may use the tools below.",
            "Answer in English.",
            "[Session context consolidated]",
        ] {
            assert!(!names_a_time(no), "{no}");
        }
        assert!(is_heading("  [Session 3 - 4:04 pm on 20 January, 2023]  "));
        assert!(!is_heading(
            "[Session 3 - 4:04 pm on 20 January, 2023]\nand a second line"
        ));
        assert!(!is_heading(&format!(
            "On 20 January, 2023 {}",
            "word ".repeat(30)
        )));
        assert!(is_heading_message(&Message::system("Tuesday 9:30")));
        assert!(!is_heading_message(&Message::user("Tuesday 9:30")));
    }
}
