//! Deleting a fjall keyspace so that fjall never gives its number to
//! another.
//!
//! fjall (3.1.13, the newest) files each keyspace's name and options in its
//! meta keyspace under the keyspace's number, and a deletion writes
//! tombstones over them. After a reopen two of its counters restart lower
//! than they were: the next keyspace number is one past the highest
//! keyspace directory left on disk, and the sequence number one past the
//! highest of the remaining keyspaces' writes, not of the meta keyspace's
//! own entries. So when the keyspace with the highest number is deleted
//! and the store reopens, the next keyspace created gets that number again
//! with entries older than (or as old as) the deletion's tombstones. They
//! hide it: at the open after, fjall finds the keyspace's directory
//! unreferenced and deletes it with its data, or finds its name but not
//! its options and panics ("should exist"; seen by the crash test). A
//! short program against fjall alone reproduces it in two reopens, with
//! clean closes as well as crashes.
//!
//! The way round: the keyspace with the highest number is never deleted.
//! A *guard* keyspace, empty, is created first whenever the one to delete
//! is newer than the guard, and the old guard goes (it is older than the
//! new one). Numbers then only grow across reopens, and none is reused.

use crate::error::Result;
use fjall::{AbstractTree, Database, Keyspace, KeyspaceCreateOptions};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Names of guard keyspaces start with this (table keyspaces with `f`,
/// the catalog is `catalog`).
const GUARD_PREFIX: &str = "guard";

/// The newest guard keyspace, if any.
#[derive(Default)]
pub(super) struct Guard(Mutex<Option<Keyspace>>);

impl Guard {
    /// Finds the guards a store holds: keeps the newest, deletes the
    /// others (a crash between making a guard and deleting the last one
    /// leaves two).
    pub(super) fn open(db: &Database) -> Result<Self> {
        let mut guards: Vec<Keyspace> = Vec::new();
        for name in db.list_keyspace_names() {
            if name.starts_with(GUARD_PREFIX) {
                guards.push(db.keyspace(&name, KeyspaceCreateOptions::default)?);
            }
        }
        guards.sort_by_key(Keyspace::id);
        let newest = guards.pop();
        for old in guards {
            db.delete_keyspace(old)?;
        }
        Ok(Self(Mutex::new(newest)))
    }

    /// Deletes `keyspace`, first making a newer guard if it is the newest
    /// keyspace the guard knows of (see the module's note), and writing
    /// out its memtable.
    pub(super) fn delete(&self, db: &Database, keyspace: Keyspace) -> Result<()> {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.as_ref().is_none_or(|g| g.id() < keyspace.id()) {
            // Numbers are handed out in ascending order past every keyspace
            // present, so the new guard's is higher than `keyspace`'s.
            let mut name = format!("{GUARD_PREFIX}{}", keyspace.id());
            let mut n = 0;
            while db.keyspace_exists(&name) {
                n += 1;
                name = format!("{GUARD_PREFIX}{}-{n}", keyspace.id());
            }
            let fresh = db.keyspace(&name, KeyspaceCreateOptions::default)?;
            if fresh.id() <= keyspace.id() {
                return Err(crate::error::Error::Corrupt {
                    reason: format!(
                        "keyspace {name} has number {} where one above {} was expected; \
                         keyspace {:?} is left in place",
                        fresh.id(),
                        keyspace.id(),
                        keyspace.name()
                    ),
                });
            }
            if let Some(old) = guard.replace(fresh) {
                db.delete_keyspace(old)?;
            }
        }
        // Its memtable written out first: a deleted keyspace's stays
        // counted in fjall's write buffer while any handle holds it, and
        // the checkpoint at close waits for that buffer to empty (a store
        // closed after a DROP TABLE took 1.5 s more).
        write_out(&keyspace)?;
        db.delete_keyspace(keyspace)?;
        Ok(())
    }
}

/// Writes `keyspace`'s memtable out to a table and waits for it, for
/// [`FLUSH_WAIT`] at most. fjall's own wait (`rotate_memtable_and_wait`)
/// has no bound: once, its flush of a sealed memtable never came (the
/// flush worker idle, the memtable still sealed), and the background
/// compaction deleting a keyspace, and the store's close waiting for it,
/// were stuck for good.
pub(super) fn write_out(keyspace: &Keyspace) -> Result<()> {
    if keyspace.rotate_memtable()? {
        let deadline = Instant::now() + FLUSH_WAIT;
        while keyspace.tree.sealed_memtable_count() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

/// How long [`write_out`] waits for a memtable to be written out.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
