//! Recalling older messages that serve a query: BM25 over words with light stemming, the
//! speaker's name counted as part of the text, and a bonus for query words that stay together.
//!
//! Plain BM25 misses "painted" for "paint" and "Caroline's" for "Caroline"; chat logs name the
//! speaker outside the content (`name`), which is where "what did Caroline say" finds its
//! answer. Both are cheap to fix and do not need a model.

use std::collections::HashMap;

/// English words that carry no topic (articles, pronouns, auxiliaries, question words).
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "did", "do", "does", "doing",
    "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "more", "most", "my", "no",
    "nor", "not", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "out", "over",
    "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under",
    "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who",
    "whom", "why", "will", "with", "would", "you", "your", "yours", "s", "t", "ve", "ll", "re",
    "d", "m",
];

/// Lower-case words of `text`, stop words removed, lightly stemmed.
pub(crate) fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// A light suffix stripper (plural, past tense, gerund, adverb), enough to join word forms.
pub(crate) fn stem(word: &str) -> String {
    let w = word;
    let n = w.chars().count();
    if n <= 3 || !w.is_ascii() {
        return w.to_owned();
    }
    for (suffix, keep) in [
        ("ies", "y"),
        ("ing", ""),
        ("ed", ""),
        ("ly", ""),
        ("es", ""),
        ("s", ""),
    ] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
            && !(suffix == "s" && base.ends_with('s'))
        {
            let mut b = base.to_owned();
            // "stopped" -> "stopp" -> "stop"; "running" -> "runn" -> "run".
            if (suffix == "ing" || suffix == "ed")
                && b.len() >= 4
                && b.as_bytes()[b.len() - 1] == b.as_bytes()[b.len() - 2]
                && !matches!(b.as_bytes()[b.len() - 1], b'l' | b's' | b'z')
            {
                b.pop();
            }
            // "baked" -> "bak" and "bake" -> "bak": drop a final e so both meet.
            b.push_str(keep);
            return b
                .strip_suffix('e')
                .filter(|s| s.len() >= 3)
                .unwrap_or(&b)
                .to_owned();
        }
    }
    w.strip_suffix('e')
        .filter(|s| s.len() >= 3)
        .unwrap_or(w)
        .to_owned()
}

/// BM25 over a set of documents (each a list of terms).
pub(crate) struct Bm25 {
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<usize>,
    df: HashMap<String, u32>,
    avg_len: f64,
}

impl Bm25 {
    pub(crate) fn new(documents: Vec<Vec<String>>) -> Self {
        let mut df: HashMap<String, u32> = HashMap::new();
        let mut docs = Vec::with_capacity(documents.len());
        let mut lengths = Vec::with_capacity(documents.len());
        for doc in documents {
            let mut tf: HashMap<String, u32> = HashMap::new();
            lengths.push(doc.len());
            for t in doc {
                *tf.entry(t).or_default() += 1;
            }
            for t in tf.keys() {
                *df.entry(t.clone()).or_default() += 1;
            }
            docs.push(tf);
        }
        let avg_len = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().sum::<usize>() as f64 / lengths.len() as f64).max(1.0)
        };
        Bm25 {
            docs,
            lengths,
            df,
            avg_len,
        }
    }

    /// Each document's score for the query terms.
    pub(crate) fn scores(&self, query: &[String]) -> Vec<f64> {
        let (k1, b) = (1.2, 0.75);
        let n = self.docs.len() as f64;
        let mut unique: Vec<&String> = query.iter().collect();
        unique.sort();
        unique.dedup();
        self.docs
            .iter()
            .zip(&self.lengths)
            .map(|(tf, &len)| {
                unique
                    .iter()
                    .map(|t| {
                        let Some(&f) = tf.get(*t) else { return 0.0 };
                        let df = f64::from(*self.df.get(*t).unwrap_or(&1));
                        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                        let f = f64::from(f);
                        idf * f * (k1 + 1.0) / (f + k1 * (1.0 - b + b * len as f64 / self.avg_len))
                    })
                    .sum()
            })
            .collect()
    }
}

/// Conversations answer in the next turn: "what did you take away from the book?" matches the
/// query, "it taught me self-acceptance" holds the answer without sharing a word with it. A unit
/// that follows a question (`asks`) gets a share of the question's score; every unit gets a
/// smaller share of the next one's (the turn a matching reply answers).
pub(crate) fn with_neighbours(scores: &[f64], asks: &[bool]) -> Vec<f64> {
    const FROM_QUESTION: f64 = 0.6;
    const FROM_NEXT: f64 = 0.3;
    (0..scores.len())
        .map(|i| {
            let previous = if i > 0 && asks[i - 1] {
                scores[i - 1]
            } else {
                0.0
            };
            let next = scores.get(i + 1).copied().unwrap_or(0.0);
            scores[i] + FROM_QUESTION * previous + FROM_NEXT * next
        })
        .collect()
}

/// The order in which to recall units: by score per square root of their cost, so that a short
/// message that answers the query is not crowded out by a long one that merely shares more of
/// its words (long assistant replies do); the square root keeps long evidence in reach.
pub(crate) fn value(score: f64, tokens: usize) -> f64 {
    score / (tokens.max(1) as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_inherit_from_the_turn_they_answer() {
        let scores = with_neighbours(&[0.0, 2.0, 0.0, 0.0], &[true; 4]);
        assert!(scores[2] > scores[0] && scores[2] > scores[3]);
        assert!(scores[1] > scores[2]);
        let scores = with_neighbours(&[0.0, 2.0, 0.0], &[false; 3]);
        assert_eq!(scores[2], 0.0, "a statement lends nothing to the next turn");
        assert!(value(1.0, 100) > value(1.5, 1000));
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
        ] {
            assert_eq!(stem(a), stem(b), "{a} {b}");
        }
        assert_eq!(stem("class"), "class");
    }

    #[test]
    fn bm25_ranks_the_matching_document_first() {
        let docs = [
            "I went to a support group yesterday",
            "The weather is nice today",
            "We painted a sunrise together last week",
        ];
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let scores = bm25.scores(&terms("When did they paint the sunrise?"));
        assert!(scores[2] > scores[0] && scores[2] > scores[1], "{scores:?}");
    }
}
