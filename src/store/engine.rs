//! The embedded store's state: [`FjallStore`] (one fjall database, its
//! catalog, the open tables and the locks writers take) and
//! [`TableHandle`] (a table's definition and the keyspaces its cells live
//! in). What the store does with them lives beside: opening in `open.rs`,
//! the catalog in `catalog.rs`, reads in `read.rs`, writes in `write.rs`,
//! garbage collection in `gc.rs`.

use super::age_filter::AgeRules;
use super::commit::{Durability, GroupSync, lock};
use super::definition::TableDef;
use super::format::FamilyFormat;
use super::gate::WriteGate;
use super::segments;
use super::worker::Worker;
use crate::error::{Error, Result};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

pub(super) const CATALOG_KEYSPACE: &str = "catalog";
pub(super) const FORMAT_KEY: &[u8] = b"meta/format";
pub(super) const NEXT_ID_KEY: &[u8] = b"meta/next_id";

/// The catalog key of a format change's cursor (see [`Moving`]).
pub(super) fn cursor_key(id: u64) -> Vec<u8> {
    format!("conv/{id}").into_bytes()
}
pub(super) const TABLE_PREFIX: &str = "table/";
pub(super) const SETTING_PREFIX: &str = "setting/";
pub(super) const LOCK_STRIPES: usize = 4096;
/// Rows per fjall batch in a bulk call.
pub(super) const BULK_CHUNK_ROWS: usize = 1024;
/// About how many bytes of pairs lie between two of a table's sample row
/// keys.
pub const SPLIT_BYTES: u64 = 64 * 1024 * 1024;

/// Options for opening a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How durable a committed mutation is.
    pub durability: Durability,
    /// Block cache size in bytes (decompressed blocks kept between scans);
    /// when `None`, a quarter of the machine's memory, as fjall advises.
    pub cache_bytes: Option<u64>,
    /// Open this Cloud Bigtable instance (`projects/P/instances/I`)
    /// instead of a directory ([`Store::open_with`]; needs the `bigtable`
    /// feature).
    pub bigtable: Option<String>,
    /// How long the cells written to an AUTO family (the default format)
    /// are left as they are before the background compaction folds them
    /// into blocks (once nothing more was written to the family for that
    /// long, or its backlog grew large); `None` turns the background
    /// compaction off (`COMPACT TABLE` still folds). The default: 2 s.
    pub background_compaction: Option<std::time::Duration>,
    /// How long the counters of reads and writes per key range and minute
    /// (`key_activity`, `cellar keys`) are kept; `None` counts nothing.
    /// The default: 3 days.
    pub key_activity: Option<std::time::Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::default(),
            cache_bytes: None,
            bigtable: None,
            background_compaction: Some(DEFAULT_QUIET),
            key_activity: Some(DEFAULT_ACTIVITY_RETENTION),
        }
    }
}

/// How long key activity is kept by default.
pub const DEFAULT_ACTIVITY_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(3 * 24 * 3600);

/// How long new cells of an AUTO family settle before they are folded.
pub const DEFAULT_QUIET: std::time::Duration = std::time::Duration::from_secs(2);

/// The machine's memory in bytes (`MemTotal` in /proc/meminfo), if known.
pub fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

/// What a garbage collection pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Cells deleted.
    pub cells_removed: u64,
    /// Rows that had garbage.
    pub rows_touched: u64,
}

/// How far a change of format has come.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatChange {
    /// Rows moved so far.
    pub rows: u64,
    /// Bytes of cell values moved so far (in the old format's pairs).
    pub bytes: u64,
    /// Whether every row is in the new format (false when `progress`
    /// stopped the change: the same call resumes it).
    pub finished: bool,
}

/// A table as the store works with it: its definition and the keyspaces
/// its cells live in.
pub(crate) struct TableHandle {
    pub def: TableDef,
    /// The keyspaces by *slot*: slot `i` below the number of families is
    /// family `i`'s own keyspace; the slots after are the new keyspaces of
    /// families whose format is being changed.
    pub keyspaces: Vec<Keyspace>,
    /// Per slot: the format of its pairs.
    pub formats: Vec<FamilyFormat>,
    /// Per family: the change of format under way, if any.
    pub moving: Vec<Option<Moving>>,
    /// Per slot: the keyspace of the family's blocks, if it has them (a
    /// family's own slot only; see `format/blocks/`).
    pub blocks: Vec<Option<Keyspace>>,
}

/// A family's rows moving to a keyspace in another format, in key order.
pub(crate) struct Moving {
    /// The slot of the new keyspace.
    pub slot: usize,
    /// Rows with keys below it are in the new keyspace, the others in the
    /// family's own. Changed only with every row lock held, so a writer
    /// holding a row's lock reads a value that stays true for that row.
    pub cursor: Arc<Mutex<Vec<u8>>>,
}

