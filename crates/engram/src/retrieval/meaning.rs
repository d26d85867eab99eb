//! Meaning: the text a unit is searched and embedded by, its similarity of meaning to a query
//! (its whole text and its best sentence), and the fusion of meaning with words, as one score
//! ([`fuse`]) and as a merge of two rankings by place ([`fuse_ranks`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use super::sentences::sentences;
use crate::Error;
use crate::embed::{Embedder, Stored, VectorStore, dot, embed_each};
use crate::message::{Message, Role};

/// A message's searchable text: its content, then each tool call's arguments with JSON decoded
/// into its keys and leaf values, one per line (so JSON escapes do not glue quotes or `\n`
/// onto identifiers).
pub fn message_lines_text(message: &Message) -> Cow<'_, str> {
    if message.calls().is_empty() {
        return message.text();
    }
    let mut out = message.text().into_owned();
    for call in message.calls() {
        let args = call.arguments.trim();
        let decoded = if args.starts_with('{') || args.starts_with('[') {
            serde_json::from_str::<serde_json::Value>(args).ok()
        } else {
            None
        };
        let mut parts = Vec::new();
        match decoded {
            Some(value) => flatten_json(&value, &mut parts),
            None if !args.is_empty() => parts.push(call.arguments.clone()),
            None => {}
        }
        for part in parts {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&part);
        }
    }
    Cow::Owned(out)
}

fn flatten_json(value: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                flatten_json(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| flatten_json(v, out)),
        Value::Null => {}
        Value::String(s) => out.push(s.clone()),
        other => out.push(other.to_string()),
    }
}

/// Appends the text `message` is embedded by: the speaker's name, then its searchable lines
/// ([`message_lines_text`]), then a newline. Compaction (a unit's messages in
/// turn) and `search_history` (one message) embed this same text, so a message's vector is
/// computed once and found again in the store's cache by either.
pub(crate) fn push_meaning_text(message: &Message, text: &mut String) {
    push_named_lines(message.name(), &message_lines_text(message), text);
}

/// [`push_meaning_text`] of a message whose speaker is `name` and searchable lines `lines`.
fn push_named_lines(name: Option<&str>, lines: &str, text: &mut String) {
    if let Some(name) = name {
        text.push_str(name);
        text.push(' ');
    }
    text.push_str(lines);
    text.push('\n');
}

/// What a unit of messages is embedded by: its whole text ([`push_meaning_text`]) and its
/// sentences, each on its own ([`Meaning::push`]).
#[derive(Debug, Default)]
pub(crate) struct Meaning {
    pub(crate) text: String,
    sentences: Vec<String>,
}

/// The sentences of one message embedded on their own, the first this many: a tool's output of
/// thousands of lines is not embedded line by line. On the dev data nine in ten messages have
/// at most 25.
const MAX_SENTENCES: usize = 32;

/// A sentence shorter than this many words, its speaker's name counted ("John Wow!", "Thanks
/// again."), says nothing on its own. Measured on LoCoMo against three words without the name
/// (single-hop and temporal questions lost half a point at 2,048) and two.
const MIN_SENTENCE_WORDS: usize = 3;

impl Meaning {
    /// Adds `message`: its text as [`push_meaning_text`] writes it, and its sentences, each led
    /// by the speaker's name as the whole text is. A sentence ends at each line's end and after
    /// each run of `.`, `!` or `?` (and the quotes or brackets that close it) followed by a
    /// space: a dot inside a path, a name or a number (`main.py`, `3.5`, `e.g.,`) ends none.
    pub(crate) fn push(&mut self, message: &Message) {
        let lines = message_lines_text(message);
        push_named_lines(message.name(), &lines, &mut self.text);
        self.push_sentences(&lines, message.name().unwrap_or_default());
    }

    /// A memory entry's: its `content` whole (embedded as written, so that a vector kept before
    /// sentences were embedded is found again), and its sentences.
    pub(crate) fn of_entry(content: &str) -> Self {
        let mut meaning = Meaning {
            text: content.to_owned(),
            ..Meaning::default()
        };
        meaning.push_sentences(content, "");
        meaning
    }

    /// The texts this unit is embedded by ([`similarities`]): its whole text, then its sentences
    /// when it has more than one (a single sentence says what the whole text says).
    pub(crate) fn texts(&self) -> impl Iterator<Item = &str> {
        let split = if self.sentences.len() > 1 {
            &self.sentences[..]
        } else {
            &[]
        };
        std::iter::once(self.text.as_str()).chain(split.iter().map(String::as_str))
    }

