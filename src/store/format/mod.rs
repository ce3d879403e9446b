//! The seam between a family's cells and fjall pairs.
//!
//! A family's *format* decides how its cells become key-value pairs in the
//! family's keyspace and back: key encoding and parsing, the key range of a
//! row or a column, the cells a row's pairs hold (in qualifier order, newest
//! first, which is what version walks and GC count on), and the timestamp
//! the compaction filter judges a pair by. Everything else in the store —
//! reads, mutations, read-modify-write, check-and-mutate, aggregate merges,
//! GC, `check` — goes through here; nothing outside this module parses a
//! pair's key. Three formats with one semantics: [`FamilyFormat::Cells`]
//! (one pair per cell, `cells.rs`), [`FamilyFormat::Packed`] (one pair per
//! row and family, `packed/`) and [`FamilyFormat::Auto`], the default
//! (cells written as CELLS, folded into PACKED blocks by merges,
//! `auto.rs`).
//!
//! Rows are always keyed by `escape(row key)` first, in every format, so a
//! row range is the same fjall key range whatever the format.

pub(crate) mod auto;
pub(crate) mod blocks;
pub(crate) mod cells;
mod numbers;
pub(crate) mod packed;
pub(crate) mod row;

pub use packed::MAX_PACKED_LEN;

pub use numbers::{NumberColumns, NumberRow, NumberRows};
pub(crate) use numbers::{keeps_every_cell, window};
pub(crate) use packed::{Selection, Shape};
pub use row::{CellRef, RowView};
pub(crate) use row::{Prune, RowBuf, garbage_verdicts, has_garbage, select, set_key};

use super::policy::GcPolicy;
use super::request::QualifierFilter;
use crate::codec;
use crate::error::Result;
use fjall::Slice;
use serde::{Deserialize, Serialize};

/// How a family's cells are laid out in its keyspace. A family created
/// without one is [`FamilyFormat::Auto`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FamilyFormat {
    /// One pair per cell: `escape(row) · escape(qualifier) · !timestamp`.
    Cells,
    /// One pair per (row, family) holding all its cells (`packed/`).
    Packed,
    /// Written as CELLS, folded into PACKED blocks by merges (`auto.rs`):
    /// what a family created without a format gets.
    #[default]
    Auto,
}

impl FamilyFormat {
    /// The format of a family the catalog stored before families had
    /// one: CELLS.
    pub(crate) fn stored_without_one() -> FamilyFormat {
        FamilyFormat::Cells
    }
}

impl std::fmt::Display for FamilyFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FamilyFormat::Cells => "CELLS",
            FamilyFormat::Packed => "PACKED",
            FamilyFormat::Auto => "AUTO",
        })
    }
}

impl FamilyFormat {
    /// The escaped row key a pair belongs to.
    pub(crate) fn row_of(self, key: &[u8]) -> Result<&[u8]> {
        match self {
            FamilyFormat::Cells | FamilyFormat::Auto => cells::row_of(key),
            FamilyFormat::Packed => packed::row_of(key),
        }
    }

    /// Whether merges fold the family's rows into blocks (PACKED, AUTO).
    pub(crate) fn has_blocks(self) -> bool {
        matches!(self, FamilyFormat::Packed | FamilyFormat::Auto)
    }

    /// Whether the family's own keyspace holds cells beside its blocks'
    /// rows (AUTO) rather than rows that shadow them.
    pub(crate) fn own_cells(self) -> bool {
        self == FamilyFormat::Auto
    }

    /// Whether each cell written is a pair of its own, whatever the row
    /// holds (and a column's versions are adjacent pairs, newest first:
    /// see [`FamilyFormat::column_of`]; AUTO: its own pairs, beside which
    /// a block may hold the row).
    pub(crate) fn pair_per_cell(self) -> bool {
        matches!(self, FamilyFormat::Cells | FamilyFormat::Auto)
    }

    /// The prefix a pair shares with the other versions of its column
    /// and no other pair, when a pair holds one cell (CELLS: a column's
    /// pairs are adjacent, newest first); `None` when it holds a row.
    pub(crate) fn column_of(self, key: &[u8]) -> Option<&[u8]> {
        match self {
            FamilyFormat::Cells => Some(cells::column_of(key)),
            FamilyFormat::Auto => auto::column_of(key),
            FamilyFormat::Packed => None,
        }
    }

    /// Decodes the pairs `buf.pairs[from..]` (one row of one family, in
    /// key order) into cells, appended to `buf.cells` in qualifier order,
    /// newest first. With `values`, sorted qualifiers, other columns'
    /// values may come empty (a format skips what it would decode).
    /// Columns `columns` turns away may be left out (a format skips those
    /// it can; the read's filter drops the rest), and so may the cells
    /// `prune` says the read's selection drops anyway.
    pub(crate) fn decode(
        self,
        family: u32,
        buf: &mut RowBuf,
        from: usize,
        values: Option<&[Vec<u8>]>,
        columns: &QualifierFilter,
        prune: Prune,
    ) -> Result<()> {
        match self {
            FamilyFormat::Cells => cells::decode(family, buf, from),
            FamilyFormat::Packed => packed::decode(family, buf, from, values, columns, prune),
            FamilyFormat::Auto => auto::decode(family, buf, from, values, columns, prune),
        }
    }

