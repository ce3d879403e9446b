//! The rows of one read as a backend lends them: [`RowSource`] (one
//! dynamic call per row, not per cell) and [`RowStream`], the handle the
//! layers above hold.

use super::format::{NumberColumns, NumberRow, NumberRows, RowView};
use super::request::{Row, ScanStats};
use crate::error::Result;
use std::sync::Arc;

/// The rows of one read, lent one at a time.
pub trait RowSource: Send {
    /// The next row, borrowed until the next call; `None` at the end.
    fn next_view(&mut self) -> Result<Option<RowView<'_>>>;
    /// Counters so far.
    fn stats(&self) -> ScanStats;
    /// The names of the families read, in the order
    /// [`CellRef::family`](super::CellRef::family) counts them.
    fn family_names(&self) -> Vec<Arc<str>>;
    /// The next row's `wanted` columns as runs of numbers, into `out`;
    /// false at the end. The rows are those `next_view` gives, wanted
    /// cells or not. By default, taken from the row's cells.
    fn next_numbers(&mut self, wanted: &NumberColumns, out: &mut NumberRow) -> Result<bool> {
        match self.next_view()? {
            None => Ok(false),
            Some(row) => {
                out.reset(wanted.len());
                out.key.extend_from_slice(row.key());
                out.take_cells(&row, wanted);
                Ok(true)
            }
        }
    }
    /// The next rows' `wanted` columns as numbers, at most `max` rows
    /// (at least 1): a run of rows that each hold at most one cell of each
    /// wanted column, all at once into `rows` ([`Numbers::Rows`]), or else
    /// the next row into `row` ([`Numbers::Row`]) as
    /// [`RowSource::next_numbers`] gives it. Either way the rows are those
    /// `next_view` gives, in order. By default a row at a time.
    fn next_number_rows(
        &mut self,
        wanted: &NumberColumns,
        _max: usize,
        row: &mut NumberRow,
        _rows: &mut NumberRows,
    ) -> Result<Numbers> {
        Ok(match self.next_numbers(wanted, row)? {
            true => Numbers::Row,
            false => Numbers::End,
        })
    }
    /// Lets `next_view` and `next_numbers` give up (as at the end) after
    /// stepping over `rows` rows of which the read selects nothing, so
    /// that a caller reading a long stretch of such rows can let its task
    /// go (and a cancelled query stop); [`RowSource::paused`] tells such a
    /// pause from the end. A source that never pauses ignores it.
    fn pause_after(&mut self, _rows: usize) {}
    /// Whether the last call gave up after [`RowSource::pause_after`]
    /// rows rather than reaching the end.
    fn paused(&self) -> bool {
        false
    }
}

/// What [`RowSource::next_number_rows`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbers {
    /// The end of the rows (or a pause: see [`RowSource::paused`]).
    End,
    /// One row, in the [`NumberRow`].
    Row,
    /// A run of rows, in the [`NumberRows`].
    Rows,
}

/// Rows of a read, produced lazily: memory is bounded by the largest row.
/// [`RowStream::next_view`] lends each row; as an iterator it yields owned
/// [`Row`]s.
pub struct RowStream {
    source: Box<dyn RowSource>,
    names: Option<Vec<Arc<str>>>,
}

impl RowStream {
    /// A stream over a backend's rows.
    pub fn new(source: Box<dyn RowSource>) -> Self {
        RowStream {
            source,
            names: None,
        }
    }

    /// The next row, borrowed until the next call.
    pub fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        self.source.next_view()
    }

    /// The next row's `wanted` columns (family, by its place among
    /// those read; qualifier) as runs of numbers, into `out`; false at the
    /// end. The rows are those `next_view` gives, wanted cells or not.
    pub fn next_numbers(&mut self, wanted: &NumberColumns, out: &mut NumberRow) -> Result<bool> {
        self.source.next_numbers(wanted, out)
    }

    /// See [`RowSource::next_number_rows`]: the next run of rows (or
    /// row) of `wanted` columns as numbers, at most `max` rows.
    pub fn next_number_rows(
        &mut self,
        wanted: &NumberColumns,
        max: usize,
        row: &mut NumberRow,
        rows: &mut NumberRows,
    ) -> Result<Numbers> {
        self.source.next_number_rows(wanted, max, row, rows)
    }

    /// Counters so far.
    pub fn stats(&self) -> ScanStats {
        self.source.stats()
    }

    /// See [`RowSource::pause_after`]: reads that opt in may end a call
    /// early, which [`RowStream::paused`] then says.
    pub fn pause_after(&mut self, rows: usize) {
        self.source.pause_after(rows);
    }

    /// Whether the last call paused rather than reached the end.
    pub fn paused(&self) -> bool {
        self.source.paused()
    }

    /// The names of the families read, in the order
    /// [`CellRef::family`](super::CellRef::family) counts them.
    pub fn family_names(&self) -> Vec<Arc<str>> {
        self.source.family_names()
    }
}

impl Iterator for RowStream {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Self::Item> {
        let RowStream { source, names } = self;
        let names = names.get_or_insert_with(|| source.family_names());
        match source.next_view() {
            Ok(Some(view)) => Some(Ok(view.to_row(|i| names[i].clone()))),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
