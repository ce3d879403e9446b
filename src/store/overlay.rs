//! Pending writes over a snapshot, in the families' formats.
//!
//! A row's mutations are applied in order to an overlay, so later ones see
//! earlier ones (a delete then a set, two adds to one cell); a bulk call's
//! overlay becomes one fjall batch. The overlay speaks cells (a row, a
//! qualifier, a timestamp); which pairs that means is the format's affair.

use super::engine::TableHandle;
use super::format::row::garbage_verdicts;
use super::format::{FamilyFormat, RowBuf, blocks, cells, packed};
use super::policy::GcPolicy;
use super::request::TimeRange;
use crate::codec::{self, EncodedRange};
use crate::error::Result;
use fjall::{Readable, Snapshot};
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// Pending pair writes keyed by (family index, pair key); `None` deletes.
/// PACKED rows being edited are held decoded in `packed` (by family and
/// row key) until [`Overlay::seal`] encodes them into `writes`, once per
/// commit however many mutations edit them; `bounds` holds an upper bound
/// of what each one's cells count toward the packed size limit (their
/// count when loaded plus everything written since, overwrites counted
/// twice), so the cells are counted again only near the limit.
#[derive(Default, Clone)]
pub(crate) struct Overlay {
    pub writes: BTreeMap<(usize, Vec<u8>), Option<Vec<u8>>>,
    packed: BTreeMap<(usize, Vec<u8>), packed::Cells>,
    bounds: BTreeMap<(usize, Vec<u8>), usize>,
    /// The block the last lookup of a row in blocks read: the rows of a
    /// batch are looked up in key order, mostly several in one block.
    last_block: blocks::LastBlock,
}

/// One cell to write: (family index, qualifier, timestamp, value).
pub(crate) type CellWrite<'a> = (usize, &'a [u8], i64, &'a [u8]);

/// The format of a slot's pairs. The overlay works by slot (see
/// [`TableHandle::slot`]): its public methods take a family and turn it
/// into the slot holding the row.
fn format_of(table: &TableHandle, slot: usize) -> FamilyFormat {
    table.formats[slot]
}

