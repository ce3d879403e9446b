//! [`KeyPieces`]: the key space cut at every range boundary a table's
//! key activity records show. A table's ranges change from minute to
//! minute (cut and joined as activity moves), so to add up activity
//! over time the key axis is cut at all of their boundaries, and a
//! range's counts are spread evenly over the pieces it covers.

use std::ops::Range;

use crate::codec::show_bytes;
use crate::store::ActivityRecord;

/// The pieces between every range boundary in a set of records.
#[derive(Debug, Clone)]
pub struct KeyPieces {
    /// Each piece's start, ascending; the first is the empty key.
    starts: Vec<Vec<u8>>,
}

impl KeyPieces {
    /// The pieces of `records`' boundaries.
    pub fn of(records: &[ActivityRecord]) -> KeyPieces {
        let mut starts: Vec<&[u8]> = vec![&[]];
        for r in records {
            starts.push(&r.start);
            starts.extend(r.end.as_deref());
        }
        starts.sort_unstable();
        starts.dedup();
        KeyPieces {
            starts: starts.into_iter().map(<[u8]>::to_vec).collect(),
        }
    }

    /// How many pieces.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Piece `i`'s start (`i` up to [`KeyPieces::len`]); `None` past the
    /// last piece (the end of the table).
    pub fn bound(&self, i: usize) -> Option<&[u8]> {
        self.starts.get(i).map(Vec::as_slice)
    }

    /// The pieces record `r` covers: at least one (a damaged record
    /// ending before its start covers its first piece).
    pub fn covered(&self, r: &ActivityRecord) -> Range<usize> {
        let from = self.starts.partition_point(|b| b[..] < r.start[..]);
        let to = match &r.end {
            Some(e) => self.starts.partition_point(|b| b[..] < e[..]),
            None => self.len(),
        };
        from..to.max(from + 1).min(self.len())
    }
}

/// A key's label: its text up to and with its first `delimiter` (the
/// guides' row key prefix), or its first 16 characters; `(start)` for
/// the empty key.
pub fn prefix_label(key: &[u8], delimiter: char) -> String {
    let text = show_bytes(key);
    match text.find(delimiter) {
        Some(p) => text[..p + delimiter.len_utf8()].to_string(),
        None if text.is_empty() => "(start)".to_string(),
        None => text.chars().take(16).collect(),
    }
}
