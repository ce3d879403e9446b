//! Bulk writes: rows of cell writes in flat buffers ([`CellBatch`]), which
//! a batch writer fills with no allocation per cell, and
//! [`FjallStore::write_batch`], which writes them atomically per row in one
//! commit. A row that is new to the store and only sets cells is encoded
//! straight into its pairs (a PACKED row-family from its sorted cells);
//! any other row goes through the overlay as a row mutation does.

mod batch;
mod tall;

use super::format::blocks::{self, BLOCK_ROWS, LastBlock};
use super::format::{FamilyFormat, auto};
use super::mutation::{check_key, check_qualifier, check_value};
use super::{FjallStore, aggregate, mutation, now_micros};
use crate::codec;
use crate::error::{Error, Result};
use crate::store::apply::apply;
use crate::store::engine::TableHandle;
use crate::store::overlay::Overlay;
use batch::Resolved;
pub use batch::{BatchColumn, BatchFamily, CellBatch};
use std::sync::Arc;
use tall::TallBatch;

/// A batch's new rows encoded into pairs before its rows were locked, on
/// the assumption that nothing is stored for them, against the table
/// handle of that moment; taken by the write (see `batch::Prepared`).
struct Encoded {
    handle: Arc<TableHandle>,
    /// The batch's rows in key order, when all of them are valid.
    valid: Option<Vec<usize>>,
    ahead: Ahead,
}

/// What a batch's rows were encoded into ahead.
enum Ahead {
    /// Pairs, part by part.
    Pairs(Vec<Part>),
    /// Tall rows bound for blocks, with the blocks built.
    Tall(TallBatch),
}

/// What [`FjallStore::write_batch`] does with a row that cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRows {
    /// Write nothing of the batch.
    Stop,
    /// Write the other rows.
    Skip,
}

