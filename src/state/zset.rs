//! A sorted set: member -> score in a hash-ordered map (for ZSCORE and ZSCAN), and the members
//! ordered by (score, member) in a B-tree, so that score and lexicographic ranges cost
//! O(log n + m). Rank lookups walk from the nearer end (O(min(rank, n - rank))); an
//! order-statistics tree would make them O(log n) and is open work.

use super::scanmap::ScanMap;
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::ops::Bound;

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
    order: BTreeSet<(Score, Box<[u8]>)>,
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
    pub fn scores(&self) -> &ScanMap<f64> {
        &self.scores
    }

    pub fn is_skiplist(&self) -> bool {
        self.skiplist
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
            self.order.remove(&(Score(o), m.into()));
        }
        self.order.insert((Score(score), m.into()));
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
        self.order.remove(&(Score(old), m.into()));
        Some(old)
    }

    /// Ascending (score, member).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> {
        self.order.iter().map(|(s, m)| (&**m, s.0))
    }

    /// 0-based rank in ascending order.
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        let s = self.score(m)?;
        let key = (Score(s), Box::<[u8]>::from(m));
        let below = self.order.range(..&key).count();
        Some(below)
    }

    /// Members with score in the range, ascending (reverse it for descending): O(log n + m).
    pub fn range_by_score<'a>(
        &'a self,
        r: &ScoreRange,
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], f64)> + 'a {
        let empty: Box<[u8]> = Box::from(&[][..]);
        let lo = if r.minex { r.min.next_up() } else { r.min };
        let lower = Bound::Included((Score(lo), empty.clone()));
        let upper = if r.max == f64::INFINITY && !r.maxex {
            Bound::Unbounded
        } else if r.maxex {
            Bound::Excluded((Score(r.max), empty))
        } else {
            Bound::Excluded((Score(r.max.next_up()), empty))
        };
        let valid = !(r.is_empty() || (r.minex && r.min == f64::INFINITY));
        let range = if valid {
            Some(self.order.range((lower, upper)))
        } else {
            None
        };
        range.into_iter().flatten().map(|(s, m)| (&**m, s.0))
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
            let lower = match &r.min {
                LexBound::NegInf => Bound::Unbounded,
                LexBound::PosInf => return Vec::new(),
                LexBound::Inclusive(v) => Bound::Included((s, v.clone().into_boxed_slice())),
                LexBound::Exclusive(v) => Bound::Excluded((s, v.clone().into_boxed_slice())),
            };
            let upper = match &r.max {
                LexBound::PosInf => Bound::Unbounded,
                LexBound::NegInf => return Vec::new(),
                LexBound::Inclusive(v) => Bound::Included((s, v.clone().into_boxed_slice())),
                LexBound::Exclusive(v) => Bound::Excluded((s, v.clone().into_boxed_slice())),
            };
            if let (
                Bound::Included(a) | Bound::Excluded(a),
                Bound::Included(b) | Bound::Excluded(b),
            ) = (&lower, &upper)
            {
                if a > b
                    || (a == b
                        && (matches!(lower, Bound::Excluded(_))
                            || matches!(upper, Bound::Excluded(_))))
                {
                    return Vec::new();
                }
            }
            return self
                .order
                .range((lower, upper))
                .map(|(s, m)| (&**m, s.0))
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
