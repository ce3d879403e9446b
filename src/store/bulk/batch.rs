//! [`CellBatch`]: rows of cell writes in flat buffers, which a batch
//! writer fills with no allocation per cell.

use crate::error::{Error, Result};
use crate::store::definition::FamilyKind;
use crate::store::mutation::{Mutation, RowMutation};
use std::any::Any;
use std::ops::Range;

/// A family of a [`CellBatch`], named once per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFamily(pub(super) u32);

/// A place in a [`CellBatch`] (see [`CellBatch::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMark {
    cells: usize,
    bytes: usize,
}

#[derive(Debug, Clone)]
pub(super) struct BatchRow {
    key: Range<usize>,
    cells: Range<usize>,
    /// Its cells' qualifiers, values and 8 bytes of timestamp each, summed
    /// as they are added ([`CellBatch::row_bytes`]).
    cell_bytes: usize,
}

#[derive(Debug, Clone)]
pub(super) struct BatchCell {
    pub family: BatchFamily,
    /// Merge into an aggregate cell (AddToCell) rather than set.
    pub add: bool,
    pub timestamp: i64,
    pub qualifier: Range<usize>,
    pub value: Range<usize>,
}

/// What a cell writes as counted ([`CellBatch::row_bytes`]): its
/// qualifier, its value and 8 bytes of timestamp.
fn cell_bytes(qualifier: usize, value: usize) -> usize {
    qualifier + value + 8
}

impl BatchCell {
    fn bytes(&self) -> usize {
        cell_bytes(self.qualifier.len(), self.value.len())
    }
}

/// One column of rows given a column at a time
/// ([`CellBatch::set_columns`]): its qualifier, and every row's value,
/// `width` bytes each, back to back.
#[derive(Debug, Clone, Default)]
pub struct BatchColumn {
    /// The column's qualifier.
    pub qualifier: Vec<u8>,
    /// How many bytes each value takes.
    pub width: usize,
    /// The rows' values, in row order.
    pub values: Vec<u8>,
}

impl BatchColumn {
    /// Row `row`'s value.
    pub fn value(&self, row: usize) -> &[u8] {
        &self.values[row * self.width..(row + 1) * self.width]
    }
}

/// A batch's rows given a column at a time: each row sets one cell in
/// every column, of one family, stamped with the row's time.
#[derive(Debug, Clone)]
pub(super) struct Columns {
    pub family: BatchFamily,
    pub columns: Vec<BatchColumn>,
    /// Each row's time.
    pub times: Vec<i64>,
    /// What each row's cells take, the same for every row.
    pub cell_bytes: usize,
}

/// Rows of cell writes: keys, qualifiers and values in one buffer. Build a
/// row with [`CellBatch::begin_row`] and the cell methods; a row whose
/// encoding fails half way is dropped with [`CellBatch::discard_row`].
///
/// Rows that each set one cell in the same columns (a tall table's load)
/// may instead be given a column at a time ([`CellBatch::set_columns`]):
/// the store then builds their column-wise blocks from the columns, with
/// no cell made of each value. Anything that needs them as cells gets a
/// copy made so ([`CellBatch::to_cells`]); a change to the batch makes it
/// cells first.
#[derive(Debug, Clone, Default)]
pub struct CellBatch {
    pub(super) families: Vec<String>,
    bytes: Vec<u8>,
    rows: Vec<BatchRow>,
    /// The cells, row after row (none while `columns` holds them).
    pub(super) cells: Vec<BatchCell>,
    pub(super) columns: Option<Columns>,
    /// Value buffers of columns given before, emptied, for the next.
    spare: Vec<Vec<u8>>,
    /// Its new rows encoded ahead ([`FjallStore::prepare_batch`]); any
    /// change to the batch drops them.
    pub(super) prepared: Prepared,
}

/// A batch's new rows encoded into pairs before its rows were locked, on
/// the assumption that nothing is stored for them, against the table
/// handle of that moment; taken by the write. The batch carries it without
/// knowing its type: the bulk writer (`bulk/mod.rs`) puts and takes its
/// own `Encoded`, so the batch's vocabulary stays below the writer.
#[derive(Default)]
pub(super) struct Prepared(std::sync::Mutex<Option<Box<dyn Any + Send>>>);

