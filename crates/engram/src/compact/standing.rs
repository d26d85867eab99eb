//! A user's standing instructions: what they told the agent to hold from then on ("Always run
//! the tests before you commit", "Never push to main", "From now on, answer in French"). Such a
//! rule governs every later answer, while the turns that need it rarely share a word with it (a
//! question about a meeting's date, under "always give dates as MM/DD/YYYY"), so recall by the
//! query would not bring it back; a compaction that drops it has the agent break it. A
//! compaction keeps them in view first (`super::planner`), as it keeps the instructions and the
//! task.
//!
//! An instruction is told by how English states a lasting rule, not by what it is about: a
//! message of the user's that opens with "always", "never", "from now on" or "going forward"
//! (after "please", "and" or "also"). The message leads with the rule: a rule inside a long
//! message (a numbered list in a pasted prompt, a document) comes with all the rest, which is
//! recall's to weigh. A remark that opens so ("Never been there before!") is kept too; it is
//! short, and the share of the budget these take is bounded.

use crate::message::{Message, Role};
use crate::retrieval;

/// The openings of a sentence that state a lasting rule, word by word.
const OPENINGS: [&[&str]; 4] = [
    &["always"],
    &["never"],
    &["from", "now", "on"],
    &["going", "forward"],
];

/// Words that may come before an opening ("Please always...", "And never...").
const LEAD_INS: [&str; 3] = ["please", "and", "also"];

/// The words of `sentence`, lower-cased, without the punctuation around them.
fn words(sentence: &str) -> impl Iterator<Item = String> + '_ {
    sentence
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
}

/// The standing instruction `message` states: its first sentence, when it opens as a lasting
/// rule does, lower-cased with its spaces made single (the same rule said twice is kept once);
/// `None` when it states none or is not the user's. Every message set aside is asked, so only
/// the first words are read until they open a rule.
pub(crate) fn instruction(message: &Message) -> Option<String> {
    if message.role != Role::User || !message.calls().is_empty() {
        return None;
    }
    let text = message.text();
    let sentence = retrieval::sentences(&text).next()?;
    // A lead-in, the longest opening, and a word after it: no rule is a lone opening.
    let first: Vec<String> = words(sentence).take(5).collect();
    let start = usize::from(
        first
            .first()
            .is_some_and(|w| LEAD_INS.contains(&w.as_str())),
    );
    let opens = OPENINGS.iter().any(|opening| {
        first.len() > start + opening.len()
            && first[start..]
                .iter()
                .zip(opening.iter())
                .all(|(w, o)| w == o)
    });
    opens.then(|| words(sentence).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_rule_is_told_by_how_the_user_s_message_opens() {
        let said = |text: &str| instruction(&Message::user(text));
        assert_eq!(
            said("Always run cargo fmt before you commit.").as_deref(),
            Some("always run cargo fmt before you commit")
        );
        assert!(said("From now on, answer in French. Thanks!").is_some());
        assert!(said("please never push to main").is_some());
        assert!(said("Going forward, keep replies short").is_some());
        assert!(said("And always cite the file you changed.").is_some());
        // The same rule, said again in other spacing and case, is one rule.
        assert_eq!(
            said("ALWAYS run  cargo fmt before you commit"),
            said("Always run cargo fmt before you commit.")
        );
        // Not a rule: the word elsewhere, a word that only starts with it, a lone word.
        assert!(said("I always forget the tests.").is_none());
        // A rule inside a longer message is not one it leads with.
        assert!(said("Here is the brief.\n2. Always use the proper names.").is_none());
        assert!(said("Nevertheless, it passed.").is_none());
        assert!(said("Always!").is_none());
        assert!(said("What did we decide about the cache?").is_none());
        // Only the user's: an assistant's or an instruction's "always" is not a user's rule.
        assert!(instruction(&Message::assistant("Always happy to help.")).is_none());
        assert!(instruction(&Message::system("Always answer briefly.")).is_none());
    }
}
