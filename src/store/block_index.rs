//! The block indexes of a keyspace's on-disk tables (SSTs), read from
//! their files and kept: where a table's bytes lie in its key space
//! (`sizes.rs` uses them).
//!
//! fjall does not publish the block index; lsm-tree keeps it behind
//! `#[doc(hidden)]` fields of its `Table` (the index's place in the file,
//! its compression). This file is the one place that reads them, so a
//! change of lsm-tree's layout (the dependency is pinned to 3.1) shows up
//! here and in the tests of `sizes.rs`, and nowhere else: an index that
//! cannot be read leaves its table out of an estimate.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A data block's last key (as stored: the keyspace's encoded key) and
/// its size on disk.
pub(crate) type Entry = (Box<[u8]>, u32);

/// The block indexes read so far, by SST file (files are immutable, and
/// a compaction's new file has a new name). Emptied when it holds more
/// than [`MAX_ENTRIES`] entries in all (16 GiB of 16 KiB blocks,
/// some 60 MiB of memory at most).
#[derive(Default)]
pub(crate) struct SizeIndex {
    tables: Mutex<Kept>,
}

/// The entries by file, and how many in all.
#[derive(Default)]
struct Kept {
    files: HashMap<Arc<PathBuf>, Arc<[Entry]>>,
    entries: usize,
}

const MAX_ENTRIES: usize = 1 << 20;

impl SizeIndex {
    /// The index entries of one SST, read from its file the first time.
    pub(crate) fn entries(&self, table: &lsm_tree::Table) -> Option<Arc<[Entry]>> {
        if let Some(hit) = self.lock().files.get(&table.path) {
            return Some(hit.clone());
        }
        let entries: Arc<[Entry]> = read_index(table)?.into();
        let mut kept = self.lock();
        if kept.entries + entries.len() > MAX_ENTRIES {
            kept.files.clear();
            kept.entries = 0;
        }
        kept.entries += entries.len();
        kept.files.insert(table.path.clone(), entries.clone());
        Some(entries)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The entries of an SST's block index: each data block's last key and
/// size. The index is one block (fjall's default for small tables) or
/// two levels (a top-level block over index blocks), read whole either
/// way. `None` when it cannot be read.
fn read_index(table: &lsm_tree::Table) -> Option<Vec<Entry>> {
    use lsm_tree::table::{Block, BlockHandle, IndexBlock};
    let file = std::fs::File::open(&*table.path).ok()?;
    let compression = table.metadata.index_block_compression;
    let read = |handle: BlockHandle| Block::from_file(&file, handle, compression).ok();
    let top = IndexBlock::new(read(table.regions.tli)?);
    let mut out = Vec::new();
    if table.regions.index.is_none() {
        entries_of(&top, &mut out)?;
        return Some(out);
    }
    for item in top.iter() {
        let lower = IndexBlock::new(read(BlockHandle::new(item.offset, item.size))?);
        entries_of(&lower, &mut out)?;
    }
    Some(out)
}

/// Appends an index block's entries (the blocks it points to: last key,
/// size).
fn entries_of(index: &lsm_tree::table::IndexBlock, out: &mut Vec<Entry>) -> Option<()> {
    let bytes = index.as_slice();
    for item in index.iter() {
        let mut key = Vec::new();
        if let Some(prefix) = &item.prefix {
            key.extend_from_slice(bytes.get(prefix.0..prefix.1)?);
        }
        key.extend_from_slice(bytes.get(item.end_key.0..item.end_key.1)?);
        out.push((key.into_boxed_slice(), item.size));
    }
    Some(())
}
