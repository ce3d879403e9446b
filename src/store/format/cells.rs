//! CELLS: one pair per cell.
//!
//! ```text
//! key   = escape(row key) · escape(qualifier) · (u64::MAX - timestamp) big-endian
//! value = the cell's value
//! ```
//!
//! so a row's pairs sort by qualifier, then newest first (docs/format.md).

use crate::codec::{self, CellKeyParts, EncodedRange};
use crate::error::{Error, Result};
use crate::store::format::row::{CellPos, Place, RowBuf};

/// The pair key of a cell.
pub(crate) fn key(row: &[u8], qualifier: &[u8], timestamp: i64) -> Vec<u8> {
    codec::encode_cell_key(row, qualifier, timestamp)
}

/// The pair keys of one column of one row.
pub(crate) fn column_range(row: &[u8], qualifier: &[u8]) -> EncodedRange {
    let mut prefix = codec::escape(row);
    codec::escape_into(&mut prefix, qualifier);
    EncodedRange {
        end: codec::prefix_successor(&prefix),
        start: prefix,
    }
}

/// The escaped row of a pair key.
pub(crate) fn row_of(key: &[u8]) -> Result<&[u8]> {
    Ok(&key[..codec::escaped_len(key)?])
}

/// The column a pair belongs to: its key up to the timestamp (the escaped
/// row and qualifier, prefix free), which every version of the column
/// shares and no other pair starts with.
pub(crate) fn column_of(key: &[u8]) -> &[u8] {
    &key[..key.len().saturating_sub(8)]
}

/// Checks a whole pair key: row, qualifier and timestamp.
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    CellKeyParts::split(key).map(|_| ())
}

/// The cell's timestamp, from its key.
pub(crate) fn timestamp(key: &[u8]) -> Option<i64> {
    let at = key.len().checked_sub(8)?;
    let ts = <[u8; 8]>::try_from(key.get(at..)?).ok()?;
    codec::decode_timestamp(ts).ok()
}

/// Decodes one row's pairs of one family: one cell per pair.
pub(crate) fn decode(family: u32, buf: &mut RowBuf, from: usize) -> Result<()> {
    // The previous pair's escaped qualifier (escaping is one to one, so
    // equal escaped means equal qualifiers).
    let mut previous: Option<(usize, usize, usize)> = None;
    // The row is delimited once: the pairs after the first share its
    // escaped row (checked by comparing bytes, cheaper than delimiting).
    let mut row: Option<(usize, usize)> = None;
    for pair in from..buf.pairs.len() {
        let (key, value) = &buf.pairs[pair];
        let parts = match row {
            Some((first, len)) if key.get(..len) == buf.pairs[first].0.get(..len) => {
                CellKeyParts::split_after(key, len)?
            }
            _ => {
                let parts = CellKeyParts::split(key)?;
                row = Some((pair, parts.escaped_row.len()));
                parts
            }
        };
        let span = (
            parts.escaped_row.len(),
            parts.escaped_row.len() + parts.escaped_qualifier.len(),
        );
        let first = previous.is_none_or(|(p, s, e)| buf.pairs[p].0[s..e] != key[span.0..span.1]);
        previous = Some((pair, span.0, span.1));
        let start = parts.escaped_row.len();
        let escaped = parts.escaped_qualifier;
        let index = u32::try_from(pair).map_err(|_| too_many(pair))?;
        let qualifier = match codec::plain_body(escaped) {
            // No byte needed escaping: the qualifier is in the key as is.
            Some(body) => Place::Key {
                pair: index,
                start: start as u32,
                end: (start + body.len()) as u32,
            },
            None => {
                let at = buf.scratch.len();
                codec::unescape_into(escaped, &mut buf.scratch)?;
                Place::Scratch {
                    start: at as u32,
                    end: buf.scratch.len() as u32,
                }
            }
        };
        let cell = CellPos {
            family,
            timestamp: parts.timestamp,
            first,
            qualifier,
            value: Place::Value {
                pair: index,
                start: 0,
                end: u32::try_from(value.len()).map_err(|_| too_many(value.len()))?,
            },
        };
        buf.cells.push(cell);
    }
    Ok(())
}

fn too_many(n: usize) -> Error {
    Error::Internal(format!(
        "a row read {n} pairs or bytes, more than a scan can address"
    ))
}
