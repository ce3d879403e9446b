//! Opening the fjall database under a store: the journals and segment
//! files read first, so that a damaged file is named (never the engine's
//! debug text), and one damaged table's keyspace is set aside while the
//! rest of the store opens (see [`segments`]).

use super::activity::{ActivityLog, KeyActivity, MAX_RANGES};
use super::age_filter::{AgeFilterFactory, AgeRules};
use super::commit::GroupSync;
use super::definition::{FORMAT_VERSION, FamilyDef, TableDef};
use super::engine::{
    CATALOG_KEYSPACE, FORMAT_KEY, FjallStore, Inner, LOCK_STRIPES, Moving, StoreOptions,
    TABLE_PREFIX, TableHandle, cursor_key, family_keyspace_options, machine_memory,
};
use super::format::FamilyFormat;
use super::segments::{Depth, FileDamage, SetAside};
use super::time::now_micros;
use super::{clean_close, compactor, definition, journal, keyspaces, segments};
use crate::codec::RowRange;
use crate::error::{Error, Result, engine_words};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use std::collections::{BTreeMap, HashSet};
use std::hash::RandomState;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// fjall's marker of its on-disk format: `FJL` and the format, 3.
const VERSION_FILE: &str = "version";
const VERSION_MARKER: &[u8] = b"FJL\x03";

/// cellar's own lock on a store directory: taken before anything reads or
/// changes the store's files (retiring journals, setting a damaged
/// keyspace aside), held as long as the store is open, so that a second
/// process never touches a store another one has open.
const LOCK_FILE: &str = "cellar.lock";

/// An opened database and what opening it found.
pub(super) struct Opened {
    pub db: Database,
    /// cellar's lock on the directory ([`LOCK_FILE`]); the store holds it.
    pub lock: std::fs::File,
    /// What the open dropped without failing (a torn journal tail).
    pub recovery: Vec<String>,
    /// Keyspace directories set aside at this open.
    pub set_aside_now: Vec<SetAside>,
    /// Bytes of journal the open read and replayed (0 after a clean
    /// close: see [`clean_close`]).
    pub journal_bytes: u64,
}

/// Opens the database in `path` with the builder `make` returns (called
/// again for a second attempt after damaged keyspaces are set aside).
pub(super) fn open(
    path: &Path,
    make: impl Fn() -> fjall::DatabaseBuilder<Database>,
) -> Result<Opened> {
    let damaged = |reason: String| Error::StoreDamaged {
        path: path.display().to_string(),
        reason,
    };
    let lock = lock_store(path)?;
    store_wide_files(path).map_err(damaged)?;
    // A keyspace without `current` is deleted by fjall's open as one whose
    // creation was interrupted: one that holds segments is set aside.
    let lost = segments::current_lost(path).map_err(|e| damaged(io_reason(path, &e)))?;
    let mut set_aside_now = set_aside(path, &lost)?;
    // After a clean close the journals hold nothing the tables lack:
    // retire them, so that the open replays nothing.
    clean_close::retire_if_clean(path).map_err(|e| damaged(io_reason(path, &e)))?;
    // Read before fjall opens (and cuts) the journals: what the open
    // drops, and why it fails if it does. Only a report: an unreadable
    // journal is fjall's to judge.
    let journals = journal::survey(path).unwrap_or_default();
    let journal_bytes = journals.iter().map(|j| j.valid_end).sum();
    let db = match make().open() {
        Ok(db) => db,
        Err(fjall::Error::Locked) => {
            return Err(Error::StoreInUse {
                path: path.display().to_string(),
            });
        }
        Err(fjall::Error::JournalRecovery(e)) => return Err(journal_error(path, &journals, e)),
        Err(first) => {
            // Which file? Set aside the keyspaces it finds damaged and try
            // once more; the store-wide ones fail the open, named.
            let found = segments::survey(path, Depth::Trailers)
                .map_err(|e| damaged(io_reason(path, &e)))?;
            if found.is_empty() {
                return Err(damaged(engine_reason(&first)));
            }
            set_aside_now.extend(set_aside(path, &found)?);
            match make().open() {
                Ok(db) => db,
                Err(e) => {
                    let _ = segments::put_back(path, &set_aside_now);
                    return Err(damaged(engine_reason(&e)));
                }
            }
        }
    };
    // (A survey that saw damage where fjall saw none says nothing.)
    let recovery = journals
        .iter()
        .filter(|j| j.damage.is_none())
        .filter_map(journal::JournalSurvey::describe)
        .collect();
    Ok(Opened {
        db,
        lock,
        recovery,
        set_aside_now,
        journal_bytes,
    })
}

