//! A sorted set: member -> score in a hash-ordered map (for ZSCORE and ZSCAN), and the members
//! ordered by (score, member) in a ranked order (`Ranked`), so that score, lexicographic and
//! index ranges cost O(log n + m), and ranks and range counts O(log n), as in Redis's skiplist.

use super::key::Key;
use super::ranked::Ranked;
use super::scanmap::ScanMap;
use std::cmp::Ordering;

/// A score ordered as Redis compares doubles: -0 equals 0. NaN is never stored.
#[derive(Debug, Clone, Copy)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.partial_cmp(&o.0).unwrap_or(Ordering::Equal)
    }
}

/// Redis keeps a sorted set of at most this many members, each at most `LISTPACK_VALUE_MAX`
/// bytes, in a listpack; past that it converts it to a skiplist for good.
pub const LISTPACK_ENTRIES_MAX: usize = 128;
pub const LISTPACK_VALUE_MAX: usize = 64;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZSet {
    scores: ScanMap<f64>,
    /// (score, member), the member held in place up to 22 bytes (as in `ScanMap`).
    order: Ranked<(Score, Key)>,
    /// Whether Redis would hold this set as a skiplist. It matters beyond OBJECT ENCODING: a
    /// listpack stores a -0 score as 0, a skiplist keeps -0.
    skiplist: bool,
}

impl ZSet {
    pub fn new() -> ZSet {
        ZSet::default()
    }
    pub fn len(&self) -> usize {
        self.scores.len()
    }
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }
    pub fn score(&self, m: &[u8]) -> Option<f64> {
        self.scores.get(m).copied()
    }
    /// The bytes of the members and their scores (8 each) together.
    pub fn data_bytes(&self) -> usize {
        self.scores.key_bytes() + 8 * self.scores.len()
    }

    pub fn scores(&self) -> &ScanMap<f64> {
        &self.scores
    }

    pub fn is_skiplist(&self) -> bool {
        self.skiplist
    }

    /// An empty set in the encoding Redis would hold it in (a snapshot keeps it, since a
    /// skiplist stays one).
    pub fn with_encoding(skiplist: bool) -> ZSet {
        ZSet {
            skiplist,
            ..ZSet::default()
        }
    }

    /// Sets `m`'s score; returns the previous one.
    pub fn insert(&mut self, m: &[u8], score: f64) -> Option<f64> {
        if !self.skiplist
            && (m.len() > LISTPACK_VALUE_MAX
                || (self.len() >= LISTPACK_ENTRIES_MAX && self.score(m).is_none()))
        {
            self.skiplist = true;
        }
        let score = if score == 0.0 && !self.skiplist {
            0.0
        } else {
            score
        };
        let old = self.scores.insert(m, score);
        if let Some(o) = old {
            self.order.remove(&(Score(o), Key::new(m)));
        }
        self.order.insert((Score(score), Key::new(m)));
        old
    }

    /// A freshly computed set (a STORE result) as Redis stores it: a listpack when small enough
    /// (`zsetConvertToListpackIfNeeded`), with -0 scores becoming 0.
    pub fn into_stored(mut self) -> ZSet {
        if self.len() <= LISTPACK_ENTRIES_MAX
            && self.iter().all(|(m, _)| m.len() <= LISTPACK_VALUE_MAX)
        {
            let negzero: Vec<Vec<u8>> = self
                .iter()
                .filter(|(_, s)| *s == 0.0 && s.is_sign_negative())
                .map(|(m, _)| m.to_vec())
                .collect();
            self.skiplist = false;
            for m in negzero {
                self.insert(&m, 0.0);
            }
        }
        self
    }

    /// A set built for a computed reply (ZUNION, ZINTER, ZDIFF): Redis builds those as skiplists.
    pub fn computed() -> ZSet {
        ZSet {
            skiplist: true,
            ..ZSet::default()
        }
    }

    pub fn remove(&mut self, m: &[u8]) -> Option<f64> {
        let old = self.scores.remove(m)?;
        self.order.remove(&(Score(old), Key::new(m)));
        Some(old)
    }

    /// Ascending (score, member).
    /// The heap bytes the set holds besides itself: the score map and the order, each with
    /// the members longer than a slot holds.
    pub fn heap_bytes(&self) -> usize {
        self.scores.heap_bytes(|_| 0)
            + self.order.heap_bytes()
            + self
                .order
                .iter()
                .map(|(_, m)| m.heap_bytes())
                .sum::<usize>()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.order.iter().map(|(s, m)| (m.bytes(), s.0))
    }

    /// 0-based rank in ascending order: O(log n).
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        let s = self.score(m)?;
        Some(self.order.count_below(&(Score(s), Key::new(m)), true))
    }

    /// Members at ranks `start..end` (ascending positions; reverse the iterator for
    /// descending): O(log n + m).
    pub fn by_rank(
        &self,
        start: usize,
        end: usize,
    ) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.order.range(start, end).map(|(s, m)| (m.bytes(), s.0))
    }

    /// Positions `start..end` of the members whose score is in the range.
    fn score_positions(&self, r: &ScoreRange) -> (usize, usize) {
        if r.is_empty() || (r.minex && r.min == f64::INFINITY) {
            return (0, 0);
        }
        let empty = Key::new(&[]);
        // (score, "") sorts before every member with that score.
        let lo = if r.minex { r.min.next_up() } else { r.min };
        let start = self.order.count_below(&(Score(lo), empty.clone()), true);
        let end = if r.max == f64::INFINITY && !r.maxex {
            self.order.len()
        } else {
            let hi = if r.maxex { r.max } else { r.max.next_up() };
            self.order.count_below(&(Score(hi), empty), true)
        };
        (start, end.max(start))
    }

    /// Members with score in the range, ascending (reverse it for descending): O(log n + m).
    pub fn range_by_score<'a>(
        &'a self,
        r: &ScoreRange,
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], f64)> + 'a {
        let (start, end) = self.score_positions(r);
        self.order.range(start, end).map(|(s, m)| (m.bytes(), s.0))
    }

    /// How many members have a score in the range: O(log n).
    pub fn count_by_score(&self, r: &ScoreRange) -> usize {
        let (start, end) = self.score_positions(r);
        end - start
    }

    /// Members in the lexicographic range, ascending. Redis defines this only when all scores
    /// are equal; then it is a B-tree range. Otherwise it walks in (score, member) order as
    /// Redis's skiplist walk does for ordered members.
    pub fn range_by_lex(&self, r: &LexRange) -> Vec<(&[u8], f64)> {
        let (Some(first), Some(last)) = (self.order.first(), self.order.last()) else {
            return Vec::new();
        };
        if first.0 == last.0 {
            let s = first.0;
            let start = match &r.min {
                LexBound::NegInf => 0,
                LexBound::PosInf => return Vec::new(),
                LexBound::Inclusive(v) => self.order.count_below(&(s, Key::new(v)), true),
                LexBound::Exclusive(v) => self.order.count_below(&(s, Key::new(v)), false),
            };
            let end = match &r.max {
                LexBound::PosInf => self.order.len(),
                LexBound::NegInf => return Vec::new(),
                LexBound::Inclusive(v) => self.order.count_below(&(s, Key::new(v)), false),
                LexBound::Exclusive(v) => self.order.count_below(&(s, Key::new(v)), true),
            };
            if start >= end {
                return Vec::new();
            }
            return self
                .order
                .range(start, end)
                .map(|(s, m)| (m.bytes(), s.0))
                .collect();
        }
        self.iter()
            .skip_while(|(m, _)| !r.gte_min(m))
            .take_while(|(m, _)| r.lte_max(m))
            .collect()
    }
}

