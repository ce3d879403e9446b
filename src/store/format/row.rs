//! A family's row as a read holds it, whatever the format: the buffer
//! ([`RowBuf`]) a format decodes a row into, the cells lent from it
//! ([`RowView`], [`CellRef`]), and the choice of which of them a read keeps
//! (GC policy, filter, [`Prune`]). A leaf below the formats.

use super::packed::Names;
use crate::codec;
use crate::error::{Error, Result};
use crate::store::policy::GcPolicy;
use crate::store::request::{QualifierFilter, ReadFilter, TimeRange};
use fjall::Slice;

/// Where a byte string of a cell lies: in one of the row's pairs (its key
/// or its value), in the row's scratch buffer (unescaped bytes), or in
/// the cell itself (a number a packed value stores as bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Key {
        pair: u32,
        start: u32,
        end: u32,
    },
    Value {
        pair: u32,
        start: u32,
        end: u32,
    },
    Scratch {
        start: u32,
        end: u32,
    },
    /// A qualifier built from a PACKED row's numbered qualifiers, in the
    /// buffer's [`Names`].
    Name {
        start: u32,
        end: u32,
    },
    /// Decoded 8 bytes, held in the cell itself.
    Inline([u8; 8]),
}

/// One cell of a row as decoded from its pairs, without copying bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CellPos {
    /// The family's place among the families read.
    pub family: u32,
    pub timestamp: i64,
    /// Whether the cell is the first of its column (qualifier) in the
    /// row's family: what version counts restart at, known when the pairs
    /// are decoded so that no qualifier is compared twice.
    pub first: bool,
    pub(crate) qualifier: Place,
    pub(crate) value: Place,
}

/// A cell, borrowed from the pairs it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellRef<'a> {
    /// The family's place among the families read.
    pub family: usize,
    /// The qualifier.
    pub qualifier: &'a [u8],
    /// Microseconds since the Unix epoch.
    pub timestamp: i64,
    /// The value.
    pub value: &'a [u8],
    /// Whether this is the newest cell of its column among those read.
    pub first: bool,
}

/// The buffers one row is decoded into; reused from row to row, so a scan
/// allocates nothing per cell.
#[derive(Default)]
pub(crate) struct RowBuf {
    pub pairs: Vec<(Slice, Slice)>,
    pub cells: Vec<CellPos>,
    pub scratch: Vec<u8>,
    pub key: Vec<u8>,
    /// Qualifiers built from numbered qualifiers, kept from row to row:
    /// the rows of a table mostly share them.
    pub names: Names,
}