    /// Decodes every cell of the pairs `buf.pairs` (one row of one
    /// family): what a write, a format change or GC's walk reads.
    pub(crate) fn decode_all(self, buf: &mut RowBuf) -> Result<()> {
        self.decode(0, buf, 0, None, &QualifierFilter::All, Prune::NONE)
    }

    /// Decodes the columns `wanted` of a row's one pair straight into
    /// runs of numbers (see [`NumberRow`]), each column's cells those
    /// `selection` selects; returns whether the pair holds any selected
    /// cell, wanted or not, or `None` when the format cannot (the caller
    /// decodes cells and takes the numbers from them). `wanted`:
    /// (qualifier, the column's place in `out`), sorted. `shape`: what
    /// the read kept of the last row's header (PACKED), for the same
    /// `wanted` and `selection` each time.
    pub(crate) fn decode_numbers(
        self,
        key: &[u8],
        value: &[u8],
        wanted: &[(Vec<u8>, usize)],
        selection: &Selection<'_>,
        out: &mut NumberRow,
        shape: &mut Shape,
    ) -> Result<Option<bool>> {
        match self {
            FamilyFormat::Cells => Ok(None),
            // A block row (its cells all there: the caller checked the
            // row has no other pair).
            FamilyFormat::Auto if !value.is_empty() && auto::is_bare(key)? => {
                packed::decode_numbers(key, value, wanted, selection, out, shape)
            }
            FamilyFormat::Auto => Ok(None),
            FamilyFormat::Packed => {
                packed::decode_numbers(key, value, wanted, selection, out, shape)
            }
        }
    }

    /// The timestamp a compaction filter judges a pair by (the newest cell
    /// it holds); `None` keeps the pair.
    pub(crate) fn gc_timestamp(self, key: &[u8], value: &[u8]) -> Option<i64> {
        match self {
            FamilyFormat::Cells => cells::timestamp(key),
            FamilyFormat::Auto => auto::timestamp(key),
            FamilyFormat::Packed => packed::newest(value),
        }
    }

    /// Whether [`FamilyFormat::gc_timestamp`] needs the pair's value.
    pub(crate) fn gc_reads_value(self) -> bool {
        match self {
            FamilyFormat::Cells | FamilyFormat::Auto => false,
            FamilyFormat::Packed => true,
        }
    }

    /// Whether new cells of `row` must be merged with pairs the family
    /// holds for it (PACKED: its row-family pair exists, or a block holds
    /// the row) rather than written as [`FamilyFormat::fresh_pairs`]
    /// (never for CELLS and AUTO, whose cells are pairs of their own).
    pub(crate) fn must_merge(
        self,
        snapshot: &fjall::Snapshot,
        keyspace: &fjall::Keyspace,
        blocks: Option<&fjall::Keyspace>,
        escaped_row: &[u8],
        last_block: &blocks::LastBlock,
    ) -> Result<bool> {
        use fjall::Readable;
        match self {
            FamilyFormat::Cells | FamilyFormat::Auto => Ok(false),
            FamilyFormat::Packed => Ok(snapshot.get(keyspace, escaped_row)?.is_some()
                || match blocks {
                    Some(blocks) => last_block.get(snapshot, blocks, escaped_row)?.is_some(),
                    None => false,
                }),
        }
    }

    /// Whether the family holds no pair of any row from `first` to `last`
    /// (row keys, both included), in its keyspace or its blocks.
    pub(crate) fn holds_no_rows(
        self,
        snapshot: &fjall::Snapshot,
        keyspace: &fjall::Keyspace,
        blocks: Option<&fjall::Keyspace>,
        first: &[u8],
        last: &[u8],
    ) -> Result<bool> {
        use fjall::Readable;
        let start = codec::single_row_range(first).start;
        let end = codec::single_row_range(last).end;
        let mut pairs = match &end {
            Some(end) => snapshot.range(keyspace, start.as_slice()..end.as_slice()),
            None => snapshot.range(keyspace, start.as_slice()..),
        };
        if let Some(guard) = pairs.next() {
            guard.key()?;
            return Ok(false);
        }
        match blocks {
            Some(blocks) => Ok(!blocks::any_in(
                snapshot,
                blocks,
                &start,
                &codec::escape(last),
            )?),
            None => Ok(true),
        }
    }

    /// The pairs that write `cells` (sorted by qualifier, then newest
    /// first, no coordinate twice) into a row for which
    /// [`FamilyFormat::must_merge`] is false; `family` names the family
    /// in a size-limit error. `raw`: a PACKED row bound for a block, its
    /// values stored as they are (see [`FamilyFormat::compress`]).
    pub(crate) fn fresh_pairs(
        self,
        row: &[u8],
        escaped_row: &[u8],
        family: &str,
        cells: &[(&[u8], i64, &[u8])],
        raw: bool,
        out: &mut impl FnMut(Vec<u8>, Vec<u8>),
    ) -> Result<()> {
        match self {
            FamilyFormat::Cells | FamilyFormat::Auto => {
                for (qualifier, timestamp, value) in cells {
                    out(cells::key(row, qualifier, *timestamp), value.to_vec());
                }
            }
            FamilyFormat::Packed => {
                if let Some(value) = packed::encode_sorted(row, family, cells, raw)? {
                    out(escaped_row.to_vec(), value);
                }
            }
        }
        Ok(())
    }

