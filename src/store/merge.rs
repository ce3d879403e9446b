//! Merging a PACKED or AUTO family's rows into blocks (`format/blocks/`):
//! what `COMPACT TABLE` runs for each such family, and what the background
//! compaction runs for an AUTO family, with the table readable and
//! writable throughout.
//!
//! The first merge gives the family a blocks keyspace (one catalog write).
//! Then the merge walks the family in key order, a step at a time; each
//! step holds every row lock, reads the next rows as a reader sees them
//! (the row keyspace's pairs over the blocks' rows, tombstones hiding
//! rows; AUTO: a row's block row and own cells together, a marker hiding
//! the block row), drops what the GC policy discards, and in one batch writes them
//! as new blocks, deletes the blocks it read and deletes the row
//! keyspace's pairs it read. A step ends only where a block ends, so a
//! block is always read whole and rewritten whole. In any snapshot a row
//! is then in at most one block, and the row keyspace's pair, if any,
//! shadows it; a crash between steps leaves the family correct, and the
//! next merge carries on.

use super::commit::lock;
use super::engine::{FjallStore, GcStats, TableHandle};
use super::format::blocks::{BLOCK_ROWS, Merged};
use super::format::{FamilyFormat, RowBuf, blocks, folded_row};
use super::time::now_micros;
use crate::error::Result;
use fjall::{PersistMode, Slice};

/// Rows a step reads at least (then on to the end of the block it is in).
const STEP_ROWS: usize = 4096;

/// How a merge goes: blocks of at most `block_rows`, steps of at least
/// `step_rows` rows, and whether it leaves the blocks alone that no own
/// pair falls in (`only_new`).
#[derive(Clone, Copy)]
struct Sizes {
    block_rows: usize,
    step_rows: usize,
    only_new: bool,
}

impl FjallStore {
    /// Merges the rows of `table`'s PACKED or AUTO family `family` into
    /// blocks, dropping what its GC policy discards; a no-op for a CELLS
    /// family or one whose format is being changed. What GC removed.
    pub fn merge_blocks(&self, table: &str, family: &str) -> Result<GcStats> {
        self.merge_blocks_sized(table, family, BLOCK_ROWS, STEP_ROWS)
    }

    /// [`FjallStore::merge_blocks`] with blocks of at most `block_rows`
    /// rows and steps of at least `step_rows` (tests use small ones).
    #[doc(hidden)]
    pub fn merge_blocks_sized(
        &self,
        table: &str,
        family: &str,
        block_rows: usize,
        step_rows: usize,
    ) -> Result<GcStats> {
        let sizes = Sizes {
            block_rows: block_rows.max(1),
            step_rows: step_rows.max(1),
            only_new: false,
        };
        self.merge_paced(table, family, sizes, &mut |_| true)
    }

    /// Compacts the blocks of `table`'s family `family` into fjall's last
    /// level, compressed (see `FjallStore::compact`).
    pub(super) fn compact_blocks(&self, table: &str, family: &str) -> Result<()> {
        let handle = self.handle(table)?;
        let index = handle.def.family_index(family)?;
        match &handle.blocks[index] {
            Some(blocks) => self.compact_keyspace(blocks),
            None => Ok(()),
        }
    }

    /// Folds what `table`'s AUTO family `family` holds in its own
    /// keyspace into its blocks, leaving the blocks no own pair falls in
    /// as they are; `pace` is told how long each step took and says
    /// whether to go on. What the background compaction runs.
    pub(super) fn fold_new_cells(
        &self,
        table: &str,
        family: &str,
        pace: &mut dyn FnMut(std::time::Duration) -> bool,
    ) -> Result<GcStats> {
        let sizes = Sizes {
            block_rows: BLOCK_ROWS,
            step_rows: STEP_ROWS,
            only_new: true,
        };
        self.merge_paced(table, family, sizes, pace)
    }

    fn merge_paced(
        &self,
        table: &str,
        family: &str,
        sizes: Sizes,
        pace: &mut dyn FnMut(std::time::Duration) -> bool,
    ) -> Result<GcStats> {
        let _one = lock(&self.inner.merges);
        if !self.ensure_blocks(table, family)? {
            return Ok(GcStats::default());
        }
        let mut stats = GcStats::default();
        let mut start: Vec<u8> = Vec::new();
        if sizes.only_new {
            // From the first own pair's row: the blocks before it stay.
            let handle = self.handle(table)?;
            let index = handle.def.family_index(family)?;
            let first =
                fjall::Readable::iter(&self.inner.db.snapshot(), &handle.keyspaces[index]).next();
            match first {
                Some(guard) => start = handle.formats[index].row_of(&guard.key()?)?.to_vec(),
                None => {
                    self.fresh_row_keyspace(table, family)?;
                    return Ok(stats);
                }
            }
        }
        loop {
            let began = std::time::Instant::now();
            let handle = self.handle(table)?;
            let index = handle.def.family_index(family)?;
            let def = &handle.def.families[index];
            // (A format change started meanwhile moves the rows itself.)
            if !def.format.has_blocks() || def.converting.is_some() {
                return Ok(stats);
            }
            match self.merge_step(&handle, index, &start, sizes, &mut stats)? {
                Some(next) if pace(began.elapsed()) => start = next,
                Some(_) => return Ok(stats),
                None => {
                    self.fresh_row_keyspace(table, family)?;
                    return Ok(stats);
                }
            }
        }
    }

