//! Durability: how a committed batch reaches the disk.
//!
//! Every batch is written to fjall's journal and flushed to the operating
//! system (`PersistMode::Buffer`), so it survives a crash of the process.
//! In synced mode the writer then waits for an fsync that covers its batch.
//! Writers share fsyncs (group commit): whoever finds no fsync running
//! starts one covering every batch written so far; the others wait for it.

use crate::error::Result;
use fjall::{Database, PersistMode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// How durable a committed mutation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Flushed to the operating system: survives a crash of the process,
    /// not a power loss.
    #[default]
    Buffered,
    /// Synced to the disk before the call returns: survives a power loss.
    /// Concurrent writers share fsyncs.
    Synced,
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Buffered => "buffered",
            Durability::Synced => "synced",
        })
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    /// `buffered` or `synced`.
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "buffered" => Ok(Durability::Buffered),
            "synced" | "sync" => Ok(Durability::Synced),
            _ => Err(format!(
                "durability {s:?}: use buffered (survives a crash of the process) or synced (survives a power loss)"
            )),
        }
    }
}

#[derive(Default)]
struct SyncState {
    synced: u64,
    syncing: bool,
}

/// Group commit of synced writes.
#[derive(Default)]
pub(crate) struct GroupSync {
    written: AtomicU64,
    state: Mutex<SyncState>,
    done: Condvar,
    fsyncs: AtomicU64,
}

impl GroupSync {
    /// Waits until a sync covering the caller's (already written) batch is done.
    pub fn wait_durable(&self, db: &Database) -> Result<()> {
        let mine = self.written.fetch_add(1, Ordering::SeqCst) + 1;
        let mut state = lock(&self.state);
        loop {
            if state.synced >= mine {
                return Ok(());
            }
            if state.syncing {
                state = self
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state.syncing = true;
            let target = self.written.load(Ordering::SeqCst);
            drop(state);
            let outcome = db.persist(PersistMode::SyncAll);
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            state = lock(&self.state);
            state.syncing = false;
            if outcome.is_ok() {
                state.synced = state.synced.max(target);
            }
            self.done.notify_all();
            outcome?;
        }
    }

    /// How many fsyncs ran.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }
}

/// Locks `m`, taking the value a panicked holder left: cellar's locks
/// guard values every step leaves consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
