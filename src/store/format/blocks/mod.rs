//! Blocks: runs of a PACKED family's rows merged into one pair each, in a
//! second keyspace of the family, so that a scan pays fjall's cost per
//! pair once per run of rows instead of once per row.
//!
//! ```text
//! key   = the escaped key of the block's last row
//! value = 0x01                                   block version
//!         u32 LE: row count R (at least one)
//!         R + 1 × u32 LE: where each row's entry starts in the body
//!           (the last: the body's length)
//!         body: per row, ascending by key:
//!           u32 LE key length, the escaped row key, the row's PACKED value
//! ```
//!
//! Blocks are written only by a merge (`COMPACT TABLE`, and a format
//! change moving rows out) under every row lock; between merges they are
//! read-only. Writes go to the family's own keyspace as before, and a
//! row there *shadows* its copy in a block: a read takes the row keyspace's
//! pair where both hold the row, and an empty value there (a *tombstone*,
//! never a PACKED value) hides a row a block holds. A read of the family
//! merges the two keyspaces by row key ([`Pairs`]) and lends each block
//! row as a *virtual pair*: its key and value are slices of the block's
//! value, so everything downstream decodes it as the PACKED pair it is.

mod cursor;

pub(crate) use cursor::{Merged, Pairs};

use crate::codec::show_bytes;
use crate::error::{Error, Result};
use byteview::ByteView;
use fjall::{Keyspace, Readable, Slice, Snapshot};

/// The version written.
const VERSION: u8 = 1;

/// A block closes at this many rows...
pub(crate) const BLOCK_ROWS: usize = 64;
/// ...or once its rows hold this many bytes.
pub(crate) const BLOCK_BYTES: usize = 16 << 10;

fn corrupt(what: &str, key: &[u8]) -> Error {
    Error::Corrupt {
        reason: format!("block {}: {what}", show_bytes(key)),
    }
}

/// A part of a [`Slice`], sharing its bytes.
fn part(bytes: &Slice, range: std::ops::Range<usize>) -> Slice {
    Slice::from(ByteView::from(bytes.clone()).slice(range))
}