    /// Gives `table`'s family `family` a blocks keyspace if it is PACKED
    /// and has none (one catalog write); whether it has one now (not for
    /// a CELLS family, nor while its format changes).
    pub(super) fn ensure_blocks(&self, table: &str, family: &str) -> Result<bool> {
        // (Whether the family is PACKED and steady, and has blocks.)
        let state = |handle: &TableHandle| -> Result<(usize, Option<bool>)> {
            let index = handle.def.family_index(family)?;
            let def = &handle.def.families[index];
            let steady = def.format.has_blocks() && def.converting.is_none();
            Ok((index, steady.then_some(def.blocks.is_some())))
        };
        // Asked by every large batch of a load: looked at first without
        // the DDL lock.
        if let (_, found @ (None | Some(true))) = state(&*self.handle(table)?)? {
            return Ok(found.is_some());
        }
        let _ddl = lock(&self.inner.ddl);
        let handle = self.handle(table)?;
        let (index, has) = state(&handle)?;
        let Some(has) = has else {
            return Ok(false);
        };
        if !has {
            let mut def = handle.def.clone();
            let id = self.next_id()?;
            def.families[index].blocks = Some(id);
            let fresh = self.open_handle(def.clone())?;
            self.write_catalog(Some(&def), None, id + 1)?;
            self.install(fresh);
        }
        Ok(true)
    }

    /// Gives a merged family a new, empty row keyspace in place of its own
    /// when the merge left that one without a pair (no write came in
    /// meanwhile), and deletes the old one.
    ///
    /// fjall knows how far a keyspace has been written out only from its
    /// tables. A keyspace the merge emptied has none after its compaction,
    /// so every open replayed all its writes still in the journal into
    /// memory (a series' latest value read through them: 10 -> 32 us),
    /// and no journal holding any of them was ever deleted. A deleted
    /// keyspace's writes are skipped by both.
    fn fresh_row_keyspace(&self, table: &str, family: &str) -> Result<()> {
        use fjall::Readable;
        let _ddl = lock(&self.inner.ddl);
        let handle = self.handle(table)?;
        let index = handle.def.family_index(family)?;
        let def = &handle.def.families[index];
        if !def.format.has_blocks() || def.converting.is_some() || def.blocks.is_none() {
            return Ok(());
        }
        let all: Vec<_> = self.inner.row_locks.iter().map(lock).collect();
        let old = handle.keyspaces[index].clone();
        if self.inner.db.snapshot().iter(&old).next().is_some() {
            return Ok(());
        }
        let mut def = handle.def.clone();
        let id = self.next_id()?;
        def.families[index].id = id;
        let fresh = self.open_handle(def.clone())?;
        self.write_catalog(Some(&def), None, id + 1)?;
        self.install(fresh);
        drop(all);
        self.inner.keyspace_guard.delete(&self.inner.db, old)?;
        Ok(())
    }

