//! Recall's order of a log's units for a query, the one rule compaction's recall and the
//! agent's `search_history` follow: BM25 over the units' words (the speaker's name counted as
//! part of the text), lifted by the sessions about the query's topic or its time, passed on to
//! the neighbouring turns, raised for the speaker the query names; with hybrid recall fused with
//! similarity of meaning. Then the value of spending a budget on each ([`value`]).
//!
//! Every rule reads where matches fall in the log (turns, sessions, speakers, lengths), never
//! how the query is worded: a question asked in other words finds the same turns.

use std::collections::{HashMap, HashSet};

use super::log_sessions::{
    favour_dated_sessions, favour_sessions_by_meaning, favour_topical_sessions, session_of,
};
use super::meaning::fuse;
use super::{Bm25, RecallProfile};

/// What recall knows of each unit besides its words, in the log's order.
#[derive(Debug, Default)]
pub(crate) struct Traits<'a> {
    /// The unit asks something (a question mark): the next turn answers it.
    pub(crate) asks: Vec<bool>,
    /// It starts with a heading ([`super::is_heading`]), which starts a session.
    pub(crate) headings: Vec<bool>,
    /// Who speaks it (a message's `name`).
    pub(crate) speakers: Vec<Option<&'a str>>,
    /// Its voice: its speaker, else its role ("user", "assistant", "tool"). What a unit says is
    /// weighed against the typical unit of its voice ([`specific`]).
    pub(crate) voices: Vec<&'a str>,
    /// Its length in searchable words: how far a topic carries past it
    /// ([`RecallProfile::reach`]).
    pub(crate) lengths: Vec<usize>,
}

/// A ranking: unit indices with their scores, best first.
pub(crate) type Ranking = Vec<(usize, f64)>;

/// What [`order`] finds: the rankings and what [`value`] reads of each unit besides its score.
#[derive(Debug)]
pub(crate) struct Ordered {
    /// Recall's order, fused with meaning under hybrid recall.
    pub(crate) fused: Ranking,
    /// Under hybrid recall, the order by words alone, for the caller to merge with `fused` by
    /// place ([`super::fuse_ranks`]).
    pub(crate) words_only: Option<Ranking>,
    /// Each unit's share of its match on the words that locate the topic, 1 where no word
    /// matches (a unit found by meaning or by its neighbours).
    pub(crate) locality: Vec<f64>,
}

