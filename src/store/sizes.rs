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
use fjall::{AbstractTree, Keyspace};

impl FjallStore {
    /// Up to `n - 1` row keys cutting `range` of `table` into pieces of
    /// about equal bytes on disk in the families `families` (all when
    /// `None`), ascending, each strictly inside the range (after its
    /// start, before its end); `None` when the range has too little on
    /// disk to say (fewer than two blocks a piece). From the block
    /// indexes of the keyspaces' on-disk tables: no pair is read.
    pub fn size_points(
        &self,
        table: &str,
        families: Option<&[String]>,
        range: &RowRange,
        n: usize,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let handle = self.handle(table)?;
        let encoded = range.encode();
        if n < 2 || encoded.is_empty() {
            return Ok(None);
        }
        let start = encoded.start.as_slice();
        let end = encoded.end.as_deref();
        let mut weighted: Vec<(Vec<u8>, u64)> = Vec::new();
        for scan in handle.family_scans(families)? {
            for source in &scan.sources {
                self.entries_in(
                    &source.keyspace,
                    Some(source.format),
                    start,
                    end,
                    &mut weighted,
                );
                if let Some(blocks) = &source.blocks {
                    self.entries_in(blocks, None, start, end, &mut weighted);
                }
            }
        }
        if weighted.len() < 2 * n {
            return Ok(None);
        }
        weighted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let total: u64 = weighted.iter().map(|(_, w)| w).sum();
        let mut points: Vec<Vec<u8>> = Vec::with_capacity(n - 1);
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
                if points.last().is_none_or(|p| *p < row) && inside(range, &row) {
                    points.push(row);
                }
            }
        }
        Ok((!points.is_empty()).then_some(points))
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
                    out.push((row, u64::from(*size)));
                }
            }
        }
    }
}

/// Whether `row` lies strictly after `range`'s start and before its end
/// (so that both pieces it makes are non-empty ranges).
fn inside(range: &RowRange, row: &[u8]) -> bool {
    use std::ops::Bound;
    let after = match &range.start {
        Bound::Included(s) | Bound::Excluded(s) => row > s.as_slice(),
        Bound::Unbounded => !row.is_empty(),
    };
    let before = match &range.end {
        Bound::Included(e) => row <= e.as_slice(),
        Bound::Excluded(e) => row < e.as_slice(),
        Bound::Unbounded => true,
    };
    after && before
}