/// Takes cellar's lock on the store in `path` (creating the directory),
/// or says the store is in use.
fn lock_store(path: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(path)?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::StoreInUse {
            path: path.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Sets aside the damaged keyspaces in `found`; damage to keyspace 0,
/// fjall's directory of every keyspace's name and settings, fails the
/// open instead, named.
fn set_aside(path: &Path, found: &[FileDamage]) -> Result<Vec<SetAside>> {
    if let Some(d) = found.iter().find(|d| d.keyspace == 0) {
        return Err(Error::StoreDamaged {
            path: path.display().to_string(),
            reason: format!(
                "{d}. That keyspace is the storage engine's directory of every other keyspace \
                 (their names and settings); without it no table can be found. The tables' own \
                 files under keyspaces/ are untouched, but cellar cannot rebuild the directory: \
                 restore {} from a backup of the store",
                d.file.display()
            ),
        });
    }
    segments::set_aside(path, found).map_err(|e| Error::StoreDamaged {
        path: path.display().to_string(),
        reason: format!(
            "{} is damaged and could not be set aside: {e}",
            found
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        ),
    })
}

/// The files of the whole store that fjall reads before any keyspace:
/// its format marker. A missing or damaged marker is named, with the way
/// back (`cellar check --repair` rewrites it).
fn store_wide_files(path: &Path) -> std::result::Result<(), String> {
    if !path.join("keyspaces").is_dir() {
        return Ok(());
    }
    let marker = path.join(VERSION_FILE);
    let problem = match std::fs::read(&marker) {
        Ok(bytes) if bytes.starts_with(b"FJL") && bytes.len() == 4 => return Ok(()),
        Ok(bytes) => format!("holds {} bytes that are not a format marker", bytes.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "is missing".to_string(),
        Err(e) => format!("cannot be read: {e}"),
    };
    Err(format!(
        "its file {VERSION_FILE} {problem} (it holds only the storage format's marker; the \
         data is elsewhere). `cellar check --repair --store {}` rewrites it",
        path.display()
    ))
}

/// Rewrites fjall's format marker when it is missing or damaged and the
/// store's keyspaces are in the format cellar writes; whether it did.
pub fn repair_version_marker(path: &Path) -> std::io::Result<bool> {
    if store_wide_files(path).is_ok() || !path.join("keyspaces/0/current").is_file() {
        return Ok(false);
    }
    let marker = path.join(VERSION_FILE);
    let tmp = path.join("version.tmp");
    std::fs::write(&tmp, VERSION_MARKER)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &marker)?;
    Ok(true)
}

fn io_reason(path: &Path, e: &std::io::Error) -> String {
    format!("its files cannot be read ({e}) in {}", path.display())
}

fn journal_error(
    path: &Path,
    journals: &[journal::JournalSurvey],
    e: impl std::fmt::Debug,
) -> Error {
    let found: Vec<String> = journals
        .iter()
        .filter(|j| j.damage.is_some())
        .filter_map(journal::JournalSurvey::describe)
        .collect();
    Error::JournalDamaged {
        path: path.display().to_string(),
        reason: if found.is_empty() {
            format!("its journal does not replay ({e:?})")
        } else {
            found.join("; ")
        },
    }
}

/// What fjall's refusal means, in words, when no file could be named.
fn engine_reason(e: &fjall::Error) -> String {
    format!(
        "{}, and no damaged keyspace file was found. `cellar check --store DIR` reports what it can",
        engine_words(e)
    )
}

/// Catalog keys recording fjall's id of each keyspace (`ksid/f<id>`), so
/// that a keyspace set aside by its directory's id is known by name.
const KEYSPACE_ID_PREFIX: &str = "ksid/";

impl FjallStore {
    /// Whether every keyspace of `def` opened. A keyspace named in the
    /// catalog was created before the entry naming it was written, so one
    /// that is missing was set aside or lost, and must not be recreated
    /// empty: the table is damaged, with the reason naming the file.
    pub(super) fn keyspaces_present(
        &self,
        def: &TableDef,
        present: &HashSet<String>,
    ) -> std::result::Result<(), String> {
        let set_aside = &self.inner.set_aside;
        for family in &def.families {
            for name in family.keyspace_names() {
                if present.contains(&name) {
                    continue;
                }
                let id = self.recorded_keyspace_id(&name);
                let aside = id.and_then(|id| set_aside.iter().find(|s| s.keyspace == id));
                return Err(match (aside, id) {
                    (Some(s), _) => format!(
                        "family {}: its keyspace {name} (keyspaces/{}) was set aside to {} \
                         because {}. Its cells are there, untouched: restore the file from a \
                         backup and move the directory back (see {}.txt), or DROP TABLE {} \
                         to remove the table",
                        family.name,
                        s.keyspace,
                        s.dir.display(),
                        s.reason,
                        s.dir.display(),
                        def.name
                    ),
                    (None, Some(id)) => format!(
                        "family {}: its keyspace {name} (keyspaces/{id}) is missing from the store",
                        family.name
                    ),
                    (None, None) => format!(
                        "family {}: its keyspace {name} is missing from the store{}",
                        family.name,
                        if set_aside.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " (keyspaces set aside as damaged: {})",
                                set_aside
                                    .iter()
                                    .map(|s| format!("{} because {}", s.dir.display(), s.reason))
                                    .collect::<Vec<_>>()
                                    .join("; ")
                            )
                        }
                    ),
                });
            }
        }
        Ok(())
    }

    /// fjall's id of keyspace `name`, as recorded when it was opened.
    pub(super) fn recorded_keyspace_id(&self, name: &str) -> Option<u64> {
        let value = self
            .inner
            .catalog
            .get(format!("{KEYSPACE_ID_PREFIX}{name}"))
            .ok()??;
        <[u8; 8]>::try_from(&*value).ok().map(u64::from_be_bytes)
    }

    /// Records fjall's id of keyspace `name` when it is not recorded yet.
    pub(super) fn note_keyspace_id(&self, name: &str, id: u64) -> Result<()> {
        if self.recorded_keyspace_id(name) != Some(id) {
            self.inner
                .catalog
                .insert(format!("{KEYSPACE_ID_PREFIX}{name}"), id.to_be_bytes())?;
        }
        Ok(())
    }

    /// Forgets the ids of keyspaces no longer in `live`.
    pub(super) fn forget_keyspace_ids(&self, live: &[String]) -> Result<()> {
        let mut stale = Vec::new();
        for guard in self.inner.catalog.prefix(KEYSPACE_ID_PREFIX) {
            let key = guard.key()?;
            let name = String::from_utf8_lossy(&key[KEYSPACE_ID_PREFIX.len()..]).into_owned();
            if !live.contains(&name) {
                stale.push(key);
            }
        }
        for key in stale {
            self.inner.catalog.remove(key)?;
        }
        Ok(())
    }
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
        let Opened {
            db,
            lock,
            recovery,
            set_aside_now,
            journal_bytes,
        } = open(&path, make)?;
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
        let keyspace_guard = keyspaces::Guard::open(&db)?;
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
            catalog: catalog.clone(),
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
            activity: options.key_activity.map(|retention| {
                KeyActivity::new(
                    Some(ActivityLog::new(catalog.clone())),
                    retention,
                    MAX_RANGES,
                    Arc::new(now_micros),
                )
            }),
            size_index: Default::default(),
            keyspace_guard,
            _lock: lock,
        };
        let inner = Arc::new(inner);
        if let Some(activity) = &inner.activity {
            let weak = Arc::downgrade(&inner);
            activity.set_split_points(Box::new(move |table| {
                let Some(inner) = weak.upgrade() else {
                    return Vec::new();
                };
                let store = FjallStore {
                    _compactor: None,
                    inner,
                };
                // From the block indexes: no row is read.
                store
                    .range_size(table, None, &RowRange::all(), 64)
                    .map(|size| size.points)
                    .unwrap_or_default()
            }));
        }
        let compactor = options
            .background_compaction
            .and_then(|quiet| compactor::start(Arc::downgrade(&inner), quiet))
            .map(Arc::new);
        let store = FjallStore {
            _compactor: compactor,
            inner,
        };
        store.load_catalog()?;
        if let Some(activity) = &store.inner.activity {
            // Minutes past the retention go; a failure costs only space.
            let _ = activity.sweep();
        }
        Ok(store)
    }

    /// Reads every table definition. An entry that does not parse (or
    /// whose families cannot be opened) makes that one table unavailable,
    /// reported by [`FjallStore::damaged_tables`]; the others open.
    pub(super) fn load_catalog(&self) -> Result<()> {
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
                    inner.keyspace_guard.delete(&inner.db, ks)?;
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

    pub(super) fn damaged_reason(&self, table: &str) -> Option<String> {
        self.inner
            .damaged
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(table)
            .cloned()
    }

    pub(super) fn open_handle(&self, def: TableDef) -> Result<TableHandle> {
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
            let name = definition::keyspace_name(id);
            // A family's blocks are never judged by the filter; a PACKED
            // family's own keyspace then turns what it would drop into
            // tombstones (an AUTO family's cells shadow nothing).
            let blocked =
                family.blocks.is_some() && id == family.id && family.format == FamilyFormat::Packed;
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
                // (Blocks hold PACKED rows, whatever the family's format.)
                Some(id) => Some(open(id, FamilyFormat::Packed, family)?),
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
}