thread_local! {
    /// Row buffers that reads on this thread gave back, for the next ones.
    static SPARE_BUFS: std::cell::RefCell<Vec<RowBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Row buffers a thread keeps for reads to come, at most.
const SPARE_BUFS_KEPT: usize = 4;
/// A buffer holding more than this many bytes of room is not kept.
const SPARE_BUF_BYTES: usize = 1 << 20;

impl RowBuf {
    /// A buffer a finished read on this thread gave back
    /// ([`RowBuf::give_back`]), or a new one. A short read (a series'
    /// latest value) allocates its buffers again, and builds a bucket's
    /// numbered qualifiers again, unless it finds them here.
    pub fn reused() -> RowBuf {
        SPARE_BUFS
            .try_with(|spare| spare.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Keeps this buffer, emptied, for a read to come on this thread,
    /// unless it grew large or enough are kept.
    pub fn give_back(mut self) {
        self.clear();
        let room = self.pairs.capacity() * std::mem::size_of::<(Slice, Slice)>()
            + self.cells.capacity() * std::mem::size_of::<CellPos>()
            + self.scratch.capacity()
            + self.key.capacity();
        if room > SPARE_BUF_BYTES {
            return;
        }
        let _ = SPARE_BUFS.try_with(|spare| {
            if let Ok(mut spare) = spare.try_borrow_mut()
                && spare.len() < SPARE_BUFS_KEPT
            {
                spare.push(self);
            }
        });
    }

    pub fn clear(&mut self) {
        self.pairs.clear();
        self.cells.clear();
        self.scratch.clear();
        self.key.clear();
        // Between rows, where no cell points into them.
        self.names.trim();
    }

    /// Appends a cell whose bytes are copied in (for a backend that does
    /// not read fjall pairs). Cells of a family come in qualifier order,
    /// newest first; `first` marks the newest of its column.
    #[cfg_attr(
        not(feature = "bigtable"),
        allow(dead_code, reason = "used by the Bigtable backend")
    )]
    pub fn push_copied(
        &mut self,
        family: u32,
        qualifier: &[u8],
        timestamp: i64,
        value: &[u8],
        first: bool,
    ) -> Result<()> {
        let mut place = |bytes: &[u8]| -> Result<Place> {
            let start = self.scratch.len();
            let end = start + bytes.len();
            let too_large = || {
                Error::InvalidArgument(format!(
                    "a row read holds more than {} bytes; read fewer columns or versions",
                    u32::MAX
                ))
            };
            let end32 = u32::try_from(end).map_err(|_| too_large())?;
            self.scratch.extend_from_slice(bytes);
            Ok(Place::Scratch {
                start: start as u32,
                end: end32,
            })
        };
        let qualifier = place(qualifier)?;
        let value = place(value)?;
        self.cells.push(CellPos {
            family,
            timestamp,
            first,
            qualifier,
            value,
        });
        Ok(())
    }

    #[inline]
    fn bytes<'a>(&'a self, place: &'a Place) -> &'a [u8] {
        let span = |s: u32, e: u32| s as usize..e as usize;
        match place {
            Place::Key { pair, start, end } => &self.pairs[*pair as usize].0[span(*start, *end)],
            Place::Value { pair, start, end } => &self.pairs[*pair as usize].1[span(*start, *end)],
            Place::Scratch { start, end } => &self.scratch[span(*start, *end)],
            Place::Name { start, end } => self.names.bytes(span(*start, *end)),
            Place::Inline(bytes) => bytes,
        }
    }

    /// The row's selected cells.
    pub fn view(&self) -> RowView<'_> {
        RowView { buf: self }
    }
}

/// Merges two runs of one family's cells, `buf.cells[start..mid]` and
/// `buf.cells[mid..]`, each in qualifier order, newest first, into one
/// such run; where both hold a cell of one column and timestamp, the
/// second run's is kept. Marks each column's newest cell again.
pub(crate) fn merge_sources(buf: &mut RowBuf, start: usize, mid: usize) {
    use std::cmp::Ordering;
    let newer = buf.cells.split_off(mid);
    let older = buf.cells.split_off(start);
    let mut merged: Vec<CellPos> = Vec::with_capacity(older.len() + newer.len());
    let (mut i, mut j) = (0, 0);
    while i < older.len() || j < newer.len() {
        let take_newer = match (older.get(i), newer.get(j)) {
            (Some(a), Some(b)) => {
                let order = buf
                    .bytes(&a.qualifier)
                    .cmp(buf.bytes(&b.qualifier))
                    .then(b.timestamp.cmp(&a.timestamp));
                match order {
                    Ordering::Less => false,
                    Ordering::Greater => true,
                    Ordering::Equal => {
                        // The same cell twice: the newer run's wins.
                        i += 1;
                        true
                    }
                }
            }
            (None, _) => true,
            (_, None) => false,
        };
        let mut cell = if take_newer {
            j += 1;
            newer[j - 1]
        } else {
            i += 1;
            older[i - 1]
        };
        cell.first = merged
            .last()
            .is_none_or(|last| buf.bytes(&last.qualifier) != buf.bytes(&cell.qualifier));
        merged.push(cell);
    }
    buf.cells.extend(merged);
}

/// One row as read: its key and its cells, by family (in the order the
/// families were read), qualifier, then newest first; borrowed from the
/// scan's buffers.
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    buf: &'a RowBuf,
}

