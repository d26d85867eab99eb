//! Which documents a search reads, by tier: the plan, its filters and BM25 statistics shared by the two text fields.

use std::ops::Bound;

use engram::memory::Tier;
use rusqlite::Connection;
use tantivy::Term;
use tantivy::columnar::Column;
use tantivy::query::{
    AllQuery, Bm25StatisticsProvider, BooleanQuery, ConstScoreQuery, Occur, Query, RangeQuery,
    TermQuery, TermSetQuery,
};
use tantivy::schema::{Field, IndexRecordOption};

use super::super::backend;
use super::{ENTRY, Fields, index_error, tier_code};

/// BM25's statistics with the two text fields taken as one: a word's document frequency and
/// the average length are those of all entries, whichever field holds their text, so a
/// document scores what it would in one field, and hits from the two merge by score.
pub(super) struct Statistics<'a> {
    pub(super) searcher: &'a tantivy::Searcher,
    pub(super) fields: Fields,
}

impl Statistics<'_> {
    /// `term` and the same word in the other text field.
    fn both(&self, term: &Term) -> Option<Term> {
        let other = if term.field() == self.fields.content {
            self.fields.kept
        } else if term.field() == self.fields.kept {
            self.fields.content
        } else {
            return None;
        };
        Some(Term::from_field_text(other, term.value().as_str()?))
    }
}

impl Bm25StatisticsProvider for Statistics<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        let f = self.fields;
        if field == f.content || field == f.kept {
            Ok(self.searcher.total_num_tokens(f.content)?
                + self.searcher.total_num_tokens(f.kept)?)
        } else {
            self.searcher.total_num_tokens(field)
        }
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        self.searcher.total_num_docs()
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let own = self.searcher.doc_freq(term)?;
        match self.both(term) {
            Some(twin) => Ok(own + self.searcher.doc_freq(&twin)?),
            None => Ok(own),
        }
    }
}

/// `words` with the filters that never change and a tier filter, none of which score. With
/// no filter at all, the disjunction alone: the case block-max WAND makes fast.
fn filtered(
    words: BooleanQuery,
    filters: &[Box<dyn Query>],
    tiers: Option<Box<dyn Query>>,
) -> Box<dyn Query> {
    if filters.is_empty() && tiers.is_none() {
        return Box::new(words);
    }
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = vec![(Occur::Must, Box::new(words))];
    for filter in filters.iter().map(|q| q.box_clone()).chain(tiers) {
        clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(filter, 0.0))));
    }
    Box::new(BooleanQuery::new(clauses))
}

/// The fast fields a search reads of a segment's hits.
pub(super) struct Columns {
    pub(super) rowid: Column<u64>,
    pub(super) created_at: Column<i64>,
    pub(super) tier: Column<u64>,
}

impl Columns {
    pub(super) fn of(segment: &tantivy::SegmentReader) -> Result<Self, engram::Error> {
        let fast = segment.fast_fields();
        Ok(Columns {
            rowid: fast.u64("rowid").map_err(index_error)?,
            created_at: fast.i64("created_at").map_err(index_error)?,
            tier: fast.u64("tier").map_err(index_error)?,
        })
    }
}

/// The working entries a search reads as a set, at most: enough for the default cap on
/// working memory (10,000 entries) with room to spare.
/// (Small in unit tests, so that their stores take every path.)
pub(super) const WORKING_SET: usize = if cfg!(test) { 24 } else { 20_000 };

/// How many values the working entries' rowids span (0 when there are none): a bound on their
/// number from two lookups, where counting them reads them all.
pub(super) fn working_span(conn: &Connection) -> Result<u64, engram::Error> {
    let (low, high): (Option<i64>, Option<i64>) = conn
        .prepare_cached(
            "SELECT (SELECT min(entry) FROM memory_working),
                    (SELECT max(entry) FROM memory_working)",
        )
        .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(backend)?;
    Ok(match (low, high) {
        (Some(low), Some(high)) => high.saturating_sub(low).unsigned_abs() + 1,
        _ => 0,
    })
}

