//! PACKED: one pair per (row, family) holding all of the row's cells of
//! the family.
//!
//! ```text
//! key   = escape(row key)
//! value = 0x01                              format version
//!         newest timestamp, 8 bytes BE      what the compaction filter judges
//!         varint column count
//!         per column, qualifiers ascending:
//!           varint qualifier length, qualifier bytes
//!           varint cell count
//!           per cell, newest first:
//!             varint timestamp gap (first cell: the timestamp itself;
//!               then the previous cell's timestamp minus this one's)
//!             varint value length, value bytes
//! ```
//!
//! A time-bucket row of thousands of cells decodes as one pass over one
//! value: each cell costs two varints and a slice, no key to split and no
//! escape to undo. Qualifiers are stored once per column, timestamps as
//! small gaps. Writes rewrite the row's whole pair, so a packed row-family
//! has a size limit of its own, [`MAX_PACKED_LEN`].

use super::{CellPos, Place, RowBuf};
use crate::codec::{self, show_bytes};
use crate::error::{Error, Result};
use std::cmp::Reverse;
use std::collections::BTreeMap;

const VERSION: u8 = 1;
/// The largest packed row-family value, in bytes: one row's cells of one
/// PACKED family together. (It exceeds the largest single cell value.)
pub const MAX_PACKED_LEN: usize = 128 * 1024 * 1024;

/// A row's cells of one family, decoded and owned: what writes edit.
/// Keys sort by qualifier, then newest first.
pub(crate) type Cells = BTreeMap<(Vec<u8>, Reverse<i64>), Vec<u8>>;

/// One cell of a column being encoded: its timestamp and value.
type Versioned<'a> = (i64, &'a [u8]);

fn corrupt(what: &str, key: &[u8]) -> Error {
    Error::Corrupt {
        reason: format!("packed row {}: {what}", show_bytes(key)),
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a varint at `*at`, advancing it.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        n |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

/// Reads `len` bytes at `*at` as a span, advancing it.
fn span(bytes: &[u8], at: &mut usize, len: u64) -> Option<(u32, u32)> {
    let start = *at;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    if end > bytes.len() {
        return None;
    }
    *at = end;
    Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?))
}

/// Encodes a row's cells; `None` when there are none (the pair goes).
/// `row` names the row in the error when the result is over the limit.
pub(crate) fn encode(row: &[u8], family: &str, cells: &Cells) -> Result<Option<Vec<u8>>> {
    let Some(newest) = cells.keys().map(|(_, Reverse(ts))| *ts).max() else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(16 + cells.values().map(|v| v.len() + 4).sum::<usize>());
    out.push(VERSION);
    out.extend_from_slice(&newest.to_be_bytes());
    let mut columns: Vec<(&[u8], Vec<Versioned>)> = Vec::new();
    for ((qualifier, Reverse(ts)), value) in cells {
        match columns.last_mut() {
            Some((q, cells)) if *q == qualifier.as_slice() => cells.push((*ts, value)),
            _ => columns.push((qualifier, vec![(*ts, value)])),
        }
    }
    put_varint(&mut out, columns.len() as u64);
    for (qualifier, cells) in columns {
        put_varint(&mut out, qualifier.len() as u64);
        out.extend_from_slice(qualifier);
        put_varint(&mut out, cells.len() as u64);
        let mut previous: Option<i64> = None;
        for (ts, value) in cells {
            let gap = previous.map_or(ts, |p| p - ts);
            put_varint(&mut out, gap as u64);
            put_varint(&mut out, value.len() as u64);
            out.extend_from_slice(value);
            previous = Some(ts);
        }
    }
    if out.len() > MAX_PACKED_LEN {
        return Err(Error::InvalidMutation {
            reason: format!(
                "row {} of PACKED family {family:?} would hold {} bytes, over the {} MiB a packed \
                 row-family may hold; delete old cells of the row, tighten the family's GC \
                 policy, or store the family as CELLS",
                show_bytes(row),
                out.len(),
                MAX_PACKED_LEN / (1024 * 1024)
            ),
        });
    }
    Ok(Some(out))
}

/// The newest timestamp of a packed value (its header).
pub(crate) fn newest(value: &[u8]) -> Option<i64> {
    let bytes = value.get(1..9)?;
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

/// The escaped row of a pair key: the whole key.
pub(crate) fn row_of(key: &[u8]) -> Result<&[u8]> {
    if codec::escaped_len(key)? != key.len() {
        return Err(corrupt("the key has bytes after the row", key));
    }
    Ok(key)
}

/// Decodes the one pair of a row (`buf.pairs[from..]`, one pair) into
/// cells that point into its value.
pub(crate) fn decode(family: u32, buf: &mut RowBuf, from: usize) -> Result<()> {
    for pair in from..buf.pairs.len() {
        let (key, value) = &buf.pairs[pair];
        let index = u32::try_from(pair).map_err(|_| corrupt("too many pairs", key))?;
        let bad = || corrupt("the value is not a packed row", key);
        if value.first() != Some(&VERSION) || value.len() < 9 {
            return Err(bad());
        }
        let mut at = 9;
        let columns = varint(value, &mut at).ok_or_else(bad)?;
        for _ in 0..columns {
            let len = varint(value, &mut at).ok_or_else(bad)?;
            let (qs, qe) = span(value, &mut at, len).ok_or_else(bad)?;
            let qualifier = Place::Value {
                pair: index,
                start: qs,
                end: qe,
            };
            let count = varint(value, &mut at).ok_or_else(bad)?;
            let mut ts: i64 = 0;
            for i in 0..count {
                let gap =
                    i64::try_from(varint(value, &mut at).ok_or_else(bad)?).map_err(|_| bad())?;
                ts = if i == 0 {
                    gap
                } else {
                    ts.checked_sub(gap).filter(|t| *t >= 0).ok_or_else(bad)?
                };
                let len = varint(value, &mut at).ok_or_else(bad)?;
                let (vs, ve) = span(value, &mut at, len).ok_or_else(bad)?;
                buf.cells.push(CellPos {
                    family,
                    timestamp: ts,
                    first: i == 0,
                    qualifier,
                    value: Place::Value {
                        pair: index,
                        start: vs,
                        end: ve,
                    },
                });
            }
        }
        if at != value.len() {
            return Err(corrupt("the value has bytes after its last cell", key));
        }
    }
    Ok(())
}

/// Decodes a packed value into owned cells.
pub(crate) fn cells_of(key: &[u8], value: &[u8]) -> Result<Cells> {
    let mut buf = RowBuf::default();
    buf.pairs.push((key.into(), value.into()));
    decode(0, &mut buf, 0)?;
    Ok(buf
        .view()
        .cells()
        .map(|c| {
            (
                (c.qualifier.to_vec(), Reverse(c.timestamp)),
                c.value.to_vec(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cells_round_trip(cells in prop::collection::btree_map(
            (prop::collection::vec(any::<u8>(), 0..6), (0i64..i64::MAX).prop_map(Reverse)),
            prop::collection::vec(any::<u8>(), 0..20),
            0..40,
        )) {
            let key = codec::escape(b"row\x00key");
            match encode(b"row", "f", &cells).unwrap() {
                None => prop_assert!(cells.is_empty()),
                Some(value) => {
                    prop_assert_eq!(newest(&value), cells.keys().map(|k| k.1.0).max());
                    prop_assert_eq!(cells_of(&key, &value).unwrap(), cells);
                }
            }
        }

        #[test]
        fn garbage_never_panics(value in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = cells_of(&codec::escape(b"r"), &value);
        }
    }
}