impl Prepared {
    /// What was put, if it was a `T` (anything else is dropped: it can only
    /// be a writer's own type, so that is never the case).
    pub fn take<T: Any>(&self) -> Option<Box<T>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .and_then(|b| b.downcast().ok())
    }

    pub fn put<T: Any + Send>(&mut self, encoded: T) {
        *self
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Box::new(encoded));
    }

    pub fn drop_it(&mut self) {
        *self
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// A copy of a batch is encoded again.
impl Clone for Prepared {
    fn clone(&self) -> Self {
        Prepared::default()
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prepared")
    }
}

impl CellBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle of a family by name (the store resolves names once per
    /// batch, so a family dropped meanwhile fails the batch, not a row).
    pub fn family(&mut self, name: &str) -> BatchFamily {
        self.prepared.drop_it();
        let at = match self.families.iter().position(|f| f == name) {
            Some(at) => at,
            None => {
                self.families.push(name.to_string());
                self.families.len() - 1
            }
        };
        BatchFamily(at as u32)
    }

    /// Starts a row; the cells added next belong to it.
    pub fn begin_row(&mut self, key: &[u8]) {
        self.make_cells();
        self.prepared.drop_it();
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.rows.push(BatchRow {
            key: start..self.bytes.len(),
            cells: self.cells.len()..self.cells.len(),
            cell_bytes: 0,
        });
    }

    /// Where the batch is now: the cells added after it can be measured
    /// ([`CellBatch::largest_value_since`]) and dropped
    /// ([`CellBatch::truncate_row`]), as a writer that adds several
    /// inputs' cells to one row does with each input's own.
    pub fn mark(&self) -> BatchMark {
        BatchMark {
            cells: self.cells.len(),
            bytes: self.bytes.len(),
        }
    }

    /// The largest value of the cells added since `mark`.
    pub fn largest_value_since(&self, mark: BatchMark) -> usize {
        let cells = self.cells.get(mark.cells..).unwrap_or_default();
        cells.iter().map(|c| c.value.len()).max().unwrap_or(0)
    }

    /// Drops the cells added to the row being built since `mark` (taken
    /// while it was being built).
    pub fn truncate_row(&mut self, mark: BatchMark) {
        self.make_cells();
        self.prepared.drop_it();
        if let Some(row) = self.rows.last_mut()
            && row.cells.start <= mark.cells
            && mark.cells <= self.cells.len()
            && row.key.end <= mark.bytes
        {
            self.cells.truncate(mark.cells);
            row.cells.end = mark.cells;
            row.cell_bytes = self.cells[row.cells.clone()]
                .iter()
                .map(BatchCell::bytes)
                .sum();
            self.bytes.truncate(mark.bytes);
        }
    }

    /// Drops the row being built, with its cells.
    pub fn discard_row(&mut self) {
        self.make_cells();
        self.prepared.drop_it();
        if let Some(row) = self.rows.pop() {
            self.cells.truncate(row.cells.start);
            self.bytes.truncate(row.key.start);
        }
    }

    fn push_cell(
        &mut self,
        family: BatchFamily,
        add: bool,
        qualifier: &[u8],
        timestamp: i64,
        value: impl FnOnce(&mut Vec<u8>),
    ) {
        self.make_cells();
        self.prepared.drop_it();
        let qualifier = match self.same_qualifier(qualifier) {
            Some(shared) => shared,
            None => {
                let q = self.bytes.len();
                self.bytes.extend_from_slice(qualifier);
                q..self.bytes.len()
            }
        };
        let v = self.bytes.len();
        value(&mut self.bytes);
        let cell = BatchCell {
            family,
            add,
            timestamp,
            qualifier,
            value: v..self.bytes.len(),
        };
        let bytes = cell.bytes();
        self.cells.push(cell);
        if let Some(row) = self.rows.last_mut() {
            row.cells.end = self.cells.len();
            row.cell_bytes += bytes;
        }
    }

    /// Where the row before holds `qualifier` at the place in its cells
    /// the row being built is at, if it does: a load's rows repeat their
    /// columns in order, so each qualifier is stored once and shared.
    fn same_qualifier(&self, qualifier: &[u8]) -> Option<Range<usize>> {
        let [.., before, row] = self.rows.as_slice() else {
            return None;
        };
        let at = before.cells.start + (self.cells.len() - row.cells.start);
        let shared = &self
            .cells
            .get(at)
            .filter(|_| at < before.cells.end)?
            .qualifier;
        (self.bytes[shared.clone()] == *qualifier).then(|| shared.clone())
    }

    /// Sets a cell of the row being built; `value` writes its bytes.
    pub fn set_with(
        &mut self,
        family: BatchFamily,
        qualifier: &[u8],
        timestamp: i64,
        value: impl FnOnce(&mut Vec<u8>),
    ) {
        self.push_cell(family, false, qualifier, timestamp, value);
    }

    /// Sets a cell of the row being built.
    pub fn set(&mut self, family: BatchFamily, qualifier: &[u8], timestamp: i64, value: &[u8]) {
        self.push_cell(family, false, qualifier, timestamp, |b| {
            b.extend_from_slice(value)
        });
    }

    /// Merges input into an aggregate cell of the row being built.
    pub fn add(&mut self, family: BatchFamily, qualifier: &[u8], timestamp: i64, input: &[u8]) {
        self.push_cell(family, true, qualifier, timestamp, |b| {
            b.extend_from_slice(input)
        });
    }

    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the batch holds no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The key of row `row`.
    pub fn key(&self, row: usize) -> &[u8] {
        &self.bytes[self.rows[row].key.clone()]
    }

    /// The bytes row `row` writes: its key, and per cell its qualifier,
    /// value and 8 bytes of timestamp. Kept as the batch is built, so
    /// that counting a load's writes reads no cell.
    pub fn row_bytes(&self, row: usize) -> u64 {
        let r = &self.rows[row];
        let cells = match &self.columns {
            Some(c) => c.cell_bytes,
            None => r.cell_bytes,
        };
        (r.key.len() + cells) as u64
    }

    /// How many cells row `row` writes.
    pub fn cell_count(&self, row: usize) -> usize {
        match &self.columns {
            Some(c) => c.columns.len(),
            None => self.rows[row].cells.len(),
        }
    }

    /// Cells in the batch.
    pub fn total_cells(&self) -> usize {
        match &self.columns {
            Some(c) => c.columns.len() * self.rows.len(),
            None => self.cells.len(),
        }
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.prepared.drop_it();
        self.families.clear();
        self.bytes.clear();
        self.rows.clear();
        self.cells.clear();
        if let Some(columns) = self.columns.take() {
            self.spare.extend(columns.columns.into_iter().map(|mut c| {
                c.values.clear();
                c.values
            }));
        }
    }

    /// An empty buffer for a column's values ([`CellBatch::set_columns`]):
    /// one a column given before this batch was cleared held, when there
    /// is one (a load's batches are megabytes a column; reused, their
    /// pages are not the kernel's to clear again).
    pub fn column_buffer(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// Sets, in every row begun so far, one cell in each of `columns` of
    /// `family`, stamped with the row's time in `times`: row `i`'s value
    /// of a column is its `i`th. The rows must have no cells of their own
    /// yet, and each column a value for each row.
    pub fn set_columns(
        &mut self,
        family: BatchFamily,
        columns: Vec<BatchColumn>,
        times: Vec<i64>,
    ) -> Result<()> {
        let rows = self.rows.len();
        let fits = |c: &BatchColumn| c.values.len() == c.width * rows;
        if !self.cells.is_empty() || self.columns.is_some() {
            return Err(Error::Internal(
                "columns set in a batch whose rows have cells".into(),
            ));
        }
        if times.len() != rows || !columns.iter().all(fits) {
            return Err(Error::Internal(format!(
                "columns set for {rows} rows with {} times and {:?} values",
                times.len(),
                columns.iter().map(|c| c.values.len()).collect::<Vec<_>>()
            )));
        }
        self.prepared.drop_it();
        let row_cells = columns
            .iter()
            .map(|c| cell_bytes(c.qualifier.len(), c.width))
            .sum();
        self.columns = Some(Columns {
            family,
            columns,
            times,
            cell_bytes: row_cells,
        });
        Ok(())
    }

    /// The batch's rows as cells: a copy, if they were given a column at
    /// a time.
    pub(crate) fn to_cells(&self) -> std::borrow::Cow<'_, CellBatch> {
        let Some(columns) = &self.columns else {
            return std::borrow::Cow::Borrowed(self);
        };
        let mut cells = CellBatch {
            families: self.families.clone(),
            ..CellBatch::default()
        };
        cells
            .bytes
            .reserve(self.bytes.len() + self.rows.len() * columns.columns.len() * 8);
        cells.cells.reserve(self.rows.len() * columns.columns.len());
        for (row, &time) in columns.times.iter().enumerate() {
            cells.begin_row(self.key(row));
            for column in &columns.columns {
                cells.set(columns.family, &column.qualifier, time, column.value(row));
            }
        }
        std::borrow::Cow::Owned(cells)
    }

    /// Turns rows given a column at a time into cells, in place.
    pub(super) fn make_cells(&mut self) {
        if self.columns.is_some() {
            *self = self.to_cells().into_owned();
        }
    }

    /// The cells of row `row` (a batch of cells, not columns).
    pub(super) fn row_cells(&self, row: usize) -> &[BatchCell] {
        debug_assert!(self.columns.is_none(), "cells asked of columns");
        &self.cells[self.rows[row].cells.clone()]
    }

    /// Where row `row`'s cells start among the batch's.
    pub(super) fn cells_start(&self, row: usize) -> usize {
        self.rows[row].cells.start
    }

    pub(super) fn qualifier(&self, cell: &BatchCell) -> &[u8] {
        &self.bytes[cell.qualifier.clone()]
    }

    pub(super) fn value(&self, cell: &BatchCell) -> &[u8] {
        &self.bytes[cell.value.clone()]
    }

    /// Row `row` as a row mutation (the general path).
    pub(crate) fn row_mutation(&self, row: usize) -> RowMutation {
        if let Some(c) = &self.columns {
            let family = &self.families[c.family.0 as usize];
            let mutations = c
                .columns
                .iter()
                .map(|column| Mutation::SetCell {
                    family: family.clone(),
                    qualifier: column.qualifier.clone(),
                    timestamp: Some(c.times[row]),
                    value: column.value(row).to_vec(),
                })
                .collect();
            return RowMutation::new(self.key(row).to_vec(), mutations);
        }
        let mutations = self
            .row_cells(row)
            .iter()
            .map(|c| {
                let family = self.families[c.family.0 as usize].clone();
                let qualifier = self.qualifier(c).to_vec();
                let value = self.value(c).to_vec();
                if c.add {
                    Mutation::AddToCell {
                        family,
                        qualifier,
                        timestamp: Some(c.timestamp),
                        input: value,
                    }
                } else {
                    Mutation::SetCell {
                        family,
                        qualifier,
                        timestamp: Some(c.timestamp),
                        value,
                    }
                }
            })
            .collect();
        RowMutation::new(self.key(row).to_vec(), mutations)
    }
}

/// One family of a batch, resolved against the table.
pub(super) struct Resolved {
    pub index: usize,
    pub kind: FamilyKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells added after a mark are measured and dropped with nothing
    /// of the row's earlier cells lost, whether their qualifiers are
    /// shared with the row before or their own.
    #[test]
    fn cells_after_a_mark_are_dropped_alone() {
        let mut batch = CellBatch::new();
        let f = batch.family("m");
        batch.begin_row(b"a#1");
        batch.set(f, b"p", 1, b"one");
        batch.begin_row(b"a#2");
        batch.set(f, b"p", 1, b"two");
        let mark = batch.mark();
        batch.set(f, b"p", 2, b"three!");
        batch.set(f, b"q", 2, b"x");
        assert_eq!(batch.largest_value_since(mark), 6);
        assert_eq!(batch.cell_count(1), 3);
        batch.truncate_row(mark);
        assert_eq!(batch.mark(), mark);
        assert_eq!(batch.largest_value_since(mark), 0);
        assert_eq!(batch.cell_count(1), 1);
        let cells = batch.row_cells(1);
        assert_eq!(batch.value(&cells[0]), b"two");
        assert_eq!(batch.qualifier(&cells[0]), b"p");
        // And the row goes on from there.
        batch.set(f, b"p", 3, b"four");
        assert_eq!(batch.cell_count(1), 2);
        assert_eq!(batch.key(1), b"a#2");
        assert_eq!(batch.value(&batch.row_cells(1)[1]), b"four");
        // What the row writes follows its cells: its key, and each
        // cell's qualifier, value and 8 bytes of timestamp.
        assert_eq!(batch.row_bytes(0), 3 + (1 + 3 + 8));
        assert_eq!(batch.row_bytes(1), 3 + (1 + 3 + 8) + (1 + 4 + 8));
    }

    /// A row's bytes are the same given a column at a time as given as
    /// cells, and made into cells.
    #[test]
    fn row_bytes_agree_between_columns_and_cells() {
        let mut columns = CellBatch::new();
        let mut cells = CellBatch::new();
        let (f, g) = (columns.family("m"), cells.family("m"));
        for key in [&b"a#1"[..], b"bb#22"] {
            columns.begin_row(key);
            cells.begin_row(key);
            cells.set(g, b"pressure", 7, &1.5f64.to_le_bytes());
            cells.set(g, b"t", 7, &[1, 2, 3, 4]);
        }
        let column = |qualifier: &[u8], width: usize| BatchColumn {
            qualifier: qualifier.to_vec(),
            width,
            values: vec![0; 2 * width],
        };
        columns
            .set_columns(f, vec![column(b"pressure", 8), column(b"t", 4)], vec![7, 7])
            .unwrap();
        let made = columns.to_cells();
        for row in 0..2 {
            let want = (columns.key(row).len() + (8 + 8 + 8) + (1 + 4 + 8)) as u64;
            assert_eq!(columns.row_bytes(row), want);
            assert_eq!(cells.row_bytes(row), want);
            assert_eq!(made.row_bytes(row), want);
        }
    }
}