/// Recall's order of the units for `query`, whose searched words are `terms`: `bm25` indexes the
/// units in the log's order; `similar` is each unit's similarity of meaning to the query (hybrid
/// recall). Each word weighs by how few of the log's sessions use it ([`Bm25::located_scores`]);
/// in a log of one session every word keeps its weight.
///
/// The sessions about the query's topic and those its time dates lift their matching units; a
/// session's heading that shares the query's words leads to the session's first turn, as a
/// question leads to its answer; a match lends a share to the turns around it ([`neighbours`]);
/// a named speaker's turns weigh more. With `similar`, the scores are fused with meaning and the
/// sessions nearest the query in meaning rise too, and the order by words alone comes second,
/// for the caller to merge by place ([`super::fuse_ranks`]). Units left at zero are left out.
pub(crate) fn order(
    bm25: &Bm25,
    terms: &[String],
    traits: &Traits<'_>,
    query: &str,
    similar: Option<&[f32]>,
    profile: &RecallProfile,
) -> Ordered {
    let (sessions, count) = session_of(&traits.headings);
    let (mut lexical, plain) = bm25.located_scores(terms, &sessions, count, profile);
    // Each unit's share of its match on the words that locate the topic (1 where no word
    // matches: a unit found by meaning alone).
    let locality: Vec<f64> = plain
        .iter()
        .zip(&lexical)
        .map(|(&plain, &located)| if plain > 0.0 { located / plain } else { 1.0 })
        .collect();
    let mut names_a_time = false;
    if count > 1 {
        // Each session's heading score, read before the topical rise changes it.
        let mut dated = vec![0.0; count];
        for (i, &heading) in traits.headings.iter().enumerate() {
            if heading {
                dated[sessions[i]] = lexical[i];
            }
        }
        // A heading that shares the query's words: the query names what a heading says (in a
        // chat log, the session's date).
        names_a_time = dated.iter().any(|&d| d > 0.0);
        let by_session = bm25.grouped_scores(terms, &sessions, count);
        favour_topical_sessions(
            &mut lexical,
            &sessions,
            &by_session,
            &locality,
            profile.topical_session,
        );
        favour_dated_sessions(&mut lexical, &sessions, &dated, profile.dated_session);
    }
    // A session's heading that shares the query's words leads to the session's first turn, as
    // a question leads to its answer: "what was John doing in August 2023?" is answered by the
    // turn after the heading dated 13 August, 2023 ("since we last chatted, I'm volunteering as
    // a mentor"). By words only: a heading's similarity of meaning says nothing.
    let asks: Vec<bool> = traits
        .asks
        .iter()
        .zip(&traits.headings)
        .zip(&lexical)
        .map(|((&asks, &heading), &score)| asks || (heading && score > 0.0))
        .collect();
    let mut words_only: Option<Vec<f64>> = None;
    if let Some(similar) = similar {
        words_only = Some(lexical.clone());
        lexical = fuse(&lexical, similar, profile.meaning_merged);
        // A question that names a session's time is answered in the sessions of that time (the
        // dated rise above); sessions lifted by their meaning would crowd them out.
        if count > 1 && !names_a_time {
            favour_sessions_by_meaning(
                &mut lexical,
                &sessions,
                &traits.headings,
                similar,
                &locality,
                profile.session_meaning,
            );
        }
    }
    let specific = specific(bm25.rarest(), &traits.voices, profile.specificity);
    let named = named_speakers(&traits.speakers, query);
    let order_of = |matches: &[f64]| {
        let mut scores = neighbours(matches, &asks, &sessions, &named, traits, profile);
        for (score, specific) in scores.iter_mut().zip(&specific) {
            *score *= specific;
        }
        favour_named_speakers(&mut scores, &named, profile.named_speaker);
        let mut order: Ranking = (0..scores.len())
            .filter(|&i| scores[i] > 0.0)
            .map(|i| (i, scores[i]))
            .collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        order
    };
    Ordered {
        fused: order_of(&lexical),
        words_only: words_only.map(|w| order_of(&w)),
        locality,
    }
}

/// A lent share below this part of the best match is dropped: it would rank a turn above those
/// that match nothing for no reason one could tell.
const CRUMB: f64 = 0.001;