    /// Merges the rows from `start` (an escaped key) on, at least
    /// `step_rows` of them and to the end of a block, into blocks of at
    /// most `block_rows`; where the next
    /// step starts, `None` when the family is done. With `only_new`, the
    /// step ends at the first block boundary past which no own pair comes
    /// before the next block's end, and the next starts at the next own
    /// pair's row (the blocks between are left as they are).
    fn merge_step(
        &self,
        handle: &TableHandle,
        index: usize,
        start: &[u8],
        sizes: Sizes,
        stats: &mut GcStats,
    ) -> Result<Option<Vec<u8>>> {
        let Sizes {
            block_rows,
            step_rows,
            only_new,
        } = sizes;
        let Some(blocks_ks) = &handle.blocks[index] else {
            return Ok(None);
        };
        let rows_ks = &handle.keyspaces[index];
        let family = &handle.def.families[index];
        let _all: Vec<_> = self.inner.row_locks.iter().map(lock).collect();
        let snapshot = self.inner.db.snapshot();
        let now = now_micros();
        let format = handle.formats[index];
        let mut merged = Merged::keeping(&snapshot, rows_ks, blocks_ks, format.own_cells(), start)?;
        // Where the next step starts when it skips blocks (`only_new`).
        let mut skip_to: Option<Option<Vec<u8>>> = None;
        let mut kept: Vec<(Slice, Slice)> = Vec::new();
        let (mut read, mut last) = (0usize, None::<Vec<u8>>);
        let mut more = false;
        let mut row_pairs: Vec<(Slice, Slice)> = Vec::new();
        let mut buf = RowBuf::default();
        while let Some(pair) = merged.next()? {
            let row = format.row_of(&pair.0)?.to_vec();
            row_pairs.push(pair);
            // (AUTO: a row's own cells follow its block row.)
            if merged.peek_key().is_some_and(|next| next.starts_with(&row)) {
                continue;
            }
            read += 1;
            let pairs = std::mem::take(&mut row_pairs);
            let (folded, removed) =
                folded_row(format, &family.gc, now, &family.name, pairs, &mut buf)?;
            if removed > 0 {
                stats.rows_touched += 1;
                stats.cells_removed += removed;
            }
            last = Some(row);
            kept.extend(folded);
            if !merged.at_block_boundary() {
                continue;
            }
            if only_new && let Some(next) = merged.next_own_beyond_block()? {
                skip_to = Some(next);
                break;
            }
            if read >= step_rows {
                more = true;
                break;
            }
        }
        let (rows_read, blocks_read) = (merged.rows_read(), merged.read_blocks());
        if rows_read.is_empty() && blocks_read.is_empty() {
            return Ok(skip_to.flatten());
        }
        let new_blocks = blocks::build(&kept, &[], block_rows, None)?;
        // Where the span held no block, the new ones go in as sorted
        // tables (no journal): until the batch below deletes the row
        // keyspace's pairs, those shadow them with the same rows, and the
        // locks keep writers out.
        let ingest = blocks_read.is_empty() && !new_blocks.is_empty();
        if ingest {
            let mut ingestion = blocks_ks.start_ingestion()?;
            for (key, value) in new_blocks.iter() {
                ingestion.write(key.as_slice(), value.as_slice())?;
            }
            ingestion.finish()?;
        }
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::Buffer));
        for key in rows_read {
            batch.remove(rows_ks, key);
        }
        // (A key written anew is not also removed: one batch gives both
        // the same sequence number.)
        for key in blocks_read {
            if new_blocks
                .binary_search_by(|(k, _)| k.as_slice().cmp(&key))
                .is_err()
            {
                batch.remove(blocks_ks, key);
            }
        }
        if !ingest {
            for (key, value) in new_blocks {
                batch.insert(blocks_ks, key, value);
            }
        }
        batch.commit()?;
        if let Some(next) = skip_to {
            return Ok(next);
        }
        Ok(match (more, last) {
            (true, Some(last)) => {
                let mut next = last.to_vec();
                next.push(0);
                Some(next)
            }
            _ => None,
        })
    }

    /// Writes a bulk batch's new PACKED rows (of slot `slot`; (slot,
    /// escaped row, value), strictly ascending; `raw`: whether their
    /// values were encoded raw, for blocks) straight into blocks, as
    /// [`FjallStore::ingest_built`] says.
    pub(super) fn ingest_blocks(
        &self,
        table: &TableHandle,
        slot: usize,
        pairs: &[(usize, Vec<u8>, Vec<u8>)],
        runs: &[usize],
        raw: bool,
    ) -> Result<bool> {
        // (An AUTO family's new cells go in as cells: merges fold them.)
        if table.formats[slot] != FamilyFormat::Packed {
            return Ok(false);
        }
        let rows_of: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(_, k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        let keys: Vec<&[u8]> = rows_of.iter().map(|(k, _)| *k).collect();
        // A block that cannot go column-wise holds raw rows compressed.
        let compress =
            |key: &[u8], value: &[u8]| super::bulk::compress_pair(table, slot, key, value);
        let compress: Option<blocks::Compress<'_>> = raw.then_some(&compress);
        self.ingest_built(table, slot, &keys, runs, |cuts| {
            blocks::build(&rows_of, cuts, BLOCK_ROWS, compress)
        })
    }

    /// Rows (their escaped keys `keys`, strictly ascending, all of one
    /// slot, which has blocks) ingested as the blocks `build` makes of
    /// them, given where blocks must be cut (`runs`, and where the rows
    /// surround a stored block); `false`, with nothing written, when a
    /// row falls within a stored block's rows (the caller writes them as
    /// rows). The caller holds the rows' locks and has made sure that
    /// none of them is stored. One loader at a time looks and ingests, so
    /// no two put blocks around each other's rows; a merge, which holds
    /// every row lock, cannot run meanwhile.
    pub(super) fn ingest_built(
        &self,
        table: &TableHandle,
        slot: usize,
        keys: &[&[u8]],
        runs: &[usize],
        build: impl FnOnce(&[usize]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>,
    ) -> Result<bool> {
        let Some(blocks_ks) = &table.blocks[slot] else {
            return Ok(false);
        };
        let _one = lock(&self.inner.block_loads);
        let snapshot = self.inner.db.snapshot();
        let Some(mut cuts) = blocks::gaps(&snapshot, blocks_ks, keys)? else {
            return Ok(false);
        };
        cuts.extend_from_slice(runs);
        cuts.sort_unstable();
        cuts.dedup();
        let mut ingestion = blocks_ks.start_ingestion()?;
        for (key, value) in build(&cuts)? {
            ingestion.write(key, value)?;
        }
        ingestion.finish()?;
        self.inner
            .ingested
            .fetch_add(keys.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }
}