impl FjallStore {
    /// Writes the rows of `batch` into `table` in one commit, each row
    /// atomically; cells of a row repeating a (family, qualifier,
    /// timestamp) keep the last value, and a key repeated in the batch
    /// applies its rows in order. Returns the rows that could not be
    /// written, by index, with why: with [`BadRows::Stop`] at most one,
    /// and then nothing of the batch was written. An `Err` is a storage
    /// failure or a family the table does not have.
    pub fn write_batch(
        &self,
        table: &str,
        batch: &CellBatch,
        bad: BadRows,
    ) -> Result<Vec<(usize, Error)>> {
        let first = self.handle(table)?;
        let resolved = resolve(&first, batch)?;
        // The encoding done ahead holds where the table is as it was then
        // and its rows have nothing stored to merge with, as it assumed.
        let mut prepared = batch
            .prepared
            .take::<Encoded>()
            .filter(|p| Arc::ptr_eq(&p.handle, &first));
        let checked = match prepared.as_mut().and_then(|p| p.valid.take()) {
            // (Ahead, the order was checked too: it decided `ahead`.)
            Some(valid) => Ok(Checked {
                valid,
                failed: Vec::new(),
                strict: false,
            }),
            None => checked_rows(batch, &resolved, bad),
        };
        let Checked {
            valid,
            mut failed,
            strict,
        } = match checked {
            Ok(checked) => checked,
            Err(stop) => return Ok(vec![stop]),
        };

        self.blocks_for_load(table, batch, &valid)?;
        let _guards = self.lock_rows(&first, valid.iter().map(|&r| batch.key(r)));
        let (handle, snapshot) = self.locked_view(table, &first)?;
        // Families cannot change under a handle of the same table, but the
        // format of one can: resolve again against what is locked.
        let resolved = resolve(&handle, batch)?;
        let now = now_micros();
        let runs = runs(&valid);
        let fresh = Fresh {
            snapshot: Some(&snapshot),
            table: &handle,
            batch,
            families: &resolved,
            span: span(batch, &valid),
            raw: bound_for_blocks(&handle, &valid, runs.as_deref()),
            wide: None,
        };
        let tall_bound = failed.is_empty() && fresh.raw;
        let ahead = prepared
            .filter(|p| Arc::ptr_eq(&p.handle, &handle))
            .map(|p| p.ahead);
        let (parts, tall) = match ahead {
            Some(Ahead::Pairs(parts)) => (Some(parts), None),
            Some(Ahead::Tall(tall)) => (None, Some(tall)),
            None if tall_bound => (
                None,
                TallBatch::of(&handle, batch, &resolved, &valid, strict),
            ),
            None => (None, None),
        };
        // A load of tall rows, none of them stored, goes straight into
        // blocks.
        if tall_bound
            && let Some(runs) = &runs
            && let Some(tall) = tall
            && Vacant::new(&fresh).holds_none(&snapshot, &handle, tall.slot)?
            && tall.ingest(self, &handle, batch, runs)?
        {
            return Ok(Vec::new());
        }
        // Rows given a column at a time go on as cells.
        let cells = batch.to_cells();
        let batch = &*cells;
        // (Encoded ahead, the rows bound for blocks were chosen then.)
        let block_rows = match (&parts, wide_for_blocks(&handle, batch, &valid)) {
            (_, false) => None,
            (Some(_), true) => Some(Vec::new()),
            (None, true) => Some(self.block_rows(&handle, &snapshot, batch, &valid)?),
        };
        let fresh = Fresh {
            batch,
            wide: block_rows.as_deref(),
            ..fresh
        };
        let parts = match parts {
            Some(parts) => fresh.settle(parts, &valid)?,
            None => encode_new_rows(&fresh, &valid, &repeated_keys(batch, &valid)),
        };
        let mut overlay = Overlay::default();
        let mut direct: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        let mut outcomes = Vec::with_capacity(valid.len());
        // Per row of `valid`, where its pairs end in `direct`.
        let mut ends = Vec::with_capacity(valid.len());
        for part in parts {
            let base = direct.len();
            ends.extend(part.ends.iter().map(|end| base + end));
            direct.extend(part.pairs);
            outcomes.extend(part.outcomes);
        }
        for (&row, written) in valid.iter().zip(outcomes) {
            // A row new to the store went straight into pairs; any other
            // (a repeated key, an add, stored cells) goes through the
            // overlay.
            let outcome = written.and_then(|done| match done {
                true => Ok(()),
                false => apply(
                    &snapshot,
                    &handle,
                    &mut overlay,
                    &batch.row_mutation(row),
                    now,
                ),
            });
            if let Err(e) = outcome {
                if bad == BadRows::Stop {
                    return Ok(vec![(row, e)]);
                }
                failed.push((row, e));
            }
        }
        let written = valid.len() - failed.len();
        if fresh.wide.is_some()
            && failed.is_empty()
            && overlay.is_empty()
            && ends.len() == valid.len()
            && let Some((rest, rows)) =
                self.ingest_wide(&fresh, &snapshot, &valid, &direct, &ends)?
        {
            match ingestible(&rest, rows) {
                Some(slot) => self.ingest_pairs(&handle, slot, rest, rows)?,
                None => self.commit_pairs(&handle, overlay, rest)?,
            }
            return Ok(failed);
        }
        // A family's own PACKED rows go in as blocks where they can, cut
        // where the batch's runs meet (see [`runs`]).
        let runs = runs.filter(|_| failed.is_empty() && direct.len() == valid.len());
        match ingestible(&direct, written) {
            Some(slot)
                if overlay.is_empty()
                    && let Some(runs) = &runs
                    && self.ingest_blocks(&handle, slot, &direct, runs, fresh.raw)? => {}
            Some(slot) => {
                // The new rows' pairs are ingested, the rows that merge
                // with stored ones (a load's first row continuing the
                // last load's, as a series' bucket does) committed: each
                // row is in one of the two, whole.
                let direct = compressed(&fresh, direct)?;
                self.ingest_pairs(&handle, slot, direct, written)?;
                self.commit_pairs(&handle, overlay, Vec::new())?
            }
            None => {
                let direct = compressed(&fresh, direct)?;
                self.commit_pairs(&handle, overlay, direct)?
            }
        }
        failed.sort_by_key(|(row, _)| *row);
        Ok(failed)
    }

