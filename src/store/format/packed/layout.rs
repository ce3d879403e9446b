//! The packed value's layout: its version byte and header, the run of
//! each column's newest timestamp, and the limits on its size. A leaf the
//! encoder (`mod.rs`, `tall.rs`) and the decoders share.

use super::runs::Run;
use crate::codec::show_bytes;
use crate::error::Error;
use std::cmp::Reverse;
use std::collections::BTreeMap;

/// The version written.
pub(super) const VERSION: u8 = 4;

/// Whether a value's first byte is a version read as columns (2 to 4).
pub(super) fn columnar(version: Option<&u8>) -> bool {
    matches!(version, Some(2..=4))
}

/// Each column's newest timestamp: stored as itself (versions 2 and 3)
/// or as its age from the row's newest (version 4: a tall row's columns,
/// all of one time, take a run header of zeros, not the time's 8 bytes).
#[derive(Clone, Copy)]
pub(super) struct Firsts<'a> {
    run: Run<'a>,
    /// The row's newest timestamp, when the run holds ages.
    newest: Option<i64>,
}

impl<'a> Firsts<'a> {
    /// Reads the run of `columns` columns at `*at` of `value` (whose
    /// version and newest timestamp say how it is stored).
    pub fn read(value: &'a [u8], at: &mut usize, columns: usize) -> Option<Firsts<'a>> {
        let run = Run::read(value, at, columns)?;
        let newest = match value.first() {
            Some(2 | 3) => None,
            _ => Some(newest(value)?),
        };
        Some(Firsts { run, newest })
    }

    /// Column `column`'s newest timestamp; `None` when it is malformed.
    #[inline]
    pub fn get(&self, column: usize) -> Option<i64> {
        let stored = self.run.get(column);
        match self.newest {
            None => Some(stored),
            Some(newest) => newest.checked_sub(stored).filter(|_| stored >= 0),
        }
    }
}

/// How much a packed row-family may hold: the sum over its cells of
/// qualifier and value lengths plus [`CELL_OVERHEAD`] bytes a cell. Its
/// encoded value is never larger than that plus a header.
pub const MAX_PACKED_LEN: usize = 128 * 1024 * 1024;

/// What each cell counts toward [`MAX_PACKED_LEN`] besides its qualifier
/// and value: at least what encoding it can take (its share of the runs,
/// at most 8 bytes a number in each, and of the segment headers).
pub(super) const CELL_OVERHEAD: usize = 48;

/// The most cells a packed value can hold within the limit.
pub(super) const MAX_CELLS: usize = MAX_PACKED_LEN / CELL_OVERHEAD;

/// A row's cells of one family, decoded and owned: what writes edit.
/// Keys sort by qualifier, then newest first.
pub(crate) type Cells = BTreeMap<(Vec<u8>, Reverse<i64>), Vec<u8>>;

pub(super) fn corrupt(what: &str, key: &[u8]) -> Error {
    Error::Corrupt {
        reason: format!("packed row {}: {what}", show_bytes(key)),
    }
}

/// The newest timestamp of a packed value (its header).
pub(crate) fn newest(value: &[u8]) -> Option<i64> {
    let bytes = value.get(1..9)?;
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}
