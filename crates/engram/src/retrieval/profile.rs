//! Every weight recall uses, in one value, each with the situation of an agent's history that
//! it serves. Nothing here reads how a question is worded: each weight acts on where matches
//! fall in the log (their turns, sessions, speakers, lengths, how rare what they say is) or on
//! how two rankings merge.

use crate::Error;

/// The names [`RecallProfile::with`] takes, one per weight.
const WEIGHTS: [&str; 15] = [
    "answer",
    "neighbour",
    "reach",
    "topical_session",
    "dated_session",
    "session_meaning",
    "named_speaker",
    "cost",
    "meaning",
    "meaning_merged",
    "best_sentence",
    "fuse_depth",
    "spread",
    "spread_prior",
    "specificity",
];

/// The weights of recall (`super::rank::order`) and of hybrid search's fusion
/// (`super::meaning::fuse`, `super::meaning::fuse_ranks`). [`RecallProfile::default`] is
/// what every surface uses; the fields are public so that a test or an experiment can move
/// one weight and see what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallProfile {
    /// The share of a question's score that the turn right after it gets: a question is
    /// answered by the next turn ("what did you take away from the book?" -> "it taught me
    /// self-acceptance"), which often shares no word with it. Larger than [`Self::neighbour`]:
    /// an answer is more surely about its question than any other neighbour.
    pub answer: f64,
    /// The share of a match's score that the turn right beside it gets, either way, and again
    /// for each turn further (so `neighbour ^ k` at `k` turns): what a turn says is often in
    /// its neighbours, the lead-in before it ("something happened two weeks ago!") and the
    /// reply after it ("did you join in?" "yes, it was amazing"). The same share reaches the
    /// turn before and after of a speaker the query names, across the other's reply: their
    /// thread (`super::rank::neighbours`). Below one half: a neighbour never outranks a match of
    /// half the strength.
    pub neighbour: f64,
    /// The words (searchable terms, stop words left out) over which a share passing over a turn
    /// halves as well: a few short turns of a chat pass a topic on, a long reply or a tool's
    /// output keeps it to itself. About a long paragraph.
    pub reach: f64,
    /// The share of the best unit's score that a session about the query's topic (its whole
    /// text matches well) adds to its matching units, in proportion to how much of each one's
    /// match is on words that locate the topic ([`Self::spread`]): a word said in passing in
    /// small talk weighs less than the same word in the session about it, and a turn there
    /// that shares only an everyday word with the question is not lifted with the matches.
    pub topical_session: f64,
    /// The share of the best unit's score that a session whose heading matches the query adds
    /// to its matching units: a question that names a time ("in August 2023") is answered in
    /// the sessions of that time, whose headings carry the date while the answer does not.
    pub dated_session: f64,
    /// The share of the best unit's fused score that the sessions nearest the query in meaning
    /// add to their units, as [`Self::topical_session`] in proportion to where their match is
    /// (hybrid recall): a session about the topic in other words.
    pub session_meaning: f64,
    /// The share by which a unit's score rises when the query names its speaker as a word: a
    /// name that speaks half the turns weighs little in BM25, yet most questions about a person
    /// are answered in that person's turns. A share, not a filter: half again, so that a
    /// question that names the wrong person (or both) still finds the other's better match.
    pub named_speaker: f64,
    /// How much a unit's length counts against it: the order is by score over `(length /
    /// typical) ^ cost`, what each token of the budget buys. A long reply or output shares more
    /// of any query's words without answering better and takes the room of several short
    /// turns; the square root keeps long evidence in reach. A unit shorter than typical is
    /// worth more than its score only for its match on words that locate the topic
    /// (`super::rank::value`).
    pub cost: f64,
    /// The share of similarity of meaning in a ranking that stands alone (memory search):
    /// less than the words' share, so that a turn that shares the query's words stays ahead
    /// of one that is merely about the same kind of thing.
    pub meaning: f64,
    /// The share of similarity of meaning in compaction's fused ranking, which is then merged
    /// by place with the order by words alone (`super::meaning::fuse_ranks`): the merge keeps
    /// what words rank first in reach, so meaning may weigh as much as words here.
    pub meaning_merged: f64,
    /// The share of a unit's best sentence in its similarity of meaning (its whole text has the
    /// rest): a turn that names the topic in passing ("off to taekwondo now!" in a turn about
    /// the weekend) is near the query by that sentence alone.
    pub best_sentence: f64,
    /// The depth of the merge by place (`super::meaning::fuse_ranks`) as a share of the units
    /// the budget holds: a small depth makes the head of each ranking count far more than its
    /// tail, so each ranking's best come first.
    pub fuse_depth: f64,
    /// How much a word that most of a log's sessions use weighs less
    /// (`super::Bm25::located_scores`): an agent asked about one topic across a long history
    /// needs the turns of that topic, not those that share the question's everyday words
    /// ("time", "last", a name) which every session has. A log of one session (an agent's own
    /// history, a chat sent whole through the proxy) keeps every word's weight: a word said all
    /// through it is as often the project the whole history is about as an everyday word, and a
    /// question about the project is answered by the turns that name it. The power of the
    /// scale; 0 turns it off.
    pub spread: f64,
    /// The sessions, using none of the query's words, that the scale of [`Self::spread`]
    /// counts besides the log's own: a word in each of a few sessions may be what they are all
    /// about (a user who brings up the same project every time), and only across more sessions
    /// than these does "in nearly all of them" show that a word is everyday. With 4, a history
    /// of up to four sessions keeps every word's weight.
    pub spread_prior: f64,
    /// How much a unit's specificity scales its score: the rarity in the log of the rarest
    /// word it holds, against that of the typical unit of the same voice (its speaker, else its
    /// role). A turn that names nothing rarer than everyday words ("glad you had a great
    /// time!", "thanks, Mel!") tells nothing about a topic even when it shares an everyday word
    /// of the question, while a turn that names a place, a person, a project or an error is what
    /// recall is for. Each voice against its own: a user's short fact is weighed among the
    /// user's turns, not against an assistant's long explanations. 1 scales by the plain ratio,
    /// 0 turns it off.
    pub specificity: f64,
}

