//! The background compaction: a thread per open store that folds the
//! cells written to AUTO families into their blocks once they settle
//! (`format/auto.rs`), so that a table created with no format scans like
//! PACKED without a manual step.
//!
//! Every `quiet` it looks at each AUTO family's own keyspace: one that
//! holds pairs and has not grown since the last look (no write came in
//! meanwhile), or holds more than [`BACKLOG`] pairs however busy it is,
//! is folded, leaving the blocks no new cell falls in as they are
//! (`FjallStore::fold_new_cells`). Each step of a fold is followed by a
//! pause as long as the step took, so the compaction uses at most half of
//! one core, and the reads and writes a step holds back wait one step at
//! most. The thread holds the store only weakly; the last handle's drop
//! stops it and waits for it (a step at most) before the store closes.

use super::engine::{FjallStore, Inner};
use super::format::FamilyFormat;
use super::worker::{Stop, Worker, stopped};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

/// Own pairs past which an AUTO family is folded even while it is being
/// written.
const BACKLOG: u64 = 1 << 20;

/// Bytes of blocks folds wrote since the family's blocks were last
/// compacted past which they are compacted: new blocks land in fjall's
/// first levels, which are not compressed (a tall table's folded
/// readings: 13.3 bytes each there, 8.8 once compacted).
const COMPRESS_AFTER: u64 = 8 << 20;
/// Below [`COMPRESS_AFTER`], the bytes folds wrote are compacted once
/// they are this many and a quarter of the family's blocks: a small
/// table is compressed too (a compaction rewrites every block, so at
/// most four times the bytes folded are rewritten).
const COMPRESS_SMALL: u64 = 1 << 20;

/// Whether a family's blocks are compacted now, `pending` bytes of them
/// written by folds since they last were, of `blocks` bytes on disk.
fn compress_now(pending: u64, blocks: u64) -> bool {
    pending >= COMPRESS_AFTER || (pending >= COMPRESS_SMALL && pending.saturating_mul(4) >= blocks)
}

/// Starts the background compaction of `store`, looking every `quiet`;
/// `None` if the OS refused a thread (the store then works without it:
/// `COMPACT TABLE` still folds).
pub(super) fn start(store: Weak<Inner>, quiet: Duration) -> Option<Worker> {
    Worker::start("cellar-compact", move |stop| run(&store, quiet, stop))
}

fn run(store: &Weak<Inner>, quiet: Duration, stop: &Stop) {
    // Per (table, family keyspace id): its own pairs at the last look.
    let mut seen: HashMap<(String, u64), u64> = HashMap::new();
    // Per (table, family): bytes of blocks folds wrote since the blocks
    // were last compacted.
    let mut pending: HashMap<(String, String), u64> = HashMap::new();
    loop {
        if stopped(stop, quiet) {
            return;
        }
        let Some(inner) = store.upgrade() else {
            return;
        };
        let store = FjallStore {
            inner,
            _compactor: None,
        };
        for (table, family) in settled(&store, &mut seen) {
            let mut pace = |step: Duration| !stopped(stop, step);
            // A table dropped or altered meanwhile is looked at again at
            // the next turn; nothing else can go wrong that a read or a
            // write would not meet first.
            let before = blocks_bytes(&store, &table, &family);
            let _ = store.fold_new_cells(&table, &family, &mut pace);
            if stopped(stop, Duration::ZERO) {
                return;
            }
            let after = blocks_bytes(&store, &table, &family);
            let key = (table, family);
            let written = pending.entry(key.clone()).or_default();
            *written = written.saturating_add(after.saturating_sub(before));
            if compress_now(*written, after) {
                let _ = store.compact_blocks(&key.0, &key.1);
                pending.remove(&key);
            }
        }
    }
}

/// The bytes on disk of the blocks of `table`'s family `family` (0 when
/// it has none, or is gone).
fn blocks_bytes(store: &FjallStore, table: &str, family: &str) -> u64 {
    store
        .handle(table)
        .ok()
        .and_then(|handle| {
            let index = handle.def.family_index(family).ok()?;
            handle.blocks[index].as_ref().map(|b| b.disk_space())
        })
        .unwrap_or(0)
}

/// The AUTO families to fold now: (table, family).
fn settled(store: &FjallStore, seen: &mut HashMap<(String, u64), u64>) -> Vec<(String, String)> {
    let tables: Vec<_> = store
        .inner
        .tables
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|(name, handle)| (name.clone(), Arc::clone(handle)))
        .collect();
    let mut now = HashMap::new();
    let mut due = Vec::new();
    for (name, handle) in tables {
        for (index, family) in handle.def.families.iter().enumerate() {
            if family.format != FamilyFormat::Auto || family.converting.is_some() {
                continue;
            }
            let pairs = handle.keyspaces[index].approximate_len() as u64;
            if pairs == 0 {
                continue;
            }
            let id = (name.clone(), family.id);
            if seen.get(&id) == Some(&pairs) || pairs >= BACKLOG {
                due.push((name.clone(), family.name.clone()));
            }
            now.insert(id, pairs);
        }
    }
    *seen = now;
    due
}

#[cfg(test)]
mod tests {
    use super::{COMPRESS_AFTER, COMPRESS_SMALL, compress_now};

    #[test]
    fn folded_blocks_are_compressed_when_many_or_a_large_share() {
        // A table's first fold of a few MB: compressed.
        assert!(compress_now(5 << 20, 5 << 20));
        // Under a MB: left (it is small either way).
        assert!(!compress_now(COMPRESS_SMALL - 1, COMPRESS_SMALL - 1));
        // A few MB folded into a large table: waits for more...
        assert!(!compress_now(2 << 20, 100 << 20));
        // ...until a quarter of it, or 8 MB, whichever comes first.
        assert!(compress_now(COMPRESS_AFTER, 1 << 30));
        assert!(compress_now(3 << 20, 12 << 20));
        assert!(!compress_now(3 << 20, (12 << 20) + 1));
    }
}
