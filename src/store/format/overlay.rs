//! Pending writes over a snapshot, in the families' formats.
//!
//! A row's mutations are applied in order to an overlay, so later ones see
//! earlier ones (a delete then a set, two adds to one cell); a bulk call's
//! overlay becomes one fjall batch. The overlay speaks cells (a row, a
//! qualifier, a timestamp); which pairs that means is the format's affair.

use super::{FamilyFormat, RowBuf, cells};
use crate::codec::{self, EncodedRange};
use crate::error::Result;
use crate::store::TableHandle;
use crate::store::catalog::GcPolicy;
use crate::store::read::TimeRange;
use fjall::{Readable, Snapshot};
use std::collections::BTreeMap;

/// Pending pair writes keyed by (family index, pair key); `None` deletes.
#[derive(Default)]
pub(crate) struct Overlay {
    pub writes: BTreeMap<(usize, Vec<u8>), Option<Vec<u8>>>,
}

fn format_of(table: &TableHandle, family: usize) -> FamilyFormat {
    table.def.families[family].format
}

impl Overlay {
    fn get(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(pending) = self.writes.get(&(family, key.to_vec())) {
            return Ok(pending.clone());
        }
        Ok(snapshot
            .get(&table.keyspaces[family], key)?
            .map(|v| v.to_vec()))
    }

    /// The live pairs of a key range, pending writes included, in key order.
    fn pairs_in(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        range: &EncodedRange,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let keyspace = &table.keyspaces[family];
        let iter = match &range.end {
            Some(end) => snapshot.range(keyspace, range.start.as_slice()..end.as_slice()),
            None => snapshot.range(keyspace, range.start.as_slice()..),
        };
        let mut pairs = BTreeMap::new();
        for guard in iter {
            let (k, v) = guard.into_inner()?;
            pairs.insert(k.to_vec(), Some(v.to_vec()));
        }
        let lo = (family, range.start.clone());
        for ((f, k), v) in self.writes.range(lo..) {
            if *f != family || !range.contains(k) {
                break;
            }
            pairs.insert(k.clone(), v.clone());
        }
        Ok(pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// The cells of one row of one family (all columns, or one), pending
    /// writes included, decoded into `buf` (qualifier order, newest
    /// first), with each cell's pair key.
    fn row_cells(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: Option<&[u8]>,
        buf: &mut RowBuf,
    ) -> Result<Vec<Vec<u8>>> {
        buf.clear();
        let format = format_of(table, family);
        let range = match (format, qualifier) {
            (FamilyFormat::Cells, Some(q)) => cells::column_range(row, q),
            (FamilyFormat::Cells, None) => codec::single_row_range(row),
        };
        let mut keys = Vec::new();
        for (k, v) in self.pairs_in(snapshot, table, family, &range)? {
            keys.push(k.clone());
            buf.pairs.push((k.into(), v.into()));
        }
        format.decode(0, buf, 0)?;
        Ok(keys)
    }

    /// Writes a cell.
    pub fn put_cell(
        &mut self,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: &[u8],
        timestamp: i64,
        value: Vec<u8>,
    ) {
        match format_of(table, family) {
            FamilyFormat::Cells => {
                let key = cells::key(row, qualifier, timestamp);
                self.writes.insert((family, key), Some(value));
            }
        }
    }

    /// The value of one cell, if it exists.
    pub fn cell(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: &[u8],
        timestamp: i64,
    ) -> Result<Option<Vec<u8>>> {
        match format_of(table, family) {
            FamilyFormat::Cells => self.get(
                snapshot,
                table,
                family,
                &cells::key(row, qualifier, timestamp),
            ),
        }
    }

    /// The cells of one column, newest first: (timestamp, value).
    pub fn column(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: &[u8],
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        let mut buf = RowBuf::default();
        self.row_cells(snapshot, table, family, row, Some(qualifier), &mut buf)?;
        Ok(buf
            .view()
            .cells()
            .map(|c| (c.timestamp, c.value.to_vec()))
            .collect())
    }

    /// Deletes the cells of a row in one family whose timestamp lies in
    /// `time_range`: of one column, or of all (`qualifier: None`).
    pub fn delete_cells(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: Option<&[u8]>,
        time_range: TimeRange,
    ) -> Result<()> {
        let mut buf = RowBuf::default();
        let keys = self.row_cells(snapshot, table, family, row, qualifier, &mut buf)?;
        match format_of(table, family) {
            FamilyFormat::Cells => {
                for (key, cell) in keys.into_iter().zip(buf.view().cells()) {
                    if time_range.contains(cell.timestamp) {
                        self.writes.insert((family, key), None);
                    }
                }
            }
        }
        Ok(())
    }

    /// Deletes the cells of a row in one family that `gc` discards;
    /// returns how many.
    pub fn delete_garbage(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        gc: &GcPolicy,
        now: i64,
    ) -> Result<u64> {
        let mut buf = RowBuf::default();
        let keys = self.row_cells(snapshot, table, family, row, None, &mut buf)?;
        let mut removed = 0;
        match format_of(table, family) {
            FamilyFormat::Cells => {
                let mut column: Option<&[u8]> = None;
                let mut position = 0;
                for (key, cell) in keys.into_iter().zip(buf.view().cells()) {
                    if column != Some(cell.qualifier) {
                        column = Some(cell.qualifier);
                        position = 0;
                    }
                    if gc.is_garbage(position, cell.timestamp, now) {
                        self.writes.insert((family, key), None);
                        removed += 1;
                    }
                    position += 1;
                }
            }
        }
        Ok(removed)
    }

    /// This overlay's pending writes to one row, as a new overlay: what a
    /// row's own mutations start from.
    pub fn row_part(&self, families: usize, row: &[u8]) -> Overlay {
        let range = codec::single_row_range(row);
        let mut part = Overlay::default();
        for family in 0..families {
            let entries = self.writes.range((family, range.start.clone())..);
            for ((f, key), value) in
                entries.take_while(|((f, k), _)| *f == family && range.contains(k))
            {
                part.writes.insert((*f, key.clone()), value.clone());
            }
        }
        part
    }

    /// Moves `other`'s writes on top of this overlay's.
    pub fn absorb(&mut self, other: Overlay) {
        self.writes.extend(other.writes);
    }
}