/// Encodes rows (escaped key, PACKED value), ascending by key and at
/// least one, into a block's value.
pub(crate) fn encode<K: AsRef<[u8]>, V: AsRef<[u8]>>(rows: &[(K, V)]) -> Vec<u8> {
    let body: usize = rows
        .iter()
        .map(|(k, v)| 4 + k.as_ref().len() + v.as_ref().len())
        .sum();
    let mut out = Vec::with_capacity(5 + 4 * (rows.len() + 1) + body);
    out.push(VERSION);
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    let mut at = 0usize;
    for (k, v) in rows {
        out.extend_from_slice(&(at as u32).to_le_bytes());
        at += 4 + k.as_ref().len() + v.as_ref().len();
    }
    out.extend_from_slice(&(at as u32).to_le_bytes());
    for (k, v) in rows {
        let (k, v) = (k.as_ref(), v.as_ref());
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}

/// One block as read: its key and value, with its rows' places checked.
pub(crate) struct Block {
    key: Slice,
    value: Slice,
    rows: usize,
    /// Where the body starts in the value.
    body: usize,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
}

impl Block {
    /// Reads a block pair, checking that every row's entry lies in the
    /// value (not that the rows are ordered: see [`check`]).
    pub fn parse(key: Slice, value: Slice) -> Result<Block> {
        let bad = |what: &str| corrupt(what, &key);
        if value.first() != Some(&VERSION) {
            return Err(bad("unknown block version"));
        }
        let rows = u32_at(&value, 1).ok_or_else(|| bad("truncated header"))?;
        if rows == 0 {
            return Err(bad("no rows"));
        }
        let body = rows
            .checked_add(1)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| n.checked_add(5))
            .filter(|&b| b <= value.len())
            .ok_or_else(|| bad("truncated offset table"))?;
        let len = value.len() - body;
        let mut previous = 0;
        for i in 0..=rows {
            let at = u32_at(&value, 5 + 4 * i).ok_or_else(|| bad("truncated offset table"))?;
            let first_ok = i > 0 || at == 0;
            let last_ok = i < rows || at == len;
            if at < previous || !first_ok || !last_ok {
                return Err(bad("row offsets out of order"));
            }
            if i > 0 {
                let entry = at - previous;
                let key_len = u32_at(&value, body + previous).filter(|_| entry >= 4);
                if key_len.is_none_or(|k| k > entry - 4) {
                    return Err(bad("a row entry is cut short"));
                }
            }
            previous = at;
        }
        Ok(Block {
            key,
            value,
            rows,
            body,
        })
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// The block's own key (its last row's escaped key).
    pub fn key(&self) -> &Slice {
        &self.key
    }

    /// Where row `i`'s entry lies in the value: (key start, value start,
    /// end). Checked by [`Block::parse`].
    fn place(&self, i: usize) -> (usize, usize, usize) {
        let offset = |j: usize| u32_at(&self.value, 5 + 4 * j).unwrap_or(0);
        let (start, end) = (self.body + offset(i), self.body + offset(i + 1));
        let key_len = u32_at(&self.value, start).unwrap_or(0);
        (start + 4, start + 4 + key_len, end)
    }

    /// Row `i`'s escaped key.
    pub fn row_key(&self, i: usize) -> &[u8] {
        let (k, v, _) = self.place(i);
        &self.value[k..v]
    }

    /// Row `i`'s (escaped key, PACKED value), borrowed.
    #[inline]
    pub fn row_bytes(&self, i: usize) -> (&[u8], &[u8]) {
        let (k, v, end) = self.place(i);
        (&self.value[k..v], &self.value[v..end])
    }

    /// Row `i` as a pair (escaped key, PACKED value) sharing the block's bytes.
    pub fn row(&self, i: usize) -> (Slice, Slice) {
        let (k, v, end) = self.place(i);
        (part(&self.value, k..v), part(&self.value, v..end))
    }

    /// The first row whose key is at or after `key` (`len()` if none).
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.rows);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.row_key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// The row `escaped_row`'s PACKED value in the family's blocks, if a block
/// holds it.
pub(crate) fn get(
    snapshot: &Snapshot,
    blocks: &Keyspace,
    escaped_row: &[u8],
) -> Result<Option<Slice>> {
    let Some(guard) = snapshot.range(blocks, escaped_row..).next() else {
        return Ok(None);
    };
    let (key, value) = guard.into_inner()?;
    let block = Block::parse(key, value)?;
    let i = block.lower_bound(escaped_row);
    Ok((i < block.len() && block.row_key(i) == escaped_row).then(|| block.row(i).1))
}

/// Whether the blocks hold any row from `first` to `last` (escaped, both
/// included).
pub(crate) fn any_in(
    snapshot: &Snapshot,
    blocks: &Keyspace,
    first: &[u8],
    last: &[u8],
) -> Result<bool> {
    let Some(guard) = snapshot.range(blocks, first..).next() else {
        return Ok(false);
    };
    let (key, value) = guard.into_inner()?;
    let block = Block::parse(key, value)?;
    let i = block.lower_bound(first);
    Ok(i < block.len() && block.row_key(i) <= last)
}

/// Where new blocks of the rows `keys` (escaped, strictly ascending) may
/// go among the blocks stored: the indexes at which the runs of rows
/// between stored blocks start (after the first run, which starts at 0),
/// so that no block ever spans another's rows; `None` when a row falls
/// within a stored block's rows. One seek per stored block the rows
/// surround, and one more.
pub(crate) fn gaps<K: AsRef<[u8]>>(
    snapshot: &Snapshot,
    blocks: &Keyspace,
    keys: &[K],
) -> Result<Option<Vec<usize>>> {
    let mut cuts = Vec::new();
    let mut i = 0;
    while i < keys.len() {
        let at = keys[i].as_ref();
        let Some(guard) = snapshot.range(blocks, at..).next() else {
            break;
        };
        let (key, value) = guard.into_inner()?;
        let block = Block::parse(key, value)?;
        let (first, last) = (block.row_key(0), block.row_key(block.len() - 1));
        if first <= at {
            return Ok(None);
        }
        // The rows before the block's first go in the gap before it.
        let j = i + keys[i..].partition_point(|k| k.as_ref() < first);
        if j < keys.len() && keys[j].as_ref() <= last {
            return Ok(None);
        }
        if j < keys.len() && j > 0 {
            cuts.push(j);
        }
        i = j;
    }
    Ok(Some(cuts))
}

/// Rows (escaped key, PACKED value), strictly ascending, as blocks: runs
/// of up to `block_rows` rows, closed early at [`BLOCK_BYTES`] and at each
/// of `cuts` (see [`gaps`]); (block key, block value).
pub(crate) fn build<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    rows: &[(K, V)],
    cuts: &[usize],
    block_rows: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(rows.len() / block_rows.max(1) + cuts.len() + 1);
    let (mut from, mut bytes, mut next_cut) = (0, 0, 0);
    for (i, (key, value)) in rows.iter().enumerate() {
        bytes += key.as_ref().len() + value.as_ref().len();
        let end = i + 1;
        let cut = cuts.get(next_cut) == Some(&end);
        if cut {
            next_cut += 1;
        }
        if cut || end == rows.len() || end - from >= block_rows || bytes >= BLOCK_BYTES {
            out.push((key.as_ref().to_vec(), encode(&rows[from..end])));
            from = end;
            bytes = 0;
        }
    }
    out
}