impl TableHandle {
    /// The slot holding `row`'s cells of `family`.
    pub fn slot(&self, family: usize, row: &[u8]) -> usize {
        match self.moving.get(family) {
            Some(Some(m)) if row < lock(&m.cursor).as_slice() => m.slot,
            _ => family,
        }
    }

    /// The keyspace id of each slot.
    pub fn slot_ids(&self) -> Vec<u64> {
        (0..self.keyspaces.len())
            .map(|slot| {
                let family = &self.def.families[self.family_of(slot)];
                match &family.converting {
                    Some(c) if slot >= self.def.families.len() => c.id,
                    _ => family.id,
                }
            })
            .collect()
    }

    /// Every keyspace of the table with its id: the slots', then the
    /// blocks'.
    pub fn all_keyspaces(&self) -> Vec<(u64, &Keyspace)> {
        let mut all: Vec<(u64, &Keyspace)> =
            self.slot_ids().into_iter().zip(&self.keyspaces).collect();
        for (slot, blocks) in self.blocks.iter().enumerate() {
            if let (Some(ks), Some(id)) = (blocks, self.def.families[self.family_of(slot)].blocks) {
                all.push((id, ks));
            }
        }
        all
    }

    /// The family whose cells a slot holds.
    pub fn family_of(&self, slot: usize) -> usize {
        if slot < self.def.families.len() {
            return slot;
        }
        self.moving
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.slot == slot))
            .unwrap_or(0)
    }
}

pub(super) struct Inner {
    pub(super) path: PathBuf,
    pub(super) db: Database,
    pub(super) catalog: Keyspace,
    pub(super) tables: RwLock<BTreeMap<String, Arc<TableHandle>>>,
    /// Tables whose catalog entry could not be read, with the reason: the
    /// rest of the store opens without them.
    pub(super) damaged: RwLock<BTreeMap<String, String>>,
    pub(super) ddl: Mutex<()>,
    /// Held by a merge into blocks: one at a time.
    pub(super) merges: Mutex<()>,
    /// Held by a bulk load writing blocks while it looks where they go.
    pub(super) block_loads: Mutex<()>,
    pub(super) row_locks: Box<[Mutex<()>]>,
    /// Seeds the hash that spreads row keys over the lock stripes.
    pub(super) lock_seed: u64,
    pub(super) sync: GroupSync,
    pub(super) durability: Durability,
    pub(super) age_rules: AgeRules,
    /// What opening the store found and dropped (a torn journal tail).
    pub(super) recovery: Vec<String>,
    /// Damaged keyspace directories set aside at this or an earlier open.
    pub(super) set_aside: Vec<segments::SetAside>,
    /// Bytes of journal this open replayed.
    pub(super) journal_bytes: u64,
    /// Format changes under way: (table, family) -> target and progress.
    pub(super) changes: Mutex<BTreeMap<(String, String), (FamilyFormat, FormatChange)>>,
    /// Per table name: the gate its writers pass while it may be replaced.
    pub(super) gates: Mutex<std::collections::HashMap<String, Arc<WriteGate>>>,
    /// Moves on with every change to the open tables (see
    /// [`FjallStore::catalog_generation`]).
    pub(super) generation: std::sync::atomic::AtomicU64,
    /// Rows written by ingestion (see [`FjallStore::rows_ingested`]).
    pub(super) ingested: std::sync::atomic::AtomicU64,
    /// Reads and writes counted per key range and minute; `None` when off.
    pub(super) activity: Option<super::activity::KeyActivity>,
    /// The block indexes of on-disk tables read for size estimates.
    pub(super) size_index: super::block_index::SizeIndex,
    /// Keeps fjall from reusing a deleted keyspace's number.
    pub(super) keyspace_guard: super::keyspaces::Guard,
    /// cellar's lock on the store directory, released after the database
    /// (fields drop in order).
    pub(super) _lock: std::fs::File,
}