    /// Encodes `batch`'s new rows into pairs ahead of its write (see
    /// [`Backend::prepare_batch`](super::Backend::prepare_batch)): as
    /// [`FjallStore::write_batch`] would find them with nothing stored in
    /// the batch's key span, against the table as it is now. Not while a
    /// family's format is being changed (a row's keyspace then depends on
    /// a cursor that moves), nor when a bad row stops the batch anyway.
    pub fn prepare_batch(&self, table: &str, batch: &mut CellBatch) -> Result<()> {
        batch.prepared.drop_it();
        let mut handle = self.handle(table)?;
        if handle.moving.iter().any(Option::is_some) {
            return Ok(());
        }
        let resolved = resolve(&handle, batch)?;
        let Ok(Checked {
            valid,
            failed,
            strict,
        }) = checked_rows(batch, &resolved, BadRows::Skip)
        else {
            return Ok(());
        };
        let all_valid = failed.is_empty();
        // (Before the encoding: a family given blocks is a new handle.)
        if handle.def.families.iter().any(|f| f.blocks.is_none()) {
            self.blocks_for_load(table, batch, &valid)?;
            handle = self.handle(table)?;
        }
        let runs = runs(&valid);
        let raw = bound_for_blocks(&handle, &valid, runs.as_deref());
        // Tall rows bound for blocks are encoded as the blocks, cut where
        // the batch's runs meet (the write sends them down the general
        // path if any row of their span is stored by then).
        if raw
            && all_valid
            && let Some(runs) = &runs
            && let Some(mut tall) = TallBatch::of(&handle, batch, &resolved, &valid, strict)
        {
            tall.build(batch, runs)?;
            batch.prepared.put(Encoded {
                handle: Arc::clone(&handle),
                valid: Some(valid),
                ahead: Ahead::Tall(tall),
            });
            return Ok(());
        }
        // Rows given a column at a time go on as cells.
        batch.make_cells();
        let repeated = repeated_keys(batch, &valid);
        let fresh = Fresh {
            snapshot: None,
            table: &handle,
            batch,
            families: &resolved,
            span: span(batch, &valid),
            raw,
            wide: None,
        };
        let block_rows = match wide_for_blocks(&handle, batch, &valid) {
            true => Some(self.block_rows(&handle, &self.inner.db.snapshot(), batch, &valid)?),
            false => None,
        };
        let fresh = Fresh {
            wide: block_rows.as_deref(),
            ..fresh
        };
        let parts = encode_new_rows(&fresh, &valid, &repeated);
        let encoded = Encoded {
            handle: Arc::clone(&handle),
            valid: all_valid.then_some(valid),
            ahead: Ahead::Pairs(parts),
        };
        batch.prepared.put(encoded);
        Ok(())
    }
}

impl FjallStore {
    /// Gives the PACKED families a batch large enough to be ingested
    /// writes a blocks keyspace, so that its rows can go in as blocks
    /// (before any row lock is taken: it is a catalog change).
    fn blocks_for_load(&self, table: &str, batch: &CellBatch, valid: &[usize]) -> Result<()> {
        let tall = valid.len() >= INGEST_MIN_ROWS && runs(valid).is_some();
        // (Wide rows go into blocks only in an AUTO family: see
        // [`wide_for_blocks`].)
        let wide = !tall && wide_rows(batch, valid);
        if !tall && !wide {
            return Ok(());
        }
        let handle = self.handle(table)?;
        for family in &batch.families {
            let auto = handle
                .def
                .families
                .iter()
                .any(|f| &f.name == family && f.format == FamilyFormat::Auto);
            if tall || auto {
                self.ensure_blocks(table, family)?;
            }
        }
        Ok(())
    }
}

impl FjallStore {
    /// Per row of `batch`: whether it is bound for the blocks of its
    /// AUTO family (see [`wide_for_blocks`]), as `snapshot` has the
    /// table: a valid row that the family does not hold (a row the family
    /// holds gets its new cells as cells). One look for all when the
    /// batch's key span holds nothing, else one per row.
    fn block_rows(
        &self,
        table: &TableHandle,
        snapshot: &fjall::Snapshot,
        batch: &CellBatch,
        valid: &[usize],
    ) -> Result<Vec<bool>> {
        let mut bound = vec![false; batch.len()];
        let (Some(&first), Some(&last)) = (valid.first(), valid.last()) else {
            return Ok(bound);
        };
        let stored = |from: usize, to: usize| -> Result<bool> {
            let format = table.formats[0];
            let (first, last) = (batch.key(from), batch.key(to));
            let blocks = table.blocks[0].as_ref();
            Ok(!format.holds_no_rows(snapshot, &table.keyspaces[0], blocks, first, last)?)
        };
        let none = !stored(first, last)?;
        for &row in valid {
            bound[row] = none || !stored(row, row)?;
        }
        Ok(bound)
    }