    /// A pair written `raw` by [`FamilyFormat::fresh_pairs`] (values as
    /// they are, for a block) in its smallest form, to go in alone.
    pub(crate) fn compress(self, family: &str, key: &[u8], value: &[u8]) -> Result<Vec<u8>> {
        match self {
            FamilyFormat::Cells | FamilyFormat::Auto => Ok(value.to_vec()),
            FamilyFormat::Packed => packed::compress(key, family, value),
        }
    }

    /// Checks that a pair is well formed; `tombstones`: whether an empty
    /// value is one (a PACKED family with blocks).
    pub(crate) fn check_pair(self, key: &[u8], value: &[u8], tombstones: bool) -> Result<()> {
        match self {
            FamilyFormat::Cells => cells::check_key(key),
            FamilyFormat::Auto => auto::check_pair(key, value),
            FamilyFormat::Packed if tombstones && value.is_empty() => {
                packed::row_of(key).map(|_| ())
            }
            FamilyFormat::Packed => packed::cells_of(key, value).map(|_| ()),
        }
    }
}

/// A PACKED row's pair with the cells `gc` discards dropped: its value as
/// it was when nothing is garbage, encoded again otherwise, `None` when
/// nothing is left; and how many cells were dropped.
pub(crate) fn without_garbage(
    gc: &GcPolicy,
    now: i64,
    family: &str,
    key: &[u8],
    value: Slice,
) -> Result<(Option<Slice>, u64)> {
    if matches!(gc, GcPolicy::KeepAll) {
        return Ok((Some(value), 0));
    }
    let cells = packed::cells_of(key, &value)?;
    let versions = cells
        .keys()
        .map(|(q, std::cmp::Reverse(ts))| (q.as_slice(), *ts));
    let verdicts: Vec<bool> = garbage_verdicts(gc, now, versions).collect();
    let removed = verdicts.iter().filter(|g| **g).count() as u64;
    if removed == 0 {
        return Ok((Some(value), 0));
    }
    let kept: packed::Cells = cells
        .into_iter()
        .zip(verdicts)
        .filter_map(|(cell, garbage)| (!garbage).then_some(cell))
        .collect();
    let row = codec::unescape(key)?.0;
    let value = packed::encode(&row, family, &kept)?;
    Ok((value.map(Slice::from), removed))
}

/// One row's pairs in `format` (a PACKED pair, or an AUTO row's block row
/// and cells, in key order) as a PACKED row for a block, with the cells
/// `gc` discards dropped: `None` when nothing is left; and how many cells
/// were dropped.
pub(crate) fn folded_row(
    format: FamilyFormat,
    gc: &GcPolicy,
    now: i64,
    family: &str,
    mut pairs: Vec<(Slice, Slice)>,
    buf: &mut RowBuf,
) -> Result<(Option<(Slice, Slice)>, u64)> {
    let (key, value) = match format {
        FamilyFormat::Packed if pairs.len() == 1 => pairs.swap_remove(0),
        _ => match reencode(format, FamilyFormat::Packed, family, &pairs, buf)?.pop() {
            Some((key, value)) => (Slice::from(key), Slice::from(value)),
            None => return Ok((None, 0)),
        },
    };
    let (value, removed) = without_garbage(gc, now, family, &key, value)?;
    Ok((value.map(|v| (key, v)), removed))
}

/// The pairs that hold, in format `to`, the cells of one row of a family
/// held by `pairs` (one row's pairs in format `from`, in key order). Every
/// cell is kept, garbage included: GC judges them the same either way.
pub(crate) fn reencode(
    from: FamilyFormat,
    to: FamilyFormat,
    family: &str,
    pairs: &[(Slice, Slice)],
    buf: &mut RowBuf,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    buf.clear();
    let Some((first, _)) = pairs.first() else {
        return Ok(Vec::new());
    };
    let escaped = from.row_of(first)?.to_vec();
    buf.pairs.extend(pairs.iter().cloned());
    from.decode_all(buf)?;
    set_key(buf, &escaped)?;
    let view = buf.view();
    let row = view.key();
    Ok(match to {
        FamilyFormat::Cells | FamilyFormat::Auto => view
            .cells()
            .map(|c| (cells::key(row, c.qualifier, c.timestamp), c.value.to_vec()))
            .collect(),
        FamilyFormat::Packed => {
            // (A row's cells come decoded in qualifier order, newest
            // first, each once: as `encode_sorted` takes them.)
            let cells: Vec<(&[u8], i64, &[u8])> = view
                .cells()
                .map(|c| (c.qualifier, c.timestamp, c.value))
                .collect();
            packed::encode_sorted(row, family, &cells, false)?
                .map(|value| (codec::escape(row), value))
                .into_iter()
                .collect()
        }
    })
}
