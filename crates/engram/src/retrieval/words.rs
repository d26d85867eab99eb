//! The words text is searched by, one rule for compaction's recall, the agent's
//! `search_history` and every memory backend's full-text search: lower-case words, the
//! [`STOPWORDS`] left out, each stemmed by Porter2 (Snowball English, [`stem`]) (`terms`). The
//! SQLite backend's index and PostgreSQL's text search configuration (its own Snowball English
//! dictionary with no stop words, the query's words chosen here) follow the same two rules, so
//! a word found by one is found by all. A query is searched by every word it holds but its stop
//! words: how a question is worded is never read as a rule.
//!
//! Plain word matching misses "painted" for "paint", "Caroline's" for "Caroline" and "road
//! trip" for "roadtrip" (neighbouring words joined match a query's compound,
//! `terms_and_joined`). All are cheap to fix and need no model.

/// English words that carry no topic: Snowball's English stop list (articles, pronouns,
/// auxiliaries, question words, quantifiers like "each" and "few"; the list PostgreSQL's
/// `english` configuration ships), with "could", "would" and the pieces a contraction splits
/// into ("don't" is "don" and "t", "we've" is "we" and "ve"). A standard list, not one chosen
/// by what questions are asked here. Lower case, sorted by bytes, for a binary search.
#[rustfmt::skip]
pub const STOPWORDS: &[&str] = &[
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by",
    "can", "could", "d", "did", "do", "does", "doing", "don", "down", "during", "each", "few",
    "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers",
    "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "ll", "m", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off",
    "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "re",
    "s", "same", "she", "should", "so", "some", "such", "t", "than", "that", "the", "their",
    "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through",
    "to", "too", "under", "until", "up", "ve", "very", "was", "we", "were", "what", "when", "where",
    "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours",
    "yourself", "yourselves",
];

/// Whether `word` (lower case) is one of the [`STOPWORDS`].
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// A word's stem by Porter2 (Snowball English): "painted" and "painting" meet "paint",
/// "families" meets "family", "travelling" meets "traveling". `word` is lower case.
pub fn stem(word: &str) -> String {
    thread_local! {
        static PORTER2: rust_stemmers::Stemmer =
            rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    }
    PORTER2.with(|s| s.stem(word).into_owned())
}

/// Lower-case words of `text`, stop words removed, stemmed ([`stem`]).
pub(crate) fn terms(text: &str) -> Vec<String> {
    terms_and_joined(text, |_| false).0
}

/// The terms of a query ([`terms`]) without the numbers of its list: "(2)" anywhere, and "2."
/// or "2)" opening a line, number the items of a list ("put these in order: (1) the parade (2)
/// the talk") and say nothing about them. Searched, they would match every turn and every
/// session heading that holds the number (a session of the 1st, a time of 2 pm).
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    terms(&without_list_numbers(query))
}

/// `text` with its list's numbers ([`query_terms`]) replaced by a space: at most three digits,
/// in brackets, or opening a line and followed by "." or ")" and a space.
fn without_list_numbers(text: &str) -> String {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let opening = line.trim_start();
        let n = digits(opening);
        let mut rest = match opening.as_bytes().get(n) {
            Some(b'.' | b')')
                if (1..=3).contains(&n) && opening[n + 1..].starts_with(char::is_whitespace) =>
            {
                &opening[n + 1..]
            }
            _ => line,
        };
        while let Some(at) = rest.find('(') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let n = digits(after);
            if (1..=3).contains(&n) && after.as_bytes().get(n) == Some(&b')') {
                out.push(' ');
                rest = &after[n + 1..];
            } else {
                out.push('(');
                rest = after;
            }
        }
        out.push_str(rest);
    }
    out
}

/// [`terms`], and in the same pass the neighbouring words of `text` joined into one term ("road
/// trip" as "roadtrip"), so that a query that writes a compound as one word ("roadtrip",
/// "bookstore") finds the text that writes it as two. Both words are letters only, with only
/// spaces between them ([`joins`]); both are topical (no stop word) unless a hyphen joins them,
/// as in "check-up" and "to-do", which a query writes "checkup" and "todo". `wanted(first)` is
/// asked before a pair is built (compaction, which knows the query, builds only the pairs some
/// query term starts with). The joined terms count as matches, not as words: they do not
/// lengthen a document for BM25.
pub(crate) fn terms_and_joined(
    text: &str,
    wanted: impl Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut terms = Vec::new();
    let mut joined = Vec::new();
    // The previous word if it is letters only: lower-cased, whether it is topical, and where
    // it ends in `text`.
    let mut previous: Option<(String, bool, usize)> = None;
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        // `split` yields slices of `text`: a word starts at its distance from the text's start.
        let start = word.as_ptr() as usize - text.as_ptr() as usize;
        let end = start + word.len();
        let word = word.to_lowercase();
        let topical = !is_stopword(&word);
        if topical {
            terms.push(stem(&word));
        }
        if !word.chars().all(char::is_alphabetic) {
            previous = None;
            continue;
        }
        if let Some((first, first_topical, first_end)) = &previous
            && joins(&text[*first_end..start], *first_topical && topical)
            && wanted(first)
        {
            joined.push(stem(&format!("{first}{word}")));
        }
        previous = Some((word, topical, end));
    }
    (terms, joined)
}