/// The rowids of the working entries, sorted, when there are at most [`WORKING_SET`] of
/// them; `None` when there are more.
pub(super) fn working_rowids(conn: &Connection) -> Result<Option<Vec<u64>>, engram::Error> {
    let mut stmt = conn
        .prepare_cached("SELECT entry FROM memory_working ORDER BY entry LIMIT ?1")
        .map_err(backend)?;
    let rowids = stmt
        .query_map([WORKING_SET as i64 + 1], |r| r.get::<_, i64>(0))
        .and_then(|rows| {
            rows.map(|r| r.map(|r| r as u64))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(backend)?;
    Ok((rowids.len() <= WORKING_SET).then_some(rowids))
}

/// The index's documents by tier code (deleted ones included, as BM25 counts them), counted once
/// per search.
pub(super) struct Counts {
    /// Of each of [`KEPT`].
    kept: [u64; KEPT.len()],
    /// Working and archived entries: the documents less those of the tiers kept for good.
    pub(super) entries: u64,
}

impl Counts {
    pub(super) fn of(searcher: &tantivy::Searcher, f: Fields) -> Result<Self, engram::Error> {
        let mut kept = [0; KEPT.len()];
        for (n, c) in kept.iter_mut().zip(KEPT) {
            *n = searcher
                .doc_freq(&Term::from_field_u64(f.tier, c))
                .map_err(index_error)?;
        }
        let all = searcher.total_num_docs().map_err(index_error)?;
        Ok(Counts {
            kept,
            entries: all.saturating_sub(kept.iter().sum()),
        })
    }
}

/// Working sets in more runs of consecutive rowids than this are filtered on as sets of terms.
const MAX_RUNS: usize = if cfg!(test) { 2 } else { 32 };

/// The runs of consecutive values in `sorted`, as (first, last).
fn runs(sorted: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &v in sorted {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == v => *last = v,
            _ => out.push((v, v)),
        }
    }
    out
}

/// What a search wants of working and archived entries (one code in the index, see
/// [`tier_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entries {
    None,
    Any,
    Working,
    Archived,
}

/// The tier codes of the tiers an entry keeps for good.
const KEPT: [u64; 3] = [1, 2, 3];

/// The tiers a search wants, as the index tells them apart.
#[derive(Debug)]
pub(super) struct TierPlan {
    /// The codes wanted of the tiers an entry keeps, a bit each.
    kept: u8,
    pub(super) entries: Entries,
    /// The working entries' rowids, sorted, when read.
    pub(super) working: Option<Vec<u64>>,
}

impl TierPlan {
    pub(super) fn new(tiers: &[Tier]) -> Self {
        let mut kept = 0;
        let (mut working, mut archive) = (false, false);
        for &tier in tiers {
            match tier {
                Tier::Working => working = true,
                Tier::Archive => archive = true,
                other => kept |= 1 << tier_code(other),
            }
        }
        let entries = match (working, archive) {
            (true, true) => Entries::Any,
            (true, false) => Entries::Working,
            (false, true) => Entries::Archived,
            (false, false) => Entries::None,
        };
        TierPlan {
            kept,
            entries,
            working: None,
        }
    }

    /// True when telling working entries from archived ones matters.
    pub(super) fn needs_working(&self) -> bool {
        matches!(self.entries, Entries::Working | Entries::Archived)
    }

    /// Whether a hit of tier code `code` is wanted; `is_working` tells whether a rowid is a
    /// working entry, when the working set was not read.
    pub(super) fn wants(
        &self,
        code: u64,
        rowid: u64,
        is_working: impl FnOnce(u64) -> Result<bool, engram::Error>,
    ) -> Result<bool, engram::Error> {
        if code != ENTRY {
            return Ok(code < 8 && self.kept & (1 << code) != 0);
        }
        let want_working = match self.entries {
            Entries::None => return Ok(false),
            Entries::Any => return Ok(true),
            Entries::Working => true,
            Entries::Archived => false,
        };
        let working = match &self.working {
            Some(set) => set.binary_search(&rowid).is_ok(),
            None => is_working(rowid)?,
        };
        Ok(working == want_working)
    }

