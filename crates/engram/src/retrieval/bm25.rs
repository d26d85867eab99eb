//! BM25, the one ranking by words: compaction's recall, the agent's `search_history`, a
//! session's timeline and the in-memory store rank with `Bm25`; the SQLite and PostgreSQL
//! backends rank with the same formula ([`bm25_weight`]) inside their own indexes.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::words::unique_terms;

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

/// An index of documents (each a list of searchable terms, [`super::words::terms`]) that ranks
/// them by BM25 for a query. Documents are added one at a time and keep their order: a
/// session's log grows by its newest messages and its index with it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Bm25 {
    /// Each term's documents, with the term's count in each, in the order added.
    postings: HashMap<String, Vec<(u32, u32)>>,
    /// Each document's length in words.
    lengths: Vec<u32>,
    /// The sum of the lengths.
    total: u64,
    /// Each document's rarest term ([`Bm25::rarest`]), worked out when first asked for and
    /// again after a document is added (every word's frequency changes with it).
    rarest: OnceLock<Vec<f64>>,
}

impl Bm25 {
    /// An index of `documents`, each as long as its terms.
    pub(crate) fn new(documents: Vec<Vec<String>>) -> Self {
        let mut index = Bm25::default();
        for doc in documents {
            let len = doc.len();
            index.add(doc, len);
        }
        index
    }

    /// Adds a document of `terms` that is `len` words long: a document's terms may hold more
    /// than its words ([`super::words::terms_and_joined`]'s compounds count as matches, not as
    /// words).
    pub(crate) fn add(&mut self, terms: impl IntoIterator<Item = String>, len: usize) {
        let doc = self.lengths.len() as u32;
        let mut tf: HashMap<String, u32> = HashMap::new();
        for t in terms {
            *tf.entry(t).or_default() += 1;
        }
        for (t, f) in tf {
            self.postings.entry(t).or_default().push((doc, f));
        }
        self.lengths.push(len as u32);
        self.total += len as u64;
        self.rarest = OnceLock::new();
    }

    /// How many documents the index holds.
    pub(crate) fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Each document's rarest term, as that term's inverse document frequency ([`bm25_idf`]):
    /// how specific the most specific thing it says is (0 for a document without terms).
    pub(crate) fn rarest(&self) -> &[f64] {
        self.rarest.get_or_init(|| {
            let n = self.len() as f64;
            let mut rarest = vec![0.0f64; self.len()];
            for list in self.postings.values() {
                let idf = bm25_idf(n, list.len() as f64);
                for &(doc, _) in list {
                    let r = &mut rarest[doc as usize];
                    *r = r.max(idf);
                }
            }
            rarest
        })
    }

    /// Each document's length in words.
    pub(crate) fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    /// Each document's score for the query terms (a term the query repeats counts once).
    pub(crate) fn scores(&self, query: &[String]) -> Vec<f64> {
        let mut scores = vec![0.0; self.len()];
        for (_, matches) in self.matches(query) {
            for (doc, weight) in matches {
                scores[doc] += weight;
            }
        }
        scores
    }