    /// Writes a batch's AUTO rows encoded for blocks (each a PACKED row,
    /// one pair under its bare key; see [`wide_for_blocks`]) straight into
    /// the family's blocks, cut where a row not among them comes between
    /// two (a row the family holds, whose new cells are cells) and where
    /// the batch's runs meet (see [`runs`]). `direct`: the pairs of rows
    /// `valid` in order, row `i`'s ending at `ends[i]`; `snapshot`: the
    /// one taken under the rows' locks. Returns the other
    /// rows' pairs, as cells, for the caller to write (each row is in one
    /// of the two writes, whole), and how many rows they are; `None`,
    /// with nothing written, when no row can go into blocks (rows encoded
    /// ahead may be stored by now: those go as cells) or a block stored
    /// since has some of them among its rows.
    fn ingest_wide(
        &self,
        fresh: &Fresh<'_>,
        snapshot: &fjall::Snapshot,
        valid: &[usize],
        direct: &SlotPairs,
        ends: &[usize],
    ) -> Result<Option<(SlotPairs, usize)>> {
        let table = fresh.table;
        let pairs = |i: usize| &direct[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
        let mut chosen = Vec::new();
        for i in 0..valid.len() {
            if let [(0, key, _)] = pairs(i)
                && auto::is_bare(key)?
            {
                chosen.push(i);
            }
        }
        let key = |i: usize| fresh.batch.key(valid[i]);
        let (Some(&first), Some(&last)) = (chosen.first(), chosen.last()) else {
            return Ok(None);
        };
        let format = table.formats[0];
        let (own, blocks) = (&table.keyspaces[0], table.blocks[0].as_ref());
        // Rows chosen ahead of the row locks (`fresh.wide` empty) may be
        // stored by now; rows chosen under them were chosen with
        // `snapshot`.
        let ahead = fresh.wide.is_some_and(<[bool]>::is_empty);
        if ahead && !format.holds_no_rows(snapshot, own, blocks, key(first), key(last))? {
            let mut still = Vec::with_capacity(chosen.len());
            for i in chosen {
                if format.holds_no_rows(snapshot, own, blocks, key(i), key(i))? {
                    still.push(i);
                }
            }
            chosen = still;
        }
        if chosen.is_empty() {
            return Ok(None);
        }
        let cuts: Vec<usize> = (1..chosen.len())
            .filter(|&k| {
                let (a, b) = (chosen[k - 1], chosen[k]);
                b != a + 1 || valid[b] != valid[a] + 1
            })
            .collect();
        let rows: Vec<(&[u8], &[u8])> = chosen
            .iter()
            .map(|&i| {
                let (_, k, v) = &pairs(i)[0];
                (k.as_slice(), v.as_slice())
            })
            .collect();
        let keys: Vec<&[u8]> = rows.iter().map(|(k, _)| *k).collect();
        let built = self.ingest_built(table, 0, &keys, &cuts, |cuts| {
            blocks::build(&rows, cuts, BLOCK_ROWS, None)
        })?;
        if !built {
            return Ok(None);
        }
        let mut rest = Vec::new();
        let mut next = chosen.iter().peekable();
        for i in 0..valid.len() {
            if next.next_if(|&&c| c == i).is_none() {
                rest.extend(pairs(i).iter().cloned());
            }
        }
        let others = valid.len() - chosen.len();
        Ok(Some((as_own_cells(table, rest)?, others)))
    }
}

/// A batch's valid rows in key order, its invalid rows with why, and
/// whether the valid rows came strictly ascending (then no key comes
/// twice).
struct Checked {
    valid: Vec<usize>,
    failed: Vec<(usize, Error)>,
    strict: bool,
}

/// The batch's valid rows in key order (a stable sort: a repeated key's
/// rows keep theirs), so writes go to the LSM in order, repeats sit side
/// by side, and one look at each slot's pairs between the first and the
/// last key says whether any row of the batch has pairs stored, instead
/// of a look per row; and the invalid rows with why. `Err`: the first bad
/// row, when bad rows stop the batch.
fn checked_rows(
    batch: &CellBatch,
    families: &[Resolved],
    bad: BadRows,
) -> std::result::Result<Checked, (usize, Error)> {
    let mut failed = Vec::new();
    let mut valid = Vec::with_capacity(batch.len());
    let columns_valid = columns_valid(batch, families);
    for row in 0..batch.len() {
        match validate(batch, families, row, columns_valid) {
            Ok(()) => valid.push(row),
            Err(e) if bad == BadRows::Stop => return Err((row, e)),
            Err(e) => failed.push((row, e)),
        }
    }
    let strict = valid.windows(2).all(|w| batch.key(w[0]) < batch.key(w[1]));
    if !strict {
        valid.sort_by(|&a, &b| batch.key(a).cmp(batch.key(b)));
    }
    Ok(Checked {
        valid,
        failed,
        strict,
    })
}

/// Where the runs of rows `valid` (sorted by key) that came one after
/// another in the batch start (after the first), when the runs are long
/// enough to fill blocks: a batch gathered from sources read in key order
/// (a sorted file's partitions) has a few long runs. Blocks are cut where
/// runs meet, so that no block spans the key range between two sources,
/// where their later batches bring rows. `None` for a batch in no order:
/// blocks of its rows would be sparse, each spanning rows later loads
/// bring, which then could go only to the row keyspace.
fn runs(valid: &[usize]) -> Option<Vec<usize>> {
    let cuts: Vec<usize> = (1..valid.len())
        .filter(|&i| valid[i] != valid[i - 1] + 1)
        .collect();
    (valid.len() >= (cuts.len() + 1) * BLOCK_ROWS).then_some(cuts)
}

/// Whether the new rows of a batch (its valid rows, `valid`, and their
/// `runs`) are likely to go in as blocks: many, in runs (see [`runs`]), of a table of one
/// PACKED or AUTO family that has blocks. Their PACKED values are then
/// encoded `raw` (see `FamilyFormat::fresh_pairs`): the block stores them
/// anew. (An AUTO family's go in as blocks only when they are tall, see
/// `tall.rs`; else as cells.)
fn bound_for_blocks(table: &TableHandle, valid: &[usize], runs: Option<&[usize]>) -> bool {
    valid.len() >= INGEST_MIN_ROWS
        && matches!(table.blocks.as_slice(), [Some(_)])
        && table.formats.first().is_some_and(|f| f.has_blocks())
        && runs.is_some()
}

/// Cells a row holds on average from which a batch's AUTO rows are wide
/// enough to go in as blocks of PACKED rows ([`wide_for_blocks`]).
const WIDE_ROW_CELLS: usize = 64;

/// Whether a batch's valid rows are few and wide: together at least
/// [`INGEST_MIN_ROWS`] cells, [`WIDE_ROW_CELLS`] a row on average (a
/// series' bucket rows, each of a bucket's events).
fn wide_rows(batch: &CellBatch, valid: &[usize]) -> bool {
    let cells: usize = valid.iter().map(|&r| batch.cell_count(r)).sum();
    cells >= INGEST_MIN_ROWS && cells >= WIDE_ROW_CELLS * valid.len()
}

/// Whether the new rows of a batch of an AUTO family's wide rows (see
/// [`wide_rows`]) are encoded as PACKED rows, bound for the family's
/// blocks: the cells of one such row are thousands of pairs as cells,
/// which the background merge would fold into one block row later. The
/// rows the family holds (a bucket the last batch began) get their new
/// cells as cells, as AUTO's cells always go in, and so do rows that do
/// not go into blocks after all ([`as_own_cells`]).
fn wide_for_blocks(table: &TableHandle, batch: &CellBatch, valid: &[usize]) -> bool {
    matches!(table.blocks.as_slice(), [Some(_)])
        && table.formats.first() == Some(&FamilyFormat::Auto)
        && table.moving.iter().all(Option::is_none)
        && wide_rows(batch, valid)
}

/// The pairs of rows encoded for blocks that go in alone after all, in
/// their smallest form.
fn compressed(fresh: &Fresh<'_>, mut direct: SlotPairs) -> Result<SlotPairs> {
    if fresh.raw {
        for (slot, key, value) in &mut direct {
            *value = compress_pair(fresh.table, *slot, key, value)?;
        }
    }
    if fresh.wide.is_some() {
        direct = as_own_cells(fresh.table, direct)?;
    }
    Ok(direct)
}

/// The pairs of rows encoded for blocks, with each AUTO row among them
/// (a PACKED value under its bare key, see [`wide_for_blocks`]) made its
/// own cell pairs: what the family's own keyspace holds.
fn as_own_cells(table: &TableHandle, direct: SlotPairs) -> Result<SlotPairs> {
    let mut out = Vec::with_capacity(direct.len());
    for (slot, key, value) in direct {
        if table.formats[slot] == FamilyFormat::Auto && auto::is_bare(&key)? {
            out.extend(
                auto::own_pairs(&key, &value)?
                    .into_iter()
                    .map(|(k, v)| (slot, k, v)),
            );
        } else {
            out.push((slot, key, value));
        }
    }
    Ok(out)
}

/// A pair of `slot` encoded raw for a block, in its smallest form.
pub(super) fn compress_pair(
    table: &TableHandle,
    slot: usize,
    key: &[u8],
    value: &[u8],
) -> Result<Vec<u8>> {
    let name = &table.def.families[table.family_of(slot)].name;
    table.formats[slot].compress(name, key, value)
}

/// Pairs to write: (slot, key, value).
type SlotPairs = Vec<(usize, Vec<u8>, Vec<u8>)>;

/// The first and last keys of rows `valid` (in key order), if any.
fn span(batch: &CellBatch, valid: &[usize]) -> Option<(Vec<u8>, Vec<u8>)> {
    match (valid.first(), valid.last()) {
        (Some(&a), Some(&b)) => Some((batch.key(a).to_vec(), batch.key(b).to_vec())),
        _ => None,
    }
}

/// Rows of new data in a batch from which the batch is written by
/// ingestion (as sorted tables straight into the LSM) rather than through
/// the journal and memtable: enough to outweigh the fsyncs that make
/// ingested tables durable, so bulk loads take it and small writes do not.
pub const INGEST_MIN_ROWS: usize = 16_384;

/// The slot the pairs of a batch's new rows (those that went straight
/// into pairs; the others go through the overlay) can be ingested into:
/// when there are at least [`INGEST_MIN_ROWS`] rows or pairs, all in one
/// slot (ingestion is atomic per keyspace, so a row across two could be
/// half written by a crash) and in strictly ascending key order (what
/// ingestion requires).
fn ingestible(direct: &[(usize, Vec<u8>, Vec<u8>)], rows: usize) -> Option<usize> {
    // (Rows of many cells each, a series' buckets, are many pairs.)
    if rows.max(direct.len()) < INGEST_MIN_ROWS {
        return None;
    }
    let slot = direct.first()?.0;
    let one_slot = direct.iter().all(|(s, _, _)| *s == slot);
    let ascending = direct.windows(2).all(|w| w[0].1 < w[1].1);
    (one_slot && ascending).then_some(slot)
}

fn resolve(table: &TableHandle, batch: &CellBatch) -> Result<Vec<Resolved>> {
    batch
        .families
        .iter()
        .map(|name| {
            let index = table
                .def
                .families
                .iter()
                .position(|f| &f.name == name)
                .ok_or_else(|| Error::FamilyNotFound {
                    table: table.def.name.clone(),
                    family: name.clone(),
                })?;
            let kind = table.def.families[index].kind;
            Ok(Resolved { index, kind })
        })
        .collect()
}

/// The checks a row mutation gets before it is applied. `columns_valid`:
/// whether the columns of a batch given a column at a time pass
/// [`check_cell`] whatever their row (see [`columns_valid`]).
fn validate(
    batch: &CellBatch,
    families: &[Resolved],
    row: usize,
    columns_valid: bool,
) -> Result<()> {
    check_key(batch.key(row))?;
    if let Some(c) = &batch.columns {
        let timestamp = c.times[row];
        if columns_valid {
            if timestamp < 0 {
                return Err(Error::InvalidTimestamp { timestamp });
            }
            return Ok(());
        }
        for column in &c.columns {
            let value = column.value(row);
            check_cell(
                batch,
                families,
                c.family,
                false,
                &column.qualifier,
                timestamp,
                value,
            )?;
        }
        return Ok(());
    }
    for cell in batch.row_cells(row) {
        let (qualifier, value) = (batch.qualifier(cell), batch.value(cell));
        check_cell(
            batch,
            families,
            cell.family,
            cell.add,
            qualifier,
            cell.timestamp,
            value,
        )?;
    }
    Ok(())
}

/// Whether the columns of a batch given a column at a time pass
/// [`check_cell`] in every row with a time that is not negative: their
/// qualifiers and value sizes are, and a family that is no aggregate
/// checks nothing else of a value.
fn columns_valid(batch: &CellBatch, families: &[Resolved]) -> bool {
    let Some(c) = &batch.columns else {
        return false;
    };
    !batch.is_empty()
        && !families[c.family.0 as usize].kind.is_aggregate()
        && c.columns.iter().all(|column| {
            let value = column.value(0);
            check_cell(
                batch,
                families,
                c.family,
                false,
                &column.qualifier,
                0,
                value,
            )
            .is_ok()
        })
}

/// The checks of one cell write.
fn check_cell(
    batch: &CellBatch,
    families: &[Resolved],
    family: BatchFamily,
    add: bool,
    qualifier: &[u8],
    timestamp: i64,
    value: &[u8],
) -> Result<()> {
    let resolved = &families[family.0 as usize];
    check_qualifier(qualifier)?;
    check_value(value)?;
    if timestamp < 0 {
        return Err(Error::InvalidTimestamp { timestamp });
    }
    let name = &batch.families[family.0 as usize];
    if add && !resolved.kind.is_aggregate() {
        return Err(Error::InvalidMutation {
            reason: format!(
                "cannot add to column {}: family {name:?} is not an aggregate family",
                mutation::column_name(name, qualifier)
            ),
        });
    }
    if !add && resolved.kind.is_aggregate() {
        aggregate::check_value(
            resolved.kind,
            &mutation::column_name(name, qualifier),
            value,
        )?;
    }
    Ok(())
}

/// What writing a batch's new rows straight into pairs works with.
struct Fresh<'a> {
    /// What is stored; none when encoding ahead, as if nothing were.
    snapshot: Option<&'a fjall::Snapshot>,
    table: &'a TableHandle,
    batch: &'a CellBatch,
    families: &'a [Resolved],
    /// The batch's first and last keys (none when it is empty).
    span: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether its PACKED rows are encoded for blocks
    /// ([`bound_for_blocks`]).
    raw: bool,
    /// Per row of the batch, whether it is encoded as a PACKED row bound
    /// for its AUTO family's blocks ([`FjallStore::block_rows`]); given
    /// (if empty: the rows were encoded ahead) when the batch's rows are
    /// wide ([`wide_for_blocks`]).
    wide: Option<&'a [bool]>,
}

