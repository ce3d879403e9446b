//! Reclaiming garbage on disk.
//!
//! Reads always hide cells past their family's policy. Two mechanisms free
//! the space:
//! - a compaction filter drops cells older than an age that makes them
//!   garbage whatever else the policy says; it runs inside fjall's own
//!   compactions, so it needs no version counts, which a compaction that
//!   sees only some tables could get wrong;
//! - [`FjallStore::collect_garbage`](super::FjallStore::collect_garbage) walks a table,
//!   deletes every cell its policy discards (version counts included), row by
//!   row under the row lock, then compacts the family so the space returns.
//!
//! Reclaimed cells are gone: loosening a policy later does not bring back
//! cells already reclaimed, while cells not yet reclaimed reappear.

use super::engine::{BULK_CHUNK_ROWS, FjallStore, GcStats, TableHandle};
use super::format;
use super::format::blocks::Pairs;
use super::overlay::Overlay;
use super::policy::GcPolicy;
use super::time::now_micros;
use crate::codec;
use crate::error::Result;
use std::time::{Duration, Instant};

/// How long a full compaction waits for fjall's background compactions
/// to end, how long they must have been quiet, and how many times it
/// merges when one ran alongside ([`FjallStore::compact`]).
const COMPACTION_WAIT: Duration = Duration::from_secs(60);
const COMPACTION_QUIET: Duration = Duration::from_millis(20);
const MAJOR_TRIES: usize = 3;

impl FjallStore {
    /// Deletes every cell of `table` that its family's GC policy discards,
    /// then compacts the families so the disk space is returned.
    pub fn collect_garbage(&self, table: &str) -> Result<GcStats> {
        self.collect(table, None, false)
    }

    /// [`FjallStore::collect_garbage`] with every family compacted, each
    /// once: a family the pass sweeps is compacted after its sweep, one
    /// that keeps everything (which the pass skips) on its own.
    pub fn collect_and_compact(&self, table: &str) -> Result<GcStats> {
        self.collect(table, None, true)
    }

    /// [`FjallStore::collect_garbage`] for one family.
    pub fn collect_family_garbage(&self, table: &str, family: &str) -> Result<GcStats> {
        self.handle(table)?.def.family(family)?;
        self.collect(table, Some(family), false)
    }

    /// The GC pass over `only` or every family; with `merge_all`, the
    /// families without a policy are compacted too.
    fn collect(&self, table: &str, only: Option<&str>, merge_all: bool) -> Result<GcStats> {
        let handle = self.handle(table)?;
        let mut stats = GcStats::default();
        for (slot, keyspace) in handle.keyspaces.iter().enumerate() {
            let index = handle.family_of(slot);
            let family = &handle.def.families[index];
            let format = handle.formats[slot];
            if only.is_some_and(|f| f != family.name) {
                continue;
            }
            // A PACKED or AUTO family's own rows are merged into blocks,
            // garbage dropped (and a family with blocks must be: the walk
            // below sees only its row keyspace). Not while its format
            // changes.
            if format.has_blocks()
                && slot == index
                && family.converting.is_none()
                && (merge_all || handle.blocks[slot].is_some())
            {
                let merged = self.merge_blocks(table, &family.name)?;
                stats.cells_removed += merged.cells_removed;
                stats.rows_touched += merged.rows_touched;
                let fresh = self.handle(table)?;
                let now_at = fresh.def.family_index(&family.name)?;
                self.compact_keyspace(&fresh.keyspaces[now_at])?;
                if let Some(blocks) = &fresh.blocks[now_at] {
                    self.compact_keyspace(blocks)?;
                }
                continue;
            }
            if family.gc == GcPolicy::KeepAll {
                if merge_all {
                    self.compact_keyspace(keyspace)?;
                }
                continue;
            }
            let scan = self.inner.db.snapshot();
            let now = now_micros();
            let mut rows_with_garbage = Vec::new();
            let mut buf = format::RowBuf::default();
            let mut current: Vec<u8> = Vec::new();
            // Whether the row whose pairs `buf` holds has garbage; empties `buf`.
            let judge = |buf: &mut format::RowBuf| -> Result<bool> {
                if buf.pairs.is_empty() {
                    return Ok(false);
                }
                format.decode_all(buf)?;
                let garbage = format::has_garbage(&family.gc, now, buf, 0);
                buf.clear();
                Ok(garbage)
            };
            // (A family with blocks: their rows too, shadowed as reads see them.)
            let mut pairs = Pairs::open(
                &scan,
                keyspace,
                handle.blocks[slot].as_ref(),
                format.own_cells(),
                &[],
                None,
                false,
            )?;
            while let Some((key, value)) = pairs.next(false)? {
                let row = format.row_of(&key)?;
                if row != current.as_slice() {
                    if judge(&mut buf)? {
                        rows_with_garbage.push(std::mem::take(&mut current));
                    }
                    current = row.to_vec();
                }
                buf.pairs.push((key, value));
                if rows_with_garbage.len() >= BULK_CHUNK_ROWS {
                    stats = self.sweep_rows(&handle, index, &rows_with_garbage, stats)?;
                    rows_with_garbage.clear();
                }
            }
            if judge(&mut buf)? {
                rows_with_garbage.push(current);
            }
            stats = self.sweep_rows(&handle, index, &rows_with_garbage, stats)?;
            self.compact_keyspace(keyspace)?;
        }
        Ok(stats)
    }