/// What a turn says is often in the turns around it: the lead-in before it ("something
/// happened two weeks ago!"), the reply after it ("did you join in?" "yes, it was amazing"),
/// the answer to a question ("what did you take away from the book?" "it taught me
/// self-acceptance"). Each unit's score plus what its neighbours lend it, each way: a match
/// lends [`RecallProfile::neighbour`] of its score (over its length's cost, as [`value`] counts
/// it, in words) to the turn beside it, and the share halves
/// with every [`RecallProfile::reach`] words between them, so short turns pass a topic on to
/// the next few while a long reply or a tool's output keeps it to itself. A question lends
/// [`RecallProfile::answer`] to the turn right after it, however long. From each side a unit
/// takes the largest lend that reaches it, not their sum. A session's end (its next heading)
/// stops a lend; a heading lends only to its session's first turn (as a question), and takes
/// nothing.
///
/// A speaker the query names (`named`, [`named_speakers`]) carries a thread of their own: a
/// match lends that speaker's turn before and after it, across the other voice's turn in
/// between, as much as the turn beside it. A question about what someone said is answered in
/// their own turns, and what they say next goes on with what they just said ("I joined an
/// activist group" - "that's great!" - "we're marching next month"), while the reply between
/// takes a share of its own.
pub(crate) fn neighbours(
    matches: &[f64],
    asks: &[bool],
    session_of: &[usize],
    named: &[bool],
    traits: &Traits<'_>,
    profile: &RecallProfile,
) -> Vec<f64> {
    let n = matches.len();
    let best = matches.iter().copied().fold(0.0, f64::max);
    let mut out = matches.to_vec();
    if n < 2 || best <= 0.0 {
        return out;
    }
    let headings = &traits.headings;
    // How much of a lend survives passing over unit `i` whole: the neighbour's share again (a
    // topic fades turn by turn), halved for every `reach` words of it.
    let over = |i: usize| {
        profile.neighbour * 0.5f64.powf(traits.lengths[i] as f64 / profile.reach.max(1e-9))
    };
    let floor = CRUMB * best;
    let keep = |lend: f64| if lend < floor { 0.0 } else { lend };
    // What a unit lends is its score over its length's cost when it is longer than typical
    // ([`value`], in words against the typical unit's; a short turn lends its score): a long output that holds the query's words among hundreds of others says
    // less about the turns beside it than a short turn that holds them, and a neighbour never
    // outranks, by its share, the match it borrows from.
    let typical = typical_tokens(traits.lengths.iter().copied());
    let lends: Vec<f64> = matches
        .iter()
        .zip(&traits.lengths)
        .map(|(&score, &words)| score / length_cost(words, typical, profile.cost).max(1.0))
        .collect();
    let voices = &traits.voices;
    // What a named speaker's thread lends unit `i` from `own`, their turn on the far side of
    // `between`: the neighbour's share, as from the turn beside it.
    let thread = |i: usize, between: usize, own: Option<&usize>| match own {
        Some(&own) if named[i] && voices[between] != voices[i] => lends[own] * profile.neighbour,
        _ => 0.0,
    };
    // Forward: what reaches unit `i` from the units before it; `last` is each voice's latest
    // turn of the session before `i`.
    // Without a named speaker (an agent's history, a question that names nobody) there is no
    // thread to follow.
    let threads = named.contains(&true);
    let mut last: HashMap<&str, usize> = HashMap::new();
    let mut flow = 0.0f64;
    for i in 1..n {
        let from = i - 1;
        if threads && !headings[from] {
            last.insert(voices[from], from);
        }
        if session_of[from] != session_of[i] || headings[i] {
            flow = 0.0;
            last.clear();
            continue;
        }
        let share = if headings[from] {
            0.0
        } else {
            profile.neighbour
        };
        let passed = flow * over(from);
        let lent = if asks[from] {
            (lends[from] * profile.answer).max(lends[from] * share)
        } else {
            lends[from] * share
        };
        let lent = lent.max(thread(i, from, last.get(voices[i])));
        flow = keep(passed.max(lent));
        out[i] += flow;
    }
    // Back: what reaches unit `i` from the units after it; `next` is each voice's earliest turn
    // of the session after `i + 1`.
    let mut next: HashMap<&str, usize> = HashMap::new();
    let mut flow = 0.0f64;
    for i in (0..n - 1).rev() {
        let from = i + 1;
        if session_of[from] != session_of[i] || headings[from] || headings[i] {
            flow = 0.0;
            next.clear();
            continue;
        }
        let passed = flow * over(from);
        let lent = (lends[from] * profile.neighbour).max(thread(i, from, next.get(voices[i])));
        if threads {
            next.insert(voices[from], from);
        }
        flow = keep(passed.max(lent));
        out[i] += flow;
    }
    out
}

/// A unit's voice ([`Traits::voices`]): its speaker's name, else its role.
pub(crate) fn voice(speaker: Option<&str>, role: crate::Role) -> &str {
    speaker.unwrap_or(role.as_str())
}

/// How specific each unit is against the typical unit of its voice, to the power `power`
/// ([`RecallProfile::specificity`]): the rarity of its rarest word (`rarest`, an inverse
/// document frequency) over the median of its voice's units'. A greeting or a thank-you names
/// nothing rarer than everyday words and falls below 1; a turn that names something the log
/// rarely mentions rises above it. A unit with no word at all keeps its score (it matches
/// nothing by words; meaning or a neighbour brought it).
pub(crate) fn specific(rarest: &[f64], voices: &[&str], power: f64) -> Vec<f64> {
    if power == 0.0 {
        return vec![1.0; rarest.len()];
    }
    let mut by_voice: HashMap<&str, Vec<f64>> = HashMap::new();
    for (&r, &voice) in rarest.iter().zip(voices) {
        if r > 0.0 {
            by_voice.entry(voice).or_default().push(r);
        }
    }
    let typical: HashMap<&str, f64> = by_voice
        .into_iter()
        .map(|(voice, mut r)| {
            let middle = r.len() / 2;
            let (_, median, _) = r.select_nth_unstable_by(middle, f64::total_cmp);
            (voice, *median)
        })
        .collect();
    rarest
        .iter()
        .zip(voices)
        .map(|(&r, voice)| match typical.get(voice) {
            Some(&typical) if r > 0.0 => (r / typical).powf(power),
            _ => 1.0,
        })
        .collect()
}

