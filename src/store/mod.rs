//! The wide-column store: tables of rows of timestamped cells on fjall.
//!
//! One fjall database per store directory; one keyspace for the catalog and
//! one per (table, column family), so a read of one family never touches
//! the others. A row mutation is one fjall batch across the row's family
//! keyspaces, applied under the row's lock so that conditional and
//! read-modify-write operations are linearizable per row. Reads walk one
//! snapshot.

mod aggregate;
mod backend;
mod bulk;
mod catalog;
mod check;
pub mod clean_close;
mod commit;
mod convert;
mod format;
mod gc;
pub mod journal;
mod merge;
mod mutation;
mod open;
mod parallel;
mod probe;
mod read;
mod replace;
pub mod segments;
mod write;

pub use aggregate::hll_estimate;
pub use backend::{Backend, Numbers, Pinned, RowChange, RowSource, RowStream, Store};
pub use bulk::{BadRows, BatchColumn, BatchFamily, CellBatch, INGEST_MIN_ROWS};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use catalog::check_families;
pub use catalog::{
    Conversion, FORMAT_VERSION, FamilyDef, FamilyKind, FamilySpec, GcPolicy, MAX_FAMILIES,
    MAX_GC_DEPTH, MAX_GC_RULES, TableDef, validate_table_name,
};
pub use check::{CheckReport, FamilyCheck};
pub use commit::Durability;
pub use convert::FormatChange;
pub use format::{
    CellRef, FamilyFormat, MAX_PACKED_LEN, NumberColumns, NumberRow, NumberRows, RowView,
};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use format::{RowBuf, select};
pub use mutation::{
    MAX_KEY_LEN, MAX_QUALIFIER_LEN, MAX_VALUE_LEN, Mutation, ReadModifyWrite, RowMutation,
};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use mutation::{check_key, validate as validate_mutation};
pub use open::repair_version_marker;
pub use probe::RowProbe;
pub use read::{
    Cell, QualifierFilter, ReadFilter, ReadRequest, Row, RowRange, RowSet, ScanStats, TimeRange,
};
pub use replace::{Entered, WriteGate};

use crate::codec;
use crate::error::{Error, Result};
use commit::GroupSync;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use gc::{AgeFilterFactory, AgeRules};
use read::{FamilyScan, FjallRows};
use std::collections::BTreeMap;
use std::hash::RandomState;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

const CATALOG_KEYSPACE: &str = "catalog";
const FORMAT_KEY: &[u8] = b"meta/format";
const NEXT_ID_KEY: &[u8] = b"meta/next_id";

/// The catalog key of a format change's cursor (see [`Moving`]).
fn cursor_key(id: u64) -> Vec<u8> {
    format!("conv/{id}").into_bytes()
}
const TABLE_PREFIX: &str = "table/";
const SETTING_PREFIX: &str = "setting/";
const LOCK_STRIPES: usize = 4096;
/// Rows per fjall batch in a bulk call.
const BULK_CHUNK_ROWS: usize = 1024;
/// About how many bytes of pairs lie between two of a table's sample row
/// keys.
pub const SPLIT_BYTES: u64 = 64 * 1024 * 1024;

/// Microseconds since the Unix epoch, by the system clock.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `t` rounded down to a whole `step` of microseconds (a backend's
/// timestamp granularity).
pub(crate) fn align_down(t: i64, step: i64) -> i64 {
    t - t.rem_euclid(step.max(1))
}

/// `t` rounded up to a whole `step` of microseconds.
pub(crate) fn align_up(t: i64, step: i64) -> i64 {
    match t.rem_euclid(step.max(1)) {
        0 => t,
        r => t.saturating_add(step.max(1) - r),
    }
}

/// Options for opening a store.
#[derive(Debug, Clone, Default)]
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
}

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

/// What to create: a table's name, families and metadata.
#[derive(Debug, Clone, Default)]
pub struct TableSpec {
    /// The table's name.
    pub name: String,
    /// Its families.
    pub families: Vec<FamilySpec>,
    /// Metadata for higher layers.
    pub metadata: BTreeMap<String, String>,
}