    /// The searches to run and merge: the query's words in the text field of the tiers an
    /// entry keeps, if any of those is wanted, and in that of working and archived entries,
    /// if any of these is. Each search's hits are checked ([`TierPlan::wants`]); a filter
    /// inside the index narrows a search when it keeps at most half of the documents that
    /// field holds. (A filter makes the search visit every document it keeps, where a pure
    /// disjunction of words skips whatever cannot reach the top: over a slept million
    /// entries, a filter keeping 27% of the documents made the median search three times
    /// faster than checking hits, and one keeping 73% made it a third slower.)
    pub(super) fn queries(
        &self,
        counts: &Counts,
        f: Fields,
        terms: &[String],
        filters: &[Box<dyn Query>],
    ) -> Vec<Box<dyn Query>> {
        let mut queries = Vec::new();
        if self.kept != 0 {
            let mut wanted = 0;
            let mut codes: Vec<(Occur, Box<dyn Query>)> = Vec::new();
            for (n, c) in counts.kept.into_iter().zip(KEPT) {
                if self.kept & (1 << c) != 0 {
                    wanted += n;
                    codes.push((
                        Occur::Should,
                        Box::new(TermQuery::new(
                            Term::from_field_u64(f.tier, c),
                            IndexRecordOption::Basic,
                        )),
                    ));
                }
            }
            let filter: Option<Box<dyn Query>> = (wanted * 2 <= counts.kept.iter().sum())
                .then(|| Box::new(BooleanQuery::new(codes)) as _);
            queries.push(filtered(any_of(f.kept, terms), filters, filter));
        }
        let entries = counts.entries;
        let filter: Option<Box<dyn Query>> = match (self.entries, &self.working) {
            (Entries::None, _) => return queries,
            (Entries::Working, Some(working)) if working.is_empty() => return queries,
            (Entries::Working, Some(working)) if working.len() as u64 * 2 <= entries => {
                Some(rowid_set(f.rowid, working))
            }
            (Entries::Archived, Some(working))
                if entries.saturating_sub(working.len() as u64) * 2 <= entries =>
            {
                Some(Box::new(BooleanQuery::new(vec![
                    (Occur::Must, Box::new(AllQuery) as Box<dyn Query>),
                    (Occur::MustNot, rowid_set(f.rowid, working)),
                ])))
            }
            _ => None,
        };
        queries.push(filtered(any_of(f.content, terms), filters, filter));
        queries
    }
}

/// The disjunction of `terms` in a text field.
fn any_of(field: Field, terms: &[String]) -> BooleanQuery {
    BooleanQuery::new(
        terms
            .iter()
            .map(|t| -> (Occur, Box<dyn Query>) {
                (
                    Occur::Should,
                    Box::new(TermQuery::new(
                        Term::from_field_text(field, t),
                        IndexRecordOption::WithFreqs,
                    )),
                )
            })
            .collect(),
    )
}

/// A query for the documents of a sorted set of rowids. Entries inserted together have
/// consecutive rowids: a few runs make a few ranges over the rowid column, which skip the
/// segments they miss, where a set of terms looks every rowid up in every segment.
fn rowid_set(field: Field, rowids: &[u64]) -> Box<dyn Query> {
    let runs = runs(rowids);
    if runs.len() > MAX_RUNS {
        return Box::new(TermSetQuery::new(
            rowids.iter().map(|&r| Term::from_field_u64(field, r)),
        ));
    }
    Box::new(BooleanQuery::new(
        runs.into_iter()
            .map(|(low, high)| -> (Occur, Box<dyn Query>) {
                (
                    Occur::Should,
                    Box::new(RangeQuery::new(
                        Bound::Included(Term::from_field_u64(field, low)),
                        Bound::Included(Term::from_field_u64(field, high)),
                    )),
                )
            })
            .collect(),
    ))
}