    /// For each query term (once each) that some document holds, the documents holding it with
    /// the term's BM25 weight in each; [`Bm25::scores`] is their sum per document.
    pub(crate) fn matches<'a>(
        &'a self,
        query: &'a [String],
    ) -> impl Iterator<Item = (&'a String, Vec<(usize, f64)>)> + 'a {
        let n = self.len() as f64;
        let avg = (self.total as f64 / n.max(1.0)).max(1.0);
        unique_terms(query).into_iter().filter_map(move |t| {
            let list = self.postings.get(t)?;
            let df = list.len() as f64;
            Some((
                t,
                list.iter()
                    .map(|&(doc, f)| {
                        let len = f64::from(self.lengths[doc as usize]);
                        (doc as usize, bm25_weight(n, df, f64::from(f), len, avg))
                    })
                    .collect(),
            ))
        })
    }

    /// Each document's score for `query`, each word's weight scaled by how few of the groups
    /// (`group_of[doc]`, below `groups`: a log's sessions) use it: the words a question shares
    /// with every session of a long history ("time", "last", the name of who speaks throughout)
    /// say nothing about where in it the answer is, while its topic is said in some sessions
    /// and not in others. The scale is a word's BM25 inverse frequency over the groups against
    /// that of a word half of them use, at most 1, to the power `profile.spread`; the groups are
    /// counted with `profile.spread_prior` more that use no word of the query, so that a word
    /// in each of a few sessions (what a short history is about) keeps its weight. With one
    /// group (a single conversation, a task's trajectory) every word keeps its weight.
    ///
    /// Second, in the same pass, each document's plain score ([`Bm25::scores`]).
    pub(crate) fn located_scores(
        &self,
        query: &[String],
        group_of: &[usize],
        groups: usize,
        profile: &super::RecallProfile,
    ) -> (Vec<f64>, Vec<f64>) {
        let mut scores = vec![0.0; self.len()];
        let mut plain = vec![0.0; self.len()];
        let n = groups as f64 + profile.spread_prior.max(0.0);
        let half = bm25_idf(n, (n / 2.0).max(1.0));
        for (_, matches) in self.matches(query) {
            let scale = if groups > 1 && profile.spread > 0.0 {
                let mut held: Vec<usize> = matches.iter().map(|&(doc, _)| group_of[doc]).collect();
                held.sort_unstable();
                held.dedup();
                (bm25_idf(n, held.len() as f64) / half)
                    .min(1.0)
                    .powf(profile.spread)
            } else {
                1.0
            };
            for (doc, weight) in matches {
                scores[doc] += scale * weight;
                plain[doc] += weight;
            }
        }
        (scores, plain)
    }

    /// Each group's score for the query terms, a group (`group_of[doc]`, below `groups`) one
    /// document of all its members' words: the sessions of a log ranked as wholes.
    pub(crate) fn grouped_scores(
        &self,
        query: &[String],
        group_of: &[usize],
        groups: usize,
    ) -> Vec<f64> {
        let mut lengths = vec![0.0; groups];
        for (&len, &g) in self.lengths.iter().zip(group_of) {
            lengths[g] += f64::from(len);
        }
        let n = groups as f64;
        let avg = (lengths.iter().sum::<f64>() / n.max(1.0)).max(1.0);
        let mut scores = vec![0.0; groups];
        for t in unique_terms(query) {
            let Some(list) = self.postings.get(t) else {
                continue;
            };
            let mut tf: HashMap<usize, u32> = HashMap::new();
            for &(doc, f) in list {
                *tf.entry(group_of[doc as usize]).or_default() += f;
            }
            let df = tf.len() as f64;
            for (g, f) in tf {
                scores[g] += bm25_weight(n, df, f64::from(f), lengths[g], avg);
            }
        }
        scores
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::words::terms;

    #[test]
    fn grouping_sums_the_members_words() {
        let bm25 = Bm25::new(vec![
            terms("red apple"),
            terms("green apple"),
            terms("blue sky"),
        ]);
        let s = bm25.grouped_scores(&terms("apple"), &[0, 0, 1], 2);
        assert!(s[0] > 0.0 && s[1] == 0.0, "{s:?}");
        // The group of both apples is one document among two: it scores as a text that says
        // "apple" twice in four words.
        let alone = Bm25::new(vec![terms("red apple green apple"), terms("blue sky")]);
        assert_eq!(s, alone.scores(&terms("apple")));
    }

    #[test]
    fn a_documents_rarest_term_is_the_most_specific_thing_it_says() {
        let mut bm25 = Bm25::new(vec![
            terms("a great time"),
            terms("a great time at the pottery class"),
            terms("great"),
        ]);
        let n = 3.0;
        assert_eq!(bm25.rarest()[0], bm25_idf(n, 2.0), "time, in two of three");
        assert_eq!(bm25.rarest()[1], bm25_idf(n, 1.0), "pottery, in one");
        assert_eq!(bm25.rarest()[2], bm25_idf(n, 3.0), "great, in all");
        // A document added changes every word's frequency: asked again, it is worked out again.
        bm25.add(terms("pottery wheel"), 2);
        assert_eq!(bm25.rarest().len(), 4);
        assert_eq!(
            bm25.rarest()[1],
            bm25_idf(4.0, 1.0),
            "class, now the rarest"
        );
        assert_eq!(bm25.rarest()[3], bm25_idf(4.0, 1.0), "wheel");
    }

    #[test]
    fn documents_added_one_by_one_score_as_a_batch() {
        let docs = [
            "I went to a support group yesterday",
            "The weather is nice today",
            "We painted a sunrise together last week",
        ];
        let batch = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let mut grown = Bm25::default();
        for d in docs {
            let t = terms(d);
            let len = t.len();
            grown.add(t, len);
        }
        let q = terms("paint the sunrise in a group");
        assert_eq!(batch.scores(&q), grown.scores(&q));
        // A term counted as a match but not as a word (a compound) does not lengthen its text.
        let mut compound = Bm25::default();
        compound.add(["roadtrip".to_owned(), "road".into(), "trip".into()], 2);
        compound.add(["sky".to_owned(), "blue".into()], 2);
        assert_eq!(compound.lengths(), [2, 2]);
        let roadtrip = ["roadtrip".to_owned()];
        let per_term: Vec<_> = compound.matches(&roadtrip).collect();
        assert_eq!(per_term.len(), 1);
        assert_eq!(per_term[0].1.len(), 1);
        assert!(
            compound
                .scores(&["nothing".to_owned()])
                .iter()
                .all(|&s| s == 0.0)
        );
    }

    #[test]
    fn a_word_every_session_uses_weighs_less_than_the_topic() {
        let profile = crate::retrieval::RecallProfile::default();
        // Twelve sessions of two turns: "last time together" is said in every one, "garden" in
        // half of them.
        let mut docs = Vec::new();
        let mut group_of = Vec::new();
        for s in 0..12 {
            docs.push(terms(if s % 2 == 0 {
                "we planted the garden beds"
            } else {
                "we walked by the river"
            }));
            docs.push(terms("the last time together"));
            group_of.extend([s, s]);
        }
        let bm25 = Bm25::new(docs);
        let query = terms("the garden, the last time together");
        let plain = bm25.scores(&query);
        let (located, same) = bm25.located_scores(&query, &group_of, 12, &profile);
        assert_eq!(same, plain);
        // By BM25 alone the turn of three everyday words outranks the one of the topic;
        // located, the topic leads.
        assert!(plain[1] > plain[0], "{plain:?}");
        assert!(located[0] > located[1], "{located:?}");
        assert_eq!(
            located[0], plain[0],
            "a word in half the sessions keeps its weight"
        );
        // One group, or a short history (three sessions, each saying both): nothing changes.
        assert_eq!(bm25.located_scores(&query, &[0; 24], 1, &profile).0, plain);
        let short = Bm25::new(vec![
            terms("the garden at last"),
            terms("a time"),
            terms("garden time"),
            terms("garden time again"),
        ]);
        assert_eq!(
            short.located_scores(&query, &[0, 0, 1, 2], 3, &profile).0,
            short.scores(&query)
        );
        // Off, it is BM25.
        let off = crate::retrieval::RecallProfile {
            spread: 0.0,
            ..profile
        };
        assert_eq!(bm25.located_scores(&query, &group_of, 12, &off).0, plain);
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
