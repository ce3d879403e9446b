//! Opening the fjall database under a store: the journals and segment
//! files read first, so that a damaged file is named (never the engine's
//! debug text), and one damaged table's keyspace is set aside while the
//! rest of the store opens (see [`segments`]).

use std::collections::HashSet;
use std::path::Path;

use fjall::Database;

use super::FjallStore;
use super::catalog::TableDef;

use super::segments::{self, Depth, FileDamage, SetAside};
use super::{clean_close, journal};
use crate::error::engine_words;
use crate::error::{Error, Result};

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