/// Whether two neighbouring words separated by `gap` form a compound: a hyphen joins any two,
/// a space joins two topical words, and punctuation ("a list, check it") ends the compound.
fn joins(gap: &str, both_topical: bool) -> bool {
    gap == "-" || (both_topical && gap.chars().all(char::is_whitespace))
}

/// The query's terms, each once (a word the query repeats counts once).
pub(crate) fn unique_terms(query: &[String]) -> Vec<&String> {
    let mut unique: Vec<&String> = query.iter().collect();
    unique.sort();
    unique.dedup();
    unique
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_lower_case_and_found() {
        assert!(
            STOPWORDS.windows(2).all(|w| w[0] < w[1]),
            "sorted, once each"
        );
        for w in STOPWORDS {
            assert_eq!(w.to_lowercase(), *w);
            assert!(is_stopword(w), "{w}");
        }
        // Snowball's list: its quantifiers and prepositions are stop words, and nothing
        // beyond it and the contractions' pieces is.
        for stop in [
            "each",
            "few",
            "during",
            "between",
            "ourselves",
            "ve",
            "would",
        ] {
            assert!(is_stopword(stop), "{stop}");
        }
        for topical in ["also", "time", "first", "together", "paint", ""] {
            assert!(!is_stopword(topical), "{topical}");
        }
    }

    #[test]
    fn neighbouring_words_join_into_the_compound_a_query_writes_as_one() {
        let text = "We went on a road trip with my Smart-Watch, 2 new maps and a day off";
        let (words, all) = terms_and_joined(text, |_| true);
        assert_eq!(words, terms(text));
        for compound in ["roadtrip", "smartwatch", "newmap"] {
            assert!(all.iter().any(|j| j == compound), "{compound}: {all:?}");
        }
        // Across a stop word ("went on", "a road"), or with digits, nothing is joined.
        for never in ["wenton", "aroad", "2new", "dayoff"] {
            assert!(!all.iter().any(|j| j == never), "{never}: {all:?}");
        }
        // Stemmed as a query's word is: "road trips" is the query's "roadtrip".
        assert_eq!(terms_and_joined("road trips", |_| true).1, ["roadtrip"]);
        // A hyphen joins what a space would not: "check-up" is the query's "checkup".
        let (_, hyphened) = terms_and_joined("a check-up and a to-do, or check up", |_| true);
        assert_eq!(hyphened, ["checkup", "todo"]);
        // Punctuation ends a compound: "list, check" is two things, not a "listcheck".
        let (_, apart) = terms_and_joined("a packing list, check. Trip plans", |_| true);
        assert_eq!(apart, ["packinglist", "tripplan"]);
        // Only the pairs whose first word is wanted are built.
        assert_eq!(
            terms_and_joined(text, |first| first == "smart").1,
            ["smartwatch"]
        );
        // The query's own terms never hold them: a query is matched word by word.
        assert!(!terms(text).iter().any(|t| t == "roadtrip"));
    }

    #[test]
    fn stemming_joins_word_forms() {
        for (a, b) in [
            ("paint", "painted"),
            ("paint", "painting"),
            ("group", "groups"),
            ("bake", "baked"),
            ("stop", "stopped"),
            ("hobby", "hobbies"),
            ("family", "families"),
            ("traveling", "travelling"),
            ("travel", "travelled"),
            ("install", "installed"),
            ("try", "tried"),
            ("feel", "feelings"),
            ("kind", "kindness"),
            ("movie", "movies"),
        ] {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("class"), "class");
        // Short words and numbers are their own stems.
        for word in ["go", "2023", "ok"] {
            assert_eq!(stem(word), word);
        }
    }

    #[test]
    fn a_lists_numbers_are_not_searched() {
        let asked = |q: &str| query_terms(q).join(" ");
        assert_eq!(
            asked("in order: (1) the parade (2) the talk"),
            "order parad talk"
        );
        assert_eq!(
            asked("in order:\n1. the parade\n2) the talk"),
            "order parad talk"
        );
        // Numbers that say something stay: a version, a year, a size, a count in brackets.
        assert_eq!(
            asked("python 3.12 (2023) took 3 GB"),
            "python 3 12 2023 took 3 gb"
        );
        assert_eq!(asked("the (12345) ticket"), "12345 ticket");
    }
}
