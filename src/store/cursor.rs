//! One family's walk over its keyspaces for a read: where its cells lie
//! ([`FamilyScan`], [`Source`]) and the [`Cursor`] that gathers a row's
//! pairs from them, seeking past long column histories.

use super::format::FamilyFormat;
use super::format::blocks::{Pairs, TallRow};
use super::policy::GcPolicy;
use crate::codec::{self};
use crate::error::Result;
use fjall::{Keyspace, Slice, Snapshot};
use std::sync::Arc;

/// What a scan needs to know about one family.
#[derive(Clone)]
pub(crate) struct FamilyScan {
    pub name: Arc<str>,
    pub gc: GcPolicy,
    /// The keyspaces holding its cells: one, or two while its format is
    /// being changed (a row is in exactly one of them in any snapshot).
    pub sources: Vec<Source>,
}

/// One keyspace of a family's cells, its format, and its blocks if the
/// family has them.
#[derive(Clone)]
pub(crate) struct Source {
    pub format: FamilyFormat,
    pub keyspace: Keyspace,
    pub blocks: Option<Keyspace>,
}

impl Source {
    /// Its pairs from `start` to `end` (escaped keys, end excluded), its
    /// blocks' rows merged in.
    pub fn pairs(
        &self,
        snapshot: &Snapshot,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Pairs> {
        Pairs::open(
            snapshot,
            &self.keyspace,
            self.blocks.as_ref(),
            self.format.own_cells(),
            start,
            end,
            reverse,
        )
    }
}

/// Pairs past a column's newest N that a read keeping only those reads on
/// before it seeks past the rest of the column. A seek costs about as much
/// as reading a dozen pairs (2–2.5 µs against 165 ns here), so a short
/// history is read through and a long one costs one seek.
pub(super) const PAIRS_BEFORE_SEEK: usize = 8;

/// The pairs of a column, of which a read keeps the newest `n`, read
/// before it counts as long and is sought past: [`PAIRS_BEFORE_SEEK`]
/// more than it keeps, or none more once a column of the row proved long
/// (`long_seen`).
pub(super) fn long_after(n: usize, long_seen: bool) -> usize {
    match long_seen && n > 0 {
        true => n,
        false => n.saturating_add(PAIRS_BEFORE_SEEK),
    }
}

pub(super) struct Cursor {
    /// The family's place among the families read.
    pub(super) family: usize,
    pub(super) source: Source,
    pub(super) iter: Pairs,
    /// The current pair of plain pairs (with blocks, `iter` lends it).
    pub(super) head: Option<(Slice, Slice)>,
    /// Whether the cursor was ended before its pairs were (see
    /// [`Cursor::end`]).
    pub(super) ended: bool,
    /// The length of the head's escaped row, parsed once per pair
    /// (`usize::MAX`: its whole key).
    pub(super) head_row_len: usize,
}

impl Cursor {
    pub(super) fn advance(&mut self, reverse: bool) -> Result<()> {
        self.advance_in(reverse, &[])
    }

    /// Makes the first pair of a newly opened `iter` the head.
    pub(super) fn start(&mut self, reverse: bool) -> Result<()> {
        self.ended = false;
        if let Pairs::Plain(_) = self.iter {
            self.head = self.iter.next(reverse)?;
        }
        self.find_row(&[])
    }

    /// [`Cursor::advance`] while reading the escaped row `row`: a CELLS
    /// pair of the same row starts with it (escaped rows are prefix free),
    /// so its row is found without delimiting the key again. (A PACKED
    /// row has one pair: a second one starting with the row is damage,
    /// which `row_of` names.)
    pub(super) fn advance_in(&mut self, reverse: bool, row: &[u8]) -> Result<()> {
        match &mut self.iter {
            Pairs::Plain(_) => self.head = self.iter.next(reverse)?,
            Pairs::Merged(merged) => merged.advance()?,
        }
        self.find_row(row)
    }

    pub(super) fn find_row(&mut self, row: &[u8]) -> Result<()> {
        let format = self.source.format;
        // A PACKED pair's key, and a block row's, is its escaped row,
        // whole (checked where a row read is given, by `unescape_into`):
        // not read here, so that a block row's key is made only for a
        // reader that wants it.
        let whole = match &self.iter {
            Pairs::Merged(merged) => merged.on_block_row(),
            Pairs::Plain(_) => false,
        };
        if format == FamilyFormat::Packed || whole {
            self.head_row_len = usize::MAX;
            return Ok(());
        }
        if let Some(key) = self.head_key() {
            // A CELLS or AUTO pair: its row is the start of its key.
            self.head_row_len = match !row.is_empty() && key.starts_with(row) {
                true => row.len(),
                false => format.row_of(key)?.len(),
            };
        }
        Ok(())
    }

    /// The current pair, borrowed.
    #[inline]
    pub(super) fn head_pair(&self) -> Option<(&[u8], &[u8])> {
        match &self.iter {
            _ if self.ended => None,
            Pairs::Plain(_) => self.head.as_ref().map(|(k, v)| (&k[..], &v[..])),
            Pairs::Merged(merged) => merged.peek(),
        }
    }

    /// The current pair's key, borrowed.
    #[inline]
    pub(super) fn head_key(&self) -> Option<&[u8]> {
        match &self.iter {
            _ if self.ended => None,
            Pairs::Plain(_) => self.head.as_ref().map(|(k, _)| &k[..]),
            Pairs::Merged(merged) => merged.peek_key(),
        }
    }