impl Fresh<'_> {
    /// Rows encoded ahead (`parts`, of rows `valid` in order) as the
    /// locked path would have them: where a PACKED family holds pairs in
    /// the batch's key span, each of its rows encoded ahead is looked up,
    /// and one stored already goes the general path instead (a CELLS
    /// family's new cells are pairs of their own whatever it holds).
    fn settle(&self, mut parts: Vec<Part>, valid: &[usize]) -> Result<Vec<Part>> {
        let Some(snapshot) = self.snapshot else {
            return Ok(parts);
        };
        let table = self.table;
        let mut vacant = Vacant::new(self);
        let mut look = vec![false; table.keyspaces.len()];
        for family in self.families {
            let slot = family.index;
            look[slot] = !table.formats[slot].pair_per_cell()
                && !vacant.holds_none(snapshot, table, slot)?;
        }
        if !look.contains(&true) {
            return Ok(parts);
        }
        let mut rows = valid.iter();
        for part in &mut parts {
            // Which rows keep what was encoded ahead, decided on the pairs
            // in place; then the pairs of those that do are kept.
            let mut keep = vec![true; part.outcomes.len()];
            let mut start = 0;
            for (i, outcome) in part.outcomes.iter_mut().enumerate() {
                let row = rows.next().copied().unwrap_or_default();
                let end = part.ends[i];
                let mine = &part.pairs[start..end];
                start = end;
                if !matches!(outcome, Ok(true)) || !mine.iter().any(|(slot, _, _)| look[*slot]) {
                    continue;
                }
                let escaped = codec::escape(self.batch.key(row));
                for &(slot, _, _) in mine {
                    if look[slot]
                        && table.formats[slot].must_merge(
                            snapshot,
                            &table.keyspaces[slot],
                            table.blocks[slot].as_ref(),
                            &escaped,
                            &vacant.last_block,
                        )?
                    {
                        *outcome = Ok(false);
                        keep[i] = false;
                        break;
                    }
                }
            }
            if keep.iter().all(|&k| k) {
                continue;
            }
            let mut pairs = std::mem::take(&mut part.pairs).into_iter();
            let mut start = 0;
            for (i, end) in part.ends.iter_mut().enumerate() {
                let mine = pairs.by_ref().take(*end - start);
                start = *end;
                if keep[i] {
                    part.pairs.extend(mine);
                } else {
                    mine.for_each(drop);
                }
                *end = part.pairs.len();
            }
        }
        Ok(parts)
    }
}

