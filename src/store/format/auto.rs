//! AUTO, the default: cells are written as CELLS pairs (one per cell, a
//! write costs what it costs in CELLS whatever the row holds), and a
//! merge (`COMPACT TABLE`, or the store's background compaction) folds
//! settled rows into the family's blocks (`blocks/`), which scans read as
//! PACKED rows, column-wise where the rows are tall.
//!
//! The family's own keyspace holds three kinds of pair:
//!
//! ```text
//! escape(row) · escape(qualifier) · !timestamp  =  value   a cell (CELLS)
//! escape(row)                                   =  ""      a marker
//! ```
//!
//! and its blocks hold rows as PACKED values under `escape(row)`. A row's
//! cells are those of its block row (if any) and its own cells together:
//! a cell written after the row was folded stays a pair of its own (no
//! read, no rewrite of the row), and where both hold a cell of the same
//! column and timestamp the own pair's is the one. What only a rewrite
//! can do (delete cells, collect garbage) first *unfolds* the row: its
//! block row's cells become own pairs, and a marker (an empty value under
//! the bare escaped row) hides the block's copy, as a PACKED tombstone
//! does. The next merge folds the row back and deletes the marker.
//!
//! A bare escaped row sorts before every cell pair of its row (escaped
//! rows are prefix free), so a row read in key order meets its block row
//! or marker first.

use super::row::{Prune, RowBuf, merge_sources};
use super::{cells, packed};
use crate::codec;
use crate::error::Result;
use crate::store::request::QualifierFilter;

/// Whether `key` is a bare escaped row (a block row's or a marker's key)
/// rather than a cell's.
pub(crate) fn is_bare(key: &[u8]) -> Result<bool> {
    Ok(codec::escaped_len(key)? == key.len())
}

/// The column a cell pair belongs to (see [`cells::column_of`]); `None`
/// for a bare row.
pub(crate) fn column_of(key: &[u8]) -> Option<&[u8]> {
    match is_bare(key) {
        Ok(false) => Some(cells::column_of(key)),
        _ => None,
    }
}

/// The timestamp the compaction filter judges a pair by: a cell's;
/// `None` keeps a marker (dropping it would bring the block's copy back).
pub(crate) fn timestamp(key: &[u8]) -> Option<i64> {
    match is_bare(key) {
        Ok(false) => cells::timestamp(key),
        _ => None,
    }
}

/// Checks a pair of the own keyspace: a cell, or a marker.
pub(crate) fn check_pair(key: &[u8], value: &[u8]) -> Result<()> {
    if is_bare(key)? {
        if value.is_empty() {
            return Ok(());
        }
        return Err(crate::error::Error::Corrupt {
            reason: format!(
                "a pair under a bare row key holds {} bytes where a marker holds none (key {})",
                value.len(),
                codec::show_bytes(key)
            ),
        });
    }
    cells::check_key(key)
}

/// A row encoded as a PACKED value (under its escaped key) for a block
/// it did not go into after all, as the row's own cell pairs, ascending.
pub(crate) fn own_pairs(key: &[u8], value: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let (row, _) = codec::unescape(key)?;
    Ok(packed::cells_of(key, value)?
        .into_iter()
        .map(|((qualifier, std::cmp::Reverse(ts)), value)| {
            (cells::key(&row, &qualifier, ts), value)
        })
        .collect())
}

/// Decodes one row's pairs `buf.pairs[from..]` (key order): a block row
/// (PACKED value under the bare row key) or a marker first, if any, then
/// the row's own cells; a row with both has its cells merged, the own
/// pair's cell kept where both hold one.
pub(crate) fn decode(
    family: u32,
    buf: &mut RowBuf,
    from: usize,
    values: Option<&[Vec<u8>]>,
    columns: &QualifierFilter,
    prune: Prune,
) -> Result<()> {
    let Some((first, value)) = buf.pairs.get(from) else {
        return Ok(());
    };
    if !is_bare(first)? {
        return cells::decode(family, buf, from);
    }
    if value.is_empty() {
        // A marker: the row's cells are its own pairs after it.
        return cells::decode(family, buf, from + 1);
    }
    if buf.pairs.len() == from + 1 {
        return packed::decode(family, buf, from, values, columns, prune);
    }
    // A block row and own cells: every cell of both, merged.
    let own = buf.pairs.split_off(from + 1);
    let start = buf.cells.len();
    let decoded = packed::decode(family, buf, from, None, &QualifierFilter::All, Prune::NONE);
    buf.pairs.extend(own);
    decoded?;
    let mid = buf.cells.len();
    cells::decode(family, buf, from + 1)?;
    merge_sources(buf, start, mid);
    Ok(())
}