/// The query's words as written, lower-case: names, which [`super::terms`] would stem.
fn query_words(query: &str) -> HashSet<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Which units are spoken by a speaker (`name`) the query names as a word.
pub(crate) fn named_speakers(speakers: &[Option<&str>], query: &str) -> Vec<bool> {
    let words = query_words(query);
    speakers
        .iter()
        .map(|speaker| speaker.is_some_and(|s| words.contains(&s.to_lowercase())))
        .collect()
}

/// A query that names a speaker ("what activities does Melanie do?") is most often answered in
/// that speaker's own turns, yet a name that speaks half the turns weighs little in BM25: the
/// units of a speaker the query names (`named`, [`named_speakers`]) rise by `share`
/// ([`RecallProfile::named_speaker`]). A share, not a filter: a query that names the wrong
/// speaker still finds the other one's turn when it matches better.
pub(crate) fn favour_named_speakers(scores: &mut [f64], named: &[bool], share: f64) {
    for (score, &named) in scores.iter_mut().zip(named) {
        if named {
            *score *= 1.0 + share;
        }
    }
}

/// The typical length of the units a budget is spent on: the median of `tokens`, at least 1.
pub(crate) fn typical_tokens(tokens: impl IntoIterator<Item = usize>) -> usize {
    let mut tokens: Vec<usize> = tokens.into_iter().collect();
    if tokens.is_empty() {
        return 1;
    }
    let middle = tokens.len() / 2;
    let (_, median, _) = tokens.select_nth_unstable(middle);
    (*median).max(1)
}

/// The value of recalling a unit of `tokens` that scored `score`, where a typical unit has
/// `typical` tokens: its score over `(tokens / typical) ^ cost` ([`RecallProfile::cost`]), a
/// budget spent on what each token of it buys. A long reply or tool output shares more of any
/// query's words without answering better and takes the room of several turns, and a short
/// message that answers (the user's "I moved to Denver in May" beside the assistant's long
/// replies) is worth its small room; the root keeps long evidence in reach.
///
/// A unit shorter than typical earns that premium in proportion to its `locality`, the share of
/// its match on the words that locate the query's topic ([`Ordered::locality`]): a short turn
/// that names the topic is the answer in little room, while one that shares only an everyday
/// word of the question ("glad you had a good time!" for a question about every *time* someone
/// spoke of a topic) is worth no more than its score says, however little room it takes.
pub(crate) fn value(score: f64, tokens: usize, typical: usize, cost: f64, locality: f64) -> f64 {
    let cost = if tokens < typical {
        cost * locality.clamp(0.0, 1.0)
    } else {
        cost
    };
    score / length_cost(tokens, typical, cost)
}