impl<'a> RowView<'a> {
    /// The row key.
    pub fn key(&self) -> &'a [u8] {
        &self.buf.key
    }

    /// How many cells.
    pub fn len(&self) -> usize {
        self.buf.cells.len()
    }

    /// Whether the row has no cells (never, for rows a scan returns).
    pub fn is_empty(&self) -> bool {
        self.buf.cells.is_empty()
    }

    /// Cell `i`'s timestamp (`i` below [`RowView::len`]).
    pub fn timestamp(&self, i: usize) -> i64 {
        self.buf.cells[i].timestamp
    }

    /// Whether cell `i` is the newest of its column among those read.
    pub fn first(&self, i: usize) -> bool {
        self.buf.cells[i].first
    }

    /// Cell `i`'s family: its place among the families read.
    pub fn family(&self, i: usize) -> usize {
        self.buf.cells[i].family as usize
    }

    /// Cell `i`'s qualifier.
    pub fn qualifier(&self, i: usize) -> &'a [u8] {
        let buf = self.buf;
        buf.bytes(&buf.cells[i].qualifier)
    }

    /// Cell `i`'s value.
    pub fn value(&self, i: usize) -> &'a [u8] {
        let buf = self.buf;
        buf.bytes(&buf.cells[i].value)
    }

    /// The row as an owned [`Row`](crate::store::Row), family `i` (of
    /// those read) named `name(i)`.
    pub fn to_row(&self, name: impl Fn(usize) -> std::sync::Arc<str>) -> crate::store::Row {
        let cells = self
            .cells()
            .map(|c| crate::store::Cell {
                family: name(c.family),
                qualifier: c.qualifier.to_vec(),
                timestamp: c.timestamp,
                value: c.value.to_vec(),
            })
            .collect();
        crate::store::Row {
            key: self.key().to_vec(),
            cells,
        }
    }

    /// The cells.
    pub fn cells(&self) -> impl Iterator<Item = CellRef<'a>> + 'a {
        let buf = self.buf;
        buf.cells.iter().map(move |c| CellRef {
            family: c.family as usize,
            qualifier: buf.bytes(&c.qualifier),
            timestamp: c.timestamp,
            value: buf.bytes(&c.value),
            first: c.first,
        })
    }
}

/// Which cells of a column a decode may leave out because [`select`]
/// would drop them: all but the `newest` N, and those outside `time`. A
/// column's cells come newest first, so the first one older than the
/// range ends the column and the ones newer than it are stepped over.
/// Built by [`Prune::of`], which knows when that is safe.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Prune {
    pub newest: Option<usize>,
    pub time: TimeRange,
}

impl Prune {
    /// Every cell decoded.
    pub const NONE: Prune = Prune {
        newest: None,
        time: TimeRange::ALL,
    };

    /// The newest N cells of a column that hold every cell a read under
    /// `filter` keeps, if it keeps only those: with no upper time bound.
    pub fn newest(filter: &ReadFilter) -> Option<usize> {
        filter
            .cells_per_column
            .filter(|_| filter.time_range.end.is_none())
    }

    /// What a read under `filter` of a family under `gc` may leave out.
    /// GC drops a suffix of a column (its oldest cells), counting
    /// versions from the newest: cells older than the time range are
    /// past every cell kept, but cells newer than it are counted by a
    /// policy that keeps N versions, so those are left out only under
    /// one that does not count.
    pub fn of(gc: &GcPolicy, filter: &ReadFilter) -> Prune {
        let range = filter.time_range;
        Prune {
            newest: Prune::newest(filter),
            time: TimeRange {
                start: range.start,
                end: range.end.filter(|_| !gc.counts_versions()),
            },
        }
    }
}

