//! What a read asks for: which rows (a [`RowSet`]), which cells of them (a
//! [`ReadFilter`]), and what comes back ([`Row`], [`Cell`]). A leaf: the
//! engine files that serve a read import it, not each other.

use crate::codec::{self, EncodedRange, RowRange};
use crate::error::{Error, Result};
use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

/// A set of rows: the union of some ranges. Empty means no rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowSet {
    /// The ranges; they may overlap and come in any order.
    pub ranges: Vec<RowRange>,
}

impl RowSet {
    /// Every row of the table.
    pub fn all() -> Self {
        RowSet {
            ranges: vec![RowRange::all()],
        }
    }

    /// These keys.
    pub fn keys<K: Into<Vec<u8>>>(keys: impl IntoIterator<Item = K>) -> Self {
        RowSet {
            ranges: keys.into_iter().map(RowRange::key).collect(),
        }
    }

    /// One range.
    pub fn range(range: RowRange) -> Self {
        RowSet {
            ranges: vec![range],
        }
    }

    /// The rows starting with `prefix`.
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> Self {
        Self::range(RowRange::prefix(prefix))
    }

    /// Adds a range.
    pub fn with(mut self, range: RowRange) -> Self {
        self.ranges.push(range);
        self
    }

    /// The ranges as sorted, disjoint, non-empty cell-key ranges.
    pub fn encode(&self) -> Vec<EncodedRange> {
        codec::merge_ranges(self.ranges.iter().cloned(), codec::Touching::Merge)
            .into_iter()
            .map(|(encoded, _)| encoded)
            .collect()
    }
}

/// A half-open range of cell timestamps: `start` inclusive, `end` exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimeRange {
    /// Inclusive lower bound, microseconds.
    pub start: i64,
    /// Exclusive upper bound; `None` is unbounded.
    pub end: Option<i64>,
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange::ALL
    }
}

impl TimeRange {
    /// Every timestamp.
    pub const ALL: TimeRange = TimeRange {
        start: 0,
        end: None,
    };

    /// `[start, end)`.
    pub fn new(start: i64, end: i64) -> Self {
        TimeRange {
            start,
            end: Some(end),
        }
    }

    /// Whether `ts` lies in the range.
    pub fn contains(&self, ts: i64) -> bool {
        ts >= self.start && self.end.is_none_or(|end| ts < end)
    }
}

/// Which qualifiers a read returns.
#[derive(Debug, Clone, Default)]
pub enum QualifierFilter {
    /// All of them.
    #[default]
    All,
    /// Exactly these.
    Set(BTreeSet<Vec<u8>>),
    /// Those in a range.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// Those the whole of which a regular expression matches (bytes, RE2 syntax).
    Regex(regex::bytes::Regex),
}

impl QualifierFilter {
    /// A regex filter; the pattern must match the whole qualifier.
    pub fn regex(pattern: &str) -> Result<Self> {
        regex::bytes::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .unicode(false)
            .build()
            .map(QualifierFilter::Regex)
            .map_err(|e| {
                Error::InvalidArgument(format!("invalid qualifier regex {pattern:?}: {e}"))
            })
    }

    /// Whether `qualifier` passes.
    pub fn matches(&self, qualifier: &[u8]) -> bool {
        match self {
            QualifierFilter::All => true,
            QualifierFilter::Set(set) => set.contains(qualifier),
            QualifierFilter::Range(lo, hi) => RangeBounds::<&[u8]>::contains(
                &(codec::as_slice_bound(lo), codec::as_slice_bound(hi)),
                &qualifier,
            ),
            QualifierFilter::Regex(re) => re.is_match(qualifier),
        }
    }
}

/// Which cells of the selected rows a read returns. Garbage-collection
/// policies apply before the filter: a cell past its policy is never seen.
#[derive(Debug, Clone, Default)]
pub struct ReadFilter {
    /// Only these families; `None` is all of them.
    pub families: Option<Vec<String>>,
    /// Only these qualifiers.
    pub qualifiers: QualifierFilter,
    /// Only cells whose timestamp lies here.
    pub time_range: TimeRange,
    /// At most this many cells per column, newest first (1 = latest only).
    pub cells_per_column: Option<usize>,
    /// Per family listed, the only qualifiers whose values the reader
    /// uses: the other cells of that family still come (timestamps, GC
    /// and the filter are unchanged), but their values may be empty, so a
    /// format that must decode values skips theirs. Families not listed
    /// come with every value.
    pub values_of: std::collections::BTreeMap<String, Vec<Vec<u8>>>,
}