/// A score range: `min`/`max` with exclusive flags.
#[derive(Debug, Clone)]
pub struct ScoreRange {
    pub min: f64,
    pub max: f64,
    pub minex: bool,
    pub maxex: bool,
}

impl ScoreRange {
    pub fn above_min(&self, s: f64) -> bool {
        if self.minex {
            s > self.min
        } else {
            s >= self.min
        }
    }
    pub fn below_max(&self, s: f64) -> bool {
        if self.maxex {
            s < self.max
        } else {
            s <= self.max
        }
    }
    pub fn contains(&self, s: f64) -> bool {
        self.above_min(s) && self.below_max(s)
    }
    /// Redis's `zslIsInRange` emptiness test.
    pub fn is_empty(&self) -> bool {
        self.min > self.max || (self.min == self.max && (self.minex || self.maxex))
    }
}

/// One end of a lexicographic range.
#[derive(Debug, Clone)]
pub enum LexBound {
    NegInf,
    PosInf,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct LexRange {
    pub min: LexBound,
    pub max: LexBound,
}

impl LexRange {
    pub fn gte_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexBound::NegInf => true,
            LexBound::PosInf => false,
            LexBound::Inclusive(v) => m >= v.as_slice(),
            LexBound::Exclusive(v) => m > v.as_slice(),
        }
    }
    pub fn lte_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexBound::NegInf => false,
            LexBound::PosInf => true,
            LexBound::Inclusive(v) => m <= v.as_slice(),
            LexBound::Exclusive(v) => m < v.as_slice(),
        }
    }
    pub fn contains(&self, m: &[u8]) -> bool {
        self.gte_min(m) && self.lte_max(m)
    }
}