    /// Read forwards: the current row, when it comes from a column-wise
    /// block, and how many rows from it on the block gives before any
    /// other pair (see [`format::blocks::Merged::tall_run`]).
    pub(super) fn tall_run(&self) -> Option<(TallRow<'_>, usize)> {
        match &self.iter {
            Pairs::Merged(merged) if !self.ended => merged.tall_run(),
            _ => None,
        }
    }

    /// Moves past `n` rows of a run [`Cursor::tall_run`] gave.
    pub(super) fn skip_tall(&mut self, n: usize) -> Result<()> {
        if let Pairs::Merged(merged) = &mut self.iter {
            merged.skip_tall(n)?;
        }
        self.find_row(&[])
    }

    /// The current row, when it comes from a column-wise block.
    #[inline]
    pub(super) fn head_tall(&self) -> Option<TallRow<'_>> {
        match &self.iter {
            _ if self.ended => None,
            Pairs::Plain(_) => None,
            Pairs::Merged(merged) => merged.peek_tall(),
        }
    }

    /// Whether the current pair is all of its row: always in PACKED; in
    /// AUTO, a block row no own cell of the row joins.
    #[inline]
    pub(super) fn lone_row(&self) -> bool {
        match (self.source.format, &self.iter) {
            (FamilyFormat::Packed, _) => true,
            (FamilyFormat::Auto, Pairs::Merged(merged)) => !self.ended && merged.lone_block_row(),
            _ => false,
        }
    }

    /// The current pair, owned; the cursor stays on it.
    pub(super) fn take_head(&mut self) -> Option<(Slice, Slice)> {
        match &self.iter {
            _ if self.ended => None,
            Pairs::Plain(_) => self.head.take(),
            Pairs::Merged(merged) => merged.current(),
        }
    }

    pub(super) fn head_row(&self) -> Option<&[u8]> {
        self.head_key()
            .map(|key| &key[..self.head_row_len.min(key.len())])
    }

    /// Ends the cursor here.
    pub(super) fn end(&mut self) {
        self.head = None;
        self.ended = true;
    }

    /// Reads on from the keys `start..end` of `snapshot` (an empty
    /// range ends the cursor).
    pub(super) fn seek(
        &mut self,
        snapshot: &Snapshot,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
    ) -> Result<()> {
        if end.is_some_and(|end| end <= start) {
            self.end();
            return Ok(());
        }
        self.iter = self.source.pairs(snapshot, start, end, reverse)?;
        self.start(reverse)
    }
}

/// Moves a forward `cursor`'s pairs of the escaped row `row` into `pairs`.
/// With `newest`, the only cells of a column the read keeps (of a format
/// whose pairs hold a cell each), past a column's newest pairs the cursor
/// reads on [`PAIRS_BEFORE_SEEK`] pairs, then seeks past the column to
/// `end`, the end of its keys: a short history is read through, a long
/// one costs one seek. Once a column of the row proved long (or
/// `long_seen` says one did), the next long ones are sought past as soon
/// as their newest are read: a row's columns mostly hold histories alike
/// (a time bucket's measures hold a cell per event each).
#[allow(
    clippy::too_many_arguments,
    reason = "the per-row state of a hot decode, passed as it is rather than packed per call"
)]
pub(super) fn take_newest(
    cursor: &mut Cursor,
    snapshot: &Snapshot,
    row: &[u8],
    newest: Option<usize>,
    end: Option<&[u8]>,
    pairs: &mut Vec<(Slice, Slice)>,
    scanned: &mut u64,
    mut long_seen: bool,
) -> Result<()> {
    // Where the pairs of the column being read start in `pairs`.
    let mut column_from = pairs.len();
    loop {
        if cursor.head_row() != Some(row) {
            return Ok(());
        }
        let past = match newest {
            Some(n) if pairs.len() - column_from >= long_after(n, long_seen) => {
                let key = cursor.head_key().unwrap_or_default();
                let column = cursor.source.format.column_of(key).unwrap_or_default();
                column_from = column_start(cursor.source.format, pairs, column_from, column);
                let read = pairs.len() - column_from;
                (read >= long_after(n, long_seen))
                    .then(|| (column_from + n, codec::prefix_successor(column)))
            }
            _ => None,
        };
        match past {
            None => {
                pairs.extend(cursor.take_head());
                *scanned += 1;
                cursor.advance_in(false, row)?;
            }
            Some((keep, past)) => {
                long_seen = true;
                pairs.truncate(keep);
                match past {
                    Some(past) => cursor.seek(snapshot, &past, end, false)?,
                    None => cursor.end(),
                }
                column_from = pairs.len();
            }
        }
    }
}

/// Where the pairs of `column` at the end of `pairs[from..]` start (pairs
/// come in key order, so a column's are adjacent). Called only once a
/// column could be long, so that a read of short columns compares a pair
/// in every few, not each one.
pub(super) fn column_start(
    format: FamilyFormat,
    pairs: &[(Slice, Slice)],
    from: usize,
    column: &[u8],
) -> usize {
    let of_column = pairs[from..]
        .iter()
        .rev()
        .take_while(|(key, _)| format.column_of(key) == Some(column))
        .count();
    pairs.len() - of_column
}
