//! The words text is searched by, one rule for compaction's recall, the agent's
//! `search_history` and every memory backend's full-text search: lower-case words, the
//! [`STOPWORDS`] left out, each stemmed by Porter2 (Snowball English, [`stem`]). The SQLite
//! backend's index and PostgreSQL's text search configuration (its own Snowball English
//! dictionary with no stop words, the query's words chosen here) follow the same two rules, so
//! a word found by one is found by all. Every one ranks what it finds by BM25 ([`bm25_weight`]).

/// BM25's saturation of a word's count in a text (recall, `search_history`, memory search on
/// every backend; tantivy's default too).
pub const BM25_K1: f64 = 1.2;

/// BM25's weight of a text's length against the average length.
pub const BM25_B: f64 = 0.75;

/// BM25's inverse document frequency of a word that `df` of `n` texts hold.
pub fn bm25_idf(n: f64, df: f64) -> f64 {
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln()
}

/// One query word's BM25 weight in one text: `n` texts, `df` of them holding the word, `f`
/// times in this one of `len` words, `avg_len` words on average.
pub fn bm25_weight(n: f64, df: f64, f: f64, len: f64, avg_len: f64) -> f64 {
    bm25_idf(n, df) * f * (BM25_K1 + 1.0) / (f + BM25_K1 * (1.0 - BM25_B + BM25_B * len / avg_len))
}

/// English words that carry no topic (articles, pronouns, auxiliaries, question words, and the
/// pieces a contraction splits into: "don't" is "don" and "t"). Lower case, sorted by bytes,
/// for a binary search.
pub const STOPWORDS: &[&str] = &[
    "a", "about", "after", "again", "all", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "both", "but", "by", "can", "could", "d", "did", "do", "does",
    "doing", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "ll", "m", "me", "more",
    "most", "my", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "our",
    "ours", "out", "over", "own", "re", "s", "same", "she", "should", "so", "some", "such", "t",
    "than", "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this",
    "those", "through", "to", "too", "under", "until", "up", "ve", "very", "was", "we", "were",
    "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would",
    "you", "your", "yours",
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
        for topical in ["also", "during", "few", "now", "paint", ""] {
            assert!(!is_stopword(topical), "{topical}");
        }
    }
}
