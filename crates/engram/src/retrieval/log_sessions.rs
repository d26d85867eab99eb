//! The sessions of a log, its stretches between headings ([`super::headings`]) (not engram's
//! `Session`), and how the sessions about a query's topic, its time or its meaning lift their
//! matching units.

#[cfg(doc)]
use super::RecallProfile;

/// Each unit's session, counted from 0 by the headings before it (`headings[i]`: unit `i` starts
/// with one), and how many sessions there are.
pub(super) fn session_of(headings: &[bool]) -> (Vec<usize>, usize) {
    let mut session = 0usize;
    let of = headings
        .iter()
        .enumerate()
        .map(|(i, &heading)| {
            if i > 0 && heading {
                session += 1;
            }
            session
        })
        .collect();
    (of, session + 1)
}

/// A question's evidence sits in the session about its topic: of the units that share a word
/// with the query, those in a session whose whole text matches it well rise, by `share`
/// ([`RecallProfile::topical_session`]) of the best unit's score times their session's BM25
/// relative to the best session's, times their `locality` ([`lift_matches`]). A turn that shares
/// one common word with the question ("what did she paint?") and sits in the session about
/// painting now outranks the same word in small talk, while a turn of that session that shares
/// only a word every session uses stays below the matches.
/// Units that match nothing stay at zero: a session is not recalled whole.
pub(super) fn favour_topical_sessions(
    scores: &mut [f64],
    session_of: &[usize],
    sessions: &[f64],
    locality: &[f64],
    share: f64,
) {
    let best_session = sessions.iter().copied().fold(0.0, f64::max);
    if best_session <= 0.0 {
        return;
    }
    let weights: Vec<f64> = sessions.iter().map(|s| s / best_session).collect();
    lift_matches(scores, session_of, &weights, locality, share);
}

/// Each unit that matches the query (a score above zero) rises by `share` of the best unit's
/// score times its session's weight (0 to 1) times its `locality`: the share of its match on
/// words that locate the topic ([`super::Bm25::located_scores`]), so that a turn of the session
/// that shares only an everyday word with the query ("time", a name) stays below the matches.
/// Units that match nothing stay at zero: a session is not recalled whole.
fn lift_matches(
    scores: &mut [f64],
    session_of: &[usize],
    weights: &[f64],
    locality: &[f64],
    share: f64,
) {
    let best = scores.iter().copied().fold(0.0, f64::max);
    for ((score, &s), &local) in scores.iter_mut().zip(session_of).zip(locality) {
        if *score > 0.0 {
            *score += share * best * weights[s] * local;
        }
    }
}

/// Hybrid recall's topical rise: a session whose turns are, on average, near the query in
/// meaning is about its topic even where no turn shares its words ("what hobbies does Evan
/// pursue?" and a session about his painting). Each session's weight is its turns' mean
/// similarity (`similar`, the units that are not a session's heading, `headings`), counted above
/// the average session's and scaled to the nearest one's, as [`fuse`] counts a unit's; the units
/// of the fused ranking that match at all rise by `share` ([`RecallProfile::session_meaning`])
/// of the best unit's score times their session's weight and their `locality`
/// ([`lift_matches`]). Sessions without turns weigh nothing. The
/// caller leaves it out when the query names a time, whose sessions the dated rise
/// ([`favour_dated_sessions`]) lifts.
pub(super) fn favour_sessions_by_meaning(
    scores: &mut [f64],
    session_of: &[usize],
    headings: &[bool],
    similar: &[f32],
    locality: &[f64],
    share: f64,
) {
    let count = session_of.iter().max().map_or(0, |&s| s + 1);
    let mut sum = vec![0.0; count];
    let mut turns = vec![0usize; count];
    for ((&s, &heading), &similarity) in session_of.iter().zip(headings).zip(similar) {
        if !heading {
            sum[s] += f64::from(similarity);
            turns[s] += 1;
        }
    }
    let means: Vec<f64> = sum
        .iter()
        .zip(&turns)
        .filter(|&(_, &n)| n > 0)
        .map(|(&sum, &n)| sum / n as f64)
        .collect();
    if means.is_empty() {
        return;
    }
    let mut scaled = super::meaning::above_average(&means).into_iter();
    let weights: Vec<f64> = turns
        .iter()
        .map(|&n| {
            if n > 0 {
                scaled.next().unwrap_or(0.0)
            } else {
                0.0
            }
        })
        .collect();
    lift_matches(scores, session_of, &weights, locality, share);
}