/// Rows of a batch from which their encoding is shared among the cores.
const PARALLEL_MIN_ROWS: usize = 4096;

/// Consecutive rows of a batch encoded: per row whether it went straight
/// into pairs (`Ok(true)`), needs the general path (`Ok(false)`) or
/// failed; the pairs of those that went straight in, in row order.
#[derive(Default)]
struct Part {
    outcomes: Vec<Result<bool>>,
    pairs: Vec<(usize, Vec<u8>, Vec<u8>)>,
    /// Per row, where its pairs end in `pairs`.
    ends: Vec<usize>,
}

/// Encodes the new rows among `rows` (in key order) into pairs, in parts
/// of consecutive rows spread over the cores when there are many; the
/// parts in order.
fn encode_new_rows(fresh: &Fresh<'_>, rows: &[usize], repeated: &[bool]) -> Vec<Part> {
    super::parallel::in_parts(rows, PARALLEL_MIN_ROWS, |rows| {
        encode_part(fresh, rows, repeated)
    })
}

fn encode_part(fresh: &Fresh<'_>, rows: &[usize], repeated: &[bool]) -> Part {
    let mut vacant = Vacant::new(fresh);
    let mut order = Vec::new();
    let mut part = Part {
        outcomes: Vec::with_capacity(rows.len()),
        pairs: Vec::new(),
        ends: Vec::with_capacity(rows.len()),
    };
    for &row in rows {
        let before = part.pairs.len();
        let written = match repeated[row] {
            true => Ok(false),
            false => encode_new_row(fresh, &mut vacant, &mut order, row, &mut part.pairs),
        };
        if !matches!(written, Ok(true)) {
            part.pairs.truncate(before);
        }
        part.outcomes.push(written);
        part.ends.push(part.pairs.len());
    }
    part
}