impl Default for RecallProfile {
    fn default() -> Self {
        RecallProfile {
            answer: 0.6,
            neighbour: 0.4,
            reach: 64.0,
            topical_session: 0.3,
            dated_session: 0.3,
            session_meaning: 0.1,
            named_speaker: 0.5,
            cost: 0.5,
            meaning: 0.35,
            meaning_merged: 0.5,
            best_sentence: 0.5,
            fuse_depth: 0.25,
            spread: 1.0,
            spread_prior: 4.0,
            specificity: 1.0,
        }
    }
}

impl RecallProfile {
    /// The profile with each `NAME=VALUE` of `spec` (comma-separated; a name is a field's) set:
    /// how an experiment moves a weight without a build. An unknown name or a value that is not a
    /// number is an error that names it.
    pub fn with(mut self, spec: &str) -> Result<Self, Error> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part.split_once('=').ok_or_else(|| {
                Error::Malformed(format!("`{part}`: write a weight as NAME=VALUE"))
            })?;
            let value: f64 = value
                .trim()
                .parse()
                .map_err(|_| Error::Malformed(format!("`{part}`: {value} is not a number")))?;
            let field = match name.trim() {
                "answer" => &mut self.answer,
                "neighbour" => &mut self.neighbour,
                "reach" => &mut self.reach,
                "topical_session" => &mut self.topical_session,
                "dated_session" => &mut self.dated_session,
                "session_meaning" => &mut self.session_meaning,
                "named_speaker" => &mut self.named_speaker,
                "cost" => &mut self.cost,
                "meaning" => &mut self.meaning,
                "meaning_merged" => &mut self.meaning_merged,
                "best_sentence" => &mut self.best_sentence,
                "fuse_depth" => &mut self.fuse_depth,
                "spread" => &mut self.spread,
                "spread_prior" => &mut self.spread_prior,
                "specificity" => &mut self.specificity,
                other => {
                    return Err(Error::UnknownName {
                        what: "recall weight",
                        given: other.to_owned(),
                        expected: WEIGHTS.join(", "),
                    });
                }
            };
            *field = value;
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_is_set_by_its_name() {
        let p = RecallProfile::default()
            .with("neighbour=0.25, cost = 0.75,")
            .expect("valid");
        assert_eq!(p.neighbour, 0.25);
        assert_eq!(p.cost, 0.75);
        assert_eq!(p.answer, RecallProfile::default().answer);
        let err = RecallProfile::default().with("nieghbour=1").unwrap_err();
        assert!(err.to_string().contains("nieghbour"), "{err}");
        assert!(
            err.to_string().contains("neighbour"),
            "the names taken: {err}"
        );
        assert!(RecallProfile::default().with("cost=lots").is_err());
        assert!(RecallProfile::default().with("cost").is_err());
    }
}