    /// Adds the sentences of one message's `lines` ([`sentences`]), each led by `name` unless it
    /// is empty.
    fn push_sentences(&mut self, lines: &str, name: &str) {
        let name_words = name.split_whitespace().count();
        let said = sentences(lines)
            .filter(|s| name_words + s.split_whitespace().count() >= MIN_SENTENCE_WORDS)
            .take(MAX_SENTENCES);
        for sentence in said {
            self.sentences.push(if name.is_empty() {
                sentence.to_owned()
            } else {
                format!("{name} {sentence}")
            });
        }
    }
}

/// Each unit's similarity of meaning to `query`, by `embedder`: its whole text's cosine
/// similarity mixed with its best sentence's ([`super::RecallProfile::best_sentence`]), or the whole text's alone
/// when it has fewer than two sentences. A turn that names what the query asks for in passing
/// ("I'm off to do some taekwondo!" inside a turn about the weekend, for "what martial arts
/// has John done?") is near the query by that sentence while its whole text is not. The query
/// is read as asked and without the names of `speakers` ([`query_vectors`]). The vectors of the
/// texts and sentences are kept in `vectors` when given (and read from there when kept), the
/// query's never are.
pub(crate) fn similarities(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    query: &str,
    speakers: &Speakers,
    units: &[Meaning],
    best_sentence: f64,
) -> Result<Vec<f32>, Error> {
    let readings = query_vectors(embedder, query, speakers)?;
    meaning_similarities(embedder, vectors, &readings, units, best_sentence)
}

/// The words of the names of a conversation's speakers (the `name` of its user and assistant
/// messages), lower-case.
#[derive(Debug, Default)]
pub(crate) struct Speakers(HashSet<String>);

impl Speakers {
    /// Adds the speaker of `message`, if it is a user's or an assistant's and has a name (a
    /// tool result's `name` is its tool's, not a speaker's).
    pub(crate) fn add(&mut self, message: &Message) {
        if matches!(message.role, Role::User | Role::Assistant)
            && let Some(name) = message.name()
        {
            self.0
                .extend(name.split_whitespace().map(str::to_lowercase));
        }
    }

    /// `query` without the words that name a speaker ("Melanie", "Melanie's"), or `None` when
    /// it names none, or nothing else.
    fn left_out_of(&self, query: &str) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let names_one = |word: &str| {
            let core = word
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            let core = ["'s", "\u{2019}s"]
                .iter()
                .find_map(|s| core.strip_suffix(s))
                .unwrap_or(&core);
            self.0.contains(core)
        };
        let words: Vec<&str> = query.split_whitespace().collect();
        let rest: Vec<&str> = words.iter().copied().filter(|w| !names_one(w)).collect();
        (rest.len() < words.len() && !rest.is_empty()).then(|| rest.join(" "))
    }
}

/// The query's vectors for recall among the turns of `speakers`: as asked, and without the
/// speakers' names when it names one ([`Speakers::left_out_of`]); a unit's similarity is the mean
/// of its similarities to the two ([`meaning_similarities`]). A name in a short question weighs
/// much in its vector, and it is near every turn its speaker says or that is said to them
/// ("Thanks, Melanie!"), while the words already find the named speaker's turns
/// ([`favour_named_speakers`]): without it, "what activities does Melanie partake in?" is near
/// "I just signed up for a pottery class". Read as asked too, so that the speaker still counts.
/// Measured on LoCoMo with the name left out alone (temporal questions lost 0.015 at 2,048), with
/// the mean of the two vectors (0.012) and with the mean of the similarities, which kept every
/// category at least where it was (docs/benchmarks-history.md).
pub(crate) fn query_vectors(
    embedder: &dyn Embedder,
    query: &str,
    speakers: &Speakers,
) -> Result<Vec<Vec<f32>>, Error> {
    let unnamed = speakers.left_out_of(query);
    let texts: Vec<&str> = std::iter::once(query).chain(unnamed.as_deref()).collect();
    embed_each(embedder, &texts)
}