impl ReadFilter {
    /// Everything.
    pub fn all() -> Self {
        Self::default()
    }

    /// The latest cell of each column.
    pub fn latest() -> Self {
        ReadFilter {
            cells_per_column: Some(1),
            ..Default::default()
        }
    }

    /// Only these families.
    pub fn families<S: Into<String>>(mut self, families: impl IntoIterator<Item = S>) -> Self {
        self.families = Some(families.into_iter().map(Into::into).collect());
        self
    }

    /// Only these qualifiers.
    pub fn qualifiers(mut self, qualifiers: QualifierFilter) -> Self {
        self.qualifiers = qualifiers;
        self
    }

    /// Only cells in this time range.
    pub fn time_range(mut self, range: TimeRange) -> Self {
        self.time_range = range;
        self
    }

    /// At most `n` cells per column.
    pub fn cells_per_column(mut self, n: usize) -> Self {
        self.cells_per_column = Some(n);
        self
    }

    /// Only the values of these qualifiers of `family` are used (see
    /// [`ReadFilter::values_of`]).
    pub fn values_only<Q: Into<Vec<u8>>>(
        mut self,
        family: impl Into<String>,
        qualifiers: impl IntoIterator<Item = Q>,
    ) -> Self {
        let mut qualifiers: Vec<Vec<u8>> = qualifiers.into_iter().map(Into::into).collect();
        qualifiers.sort();
        qualifiers.dedup();
        self.values_of.insert(family.into(), qualifiers);
        self
    }
}

/// A read: rows, a filter, a direction and a row limit.
#[derive(Debug, Clone, Default)]
pub struct ReadRequest {
    /// Which rows.
    pub rows: RowSet,
    /// Which cells of them.
    pub filter: ReadFilter,
    /// Rows in descending key order.
    pub reverse: bool,
    /// Stop after this many rows.
    pub limit: Option<usize>,
    /// Not counted in the key activity: a look at the table on its
    /// user's behalf (the advisor's sample), so that looking does not
    /// change what is seen.
    pub unmetered: bool,
}

impl ReadRequest {
    /// Every cell of every row.
    pub fn all() -> Self {
        ReadRequest {
            rows: RowSet::all(),
            ..Default::default()
        }
    }

    /// The rows of a row set.
    pub fn rows(rows: RowSet) -> Self {
        ReadRequest {
            rows,
            ..Default::default()
        }
    }

    /// With a filter.
    pub fn filter(mut self, filter: ReadFilter) -> Self {
        self.filter = filter;
        self
    }

    /// In descending key order.
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// At most `n` rows.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }
}

/// One cell as read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cell {
    /// The family's name.
    pub family: Arc<str>,
    /// The qualifier.
    pub qualifier: Vec<u8>,
    /// Microseconds since the Unix epoch.
    pub timestamp: i64,
    /// The value.
    pub value: Vec<u8>,
}

/// One row as read: its cells by family (declaration order), qualifier,
/// then newest first. A row with no cells is never returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The row key.
    pub key: Vec<u8>,
    /// Its cells.
    pub cells: Vec<Cell>,
}

impl Row {
    /// The cells of one column, newest first.
    pub fn column<'a>(
        &'a self,
        family: &'a str,
        qualifier: &'a [u8],
    ) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells
            .iter()
            .filter(move |c| &*c.family == family && c.qualifier == qualifier)
    }

    /// The newest value of one column.
    pub fn latest(&self, family: &str, qualifier: &[u8]) -> Option<&[u8]> {
        self.cells
            .iter()
            .find(|c| &*c.family == family && c.qualifier == qualifier)
            .map(|c| c.value.as_slice())
    }
}

/// Counters of a scan, for EXPLAIN ANALYZE and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Key-value pairs read from the engine.
    pub cells_scanned: u64,
    /// Rows returned.
    pub rows_returned: u64,
    /// Cells returned.
    pub cells_returned: u64,
}
