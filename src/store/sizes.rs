//! Where a table's bytes lie in its key space, from the LSM's own index:
//! the row keys that cut a range into pieces of about equal size, without
//! reading a pair.
//!
//! Every on-disk table (SST) of a keyspace has a block index: one entry
//! per data block (4 KiB for cells, 16 KiB for PACKED pairs and blocks),
//! holding the block's last key. Taken together over a family's
//! keyspaces, the entries inside a range say where its bytes are: a key
//! space where most rows share one prefix has most of its entries under
//! that prefix, so cutting at the entries' quantiles gives pieces of
//! equal work where cutting the key space evenly gives one piece nearly
//! all of it.
//!
//! The indexes are read once per SST file and kept (`block_index.rs`);
//! a range with nothing on disk gets no points (the caller splits it
//! some other way).
//!
//! Cells still in memory (the memtable) are not counted: they are at
//! most a memtable's worth, and a table large enough to be split mostly
//! lives on disk.

use super::engine::FjallStore;
use super::format::FamilyFormat;
use crate::codec::{self, RowRange};
use crate::error::Result;
use fjall::{AbstractTree, CompressionType, Keyspace};

/// What the store knows of a row range's size without reading it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSize {
    /// Bytes of the range in on-disk tables: the blocks whose last key
    /// lies in it (and so a block more or less at either end), as they
    /// would be uncompressed: a compressed block counts as the block
    /// size it was cut at (or its own size, when larger).
    pub on_disk: u64,
    /// Bytes in memory the range may hold some of: the keyspaces' whole
    /// memtables (`u64::MAX` when one is being flushed: not known).
    pub in_memory: u64,
    /// Up to `n - 1` row keys cutting the range into pieces of about
    /// equal bytes on disk, ascending, each strictly inside the range
    /// (empty when it has fewer than two blocks a piece).
    pub points: Vec<Vec<u8>>,
}

impl RangeSize {
    /// Whether the range holds at most `bytes` in all, on disk and in
    /// memory.
    pub fn at_most(&self, bytes: u64) -> bool {
        self.on_disk.saturating_add(self.in_memory) <= bytes
    }
}

impl FjallStore {
    /// How large `range` of `table` is in the families `families` (all
    /// when `None`), and the row keys cutting it into `n` pieces of about
    /// equal bytes on disk ([`RangeSize`]). From the block indexes of the
    /// keyspaces' on-disk tables and their memtables' sizes: no pair is
    /// read.
    pub fn range_size(
        &self,
        table: &str,
        families: Option<&[String]>,
        range: &RowRange,
        n: usize,
    ) -> Result<RangeSize> {
        let handle = self.handle(table)?;
        let encoded = range.encode();
        let mut size = RangeSize::default();
        if encoded.is_empty() {
            return Ok(size);
        }
        let start = encoded.start.as_slice();
        let end = encoded.end.as_deref();
        let mut weighted: Vec<(Vec<u8>, u64)> = Vec::new();
        for scan in handle.family_scans(families)? {
            for source in &scan.sources {
                let keyspaces = std::iter::once((&source.keyspace, Some(source.format)))
                    .chain(source.blocks.iter().map(|b| (b, None)));
                for (keyspace, format) in keyspaces {
                    self.entries_in(keyspace, format, start, end, &mut weighted);
                    size.in_memory = size.in_memory.saturating_add(memtable_bytes(keyspace));
                }
            }
        }
        size.on_disk = weighted.iter().map(|(_, w)| w).sum();
        if n < 2 || weighted.len() < 2 * n {
            return Ok(size);
        }
        weighted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let total = size.on_disk;
        let mut seen = 0u64;
        let mut next = 1u64;
        for (row, weight) in weighted {
            seen += weight;
            // The piece before this point holds the blocks up to and
            // including this one, so the point is the row after it: a
            // block's last row starts the next piece (it may be cut by
            // the point, which only moves that row to the next piece).
            if next < n as u64 && seen * n as u64 >= total * next {
                next += 1;
                if size.points.last().is_none_or(|p| *p < row) && range.cuts_at(&row) {
                    size.points.push(row);
                }
            }
        }
        Ok(size)
    }

    /// Appends the row key and size of each data block of `keyspace`'s
    /// on-disk tables whose last key lies in `[start, end)`: pairs in
    /// `format` (a family's own keyspace) or blocks (`None`: keyed by
    /// their last row's escaped key).
    fn entries_in(
        &self,
        keyspace: &Keyspace,
        format: Option<FamilyFormat>,
        start: &[u8],
        end: Option<&[u8]>,
        out: &mut Vec<(Vec<u8>, u64)>,
    ) {
        let version = keyspace.tree.current_version();
        let block_size = keyspace
            .tree
            .tree_config()
            .data_block_size_policy
            .first()
            .copied()
            .unwrap_or(0);
        for table in version.iter_tables() {
            let key_range = &table.metadata.key_range;
            if key_range.max().as_ref() < start
                || end.is_some_and(|e| key_range.min().as_ref() >= e)
            {
                continue;
            }
            let Some(entries) = self.inner.size_index.entries(table) else {
                continue;
            };
            // A compressed block counts as at least the block size it was
            // cut at, as stored uncompressed: compression must not make a
            // range look smaller than the work of reading it.
            let least = if table.metadata.data_block_compression == CompressionType::None {
                0
            } else {
                block_size
            };
            let from = entries.partition_point(|(k, _)| &**k < start);
            for (key, size) in &entries[from..] {
                if end.is_some_and(|e| &**key >= e) {
                    break;
                }
                let escaped = match format {
                    Some(f) => match f.row_of(key) {
                        Ok(row) => row,
                        Err(_) => continue,
                    },
                    None => &**key,
                };
                if let Ok((row, _)) = codec::unescape(escaped) {
                    out.push((row, u64::from((*size).max(least))));
                }
            }
        }
    }
}

/// Bytes a keyspace holds in memory: its active memtable's, or
/// `u64::MAX` while sealed ones wait to be flushed (their size is not
/// published).
fn memtable_bytes(keyspace: &Keyspace) -> u64 {
    if keyspace.tree.sealed_memtable_count() > 0 {
        return u64::MAX;
    }
    keyspace.tree.active_memtable().size()
}