/// An open store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct FjallStore {
    /// The background compaction (`compactor.rs`), stopped when the last
    /// handle goes, before the database closes (fields drop in order);
    /// `None` in the compaction's own handle, or when it is off.
    pub(super) _compactor: Option<Arc<Worker>>,
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// How fjall lays out a new family keyspace's tables (kept with the
/// keyspace: a store written before keeps its own).
///
/// A PACKED family gets 16 KiB data blocks with every key stored whole
/// (fjall's default: 4 KiB blocks, each key sharing a prefix with the
/// one before, restarting every 16 keys). Those defaults suit many small
/// pairs, as CELLS writes them. A PACKED pair is a whole row: with larger
/// blocks a scan crosses a quarter of the block boundaries and lz4 finds
/// more to share (7% fewer bytes for tall rows), and a key stored whole
/// (a restart interval of one) is taken as a slice of its block instead
/// of being built: 15-20% less time per pair in a scan.
///
/// Compression stays fjall's: lz4 from level 2 down. Compressing level 1
/// as well (where a bulk load's tables go, and where a table too small to
/// outgrow it stays) cost 30% of the write speed of a large INSERT on two
/// cores; [`FjallStore::compact`] moves a table to the last level, lz4.
pub(super) fn family_keyspace_options(format: FamilyFormat) -> KeyspaceCreateOptions {
    use fjall::config::{BlockSizePolicy, RestartIntervalPolicy};
    let options = KeyspaceCreateOptions::default();
    match format {
        FamilyFormat::Packed => options
            .data_block_size_policy(BlockSizePolicy::all(16 * 1024))
            .data_block_restart_interval_policy(RestartIntervalPolicy::all(1)),
        FamilyFormat::Cells | FamilyFormat::Auto => options,
    }
}

impl FjallStore {
    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Bytes the store occupies on disk.
    pub fn disk_space(&self) -> Result<u64> {
        Ok(self.inner.db.disk_space()?)
    }

    /// Bytes one table's families occupy in on-disk tables (not counting
    /// the shared journal or cells still in memory).
    pub fn table_disk_space(&self, table: &str) -> Result<u64> {
        Ok(self
            .handle(table)?
            .all_keyspaces()
            .iter()
            .map(|(_, k)| k.disk_space())
            .sum())
    }

    /// How many rows bulk writes have put straight into sorted tables
    /// (ingestion) since the store opened.
    pub fn rows_ingested(&self) -> u64 {
        self.inner
            .ingested
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many fsyncs synced mode has run (group commit shares them).
    pub fn fsync_count(&self) -> u64 {
        self.inner.sync.fsyncs()
    }

    /// Writes everything to disk and waits for it.
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.db.persist(PersistMode::SyncAll)?)
    }

    /// Whether fjall is flushing memtables or compacting tables right now
    /// (its background work after a load, which a benchmark waits out).
    pub fn lsm_busy(&self) -> bool {
        self.inner.db.outstanding_flushes() > 0 || self.inner.db.active_compactions() > 0
    }

    /// Bytes of journal this open read and replayed: 0 after a clean
    /// close, up to the journal's size after a crash.
    pub fn journal_bytes_replayed(&self) -> u64 {
        self.inner.journal_bytes
    }

    /// Changes the open tables (definitions, keyspaces, formats) and moves
    /// the catalog generation on, after the change is visible.
    pub(crate) fn change_tables<R>(
        &self,
        change: impl FnOnce(&mut BTreeMap<String, Arc<TableHandle>>) -> R,
    ) -> R {
        let out = change(
            &mut self
                .inner
                .tables
                .write()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.inner
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        out
    }

    /// A number that changes whenever a table is created, altered,
    /// dropped, replaced or converted, in this process (the store is
    /// opened by one process at a time). What was planned against one
    /// generation holds while it stays the same.
    pub fn catalog_generation(&self) -> u64 {
        self.inner
            .generation
            .load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn handle(&self, table: &str) -> Result<Arc<TableHandle>> {
        self.inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned()
            .ok_or_else(|| match self.damaged_reason(table) {
                Some(reason) => Error::TableDamaged {
                    table: table.to_string(),
                    reason,
                },
                None => Error::TableNotFound {
                    table: table.to_string(),
                },
            })
    }

    /// A table's handle and a snapshot taken together: no change of a
    /// family's keyspaces (a format change starting or ending) comes in
    /// between, so the snapshot holds every row where the handle looks.
    pub(crate) fn handle_and_snapshot(
        &self,
        table: &str,
    ) -> Result<(Arc<TableHandle>, fjall::Snapshot)> {
        let tables = self
            .inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match tables.get(table) {
            Some(handle) => Ok((Arc::clone(handle), self.inner.db.snapshot())),
            None => {
                drop(tables);
                self.handle(table).map(|h| (h, self.inner.db.snapshot()))
            }
        }
    }

    /// What a writer works with once it holds its rows' locks: the table's
    /// handle as it is now (where each row lives may have changed while
    /// the writer waited, never while it holds the lock) and a snapshot.
    /// An error if the table was dropped (or replaced) meanwhile.
    pub(crate) fn locked_view(
        &self,
        table: &str,
        before: &TableHandle,
    ) -> Result<(Arc<TableHandle>, fjall::Snapshot)> {
        let (handle, snapshot) = self.handle_and_snapshot(table)?;
        if handle.def.id != before.def.id {
            return Err(Error::TableNotFound {
                table: table.to_string(),
            });
        }
        Ok((handle, snapshot))
    }
}