/// `(tokens / typical) ^ cost`: what a unit's length counts against its score ([`value`]).
fn length_cost(tokens: usize, typical: usize, cost: f64) -> f64 {
    (tokens.max(1) as f64 / typical.max(1) as f64).powf(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traits(lengths: &[usize], headings: &[bool]) -> Traits<'static> {
        Traits {
            asks: vec![false; lengths.len()],
            headings: headings.to_vec(),
            speakers: vec![None; lengths.len()],
            lengths: lengths.to_vec(),
            voices: vec!["user"; lengths.len()],
        }
    }

    #[test]
    fn a_match_lends_to_its_neighbours_fading_with_the_words_between() {
        let profile = RecallProfile::default();
        // Short turns of one session, a match in the middle.
        let matches = [0.0, 0.0, 4.0, 0.0, 0.0];
        let t = traits(&[16; 5], &[false; 5]);
        let session_of = [0; 5];
        let scores = neighbours(&matches, &t.asks, &session_of, &[false; 5], &t, &profile);
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Right beside it, either way: the neighbour's share.
        assert!(near(scores[3], 4.0 * profile.neighbour), "{scores:?}");
        assert!(near(scores[1], 4.0 * profile.neighbour), "{scores:?}");
        // One turn further: the neighbour's share again, and halved for every `reach` words of
        // the turn passed over.
        let passed = profile.neighbour * 0.5f64.powf(16.0 / profile.reach);
        assert!(
            near(scores[4], 4.0 * profile.neighbour * passed),
            "{scores:?}"
        );
        assert!(
            near(scores[0], 4.0 * profile.neighbour * passed),
            "{scores:?}"
        );
        assert_eq!(scores[2], 4.0, "the match keeps its own score");

        // A long reply between keeps the topic to itself: the turn after it gets little.
        let t = traits(&[16, 400, 16], &[false; 3]);
        let scores = neighbours(
            &[4.0, 0.0, 0.0],
            &t.asks,
            &[0; 3],
            &[false; 3],
            &t,
            &profile,
        );
        assert!(near(scores[1], 4.0 * profile.neighbour));
        assert!(scores[2] < 0.01 * 4.0, "{scores:?}");

        // A question lends its answer more, however long the answer.
        let mut t = traits(&[16, 400], &[false; 2]);
        t.asks[0] = true;
        let scores = neighbours(&[4.0, 0.0], &t.asks, &[0; 2], &[false; 2], &t, &profile);
        assert!(near(scores[1], 4.0 * profile.answer), "{scores:?}");

        // A heading ends a session: nothing crosses it, and it takes nothing.
        let t = traits(&[16; 4], &[false, false, true, false]);
        let scores = neighbours(
            &[0.0, 4.0, 0.0, 0.0],
            &t.asks,
            &[0, 0, 1, 1],
            &[false; 4],
            &t,
            &profile,
        );
        assert_eq!(&scores[2..], &[0.0, 0.0], "{scores:?}");
        assert!(scores[0] > 0.0);
    }

    #[test]
    fn a_named_speaker_carries_a_thread_across_the_other_s_reply() {
        let profile = RecallProfile::default();
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Two speakers taking turns, Caroline's match in the middle of a session.
        let mut t = traits(&[16; 5], &[false; 5]);
        t.voices = vec!["Caroline", "Melanie", "Caroline", "Melanie", "Caroline"];
        let matches = [0.0, 0.0, 4.0, 0.0, 0.0];
        let plain = neighbours(&matches, &t.asks, &[0; 5], &[false; 5], &t, &profile);
        // The query names Caroline: her turns before and after the match take the neighbour's
        // share, as the reply beside it does; the reply keeps its own.
        let named = [true, false, true, false, true];
        let scores = neighbours(&matches, &t.asks, &[0; 5], &named, &t, &profile);
        assert!(near(scores[0], 4.0 * profile.neighbour), "{scores:?}");
        assert!(near(scores[4], 4.0 * profile.neighbour), "{scores:?}");
        assert_eq!(scores[1], plain[1]);
        assert_eq!(scores[3], plain[3]);
        assert!(
            plain[4] < scores[4],
            "unnamed, the thread fades turn by turn"
        );
        // Not across a session's end.
        let scores = neighbours(&matches, &t.asks, &[0, 0, 0, 1, 1], &named, &t, &profile);
        assert_eq!(scores[4], 0.0, "{scores:?}");
        // Only the named speaker's thread: with Melanie named, Caroline's match lends her own
        // turns what it lent before, and Melanie's nothing more than the turn beside it.
        let named = [false, true, false, true, false];
        let scores = neighbours(&matches, &t.asks, &[0; 5], &named, &t, &profile);
        assert_eq!(scores, plain);
    }

    #[test]
    fn a_named_speaker_weighs_more_without_silencing_the_other() {
        let mut scores = vec![1.0, 1.0, 2.0, 0.0];
        let speakers = [
            Some("Melanie"),
            Some("Caroline"),
            Some("Caroline"),
            Some("Melanie"),
        ];
        let named = named_speakers(&speakers, "What does melanie paint?");
        assert_eq!(named, [true, false, false, true]);
        favour_named_speakers(&mut scores, &named, 0.3);
        assert!(scores[0] > scores[1], "{scores:?}");
        assert!(
            scores[2] > scores[0],
            "a better match by the other speaker still wins"
        );
        assert_eq!(scores[3], 0.0, "no match stays no match");
        assert_eq!(
            named_speakers(&[None, Some("Mel")], "What does Melanie paint?"),
            [false, false],
            "a name is matched as a whole word"
        );
    }

    #[test]
    fn a_turn_that_names_something_rare_weighs_more_than_one_of_everyday_words() {
        // Rarity of each turn's rarest word: two of everyday words, two that name something.
        let rarest = [0.5, 0.6, 2.0, 2.4, 0.0];
        let voices = ["Caroline"; 5];
        let s = specific(&rarest, &voices, 1.0);
        assert!(s[0] < 1.0 && s[1] < 1.0, "{s:?}");
        assert!(s[2] >= 1.0 && s[3] > s[2], "{s:?}");
        assert_eq!(s[4], 1.0, "a turn without words keeps its score");
        assert_eq!(specific(&rarest, &voices, 0.0), [1.0; 5], "0 turns it off");
        // Each voice against its own: the user's plain turns are not lowered by an assistant
        // whose every reply names something rare.
        let rarest = [0.8, 0.8, 0.8, 3.0, 3.0, 3.0];
        let voices = [
            "user",
            "user",
            "user",
            "assistant",
            "assistant",
            "assistant",
        ];
        let s = specific(&rarest, &voices, 1.0);
        assert_eq!(s, [1.0; 6], "{s:?}");
    }

    #[test]
    fn a_word_in_most_sessions_weighs_less_and_in_a_log_of_one_session_keeps_its_weight() {
        use crate::retrieval::words::terms;
        // A history of a hundred turns: "deadline" comes up once in every ten turns, "pottery"
        // nine times in a row. BM25 weighs the two alike (nine turns each), and the turns tie.
        let texts: Vec<String> = (0..100)
            .map(|i| match i {
                40..=48 => format!("the pottery class, note {i}"),
                _ if i % 10 == 5 => format!("the deadline moved, note {i}"),
                _ => format!("the weather today, note {i}"),
            })
            .collect();
        let bm25 = Bm25::new(texts.iter().map(|t| terms(t)).collect());
        let query = terms("pottery deadline");
        let plain = bm25.scores(&query);
        assert_eq!(plain[44], plain[55], "{plain:?}");
        // Neighbours, specificity and the sessions' rises off: the words' weights alone.
        let profile = RecallProfile {
            neighbour: 0.0,
            specificity: 0.0,
            topical_session: 0.0,
            dated_session: 0.0,
            ..RecallProfile::default()
        };
        // Ten sessions of ten turns: "deadline" is in nine of them, "pottery" in one. The topic
        // said in one session leads; the word every session says still ranks.
        let headed: Vec<bool> = (0..100).map(|i| i % 10 == 0).collect();
        let t = traits(&[5; 100], &headed);
        let ranked = order(&bm25, &query, &t, "pottery deadline", None, &profile).fused;
        let place = |unit: usize| ranked.iter().position(|&(i, _)| i == unit).unwrap();
        for topic in 41..49 {
            for everyday in (5..100).step_by(10).filter(|&i| i != 45) {
                assert!(place(topic) < place(everyday), "{ranked:?}");
            }
        }
        // No heading (an agent's own history, a chat sent whole): one session, where a word
        // said all through may be the project the history is about, so every word keeps its
        // weight and the turns tie again.
        let t = traits(&[5; 100], &[false; 100]);
        let ranked = order(&bm25, &query, &t, "pottery deadline", None, &profile).fused;
        let score = |unit: usize| ranked.iter().find(|&&(i, _)| i == unit).unwrap().1;
        assert_eq!(score(44), score(35), "{ranked:?}");
    }

    #[test]
    fn a_budget_is_spent_on_what_each_token_buys() {
        assert_eq!(typical_tokens([10, 300, 20, 30, 40]), 30);
        assert_eq!(typical_tokens([]), 1);
        // At the typical length, the score alone.
        assert_eq!(value(2.0, 30, 30, 0.5, 1.0), 2.0);
        // Four times as long matches twice as well: no better than the typical turn.
        assert_eq!(value(2.0, 120, 30, 0.5, 1.0), 1.0);
        assert_eq!(value(2.0, 120, 30, 0.5, 0.0), 1.0, "whatever it matches on");
        // A quarter as long is worth twice its score: the short answer beside long replies.
        assert_eq!(value(2.0, 30, 120, 0.5, 1.0), 4.0);
        // Unless what it shares with the query is only everyday words: then its score alone,
        // and a match partly on located words earns part of the premium.
        assert_eq!(value(2.0, 30, 120, 0.5, 0.0), 2.0);
        let part = value(2.0, 30, 120, 0.5, 0.5);
        assert!(2.0 < part && part < 4.0, "{part}");
        assert_eq!(
            value(2.0, 120, 30, 0.0, 1.0),
            2.0,
            "a cost of zero: the score alone"
        );
    }
}