/// [`similarities`] against a query already embedded: its `readings` ([`query_vectors`]), each
/// unit's similarity the mean of its similarities to each reading (memory search reads its
/// entries page by page and embeds the query once).
pub(crate) fn meaning_similarities(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    readings: &[Vec<f32>],
    units: &[Meaning],
    best_sentence: f64,
) -> Result<Vec<f32>, Error> {
    let embedded = unit_vectors(embedder, vectors, units)?;
    Ok(similarities_to(readings, units, &embedded, best_sentence))
}

/// The vectors of each unit's whole text and then its sentences ([`Meaning::texts`]), all units
/// in turn, kept in `vectors` when given (and read from there when kept): what
/// [`similarities_to`] compares a query with, embedded once for every query asked of the units.
pub(crate) fn unit_vectors(
    embedder: &dyn Embedder,
    vectors: Option<&dyn VectorStore>,
    units: &[Meaning],
) -> Result<Vec<Vec<f32>>, Error> {
    let texts: Vec<&str> = units.iter().flat_map(Meaning::texts).collect();
    match vectors {
        Some(vectors) if embedder.keeps_vectors() => {
            embed_each(&Stored::new(embedder, vectors), &texts)
        }
        _ => embed_each(embedder, &texts),
    }
}

/// [`meaning_similarities`] from the units' vectors already made (`embedded`, by
/// [`unit_vectors`] of the same `units`).
pub(crate) fn similarities_to(
    readings: &[Vec<f32>],
    units: &[Meaning],
    embedded: &[Vec<f32>],
    best_sentence: f64,
) -> Vec<f32> {
    let best_sentence = best_sentence as f32;
    let mut rest = embedded;
    units
        .iter()
        .map(|u| {
            // The unit's whole text, then its sentences (`Meaning::texts`).
            let (own, after) = rest.split_at(u.texts().count());
            rest = after;
            let of = |q: &[f32]| {
                let whole = dot(q, &own[0]);
                match own[1..].iter().map(|s| dot(q, s)).reduce(f32::max) {
                    None => whole,
                    Some(best) => (1.0 - best_sentence) * whole + best_sentence * best,
                }
            };
            let sum: f32 = readings.iter().map(|q| of(q)).sum();
            sum / readings.len().max(1) as f32
        })
        .collect()
}

/// BM25 and similarity of meaning in one score: each scaled to its best unit, the similarity
/// counted only above the average (most units of a conversation are about something else), and
/// mixed with `meaning` the similarity's share ([`super::RecallProfile::meaning`], [`super::RecallProfile::meaning_merged`]). A unit that
/// shares no word with the query can now be recalled when it means the same; the scores stay
/// proportional, as the neighbours' shares and the order by value per cost need.
pub(crate) fn fuse(lexical: &[f64], similar: &[f32], meaning: f64) -> Vec<f64> {
    let best = lexical.iter().copied().fold(0.0, f64::max);
    let similar: Vec<f64> = similar.iter().map(|&s| f64::from(s)).collect();
    lexical
        .iter()
        .zip(above_typical(&similar))
        .map(|(&l, s)| {
            let l = if best > 0.0 { l / best } else { 0.0 };
            (1.0 - meaning) * l + meaning * s
        })
        .collect()
}

/// Similarities counted above the typical unit's (their average), on the scale of a perfect
/// match: `(s - mean) / (1 - mean)`, 0 for the average and below. Most of a conversation is
/// about something else, so only what stands out from it counts; and what stands out counts by
/// how near it comes to the query, not by how it compares with the nearest unit, so that where
/// nothing is near nothing rises far.
pub(super) fn above_typical(similar: &[f64]) -> Vec<f64> {
    let n = similar.len().max(1) as f64;
    let mean = similar.iter().sum::<f64>() / n;
    let scale = (1.0 - mean).max(1e-9);
    similar
        .iter()
        .map(|&s| ((s - mean) / scale).max(0.0))
        .collect()
}

/// Similarities counted above their average and scaled to the highest: 1 for the nearest, 0 for
/// the average and below. The sessions of a log are compared so: one of them is the most about
/// the query.
pub(super) fn above_average(similar: &[f64]) -> Vec<f64> {
    let n = similar.len().max(1) as f64;
    let mean = similar.iter().sum::<f64>() / n;
    let top = similar.iter().copied().fold(f64::MIN, f64::max);
    let spread = (top - mean).max(1e-9);
    similar
        .iter()
        .map(|&s| ((s - mean) / spread).max(0.0))
        .collect()
}