/// Checks a block pair: well formed, its rows ascending, its key its last
/// row's; calls `row` with each row's pair. The number of rows.
pub(crate) fn check(
    key: Slice,
    value: Slice,
    mut row: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<usize> {
    let block = Block::parse(key, value)?;
    for i in 0..block.len() {
        if i > 0 && block.row_key(i - 1) >= block.row_key(i) {
            return Err(corrupt("rows out of order", block.key()));
        }
        let (k, v) = block.row(i);
        row(&k, &v)?;
    }
    if block.row_key(block.len() - 1) != &block.key()[..] {
        return Err(corrupt("the key is not its last row's", block.key()));
    }
    Ok(block.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_gives_back_its_rows() {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..5u8)
            .map(|i| (vec![b'a' + i, 0, 1], vec![4, i, i, i, i, i, i, i, i]))
            .collect();
        let value = encode(&rows);
        let key = Slice::from(rows[4].0.clone());
        let block = Block::parse(key.clone(), Slice::from(value.clone())).unwrap();
        assert_eq!(block.len(), 5);
        for (i, (k, v)) in rows.iter().enumerate() {
            let (bk, bv) = block.row(i);
            assert_eq!((&bk[..], &bv[..]), (&k[..], &v[..]));
        }
        assert_eq!(block.lower_bound(b"c"), 2);
        assert_eq!(block.lower_bound(b"z"), 5);
        assert_eq!(check(key, Slice::from(value), |_, _| Ok(())).unwrap(), 5);
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        let rows = [(b"k\0\x01".to_vec(), vec![4u8; 12])];
        let value = encode(&rows);
        for cut in 0..value.len() {
            let _ = Block::parse(Slice::from(&b"k"[..]), Slice::from(&value[..cut]));
        }
        for i in 0..value.len() {
            for byte in [0u8, 1, 0x7f, 0xff] {
                let mut bad = value.clone();
                bad[i] = byte;
                if let Ok(block) = Block::parse(Slice::from(&b"k"[..]), Slice::from(bad)) {
                    for r in 0..block.len() {
                        let _ = block.row(r);
                    }
                }
            }
        }
    }
}