fn family_name(table: &TableHandle, slot: usize) -> &str {
    &table.def.families[table.family_of(slot)].name
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

    /// The pairs of one row of a CELLS family (one column, or all),
    /// pending writes included, decoded into `buf`: cell `i` is pair `i`.
    fn cells_row(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: Option<&[u8]>,
        buf: &mut RowBuf,
    ) -> Result<()> {
        buf.clear();
        let range = match qualifier {
            Some(q) => cells::column_range(row, q),
            None => codec::single_row_range(row),
        };
        // (An AUTO row's marker, its bare escaped row, is no cell.)
        let marker = (format_of(table, family) == FamilyFormat::Auto).then(|| codec::escape(row));
        for (k, v) in self.pairs_in(snapshot, table, family, &range)? {
            if marker.as_ref() != Some(&k) {
                buf.pairs.push((k.into(), v.into()));
            }
        }
        FamilyFormat::Cells.decode_all(buf)
    }

    /// Whether an AUTO row's block copy is hidden by a marker (pending or
    /// stored), or the slot has no blocks: its cells are then all its
    /// own pairs.
    fn unfolded(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        slot: usize,
        marker: &[u8],
    ) -> Result<bool> {
        if table.blocks[slot].is_none() {
            return Ok(true);
        }
        if let Some(pending) = self.writes.get(&(slot, marker.to_vec())) {
            return Ok(pending.is_some());
        }
        Ok(snapshot.get(&table.keyspaces[slot], marker)?.is_some())
    }

    /// The cells an AUTO row's block holds of it, unless a marker hides
    /// them (see `format/auto.rs`).
    fn folded_cells(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        slot: usize,
        row: &[u8],
    ) -> Result<packed::Cells> {
        let marker = codec::escape(row);
        let Some(blocks_ks) = &table.blocks[slot] else {
            return Ok(packed::Cells::new());
        };
        if self.unfolded(snapshot, table, slot, &marker)? {
            return Ok(packed::Cells::new());
        }
        match self.last_block.get(snapshot, blocks_ks, &marker)? {
            Some(value) if !value.is_empty() => packed::cells_of(&marker, &value),
            _ => Ok(packed::Cells::new()),
        }
    }

    /// Unfolds an AUTO row that a block holds before a write that deletes:
    /// its block cells become pairs of its own (where it has none of the
    /// same column and timestamp) and a marker hides the block's copy.
    fn unfold(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        slot: usize,
        row: &[u8],
    ) -> Result<()> {
        // (Nothing when a marker hides the block's copy already, or no
        // block holds the row.)
        let folded = self.folded_cells(snapshot, table, slot, row)?;
        if folded.is_empty() {
            return Ok(());
        }
        let marker = codec::escape(row);
        let own: std::collections::BTreeSet<Vec<u8>> = self
            .pairs_in(snapshot, table, slot, &codec::single_row_range(row))?
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for ((qualifier, Reverse(timestamp)), value) in folded {
            let key = cells::key(row, &qualifier, timestamp);
            if !own.contains(&key) {
                self.writes.insert((slot, key), Some(value));
            }
        }
        self.writes.insert((slot, marker), Some(Vec::new()));
        Ok(())
    }

    /// Writes a cell.
    #[allow(clippy::too_many_arguments, reason = "a cell's coordinates")]
    pub fn put_cell(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        qualifier: &[u8],
        timestamp: i64,
        value: Vec<u8>,
    ) -> Result<()> {
        let family = table.slot(family, row);
        match format_of(table, family) {
            FamilyFormat::Cells | FamilyFormat::Auto => {
                let key = cells::key(row, qualifier, timestamp);
                self.writes.insert((family, key), Some(value));
            }
            FamilyFormat::Packed => {
                self.packed_mut(snapshot, table, family, row)?;
                self.insert_packed(family, row, qualifier, timestamp, value);
            }
        }
        Ok(())
    }

    /// Reads a PACKED row's cells as they stand (being edited, pending,
    /// or stored) without copying a row that is being edited.
    fn read_packed<R>(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
        read: impl FnOnce(&packed::Cells) -> R,
    ) -> Result<R> {
        match self.packed.get(&(family, row.to_vec())) {
            Some(cells) => Ok(read(cells)),
            None => Ok(read(&self.load_packed(snapshot, table, family, row)?)),
        }
    }

    /// A PACKED row's cells as they stand: being edited, pending, or stored.
    fn load_packed(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
    ) -> Result<packed::Cells> {
        if let Some(cells) = self.packed.get(&(family, row.to_vec())) {
            return Ok(cells.clone());
        }
        Ok(self.load_stored(snapshot, table, family, row)?.0)
    }

    /// A PACKED row's pair value as pending or stored: in the slot's
    /// keyspace, else in its blocks; a tombstone there (an empty value)
    /// hides the row.
    fn get_packed(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        slot: usize,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let live = |v: &[u8]| (!v.is_empty()).then(|| v.to_vec());
        if let Some(pending) = self.writes.get(&(slot, key.to_vec())) {
            return Ok(pending.as_deref().and_then(live));
        }
        if let Some(stored) = snapshot.get(&table.keyspaces[slot], key)? {
            return Ok(live(&stored));
        }
        match &table.blocks[slot] {
            Some(blocks) => Ok(self
                .last_block
                .get(snapshot, blocks, key)?
                .and_then(|v| live(&v))),
            None => Ok(None),
        }
    }

    /// A PACKED row's cells as pending or stored (not being edited), and
    /// what they count toward the packed size limit.
    fn load_stored(
        &self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
    ) -> Result<(packed::Cells, usize)> {
        let key = codec::escape(row);
        match self.get_packed(snapshot, table, family, &key)? {
            Some(value) => {
                let cells = packed::cells_of(&key, &value)?;
                let size = packed::size(&cells);
                Ok((cells, size))
            }
            None => Ok((packed::Cells::new(), 0)),
        }
    }

    fn packed_mut(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        family: usize,
        row: &[u8],
    ) -> Result<&mut packed::Cells> {
        let id = (family, row.to_vec());
        if !self.packed.contains_key(&id) {
            let (cells, len) = self.load_stored(snapshot, table, family, row)?;
            self.packed.insert(id.clone(), cells);
            self.bounds.insert(id.clone(), len);
        }
        Ok(self.packed.entry(id).or_default())
    }

    /// Writes the cells of one row, `(family, qualifier, timestamp,
    /// value)`, all or none: the PACKED rows they edit are loaded and
    /// checked against the size limit before any cell is written, so a
    /// failure leaves the overlay as it was (nothing is copied to make
    /// that so; a bulk load of many cells into one row stays linear).
    pub fn put_cells(
        &mut self,
        snapshot: &Snapshot,
        table: &TableHandle,
        row: &[u8],
        cells: &[CellWrite<'_>],
    ) -> Result<()> {
        let moved: Vec<CellWrite<'_>>;
        let cells = if table.moving.iter().any(Option::is_some) {
            moved = cells
                .iter()
                .map(|&(f, q, t, v)| (table.slot(f, row), q, t, v))
                .collect();
            &moved
        } else {
            cells
        };
        let mut families: Vec<usize> = cells
            .iter()
            .filter(|(f, ..)| format_of(table, *f) == FamilyFormat::Packed)
            .map(|(f, ..)| *f)
            .collect();
        families.sort_unstable();
        families.dedup();
        for &family in &families {
            self.packed_mut(snapshot, table, family, row)?;
            let id = (family, row.to_vec());
            let grown: usize = cells
                .iter()
                .filter(|(f, ..)| *f == family)
                .map(|(_, q, _, v)| packed::cell_size(q, v))
                .sum();
            let bound = self.bounds.get(&id).copied().unwrap_or(0) + grown;
            if bound > packed::MAX_PACKED_LEN {
                // Over the limit, or overwrites counted twice: count what
                // the row would hold.
                let mut would = self.packed.get(&id).cloned().unwrap_or_default();
                for (_, q, ts, v) in cells.iter().filter(|(f, ..)| *f == family) {
                    would.insert((q.to_vec(), Reverse(*ts)), v.to_vec());
                }
                let exact = packed::size(&would);
                if exact > packed::MAX_PACKED_LEN {
                    return Err(packed::too_large(row, family_name(table, family), exact));
                }
                self.bounds.insert(id, exact.saturating_sub(grown));
            }
        }
        for &(family, qualifier, timestamp, value) in cells {
            match format_of(table, family) {
                FamilyFormat::Cells | FamilyFormat::Auto => {
                    let key = cells::key(row, qualifier, timestamp);
                    self.writes.insert((family, key), Some(value.to_vec()));
                }
                FamilyFormat::Packed => {
                    self.insert_packed(family, row, qualifier, timestamp, value.to_vec());
                }
            }
        }
        Ok(())
    }

    /// Puts a cell into a loaded PACKED row and grows its size bound.
    fn insert_packed(
        &mut self,
        family: usize,
        row: &[u8],
        qualifier: &[u8],
        timestamp: i64,
        value: Vec<u8>,
    ) {
        let id = (family, row.to_vec());
        *self.bounds.entry(id.clone()).or_default() += packed::cell_size(qualifier, &value);
        self.packed
            .entry(id)
            .or_default()
            .insert((qualifier.to_vec(), Reverse(timestamp)), value);
    }

    /// Checks the PACKED rows being edited against the size limit: exactly
    /// for those whose bound is over it.
    pub fn check_sizes(&mut self, table: &TableHandle) -> Result<()> {
        for (id, cells) in &self.packed {
            let bound = self.bounds.get(id).copied().unwrap_or(usize::MAX);
            if bound > packed::MAX_PACKED_LEN {
                let exact = packed::size(cells);
                if exact > packed::MAX_PACKED_LEN {
                    return Err(packed::too_large(&id.1, family_name(table, id.0), exact));
                }
                self.bounds.insert(id.clone(), exact);
            }
        }
        Ok(())
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.packed.is_empty()
    }

    /// Encodes the PACKED rows being edited into pair writes, checking
    /// each against the packed size limit.
    pub fn seal(&mut self, table: &TableHandle) -> Result<()> {
        self.bounds.clear();
        for ((family, row), cells) in std::mem::take(&mut self.packed) {
            let name = family_name(table, family);
            let mut value = packed::encode(&row, name, &cells)?;
            // A row emptied where blocks may hold it: a tombstone hides
            // their copy.
            if value.is_none() && table.blocks[family].is_some() {
                value = Some(Vec::new());
            }
            self.writes.insert((family, codec::escape(&row)), value);
        }
        Ok(())
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
        let family = table.slot(family, row);
        match format_of(table, family) {
            FamilyFormat::Cells => self.get(
                snapshot,
                table,
                family,
                &cells::key(row, qualifier, timestamp),
            ),
            FamilyFormat::Auto => {
                let own = self.get(
                    snapshot,
                    table,
                    family,
                    &cells::key(row, qualifier, timestamp),
                )?;
                if own.is_some() {
                    return Ok(own);
                }
                let folded = self.folded_cells(snapshot, table, family, row)?;
                Ok(folded
                    .get(&(qualifier.to_vec(), Reverse(timestamp)))
                    .cloned())
            }
            FamilyFormat::Packed => self.read_packed(snapshot, table, family, row, |cells| {
                cells
                    .get(&(qualifier.to_vec(), Reverse(timestamp)))
                    .cloned()
            }),
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
        let family = table.slot(family, row);
        if format_of(table, family) == FamilyFormat::Packed {
            let from = (qualifier.to_vec(), Reverse(i64::MAX));
            return self.read_packed(snapshot, table, family, row, |cells| {
                cells
                    .range(from..)
                    .take_while(|((q, _), _)| q == qualifier)
                    .map(|((_, Reverse(ts)), v)| (*ts, v.clone()))
                    .collect()
            });
        }
        let mut buf = RowBuf::default();
        self.cells_row(snapshot, table, family, row, Some(qualifier), &mut buf)?;
        let own = buf.view().cells().map(|c| (c.timestamp, c.value.to_vec()));
        if format_of(table, family) == FamilyFormat::Cells {
            return Ok(own.collect());
        }
        // AUTO: the block's cells of the column too, the own pair's kept
        // where both hold a timestamp.
        let mut all: BTreeMap<Reverse<i64>, Vec<u8>> = self
            .folded_cells(snapshot, table, family, row)?
            .into_iter()
            .filter(|((q, _), _)| q == qualifier)
            .map(|((_, ts), v)| (ts, v))
            .collect();
        all.extend(own.map(|(ts, v)| (Reverse(ts), v)));
        Ok(all.into_iter().map(|(Reverse(ts), v)| (ts, v)).collect())
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
        let family = table.slot(family, row);
        let format = format_of(table, family);
        if format == FamilyFormat::Auto {
            self.unfold(snapshot, table, family, row)?;
        }
        match format {
            FamilyFormat::Cells | FamilyFormat::Auto => {
                let mut buf = RowBuf::default();
                self.cells_row(snapshot, table, family, row, qualifier, &mut buf)?;
                for ((key, _), cell) in buf.pairs.iter().zip(buf.view().cells()) {
                    if time_range.contains(cell.timestamp) {
                        self.writes.insert((family, key.to_vec()), None);
                    }
                }
            }
            FamilyFormat::Packed => {
                self.packed_mut(snapshot, table, family, row)?
                    .retain(|(q, Reverse(ts)), _| {
                        qualifier.is_some_and(|want| want != q.as_slice())
                            || !time_range.contains(*ts)
                    });
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
        let family = table.slot(family, row);
        let mut removed = 0;
        let format = format_of(table, family);
        if format == FamilyFormat::Auto {
            self.unfold(snapshot, table, family, row)?;
        }
        match format {
            FamilyFormat::Packed => {
                let cells = self.load_packed(snapshot, table, family, row)?;
                let versions = cells.keys().map(|(q, Reverse(ts))| (q.as_slice(), *ts));
                let verdicts: Vec<bool> = garbage_verdicts(gc, now, versions).collect();
                removed = verdicts.iter().filter(|g| **g).count() as u64;
                if removed > 0 {
                    let kept = cells
                        .into_iter()
                        .zip(verdicts)
                        .filter_map(|(cell, garbage)| (!garbage).then_some(cell))
                        .collect();
                    self.packed.insert((family, row.to_vec()), kept);
                }
            }
            FamilyFormat::Cells | FamilyFormat::Auto => {
                let mut buf = RowBuf::default();
                self.cells_row(snapshot, table, family, row, None, &mut buf)?;
                let view = buf.view();
                let versions = view.cells().map(|c| (c.qualifier, c.timestamp));
                for ((key, _), garbage) in buf.pairs.iter().zip(garbage_verdicts(gc, now, versions))
                {
                    if garbage {
                        self.writes.insert((family, key.to_vec()), None);
                        removed += 1;
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Moves this overlay's pending writes to one row out into a new
    /// overlay: what a row's own mutations start from.
    pub fn take_row(&mut self, families: usize, row: &[u8]) -> Overlay {
        let range = codec::single_row_range(row);
        let mut part = Overlay::default();
        for family in 0..families {
            let keys: Vec<Vec<u8>> = self
                .writes
                .range((family, range.start.clone())..)
                .take_while(|((f, k), _)| *f == family && range.contains(k))
                .map(|((_, k), _)| k.clone())
                .collect();
            for key in keys {
                if let Some(value) = self.writes.remove(&(family, key.clone())) {
                    part.writes.insert((family, key), value);
                }
            }
            let id = (family, row.to_vec());
            if let Some(cells) = self.packed.remove(&id) {
                part.packed.insert(id.clone(), cells);
            }
            if let Some(bound) = self.bounds.remove(&id) {
                part.bounds.insert(id, bound);
            }
        }
        part
    }

    /// Moves `other`'s writes on top of this overlay's.
    pub fn absorb(&mut self, other: Overlay) {
        self.writes.extend(other.writes);
        self.packed.extend(other.packed);
        self.bounds.extend(other.bounds);
    }
}
