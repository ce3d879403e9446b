//! Version 1 of the packed encoding, as stores written before version 2
//! hold it; read, never written (a row is rewritten in version 2 on its
//! next write, or all at once by `ALTER ... SET FORMAT`).
//!
//! ```text
//! value = 0x01, newest timestamp (8 bytes BE), varint column count
//!         per column, qualifiers ascending:
//!           varint qualifier length, qualifier bytes
//!           varint cell count
//!           per cell, newest first:
//!             varint timestamp gap (first cell: the timestamp itself;
//!               then the previous cell's timestamp minus this one's)
//!             varint value length, value bytes
//! ```

use super::runs::varint;
use crate::store::format::row::{CellPos, Place};

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

/// Decodes a version 1 value (pair `index` of the row) into `cells`;
/// `None` when it is malformed.
pub(super) fn decode(
    family: u32,
    index: u32,
    value: &[u8],
    cells: &mut Vec<CellPos>,
) -> Option<()> {
    let mut at = 9;
    let columns = varint(value, &mut at)?;
    for _ in 0..columns {
        let len = varint(value, &mut at)?;
        let (qs, qe) = span(value, &mut at, len)?;
        let qualifier = Place::Value {
            pair: index,
            start: qs,
            end: qe,
        };
        let count = varint(value, &mut at)?;
        let mut ts: i64 = 0;
        for i in 0..count {
            let gap = i64::try_from(varint(value, &mut at)?).ok()?;
            ts = if i == 0 {
                gap
            } else {
                ts.checked_sub(gap).filter(|t| *t >= 0)?
            };
            let len = varint(value, &mut at)?;
            let (vs, ve) = span(value, &mut at, len)?;
            cells.push(CellPos {
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
    (at == value.len()).then_some(())
}

#[cfg(test)]
mod tests {
    use super::super::runs::put_varint;
    use super::super::{Cells, any_cells, cells_of};
    use crate::codec;
    use proptest::prelude::*;
    use std::cmp::Reverse;

    /// One column being encoded: its qualifier and (timestamp, value)s.
    type Column<'a> = (&'a [u8], Vec<(i64, &'a [u8])>);

    /// The version 1 encoder, as it was: what stores hold.
    fn encode(cells: &Cells) -> Vec<u8> {
        let newest = cells.keys().map(|(_, Reverse(ts))| *ts).max().unwrap_or(0);
        let mut out = vec![1];
        out.extend_from_slice(&newest.to_be_bytes());
        let mut columns: Vec<Column> = Vec::new();
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
                put_varint(&mut out, previous.map_or(ts, |p| p - ts) as u64);
                put_varint(&mut out, value.len() as u64);
                out.extend_from_slice(value);
                previous = Some(ts);
            }
        }
        out
    }

    proptest! {
        #[test]
        fn version_1_values_still_read(cells in any_cells(1..40)) {
            let value = encode(&cells);
            prop_assert_eq!(cells_of(&codec::escape(b"r"), &value).unwrap(), cells);
        }
    }
}