/// Whether a slot holds no pairs at all between the batch's first and
/// last keys (then no row of the batch needs merging there), found once
/// per slot and batch.
struct Vacant {
    /// The batch's first and last keys (none when it is empty).
    span: Option<(Vec<u8>, Vec<u8>)>,
    slots: Vec<Option<bool>>,
    /// The block the batch's last lookup of a stored row read.
    last_block: LastBlock,
}

impl Vacant {
    fn new(fresh: &Fresh<'_>) -> Vacant {
        Vacant {
            span: fresh.span.clone(),
            slots: vec![None; fresh.table.keyspaces.len()],
            last_block: LastBlock::default(),
        }
    }

    fn holds_none(
        &mut self,
        snapshot: &fjall::Snapshot,
        table: &TableHandle,
        slot: usize,
    ) -> Result<bool> {
        let Some((first, last)) = &self.span else {
            return Ok(false);
        };
        if let Some(known) = self.slots.get(slot).copied().flatten() {
            return Ok(known);
        }
        let vacant = table.formats[slot].holds_no_rows(
            snapshot,
            &table.keyspaces[slot],
            table.blocks[slot].as_ref(),
            first,
            last,
        )?;
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some(vacant);
        }
        Ok(vacant)
    }
}

/// Per row of the batch: whether another valid row has its key (those go
/// through the overlay, in order). `valid` is in key order.
fn repeated_keys(batch: &CellBatch, valid: &[usize]) -> Vec<bool> {
    let mut repeated = vec![false; batch.len()];
    for w in valid.windows(2) {
        if batch.key(w[0]) == batch.key(w[1]) {
            repeated[w[0]] = true;
            repeated[w[1]] = true;
        }
    }
    repeated
}