/// Hybrid recall's order: the fused ranking (words and meaning) and the ranking by words alone,
/// merged by reciprocal-rank fusion. A unit's value is the sum over the two rankings of
/// `1 / (depth + place)`, each unit once, best first; `depth` is `depth_share` ([`super::RecallProfile::fuse_depth`]) of `holds`, how
/// many units the recall budget holds (its tokens over the ranked units' mean; for a search, the
/// hits it returns), at least 1. Fused alone, units merely near the query's topic pushed out
/// evidence that shares its words (a long history has many sessions about the same things).
/// Summing places lets a unit that both rankings hold near their heads beat one that only
/// meaning ranks there, and the small depth makes a place near the head count far more than
/// one further down, so each ranking's best come first. Ties go to the newer unit (the higher
/// index), as in each ranking.
pub(crate) fn fuse_ranks(
    fused: &[(usize, f64)],
    words: &[(usize, f64)],
    holds: f64,
    depth_share: f64,
) -> Vec<(usize, f64)> {
    let depth = (depth_share * holds).max(1.0);
    let mut value: HashMap<usize, f64> = HashMap::with_capacity(fused.len().max(words.len()));
    for ranking in [fused, words] {
        for (place, &(unit, _)) in ranking.iter().enumerate() {
            *value.entry(unit).or_default() += 1.0 / (depth + place as f64);
        }
    }
    let mut order: Vec<(usize, f64)> = value.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::Topics;
    use crate::retrieval::RecallProfile;
    use crate::retrieval::bm25::Bm25;
    use crate::retrieval::words::terms;

    fn best_sentence() -> f32 {
        RecallProfile::default().best_sentence as f32
    }

    fn meaning() -> f64 {
        RecallProfile::default().meaning
    }

    fn meaning_merged() -> f64 {
        RecallProfile::default().meaning_merged
    }

    /// Each text as a unit of its own, cut into sentences as a memory entry is.
    fn meanings(texts: &[&str]) -> Vec<Meaning> {
        texts.iter().map(|t| Meaning::of_entry(t)).collect()
    }

    #[test]
    fn a_message_is_cut_into_sentences_led_by_its_speaker() {
        let mut message = crate::Message::user(
            "Had a long week at work. Wow! I'm off to do some taekwondo now!\n\
             Yes!!! Done at last",
        );
        message.set_name(Some("John".to_owned()));
        let mut meaning = Meaning::default();
        meaning.push(&message);
        assert!(
            meaning.text.starts_with("John Had a long week"),
            "{}",
            meaning.text
        );
        // A run of `.`, `!` or `?` cuts, and so does a line's end; "John Wow!" and "John Yes!!!"
        // are too short to stand alone.
        assert_eq!(
            meaning.sentences,
            [
                "John Had a long week at work.",
                "John I'm off to do some taekwondo now!",
                "John Done at last",
            ]
        );
        // A dot inside a path or a number ends no sentence; one before a closing quote does.
        let mut code = Meaning::default();
        code.push(&crate::Message::user(
            "Fixed main.py for v3.5 today. She said \"it works now.\" Then we shipped it",
        ));
        assert_eq!(
            code.sentences,
            [
                "Fixed main.py for v3.5 today.",
                "She said \"it works now.\"",
                "Then we shipped it",
            ]
        );
        // Space after a sentence's end is no sentence, however long the speaker's name: it
        // would be embedded as the name alone.
        let mut named = crate::Message::user("We shipped the fix today.   ");
        named.set_name(Some("Mary Ann Smith".to_owned()));
        let mut spaced = Meaning::default();
        spaced.push(&named);
        assert_eq!(
            spaced.sentences,
            ["Mary Ann Smith We shipped the fix today."]
        );
        assert_eq!(
            sentences("We shipped the fix today.   \n\n  Then we slept. ").collect::<Vec<_>>(),
            ["We shipped the fix today.", "Then we slept."]
        );
        // A tool's output of thousands of lines gives at most MAX_SENTENCES.
        let mut long = Meaning::default();
        long.push(&crate::Message::user("one more line here\n".repeat(1000)));
        assert_eq!(long.sentences.len(), MAX_SENTENCES);
    }

    #[test]
    fn a_unit_is_near_the_query_by_its_best_sentence() {
        /// A model that sees a topic only where it stands out: a text of at most six words
        /// that names a martial art is about martial arts, anything longer about the rest.
        #[derive(Debug)]
        struct Diluted;
        impl Embedder for Diluted {
            fn name(&self) -> &str {
                "diluted"
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
                Ok(texts
                    .iter()
                    .map(|t| {
                        let short = t.split_whitespace().count() <= 6;
                        let art = ["martial", "taekwondo", "karate"]
                            .iter()
                            .any(|w| t.contains(w));
                        if short && art {
                            vec![0.9, 0.1]
                        } else {
                            vec![0.1, 0.9]
                        }
                    })
                    .collect())
            }
        }
        let units = meanings(&[
            "What a weekend, the kids were wild and the dog ran off. Off to taekwondo now!",
            "What a weekend, the kids were wild and the dog ran off again today",
            "karate",
        ]);
        let similar = similarities(
            &Diluted,
            None,
            "what martial arts",
            &Speakers::default(),
            &units,
            RecallProfile::default().best_sentence,
        )
        .expect("embeds");
        let far = 0.9f32 * 0.1 + 0.1 * 0.9;
        // The first unit's whole text is far; its second sentence is near, and counts for
        // its share. The second has no such sentence, the third a single one (its whole text).
        let near = 0.9f32 * 0.9 + 0.1 * 0.1;
        let expected = (1.0 - best_sentence()) * far + best_sentence() * near;
        assert!((similar[0] - expected).abs() < 1e-6, "{similar:?}");
        assert!((similar[1] - far).abs() < 1e-6, "{similar:?}");
        assert!((similar[2] - near).abs() < 1e-6, "{similar:?}");
    }

    #[test]
    fn fusion_recalls_by_meaning_and_keeps_the_words_weight() {
        let docs: Vec<String> = [
            "My dog Rex chases frisbees",
            "the meeting moved to room 4",
            "which room is the meeting in",
        ]
        .map(String::from)
        .to_vec();
        let query = "What pet do I have?";
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let lexical = bm25.scores(&terms(query));
        assert!(
            lexical.iter().all(|&s| s == 0.0),
            "no shared word: {lexical:?}"
        );
        let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
        let similar = similarities(
            &Topics,
            None,
            query,
            &Speakers::default(),
            &meanings(&texts),
            RecallProfile::default().best_sentence,
        )
        .expect("embeds");
        let fused = fuse(&lexical, &similar, meaning());
        assert!(fused[0] > 0.0, "{fused:?}");
        assert_eq!(fused[1], 0.0, "below the average similarity adds nothing");

        // With words in common, the best lexical match still counts in full.
        let lexical = bm25.scores(&terms("meeting room"));
        let fused = fuse(
            &lexical,
            &similarities(
                &Topics,
                None,
                "meeting room",
                &Speakers::default(),
                &meanings(&texts),
                RecallProfile::default().best_sentence,
            )
            .expect("embeds"),
            meaning(),
        );
        assert!(fused[1] > fused[0] && fused[2] > fused[0], "{fused:?}");
    }

    #[test]
    fn meaning_weighs_more_where_words_alone_keep_their_place() {
        // The best word match, a turn about pets that shares no word, and a turn whose words
        // score 0.7 of the best.
        let docs = [
            "the room is booked",
            "my puppy naps all day",
            "room four again",
        ];
        let similar = similarities(
            &Topics,
            None,
            "where does my dog sleep",
            &Speakers::default(),
            &meanings(&docs),
            RecallProfile::default().best_sentence,
        )
        .expect("embeds");
        let lexical = [1.0, 0.0, 0.7];
        // Standing alone (memory search, search_history), the words' match stays ahead...
        let alone = fuse(&lexical, &similar, meaning());
        assert!(alone[2] > alone[1], "{alone:?}");
        // ...while compaction, whose merge with words alone keeps the word match in its place,
        // lets the turn that means the query pass it.
        let merged = fuse(&lexical, &similar, meaning_merged());
        assert!(merged[1] > merged[2], "{merged:?}");
        assert!(
            merged[0] > merged[2],
            "the best word match still leads: {merged:?}"
        );
    }

    #[test]
    fn the_query_means_its_topic_as_much_as_the_speaker_it_names() {
        let named = |mut message: crate::Message, name: &str| {
            message.set_name(Some(name.to_owned()));
            message
        };
        let mut speakers = Speakers::default();
        speakers.add(&named(crate::Message::user("hi"), "Melanie"));
        speakers.add(&named(crate::Message::assistant("hello"), "Caroline Smith"));
        // A tool result's name is its tool's, not a speaker's.
        let mut tool = named(crate::Message::user("ok"), "bash");
        tool.role = Role::Tool;
        speakers.add(&tool);
        let left = |q: &str| speakers.left_out_of(q);
        assert_eq!(
            left("What activities does Melanie partake in?").as_deref(),
            Some("What activities does partake in?")
        );
        assert_eq!(
            left("What did Caroline\u{2019}s and melanie's kids like?").as_deref(),
            Some("What did and kids like?")
        );
        assert_eq!(
            left("did Smith run bash?").as_deref(),
            Some("did run bash?")
        );
        assert_eq!(left("where is the meeting?"), None, "no name");
        assert_eq!(left("Melanie?"), None, "nothing but a name");
        assert_eq!(Speakers::default().left_out_of("Melanie?"), None);

        /// A model that reads a name and pottery as two directions.
        #[derive(Debug)]
        struct Named;
        impl Embedder for Named {
            fn name(&self) -> &str {
                "named"
            }
            fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
                Ok(texts
                    .iter()
                    .map(|t| match (t.contains("Melanie"), t.contains("pottery")) {
                        (true, _) => vec![1.0, 0.0],
                        (false, true) => vec![0.0, 1.0],
                        (false, false) => vec![0.6, 0.8],
                    })
                    .collect())
            }
        }
        // Asked as written, the query is all name; without it, all topic: a unit's similarity is
        // the mean of its similarities to the two.
        let q = query_vectors(&Named, "Melanie pottery?", &speakers).expect("embeds");
        assert_eq!(q, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        let units = meanings(&[
            "Thanks, Melanie!",
            "I signed up for a pottery class",
            "Thanks so much, Melanie! I signed up for a pottery class.",
        ]);
        let similar = similarities(
            &Named,
            None,
            "Melanie pottery?",
            &speakers,
            &units,
            RecallProfile::default().best_sentence,
        )
        .expect("embeds");
        assert_eq!(
            similar[..2],
            [0.5, 0.5],
            "the vocative no longer outranks the topic"
        );
        // Each reading finds the unit's best sentence for itself: as asked, the whole text
        // (1); without the name, the sentence about pottery (best_sentence() of 1).
        let both = 0.5 * (1.0 + best_sentence());
        assert!((similar[2] - both).abs() < 1e-6, "{similar:?}");
        let asked = similarities(
            &Named,
            None,
            "Melanie pottery?",
            &Speakers::default(),
            &units,
            RecallProfile::default().best_sentence,
        )
        .expect("embeds");
        assert_eq!(asked[..2], [1.0, 0.0], "without speakers, as asked");
    }

    #[test]
    fn an_embedder_that_miscounts_is_an_error() {
        #[derive(Debug)]
        struct Short;
        impl Embedder for Short {
            fn name(&self) -> &str {
                "short"
            }
            fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
                Ok(vec![vec![1.0]])
            }
        }
        let err = similarities(
            &Short,
            None,
            "q",
            &Speakers::default(),
            &meanings(&["a", "b"]),
            RecallProfile::default().best_sentence,
        )
        .expect_err("miscounted");
        assert!(err.to_string().contains("1 vectors for 2 texts"), "{err}");
    }

    #[test]
    fn the_rankings_fuse_by_place_each_unit_once() {
        let order = |fused: &[usize], words: &[usize], holds| -> Vec<usize> {
            let ranking = |units: &[usize]| -> Vec<(usize, f64)> {
                units.iter().map(|&u| (u, 1.0)).collect()
            };
            fuse_ranks(&ranking(fused), &ranking(words), holds, 0.25)
                .into_iter()
                .map(|(u, _)| u)
                .collect()
        };
        // 3 is second and first: it passes 7, first and third; 9 (second by words only) passes
        // 5 (third by the fused ranking only), as a later place counts a little less.
        assert_eq!(order(&[7, 3, 5, 1], &[3, 9, 7], 160.0), [3, 7, 9, 5, 1]);
        assert_eq!(order(&[], &[2, 4], 160.0), [2, 4]);
        // 6 is third in both. When the budget holds four units (a depth of one), a head counts
        // more than two thirds; when it holds 160 (a depth of 40), being in both counts more.
        assert_eq!(order(&[5, 8, 6], &[4, 9, 6], 4.0), [5, 4, 6, 9, 8]);
        assert_eq!(order(&[5, 8, 6], &[4, 9, 6], 160.0), [6, 5, 4, 9, 8]);
    }
}