    /// Compacts every family of `table` fully: flushes memtables, merges
    /// all on-disk tables and drops cells the age rules of the GC policies
    /// discard.
    pub fn compact(&self, table: &str) -> Result<()> {
        let handle = self.handle(table)?;
        for (_, keyspace) in handle.all_keyspaces() {
            self.compact_keyspace(keyspace)?;
        }
        Ok(())
    }

    /// Writes a keyspace's memtable out and merges all its tables into the
    /// last level (lz4, the age rules applied).
    ///
    /// fjall declines a major compaction, silently, when a background
    /// compaction holds any of the keyspace's tables at that moment (one
    /// is often queued by the flush just before). A table then stayed in
    /// level 1, uncompressed: 14.3 bytes a reading of the comparison
    /// bench's bucket columns instead of 9.7, changing from run to run.
    /// So the background is let settle first, and the merge is run again
    /// (up to [`MAJOR_TRIES`] times) when a background compaction ran
    /// alongside it, which is when it may have been declined.
    pub(super) fn compact_keyspace(&self, keyspace: &fjall::Keyspace) -> Result<()> {
        // Not while a merge into blocks runs (the background compaction
        // folding an AUTO family): a read begun after the two had run
        // side by side was seen to miss the cells a later step folded.
        let _one = super::commit::lock(&self.inner.merges);
        super::keyspaces::write_out(keyspace)?;
        // fjall moves the mark below which a merge may drop deleted and
        // overwritten versions only now and then (on a memtable rotation
        // that found one to seal, every 10 000 snapshots, when an
        // ingestion ends). A merge into blocks deletes every row pair it
        // read; with the mark behind, their tombstones outlived this
        // compaction and every read of the family stepped over them (a
        // series' latest value: 10 -> 32 us). An ingestion of nothing
        // moves the mark up to now.
        keyspace.start_ingestion()?.finish()?;
        let db = &self.inner.db;
        for _ in 0..MAJOR_TRIES {
            self.settle_compactions();
            let before = db.compactions_completed();
            keyspace.major_compact()?;
            if db.active_compactions() == 0 && db.compactions_completed() == before {
                break;
            }
        }
        Ok(())
    }

    /// Waits (up to [`COMPACTION_WAIT`]) until no background compaction
    /// runs and none has finished for [`COMPACTION_QUIET`].
    fn settle_compactions(&self) {
        let db = &self.inner.db;
        let started = Instant::now();
        let mut seen = db.compactions_completed();
        let mut quiet = Instant::now();
        while started.elapsed() < COMPACTION_WAIT {
            let done = db.compactions_completed();
            if db.active_compactions() > 0 || done != seen {
                seen = done;
                quiet = Instant::now();
            } else if quiet.elapsed() >= COMPACTION_QUIET {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Re-evaluates rows (given escaped) under their locks and deletes their garbage.
    fn sweep_rows(
        &self,
        handle: &TableHandle,
        family: usize,
        rows: &[Vec<u8>],
        mut stats: GcStats,
    ) -> Result<GcStats> {
        let policy = &handle.def.families[family].gc;
        for escaped in rows {
            let (key, _) = codec::unescape(escaped)?;
            let _guard = self.lock_rows(handle, std::iter::once(key.as_slice()));
            let (handle, snapshot) = self.locked_view(&handle.def.name, handle)?;
            let handle = handle.as_ref();
            let mut garbage = Overlay::default();
            let removed =
                garbage.delete_garbage(&snapshot, handle, family, &key, policy, now_micros())?;
            if removed > 0 {
                stats.rows_touched += 1;
                stats.cells_removed += removed;
                self.commit(handle, garbage)?;
            }
        }
        Ok(stats)
    }
}