/// Writes a row that only sets cells and has nothing stored to merge with
/// straight into `out` as (slot, key, value); `false` (with `out` to be
/// cut back by the caller) when the row needs the general path.
fn encode_new_row(
    fresh: &Fresh<'_>,
    vacant: &mut Vacant,
    order: &mut Vec<(usize, usize)>,
    row: usize,
    out: &mut Vec<(usize, Vec<u8>, Vec<u8>)>,
) -> Result<bool> {
    let Fresh {
        snapshot,
        table,
        batch,
        families,
        ..
    } = *fresh;
    let key = batch.key(row);
    let cells = batch.row_cells(row);
    if cells.iter().any(|c| c.add) {
        return Ok(false);
    }
    // (slot, cell) by slot, qualifier and newest first; of cells with one
    // coordinate the one written last comes last.
    order.clear();
    order.extend(
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| (table.slot(families[c.family.0 as usize].index, key), i)),
    );
    order.sort_by(|&(sa, a), &(sb, b)| {
        let (ca, cb) = (&cells[a], &cells[b]);
        sa.cmp(&sb)
            .then_with(|| batch.qualifier(ca).cmp(batch.qualifier(cb)))
            .then_with(|| cb.timestamp.cmp(&ca.timestamp))
            .then_with(|| a.cmp(&b))
    });
    let same = |x: (usize, usize), y: (usize, usize)| {
        x.0 == y.0
            && cells[x.1].timestamp == cells[y.1].timestamp
            && batch.qualifier(&cells[x.1]) == batch.qualifier(&cells[y.1])
    };
    let escaped = codec::escape(key);
    let mut start = 0;
    while start < order.len() {
        let slot = order[start].0;
        let end = order[start..]
            .iter()
            .position(|&(s, _)| s != slot)
            .map_or(order.len(), |n| start + n);
        let format = table.formats[slot];
        if let Some(snapshot) = snapshot
            && !vacant.holds_none(snapshot, table, slot)?
            && format.must_merge(
                snapshot,
                &table.keyspaces[slot],
                table.blocks[slot].as_ref(),
                &escaped,
                &vacant.last_block,
            )?
        {
            return Ok(false);
        }
        let run = &order[start..end];
        let sorted: Vec<(&[u8], i64, &[u8])> = run
            .iter()
            .enumerate()
            .filter(|&(i, &x)| run.get(i + 1).is_none_or(|&next| !same(x, next)))
            .map(|(_, &(_, c))| {
                let cell = &cells[c];
                (batch.qualifier(cell), cell.timestamp, batch.value(cell))
            })
            .collect();
        let name = &table.def.families[table.family_of(slot)].name;
        let mut push = |k, v| out.push((slot, k, v));
        // An AUTO row bound for a block is its PACKED value (one too
        // large for one goes as cells).
        let block_row = fresh.wide.and_then(|w| w.get(row)) == Some(&true)
            && format == FamilyFormat::Auto
            && FamilyFormat::Packed
                .fresh_pairs(key, &escaped, name, &sorted, false, &mut push)
                .is_ok();
        if !block_row {
            format.fresh_pairs(key, &escaped, name, &sorted, fresh.raw, &mut push)?;
        }
        start = end;
    }
    Ok(true)
}