/// Drops from `buf.cells[from..]` (one family of one row, in qualifier
/// order, newest first) the cells GC discards and those `filter` does not
/// select. GC counts versions before the filter: a cell past its policy is
/// never seen, whatever the filter.
pub(crate) fn select(gc: &GcPolicy, filter: &ReadFilter, now: i64, buf: &mut RowBuf, from: usize) {
    // Nothing to drop: a family that keeps everything, read whole (or
    // every column of it the qualifier filter selects, as when a series
    // reads its measures and the row holds nothing else).
    if matches!(gc, GcPolicy::KeepAll)
        && filter.time_range == TimeRange::ALL
        && filter.cells_per_column.is_none()
    {
        let every_column = match &filter.qualifiers {
            QualifierFilter::All => true,
            q => (from..buf.cells.len())
                .filter(|&i| i == from || buf.cells[i].first)
                .all(|i| q.matches(buf.bytes(&buf.cells[i].qualifier))),
        };
        if every_column {
            return;
        }
    }
    let mut kept = from;
    let (mut index, mut taken, mut wanted) = (0usize, 0usize, false);
    for i in from..buf.cells.len() {
        let mut cell = buf.cells[i];
        if cell.first || i == from {
            wanted = match &filter.qualifiers {
                QualifierFilter::All => true,
                q => q.matches(buf.bytes(&cell.qualifier)),
            };
            index = 0;
            taken = 0;
        }
        let garbage = gc.is_garbage(index, cell.timestamp, now);
        index += 1;
        if !wanted
            || garbage
            || !filter.time_range.contains(cell.timestamp)
            || filter.cells_per_column.is_some_and(|n| taken >= n)
        {
            continue;
        }
        // The first cell kept of a column is its first from now on.
        cell.first = taken == 0;
        taken += 1;
        buf.cells[kept] = cell;
        kept += 1;
    }
    buf.cells.truncate(kept);
}

/// Per cell of a row of one family, given as (qualifier, timestamp) in
/// qualifier order, newest first: whether `gc` discards it. GC's walks
/// use it; `select` makes the same count fused with the read filter.
pub(crate) fn garbage_verdicts<'a>(
    gc: &'a GcPolicy,
    now: i64,
    cells: impl IntoIterator<Item = (&'a [u8], i64)> + 'a,
) -> impl Iterator<Item = bool> + 'a {
    let mut column: Option<&[u8]> = None;
    let mut position = 0;
    cells.into_iter().map(move |(qualifier, timestamp)| {
        if column != Some(qualifier) {
            column = Some(qualifier);
            position = 0;
        }
        position += 1;
        gc.is_garbage(position - 1, timestamp, now)
    })
}

/// Whether any cell of `buf.cells[from..]` is garbage under `gc`.
pub(crate) fn has_garbage(gc: &GcPolicy, now: i64, buf: &RowBuf, from: usize) -> bool {
    let versions = buf
        .view()
        .cells()
        .skip(from)
        .map(|c| (c.qualifier, c.timestamp));
    garbage_verdicts(gc, now, versions).any(|garbage| garbage)
}

/// Unescapes an escaped row key into `buf.key`.
pub(crate) fn set_key(buf: &mut RowBuf, escaped_row: &[u8]) -> Result<()> {
    buf.key.clear();
    codec::unescape_into(escaped_row, &mut buf.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read's buffer goes back to its thread emptied, with its room, and
    /// the next read takes it; one that grew large is let go.
    #[test]
    fn row_buffers_are_kept_for_the_next_read_on_the_thread() {
        std::thread::spawn(|| {
            let mut buf = RowBuf::reused();
            buf.scratch.extend_from_slice(b"left over");
            buf.key.extend_from_slice(b"row");
            let room = buf.scratch.capacity();
            buf.give_back();
            let again = RowBuf::reused();
            assert!(again.scratch.is_empty() && again.key.is_empty());
            assert_eq!(again.scratch.capacity(), room, "the same buffer");
            assert_eq!(RowBuf::reused().scratch.capacity(), 0, "only one was kept");
            let mut large = again;
            large.scratch.reserve(SPARE_BUF_BYTES + 1);
            large.give_back();
            assert_eq!(
                RowBuf::reused().scratch.capacity(),
                0,
                "a large one is not kept"
            );
            for _ in 0..2 * SPARE_BUFS_KEPT {
                let mut b = RowBuf::default();
                b.scratch.reserve(8);
                b.give_back();
            }
            let kept = std::iter::from_fn(|| Some(RowBuf::reused()))
                .take(2 * SPARE_BUFS_KEPT)
                .filter(|b| b.scratch.capacity() > 0)
                .count();
            assert_eq!(kept, SPARE_BUFS_KEPT);
        })
        .join()
        .unwrap();
    }
}