impl TableSpec {
    /// A table with no families yet.
    pub fn new(name: impl Into<String>) -> Self {
        TableSpec {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Adds a family.
    pub fn family(mut self, family: FamilySpec) -> Self {
        self.families.push(family);
        self
    }

    /// Sets a metadata entry.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
}

/// One change to a table's definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterOp {
    /// Add a family.
    AddFamily(FamilySpec),
    /// Drop a family and all its cells.
    DropFamily(String),
    /// Change a family's GC policy.
    SetGc {
        /// The family.
        family: String,
        /// The new policy.
        gc: GcPolicy,
    },
    /// Set (`Some`) or remove (`None`) a metadata entry.
    SetMetadata(String, Option<String>),
}

/// What a garbage collection pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Cells deleted.
    pub cells_removed: u64,
    /// Rows that had garbage.
    pub rows_touched: u64,
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

    fn family_scans(&self, only: Option<&[String]>) -> Result<Vec<FamilyScan>> {
        if let Some(names) = only {
            for name in names {
                self.def.family(name)?;
            }
        }
        Ok(self
            .def
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| only.is_none_or(|names| names.contains(&f.name)))
            .map(|(i, f)| FamilyScan {
                name: Arc::from(f.name.as_str()),
                gc: f.gc.clone(),
                sources: std::iter::once(i)
                    .chain(self.moving[i].as_ref().map(|m| m.slot))
                    .map(|slot| read::Source {
                        format: self.formats[slot],
                        keyspace: self.keyspaces[slot].clone(),
                        blocks: self.blocks[slot].clone(),
                    })
                    .collect(),
            })
            .collect())
    }
}

struct Inner {
    path: PathBuf,
    db: Database,
    catalog: Keyspace,
    tables: RwLock<BTreeMap<String, Arc<TableHandle>>>,
    /// Tables whose catalog entry could not be read, with the reason: the
    /// rest of the store opens without them.
    damaged: RwLock<BTreeMap<String, String>>,
    ddl: Mutex<()>,
    /// Held by a merge into blocks: one at a time.
    merges: Mutex<()>,
    /// Held by a bulk load writing blocks while it looks where they go.
    block_loads: Mutex<()>,
    row_locks: Box<[Mutex<()>]>,
    /// Seeds the hash that spreads row keys over the lock stripes.
    lock_seed: u64,
    sync: GroupSync,
    durability: Durability,
    age_rules: AgeRules,
    /// What opening the store found and dropped (a torn journal tail).
    recovery: Vec<String>,
    /// Damaged keyspace directories set aside at this or an earlier open.
    set_aside: Vec<segments::SetAside>,
    /// Bytes of journal this open replayed.
    journal_bytes: u64,
    /// Format changes under way: (table, family) -> target and progress.
    changes: Mutex<BTreeMap<(String, String), (FamilyFormat, FormatChange)>>,
    /// Per table name: the gate its writers pass while it may be replaced.
    gates: Mutex<std::collections::HashMap<String, Arc<WriteGate>>>,
    /// Moves on with every change to the open tables (see
    /// [`FjallStore::catalog_generation`]).
    generation: std::sync::atomic::AtomicU64,
    /// Rows written by ingestion (see [`FjallStore::rows_ingested`]).
    ingested: std::sync::atomic::AtomicU64,
    /// cellar's lock on the store directory, released after the database
    /// (fields drop in order).
    _lock: std::fs::File,
}