/// A question that names a time ("what injury did Evan suffer in August 2023?") is answered in
/// the sessions of that time, whose headings carry the date ("[Session 9 - 10:18 am on 27
/// August, 2023]"), while the answer ("I twisted my knee") does not repeat it. `headings` holds
/// each session's heading score (zero for a session without one). A session whose heading
/// matches at least half as well as the best heading is dated to the query, and so is the
/// session right after the last of a run of them: what happened in the last week of October is
/// told in the first session of November ("last week I threw a party"). Of the units that match
/// the query, those in a dated session rise by `share` ([`RecallProfile::dated_session`]) of the best unit's score, in
/// proportion to the dated heading's match (for the session after, its predecessor's). Words
/// every heading shares ("2023") weigh little beside a month, so the cut at half leaves the
/// sessions of other months where they were.
pub(super) fn favour_dated_sessions(
    scores: &mut [f64],
    session_of: &[usize],
    headings: &[f64],
    share: f64,
) {
    let best_heading = headings.iter().copied().fold(0.0, f64::max);
    if best_heading <= 0.0 {
        return;
    }
    let dated = |s: usize| headings[s] >= 0.5 * best_heading;
    let weights: Vec<f64> = (0..headings.len())
        .map(|s| {
            if dated(s) {
                headings[s] / best_heading
            } else if s > 0 && dated(s - 1) {
                headings[s - 1] / best_heading
            } else {
                0.0
            }
        })
        .collect();
    // The dated session is where the answer is, whatever words it shares: its every match
    // rises alike.
    lift_matches(
        scores,
        session_of,
        &weights,
        &vec![1.0; scores.len()],
        share,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATED_SESSION: f64 = 0.3;
    const SESSION_MEANING: f64 = 0.1;
    const TOPICAL_SESSION: f64 = 0.3;
    use crate::retrieval::bm25::Bm25;
    use crate::retrieval::words::terms;

    #[test]
    fn the_sessions_a_query_dates_and_the_one_after_rise() {
        // Five sessions: the first has no heading; the third's heading names the query's month,
        // the others share only the year.
        let headings = [0.0, 0.4, 2.0, 0.4, 0.4];
        let session_of = [0, 1, 1, 2, 2, 3, 4];
        let mut scores = vec![1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        favour_dated_sessions(&mut scores, &session_of, &headings, DATED_SESSION);
        // The dated session's matching unit and the next session's rise by the full share...
        assert_eq!(scores[3], 1.0 + DATED_SESSION);
        assert_eq!(scores[5], 1.0 + DATED_SESSION);
        // ...units that match nothing stay out, and the other sessions stay where they were.
        assert_eq!([scores[2], scores[4]], [0.0, 0.0]);
        assert_eq!([scores[0], scores[1], scores[6]], [1.0, 1.0, 1.0]);
        // No heading matches: nothing moves.
        let mut scores = vec![1.0, 2.0];
        favour_dated_sessions(&mut scores, &[0, 1], &[0.0, 0.0], DATED_SESSION);
        assert_eq!(scores, [1.0, 2.0]);
    }

    #[test]
    fn the_sessions_nearest_the_query_in_meaning_rise() {
        // Three sessions, each a heading and two turns. The second's turns are nearest the
        // query in meaning (its heading's similarity does not count); the third is farthest.
        let session_of = [0, 0, 0, 1, 1, 1, 2, 2, 2];
        let headings = [true, false, false, true, false, false, true, false, false];
        let similar = [0.9, 0.3, 0.3, 0.0, 0.8, 0.6, 0.9, 0.1, 0.1];
        let mut scores = vec![0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 1.0];
        favour_sessions_by_meaning(
            &mut scores,
            &session_of,
            &headings,
            &similar,
            &[1.0; 9],
            SESSION_MEANING,
        );
        // The nearest session's matching unit rises by the full share of the best score...
        assert!(
            (scores[4] - (1.0 + 2.0 * SESSION_MEANING)).abs() < 1e-9,
            "{scores:?}"
        );
        // ...and now outranks the same match in a session no nearer than the average, which
        // stays put.
        assert_eq!(scores[1], 1.0);
        assert!(scores[4] > scores[1]);
        // Units that match nothing stay out; a session below the average does not move.
        assert_eq!([scores[3], scores[5]], [0.0, 0.0]);
        assert_eq!([scores[7], scores[8]], [2.0, 1.0]);
        // Only headings, no turns: nothing moves.
        let mut scores = vec![1.0, 2.0];
        favour_sessions_by_meaning(
            &mut scores,
            &[0, 1],
            &[true, true],
            &[0.9, 0.1],
            &[1.0; 2],
            SESSION_MEANING,
        );
        assert_eq!(scores, [1.0, 2.0]);
    }

    #[test]
    fn a_turn_that_shares_only_an_everyday_word_is_not_lifted_with_the_matches() {
        // One topical session of three turns: two match the topic's word, one shares only a word
        // every session uses (its locality near zero); a second session is not topical.
        let session_of = [0, 0, 0, 1];
        let mut scores = vec![2.0, 1.0, 0.2, 1.0];
        favour_topical_sessions(
            &mut scores,
            &session_of,
            &[3.0, 0.0],
            &[1.0, 1.0, 0.05, 1.0],
            TOPICAL_SESSION,
        );
        assert!(
            (scores[1] - (1.0 + TOPICAL_SESSION * 2.0)).abs() < 1e-9,
            "{scores:?}"
        );
        assert!(scores[2] < 0.2 + 0.05, "{scores:?}");
        assert_eq!(scores[3], 1.0);
    }

    #[test]
    fn a_match_in_the_session_about_the_topic_outranks_small_talk() {
        // Two sessions: small talk that mentions painting once, and one about painting.
        let docs = [
            "how was your weekend",
            "fine, I saw a painting at a friend's house",
            "the weather was great",
            "I painted a sunset with my kids",
            "we used watercolors and painted the lake too",
            "painting relaxes me after work",
        ];
        let session_of = [0, 0, 0, 1, 1, 1];
        let bm25 = Bm25::new(docs.iter().map(|d| terms(d)).collect());
        let query = terms("What did she paint?");
        let mut scores = bm25.scores(&query);
        let by_session = bm25.grouped_scores(&query, &session_of, 2);
        assert!(by_session[1] > by_session[0], "{by_session:?}");
        let before = scores.clone();
        favour_topical_sessions(
            &mut scores,
            &session_of,
            &by_session,
            &[1.0; 6],
            TOPICAL_SESSION,
        );
        assert!(scores[3] > scores[1], "{scores:?}");
        assert!(scores[3] - before[3] > scores[1] - before[1], "{scores:?}");
        assert_eq!(scores[0], 0.0, "no word in common stays at zero");
        assert_eq!(scores[2], 0.0);
    }
}