/// An open store. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct FjallStore {
    inner: Arc<Inner>,
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
fn family_keyspace_options(format: FamilyFormat) -> KeyspaceCreateOptions {
    use fjall::config::{BlockSizePolicy, RestartIntervalPolicy};
    let options = KeyspaceCreateOptions::default();
    match format {
        FamilyFormat::Packed => options
            .data_block_size_policy(BlockSizePolicy::all(16 * 1024))
            .data_block_restart_interval_policy(RestartIntervalPolicy::all(1)),
        FamilyFormat::Cells => options,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FjallStore {
    /// Opens (or creates) the store in directory `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<FjallStore> {
        FjallStore::open_with(path, StoreOptions::default())
    }

    /// Opens (or creates) the store in directory `path`.
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<FjallStore> {
        let path = path.as_ref().to_path_buf();
        let age_rules: AgeRules = AgeRules::default();
        let rules = age_rules.clone();
        // A scan that finds its blocks cached skips the read, the checksum
        // and the decompression (a few percent of a full scan's time here).
        let cache = options
            .cache_bytes
            .or_else(|| machine_memory().map(|m| m / 4));
        let make = || {
            let rules = rules.clone();
            let builder = Database::builder(&path)
                .manual_journal_persist(true)
                // Bounds the journal replayed at open after a crash (fjall's
                // minimum; the default 512 MiB took about a minute to replay).
                .max_journaling_size(64 * 1024 * 1024)
                .with_compaction_filter_factories(Arc::new(move |name: &str| {
                    let factory: Arc<dyn fjall::compaction::filter::Factory> =
                        Arc::new(AgeFilterFactory {
                            keyspace: name.to_string(),
                            rules: rules.clone(),
                        });
                    name.starts_with('f').then_some(factory)
                }));
            match cache {
                Some(bytes) => builder.cache_size(bytes),
                None => builder,
            }
        };
        let open::Opened {
            db,
            lock,
            recovery,
            set_aside_now,
            journal_bytes,
        } = open::open(&path, make)?;
        // The catalog is one keyspace among the others: when the keyspace
        // set aside was the catalog, the store cannot open (and must not
        // open empty). Put it back and say so.
        let names = db.list_keyspace_names();
        if !names.iter().any(|n| &**n == CATALOG_KEYSPACE)
            && (!set_aside_now.is_empty() || !names.is_empty())
        {
            drop(db);
            let _ = segments::put_back(&path, &set_aside_now);
            let found: Vec<String> = set_aside_now.iter().map(|s| s.reason.clone()).collect();
            return Err(Error::StoreDamaged {
                path: path.display().to_string(),
                reason: format!(
                    "cellar's catalog (the table definitions) did not open{}. The tables' cells are \
                     untouched, but without the catalog they cannot be read: restore the file from a \
                     backup of the store",
                    if found.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", found.join("; "))
                    }
                ),
            });
        }
        let catalog = db.keyspace(CATALOG_KEYSPACE, KeyspaceCreateOptions::default)?;
        match catalog.get(FORMAT_KEY)? {
            None => {
                catalog.insert(FORMAT_KEY, FORMAT_VERSION.to_be_bytes())?;
                db.persist(PersistMode::SyncAll)?;
            }
            Some(v) => {
                let found = <[u8; 4]>::try_from(&*v)
                    .map(u32::from_be_bytes)
                    .map_err(|_| Error::Corrupt {
                        reason: format!("store format marker is {} bytes, expected 4", v.len()),
                    })?;
                if found > FORMAT_VERSION {
                    return Err(Error::UnsupportedFormat {
                        found,
                        supported: FORMAT_VERSION,
                    });
                }
            }
        }
        let set_aside = segments::set_aside_before(&path).unwrap_or_default();
        let mut recovery = recovery;
        recovery.extend(set_aside_now.iter().map(|s| {
            format!(
                "keyspaces/{} was set aside to {} because {}; the table it belongs to is \
                 reported damaged, the others open",
                s.keyspace,
                s.dir.display(),
                s.reason
            )
        }));
        let inner = Inner {
            path,
            db,
            catalog,
            tables: RwLock::default(),
            damaged: RwLock::default(),
            ddl: Mutex::default(),
            merges: Mutex::default(),
            block_loads: Mutex::default(),
            row_locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            lock_seed: {
                use std::hash::BuildHasher;
                RandomState::new().hash_one(LOCK_STRIPES)
            },
            sync: GroupSync::default(),
            durability: options.durability,
            age_rules,
            recovery,
            set_aside,
            journal_bytes,
            changes: Mutex::default(),
            gates: Mutex::default(),
            generation: std::sync::atomic::AtomicU64::new(0),
            ingested: std::sync::atomic::AtomicU64::new(0),
            _lock: lock,
        };
        let store = FjallStore {
            inner: Arc::new(inner),
        };
        store.load_catalog()?;
        Ok(store)
    }

    /// Reads every table definition. An entry that does not parse (or
    /// whose families cannot be opened) makes that one table unavailable,
    /// reported by [`FjallStore::damaged_tables`]; the others open.
    fn load_catalog(&self) -> Result<()> {
        let inner = &self.inner;
        let mut tables = BTreeMap::new();
        let mut damaged = BTreeMap::new();
        let present: std::collections::HashSet<String> = inner
            .db
            .list_keyspace_names()
            .iter()
            .map(|n| n.to_string())
            .collect();
        for guard in inner.catalog.prefix(TABLE_PREFIX) {
            let (key, value) = guard.into_inner()?;
            let name = String::from_utf8_lossy(&key[TABLE_PREFIX.len()..]).into_owned();
            let def = serde_json::from_slice::<TableDef>(&value)
                .map_err(|e| {
                    format!(
                        "its catalog entry does not parse: {e}; its cells cannot be read without it, and DROP TABLE {name} removes the definition"
                    )
                })
                .and_then(|def| self.keyspaces_present(&def, &present).map(|()| def))
                .and_then(|def| {
                    self.open_handle(def)
                        .map_err(|e| format!("its column families do not open: {e}"))
                });
            match def {
                Ok(handle) => {
                    tables.insert(handle.def.name.clone(), Arc::new(handle));
                }
                Err(reason) => {
                    damaged.insert(name, reason);
                }
            }
        }
        // Keyspaces that no table references are left over from a drop that
        // was interrupted after its catalog change: finish the drop. Not
        // when an entry is damaged: its keyspaces are unknown, and may hold
        // data that a repaired entry would reach again.
        if damaged.is_empty() {
            let live: Vec<String> = tables
                .values()
                .flat_map(|t| t.def.families.iter().flat_map(FamilyDef::keyspace_names))
                .collect();
            for name in inner.db.list_keyspace_names() {
                let name: &str = &name;
                if name.starts_with('f') && !live.iter().any(|l| l == name) {
                    let ks = inner.db.keyspace(name, KeyspaceCreateOptions::default)?;
                    inner.db.delete_keyspace(ks)?;
                }
            }
            self.forget_keyspace_ids(&live)?;
        }
        self.change_tables(|open| *open = tables);
        *inner
            .damaged
            .write()
            .unwrap_or_else(PoisonError::into_inner) = damaged;
        Ok(())
    }

    /// Tables that could not be opened, with the reason. They cannot be
    /// read or written; `drop_table` removes their definitions.
    pub fn damaged_tables(&self) -> Vec<(String, String)> {
        self.inner
            .damaged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// What opening the store dropped without failing, one sentence each:
    /// the torn tail of a journal, a write a crash interrupted.
    pub fn recovery_notes(&self) -> &[String] {
        &self.inner.recovery
    }

    fn damaged_reason(&self, table: &str) -> Option<String> {
        self.inner
            .damaged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned()
    }

    fn open_handle(&self, def: TableDef) -> Result<TableHandle> {
        let n = def.families.len();
        let mut keyspaces = Vec::with_capacity(n);
        let mut formats = Vec::with_capacity(n);
        let mut moving = Vec::with_capacity(n);
        let mut rules = self
            .inner
            .age_rules
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let mut open = |id: u64, format: FamilyFormat, family: &FamilyDef| -> Result<Keyspace> {
            let name = catalog::keyspace_name(id);
            // A family's blocks are never judged by the filter; its own
            // keyspace then turns what it would drop into tombstones.
            let blocked = family.blocks.is_some() && id == family.id;
            match family.gc.unconditional_max_age() {
                Some(age) if family.blocks != Some(id) => {
                    rules.insert(name.clone(), (age, format, blocked))
                }
                _ => rules.remove(&name),
            };
            let keyspace = self
                .inner
                .db
                .keyspace(&name, || family_keyspace_options(format))?;
            self.note_keyspace_id(&name, keyspace.id())?;
            Ok(keyspace)
        };
        let mut blocks = Vec::with_capacity(n);
        for family in &def.families {
            keyspaces.push(open(family.id, family.format, family)?);
            formats.push(family.format);
            blocks.push(match family.blocks {
                Some(id) => Some(open(id, family.format, family)?),
                None => None,
            });
        }
        for family in &def.families {
            moving.push(match &family.converting {
                None => None,
                Some(c) => {
                    keyspaces.push(open(c.id, c.format, family)?);
                    formats.push(c.format);
                    blocks.push(None);
                    let cursor = self
                        .inner
                        .catalog
                        .get(cursor_key(c.id))?
                        .map(|v| v.to_vec())
                        .unwrap_or_default();
                    Some(Moving {
                        slot: keyspaces.len() - 1,
                        cursor: Arc::new(Mutex::new(cursor)),
                    })
                }
            });
        }
        Ok(TableHandle {
            def,
            keyspaces,
            formats,
            moving,
            blocks,
        })
    }

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

    /// About how many cells (key-value pairs, before GC) a table holds:
    /// cheap, from the LSM's own counts; for planning, never for answers.
    pub fn approximate_cells(&self, table: &str) -> Result<u64> {
        Ok(self
            .handle(table)?
            .all_keyspaces()
            .iter()
            .map(|(_, k)| k.approximate_len() as u64)
            .sum())
    }

    /// Row keys splitting a table into pieces of about [`SPLIT_BYTES`]
    /// each, with the bytes before each (see
    /// [`Backend::sample_row_keys`]): from one walk of the table's largest
    /// keyspace (a cost of a full scan of it; the embedded store has no
    /// cheaper index of its key distribution). The last entry is the
    /// empty key (the table's end).
    pub fn sample_row_keys(&self, table: &str) -> Result<Vec<(Vec<u8>, u64)>> {
        self.sample_row_keys_every(table, SPLIT_BYTES)
    }

    /// [`FjallStore::sample_row_keys`] with a sample about every `step`
    /// bytes (tests use small steps).
    #[doc(hidden)]
    pub fn sample_row_keys_every(&self, table: &str, step: u64) -> Result<Vec<(Vec<u8>, u64)>> {
        let step = step.max(1);
        let handle = self.handle(table)?;
        let mut samples = Vec::new();
        // Largest on disk, then (all still in memory) by pairs held.
        // (A slot's blocks count with it, and are walked with it.)
        let largest = (0..handle.keyspaces.len()).max_by_key(|&s| {
            let k = std::iter::once(&handle.keyspaces[s]).chain(&handle.blocks[s]);
            k.map(|k| (k.disk_space(), k.approximate_len() as u64))
                .fold((0, 0), |(d, n), (kd, kn)| (d + kd, n + kn))
        });
        let mut bytes = 0u64;
        if let Some(slot) = largest {
            let format = handle.formats[slot];
            let mut next_split = step;
            let mut last_row: Vec<u8> = Vec::new();
            let snapshot = self.inner.db.snapshot();
            let keyspace = &handle.keyspaces[slot];
            let blocks = handle.blocks[slot].as_ref();
            let mut pairs =
                format::blocks::Pairs::open(&snapshot, keyspace, blocks, &[], None, false)?;
            while let Some((key, value)) = pairs.next(false)? {
                let row = format.row_of(&key)?;
                bytes += (key.len() + value.len()) as u64;
                if bytes >= next_split && row != last_row.as_slice() {
                    let (plain, _) = codec::unescape(row)?;
                    samples.push((plain, bytes));
                    next_split = bytes + step;
                }
                last_row.clear();
                last_row.extend_from_slice(row);
            }
        }
        samples.push((Vec::new(), bytes));
        Ok(samples)
    }

    /// Iterates every pair of a table's families in key order, decoding
    /// nothing: how many pairs and bytes (keys and values) it holds. What
    /// any scan of the table costs at least, whatever it does with the
    /// pairs (the comparison bench reports it as the layout's floor).
    pub fn scan_pairs(&self, table: &str) -> Result<(u64, u64)> {
        let (mut pairs, mut bytes) = (0u64, 0u64);
        for (_, keyspace) in self.handle(table)?.all_keyspaces() {
            for guard in keyspace.iter() {
                let (key, value) = guard.into_inner()?;
                pairs += 1;
                bytes += (key.len() + value.len()) as u64;
            }
        }
        Ok((pairs, bytes))
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

    /// Closes the store cleanly without closing it: writes every memtable
    /// out to on-disk tables, syncs, and records the journals as they are
    /// (see [`clean_close`]), so that the next open replays no journal
    /// (opening after a large load goes from up to a second to
    /// milliseconds). A write after it makes the next open replay as
    /// usual. The shell and the server call it when they close; returns
    /// whether the journals were recorded (false when a write came in
    /// meanwhile).
    pub fn checkpoint(&self) -> Result<bool> {
        // No keyspace is created or deleted meanwhile (a DROP between
        // listing a keyspace and opening it would recreate it empty).
        let _ddl = lock(&self.inner.ddl);
        let db = &self.inner.db;
        // Every keyspace, not only the open tables' (a damaged table's
        // keyspaces hold writes too).
        for name in db.list_keyspace_names() {
            if db.keyspace_exists(&name) {
                db.keyspace(&name, KeyspaceCreateOptions::default)?
                    .rotate_memtable_and_wait()?;
            }
        }
        self.flush()?;
        let settled = || db.write_buffer_size() == 0 && db.outstanding_flushes() == 0;
        Ok(clean_close::mark(&self.inner.path, settled)?)
    }

    /// Bytes of journal this open read and replayed: 0 after a clean
    /// close, up to the journal's size after a crash.
    pub fn journal_bytes_replayed(&self) -> u64 {
        self.inner.journal_bytes
    }

    // ---- catalog -------------------------------------------------------

    /// Sets (or with `None` removes) a store-wide setting of the layers
    /// above the store, such as a registered `.proto` source. Durable when
    /// this returns.
    pub fn put_setting(&self, key: &str, value: Option<&str>) -> Result<()> {
        if key.is_empty() || key.len() > 4096 {
            return Err(Error::InvalidArgument(format!(
                "setting name must be 1 to 4096 bytes, got {}",
                key.len()
            )));
        }
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::SyncAll));
        let name = format!("{SETTING_PREFIX}{key}");
        match value {
            Some(v) => batch.insert(&self.inner.catalog, name, v.as_bytes()),
            None => batch.remove(&self.inner.catalog, name),
        }
        batch.commit()?;
        Ok(())
    }

    /// The settings whose names start with `prefix`, sorted by name.
    pub fn settings(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for guard in self
            .inner
            .catalog
            .prefix(format!("{SETTING_PREFIX}{prefix}"))
        {
            let (k, v) = guard.into_inner()?;
            let name = String::from_utf8_lossy(&k[SETTING_PREFIX.len()..]).into_owned();
            let value = String::from_utf8(v.to_vec()).map_err(|_| Error::Corrupt {
                reason: format!("setting {name:?} is not UTF-8"),
            })?;
            out.push((name, value));
        }
        Ok(out)
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

    /// The names of all tables, sorted.
    pub fn list_tables(&self) -> Vec<String> {
        self.inner
            .tables
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// A table's definition.
    pub fn table(&self, name: &str) -> Result<TableDef> {
        Ok(self.handle(name)?.def.clone())
    }

    /// The next unused internal id.
    fn next_id(&self) -> Result<u64> {
        let current = match self.inner.catalog.get(NEXT_ID_KEY)? {
            None => 1,
            Some(v) => <[u8; 8]>::try_from(&*v)
                .map(u64::from_be_bytes)
                .map_err(|_| Error::Corrupt {
                    reason: "catalog id counter is not 8 bytes".into(),
                })?,
        };
        Ok(current.max(1))
    }

    fn write_catalog(
        &self,
        def: Option<&TableDef>,
        remove: Option<&str>,
        next_id: u64,
    ) -> Result<()> {
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::SyncAll));
        if let Some(name) = remove {
            batch.remove(&self.inner.catalog, format!("{TABLE_PREFIX}{name}"));
        }
        if let Some(def) = def {
            self.put_def(&mut batch, def)?;
        }
        batch.insert(&self.inner.catalog, NEXT_ID_KEY, next_id.to_be_bytes());
        batch.commit()?;
        Ok(())
    }

    /// Puts a table's definition into a catalog batch.
    fn put_def(&self, batch: &mut fjall::OwnedWriteBatch, def: &TableDef) -> Result<()> {
        let json = serde_json::to_vec(def).map_err(|e| Error::Corrupt {
            reason: format!("cannot encode the definition of table {:?}: {e}", def.name),
        })?;
        batch.insert(
            &self.inner.catalog,
            format!("{TABLE_PREFIX}{}", def.name),
            json,
        );
        Ok(())
    }

    /// Creates a table.
    pub fn create_table(&self, spec: TableSpec) -> Result<TableDef> {
        validate_table_name(&spec.name)?;
        catalog::check_families(&spec.name, &spec.families)?;
        let _ddl = lock(&self.inner.ddl);
        match self.handle(&spec.name) {
            Ok(_) => return Err(Error::TableExists { table: spec.name }),
            Err(e @ Error::TableDamaged { .. }) => return Err(e),
            Err(_) => {}
        }
        let mut id = self.next_id()?;
        let def = TableDef::from_spec(spec, &mut id);
        let handle = self.open_handle(def.clone())?;
        self.write_catalog(Some(&def), None, id)?;
        self.change_tables(|open| open.insert(def.name.clone(), Arc::new(handle)));
        Ok(def)
    }

    /// Changes a table's definition: all operations or none.
    pub fn alter_table(&self, name: &str, ops: Vec<AlterOp>) -> Result<TableDef> {
        let _ddl = lock(&self.inner.ddl);
        let old = self.handle(name)?;
        let mut def = old.def.clone();
        let mut id = self.next_id()?;
        let specs = def.apply(ops, &mut id)?;
        catalog::check_families(name, &specs)?;
        let handle = self.open_handle(def.clone())?;
        self.write_catalog(Some(&def), None, id)?;
        self.change_tables(|open| open.insert(name.to_string(), Arc::new(handle)));
        let live: Vec<u64> = def.families.iter().flat_map(FamilyDef::ids).collect();
        for (id, ks) in old.all_keyspaces() {
            if !live.contains(&id) {
                self.inner.db.delete_keyspace(ks.clone())?;
            }
        }
        Ok(def)
    }

    /// Drops a table and all its cells.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let _ddl = lock(&self.inner.ddl);
        if self.damaged_reason(name).is_some() {
            // Only the definition can go: which keyspaces were the table's
            // is unknown. The next open with an undamaged catalog removes
            // them.
            let id = self.next_id()?;
            self.write_catalog(None, Some(name), id)?;
            self.inner
                .damaged
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(name);
            return Ok(());
        }
        let old = self.handle(name)?;
        let id = self.next_id()?;
        self.write_catalog(None, Some(name), id)?;
        self.change_tables(|open| open.remove(name));
        for (_, ks) in old.all_keyspaces() {
            self.inner.db.delete_keyspace(ks.clone())?;
        }
        Ok(())
    }

    // ---- reads ---------------------------------------------------------

    /// Reads rows through one snapshot, lazily (through the trait:
    /// [`Backend::read_rows`]).
    pub(crate) fn read_rows(&self, table: &str, request: ReadRequest) -> Result<FjallRows> {
        let (handle, snapshot) = self.handle_and_snapshot(table)?;
        let families = handle.family_scans(request.filter.families.as_deref())?;
        Ok(FjallRows::new(snapshot, families, request, now_micros()))
    }
}
