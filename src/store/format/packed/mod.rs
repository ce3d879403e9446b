//! PACKED: one pair per (row, family) holding all of the row's cells of
//! the family, stored column-wise so that a scan decodes runs, not cells.
//!
//! ```text
//! key   = escape(row key)
//! value = 0x04                              format version
//!         newest timestamp, 8 bytes BE      what the compaction filter judges
//!         varint column count C, varint cell count N
//!         the qualifiers, ascending, listed or numbered (qualifiers.rs)
//!         run of C numbers: each column's cell count
//!         run of C numbers: how much older than the row's newest
//!           timestamp each column's newest is
//!         run of N - C numbers: the other cells' timestamp gaps, newest
//!           first within each column (the previous timestamp minus this one)
//!         run of N numbers: each cell's value length
//!         value segments, cells in order (values.rs)
//! ```
//!
//! A run (runs.rs) stores numbers as a base, a common step and bit-packed
//! multiples, so what repeats costs nothing: a time bucket's 60 cells a
//! minute apart store their timestamps in a few header bytes, the lengths
//! of fixed-width values likewise, and DOUBLE or BIGINT values with a short
//! decimal form (measurements) take the bits their spread needs. Writes
//! rewrite the row's whole pair, so a packed row-family has a size limit of
//! its own, [`MAX_PACKED_LEN`]. Version 3 values (each column's newest
//! timestamp itself, not its age), version 2 values (as 3, each qualifier
//! listed, no kind byte; runs never linear) and version 1 values (v1.rs)
//! are still read.

pub(crate) mod keys;
mod layout;
mod numbers;
mod qualifiers;
mod runs;
mod tall;
mod v1;
mod values;

pub(crate) use numbers::{Selection, Shape, decode_numbers, decode_tall_numbers, decode_tall_rows};
pub(crate) use qualifiers::Names;
pub(crate) use tall::{
    Tall, decode_row_cells, encode as encode_tall, shape_of, u32_at, write_body as write_tall_body,
};

use super::row::{CellPos, Place, Prune, RowBuf};
use crate::codec::{self, show_bytes};
use crate::error::{Error, Result};
use crate::store::request::QualifierFilter;
pub use layout::MAX_PACKED_LEN;
use layout::{CELL_OVERHEAD, Firsts, MAX_CELLS, VERSION, columnar, corrupt};
pub(crate) use layout::{Cells, newest};
use qualifiers::{Lies, Qualifiers};
use runs::{Plan, Run, put_varint, varint};
use std::cmp::Reverse;
use values::{Piece, SEGMENT_CELLS, SINGLE_CELLS, Segments};

/// What one cell counts toward [`MAX_PACKED_LEN`].
pub(crate) fn cell_size(qualifier: &[u8], value: &[u8]) -> usize {
    qualifier.len() + value.len() + CELL_OVERHEAD
}

/// What a row's cells count toward [`MAX_PACKED_LEN`].
pub(crate) fn size(cells: &Cells) -> usize {
    cells.iter().map(|((q, _), v)| cell_size(q, v)).sum()
}

/// The error for a row whose cells would count `size` bytes, over the limit.
pub(crate) fn too_large(row: &[u8], family: &str, size: usize) -> Error {
    Error::InvalidMutation {
        reason: format!(
            "row {} of PACKED family {family:?} would hold {size} bytes (qualifiers and values, \
             plus {CELL_OVERHEAD} a cell), over the {} MiB a packed row-family may hold; delete \
             old cells of the row, tighten the family's GC policy, or store the family as CELLS",
            show_bytes(row),
            MAX_PACKED_LEN / (1024 * 1024)
        ),
    }
}

/// Writes what a PACKED value holds after its newest timestamp up to its
/// timestamps: its column and cell counts, its qualifiers and the run of
/// each column's cell count. For a tall row (each column one cell) it is
/// the row's *shape*: rows of one shape share a column-wise block.
fn write_shape<'q>(
    columns: usize,
    cells: usize,
    qualifiers: impl Iterator<Item = &'q [u8]> + Clone,
    counts: &[i64],
    out: &mut Vec<u8>,
) {
    put_varint(out, columns as u64);
    put_varint(out, cells as u64);
    qualifiers::write(qualifiers, out);
    Plan::write_run(counts, out);
}

/// The shape (see [`write_shape`]) of tall rows whose columns are
/// `qualifiers`, ascending; `None` when there are none or more than a
/// packed value may hold.
pub(crate) fn tall_shape(qualifiers: &[&[u8]]) -> Option<Vec<u8>> {
    let c = qualifiers.len();
    if c == 0 || c > MAX_CELLS || !qualifiers.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    let mut out = Vec::new();
    write_shape(c, c, qualifiers.iter().copied(), &vec![1; c], &mut out);
    Some(out)
}

/// Encodes a row's cells; `None` when there are none (the pair goes).
/// `row` names the row in the error when the cells are over the limit.
pub(crate) fn encode(row: &[u8], family: &str, cells: &Cells) -> Result<Option<Vec<u8>>> {
    let sorted: Vec<(&[u8], i64, &[u8])> = cells
        .iter()
        .map(|((q, Reverse(ts)), v)| (q.as_slice(), *ts, v.as_slice()))
        .collect();
    encode_sorted(row, family, &sorted, false)
}

/// [`encode`] of cells given as (qualifier, timestamp, value), sorted by
/// qualifier, then newest first, no coordinate twice. With `raw`, values
/// are stored as they are, no smaller form sought: for a row bound for a
/// block, which stores its values anew (see `tall.rs`).
pub(crate) fn encode_sorted(
    row: &[u8],
    family: &str,
    cells: &[(&[u8], i64, &[u8])],
    raw: bool,
) -> Result<Option<Vec<u8>>> {
    let Some(newest) = cells.iter().map(|(_, ts, _)| *ts).max() else {
        return Ok(None);
    };
    let total: usize = cells.iter().map(|(q, _, v)| cell_size(q, v)).sum();
    if total > MAX_PACKED_LEN {
        return Err(too_large(row, family, total));
    }
    let n = cells.len();
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let Scratch {
            starts,
            counts,
            firsts,
            gaps,
            lengths,
        } = &mut *scratch;
        starts.clear();
        counts.clear();
        firsts.clear();
        gaps.clear();
        lengths.clear();
        let mut previous = 0i64;
        for (i, &(qualifier, ts, value)) in cells.iter().enumerate() {
            match counts.last_mut() {
                Some(count) if starts.last().is_some_and(|&s| cells[s].0 == qualifier) => {
                    *count += 1;
                    gaps.push(previous - ts);
                }
                _ => {
                    starts.push(i);
                    counts.push(1);
                    firsts.push(newest - ts);
                }
            }
            previous = ts;
            lengths.push(value.len() as i64);
        }
        let value_bytes: usize = cells.iter().map(|c| c.2.len()).sum();
        let mut out = Vec::with_capacity(64 + n * 2 + value_bytes);
        out.push(VERSION);
        out.extend_from_slice(&newest.to_be_bytes());
        write_shape(
            starts.len(),
            n,
            starts.iter().map(|&start| cells[start].0),
            counts,
            &mut out,
        );
        for run in [&*firsts, &*gaps, &*lengths] {
            Plan::write_run(run, &mut out);
        }
        if raw {
            values::write_raw_header(n, &mut out);
            for (_, _, value) in cells {
                out.extend_from_slice(value);
            }
            return Ok(Some(out));
        }
        // Segments of whole columns: cut at a column's end.
        let (mut start, mut end) = (0, 0);
        let mut singles = true;
        for &count in counts.iter() {
            end += count as usize;
            singles &= count == 1 && cells[end - 1].2.len() == 8;
            let cap = if singles { SINGLE_CELLS } else { SEGMENT_CELLS };
            if end - start >= cap || end == n {
                values::write_segment(&cells[start..end], &mut out);
                start = end;
                singles = true;
            }
        }
        if lengths.capacity() > SCRATCH_KEPT {
            *scratch = Scratch::default();
        }
        Ok(Some(out))
    })
}

/// Cells whose room the scratch keeps after a row: a larger row's goes.
const SCRATCH_KEPT: usize = 1 << 16;

/// What [`encode_sorted`] builds a row's runs in, kept per thread so that
/// encoding a row allocates only its value.
#[derive(Default)]
struct Scratch {
    /// Each column's first cell.
    starts: Vec<usize>,
    counts: Vec<i64>,
    firsts: Vec<i64>,
    gaps: Vec<i64>,
    lengths: Vec<i64>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// The escaped row of a pair key: the whole key.
pub(crate) fn row_of(key: &[u8]) -> Result<&[u8]> {
    if codec::escaped_len(key)? != key.len() {
        return Err(corrupt("the key has bytes after the row", key));
    }
    Ok(key)
}

/// Decodes the one pair of a row (`buf.pairs[from..]`, one pair) into
/// cells that point into its value, or hold the bytes themselves for
/// values stored as numbers.
pub(crate) fn decode(
    family: u32,
    buf: &mut RowBuf,
    from: usize,
    values: Option<&[Vec<u8>]>,
    columns: &QualifierFilter,
    prune: Prune,
) -> Result<()> {
    let RowBuf {
        pairs,
        cells,
        names,
        ..
    } = buf;
    let wanted = Wanted {
        values,
        columns,
        prune,
    };
    for (pair, (key, value)) in pairs.iter().enumerate().skip(from) {
        let index = u32::try_from(pair).map_err(|_| corrupt("too many pairs", key))?;
        let decoded = match value.first() {
            _ if value.len() < 9 => None,
            Some(1) => v1::decode(family, index, value, cells),
            v if columnar(v) => decode_value(family, index, value, cells, names, &wanted),
            _ => None,
        };
        if decoded.is_none() {
            return Err(corrupt("the value is not a packed row", key));
        }
    }
    Ok(())
}

/// The parts of a version 2 value before its values.
struct Header<'a> {
    /// Column count C and cell count N.
    columns: usize,
    n: usize,
    qualifiers: Qualifiers<'a>,
    counts: Run<'a>,
    firsts: Firsts<'a>,
    gaps: Run<'a>,
    lengths: Run<'a>,
    segments: Segments<'a>,
}

impl<'a> Header<'a> {
    /// Reads a version 2 value's header; `None` when it is malformed.
    fn read(value: &'a [u8]) -> Option<Header<'a>> {
        let mut at = 9;
        let columns = usize::try_from(varint(value, &mut at)?).ok()?;
        let n = usize::try_from(varint(value, &mut at)?).ok()?;
        if columns == 0 || columns > n || n > MAX_CELLS {
            return None;
        }
        let qualifiers = Qualifiers::read(value, &mut at, columns, value[0])?;
        let counts = Run::read(value, &mut at, columns)?;
        let firsts = Firsts::read(value, &mut at, columns)?;
        let gaps = Run::read(value, &mut at, n - columns)?;
        let lengths = Run::read(value, &mut at, n)?;
        Some(Header {
            columns,
            n,
            qualifiers,
            counts,
            firsts,
            gaps,
            lengths,
            segments: Segments::new(value, at),
        })
    }
}

/// What a read wants of a row's cells (see [`decode_value`]).
struct Wanted<'a> {
    values: Option<&'a [Vec<u8>]>,
    columns: &'a QualifierFilter,
    prune: Prune,
}

/// Decodes a version 2 value (pair `index` of the row); `None` when it is
/// malformed. Columns whose qualifier is not among `wanted.values`
/// (sorted) get empty values: their numbers are skipped, not computed.
/// Columns that `wanted.columns` turns away yield no cells: only their
/// value lengths are read, to find the next column's values. A column
/// yields only the cells `wanted.prune` leaves (see [`Prune`]): the
/// others' values are stepped over, and past the first cell older than
/// its time range, the column's timestamps too.
fn decode_value(
    family: u32,
    index: u32,
    value: &[u8],
    cells: &mut Vec<CellPos>,
    names: &mut Names,
    wanted: &Wanted,
) -> Option<()> {
    let Wanted {
        values,
        columns: columns_read,
        prune,
    } = *wanted;
    let Header {
        columns,
        n,
        mut qualifiers,
        counts,
        firsts,
        gaps,
        lengths,
        mut segments,
    } = Header::read(value)?;
    let place = |start: usize, end: usize| {
        Some(Place::Value {
            pair: index,
            start: u32::try_from(start).ok()?,
            end: u32::try_from(end).ok()?,
        })
    };
    cells.reserve(n);
    let built = match qualifiers {
        Qualifiers::Numbered { .. } => Some(names.of(value, &mut qualifiers, columns)?),
        Qualifiers::Listed(_) => None,
    };
    let (mut cell, mut gap) = (0usize, 0usize);
    for column in 0..columns {
        let (qualifier, name) = match built {
            Some(first) => {
                let (start, end) = names.span(first + column)?;
                (
                    Place::Name { start, end },
                    names.bytes(start as usize..end as usize),
                )
            }
            None => match qualifiers.next(value, &mut Vec::new())? {
                Lies::Value(range) => (place(range.start, range.end)?, &value[range]),
                Lies::Built(_) => return None,
            },
        };
        let wanted = values.is_none_or(|v| v.binary_search_by(|q| q.as_slice().cmp(name)).is_ok());
        let read = matches!(columns_read, QualifierFilter::All) || columns_read.matches(name);
        let count = usize::try_from(counts.get(column)).ok()?;
        if count == 0 || count > n - cell {
            return None;
        }
        if !read {
            segments.skip_many(&lengths, cell, count)?;
            cell += count;
            gap += count - 1;
            continue;
        }
        let mut timestamp = firsts.get(column)?;
        if timestamp < 0 {
            return None;
        }
        let keep = prune.newest.unwrap_or(count);
        let newer = |t: i64| prune.time.end.is_some_and(|end| t >= end);
        let column_gaps = gap;
        // Cells of the column passed (`timestamp` is the next one's).
        let mut seen = 0;
        // Those newer than the range: their values stepped over at once.
        while newer(timestamp) {
            seen += 1;
            if seen == count {
                break;
            }
            timestamp = older(timestamp, &gaps, &mut gap)?;
        }
        if seen > 0 {
            segments.skip_many(&lengths, cell, seen)?;
            cell += seen;
        }
        let mut kept = 0;
        while seen < count && kept < keep && timestamp >= prune.time.start {
            let len = usize::try_from(lengths.get(cell)).ok()?;
            let value = if !wanted {
                segments.skip(len)?;
                Place::Value {
                    pair: index,
                    start: 0,
                    end: 0,
                }
            } else {
                match segments.next(len)? {
                    Piece::Value(start, end) => place(start, end)?,
                    Piece::Bytes(bytes) => Place::Inline(bytes),
                }
            };
            cells.push(CellPos {
                family,
                timestamp,
                first: kept == 0,
                qualifier,
                value,
            });
            kept += 1;
            seen += 1;
            cell += 1;
            if seen < count {
                timestamp = older(timestamp, &gaps, &mut gap)?;
            }
        }
        if seen < count {
            // Older than the read keeps: only stepped over.
            segments.skip_many(&lengths, cell, count - seen)?;
            cell += count - seen;
        }
        gap = column_gaps + (count - 1);
    }
    (cell == n && segments.end()? == value.len()).then_some(())
}

/// The timestamp of a column's next cell, `gaps`' next number older than
/// `timestamp`; `None` when that is not a valid timestamp (a gap of 0
/// would make two cells of one time).
fn older(timestamp: i64, gaps: &Run<'_>, gap: &mut usize) -> Option<i64> {
    let step = gaps.get(*gap);
    *gap += 1;
    timestamp.checked_sub(step).filter(|t| step > 0 && *t >= 0)
}

/// A value encoded anew from its cells, each segment in its smallest form
/// (what a row encoded `raw` becomes when it goes in alone after all).
pub(crate) fn compress(key: &[u8], family: &str, value: &[u8]) -> Result<Vec<u8>> {
    let (row, _) = codec::unescape(key)?;
    encode(&row, family, &cells_of(key, value)?)?
        .ok_or_else(|| corrupt("a packed row without cells", key))
}

/// Decodes a packed value into owned cells.
pub(crate) fn cells_of(key: &[u8], value: &[u8]) -> Result<Cells> {
    let mut buf = RowBuf::default();
    buf.pairs.push((key.into(), value.into()));
    decode(0, &mut buf, 0, None, &QualifierFilter::All, Prune::NONE)?;
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

/// Random cells of a row: short qualifiers, any timestamps and values.
#[cfg(test)]
fn any_cells(count: std::ops::Range<usize>) -> impl proptest::strategy::Strategy<Value = Cells> {
    use proptest::prelude::*;
    // Any bytes, or numbers (which rows may store numbered).
    let qualifier = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..6),
        "-?[0-9]{1,3}(\\.[0-9])?".prop_map(String::into_bytes),
    ];
    prop::collection::btree_map(
        (qualifier, (0i64..i64::MAX).prop_map(Reverse)),
        prop::collection::vec(any::<u8>(), 0..20),
        count,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A row encoded raw (for a block) holds the same cells, and
        /// compressed is the row encoded in its smallest form.
        #[test]
        fn raw_rows_compress_to_their_smallest_form(
            cells in any_cells(1..40),
            doubles in prop::collection::vec(-1000i64..1000, 0..8),
        ) {
            let mut cells = cells;
            for (i, d) in doubles.iter().enumerate() {
                let value = (*d as f64 / 4.0).to_be_bytes().to_vec();
                cells.insert((b"d".to_vec(), Reverse(i as i64 + 1)), value);
            }
            let sorted: Vec<(&[u8], i64, &[u8])> = cells
                .iter()
                .map(|((q, Reverse(ts)), v)| (q.as_slice(), *ts, v.as_slice()))
                .collect();
            let raw = encode_sorted(b"row", "f", &sorted, true).unwrap().unwrap();
            let small = encode_sorted(b"row", "f", &sorted, false).unwrap().unwrap();
            let key = codec::escape(b"row");
            prop_assert_eq!(cells_of(&key, &raw).unwrap(), cells.clone());
            prop_assert_eq!(compress(&key, "f", &raw).unwrap(), small);
        }

        #[test]
        fn columns_turned_away_yield_no_cells(
            cells in any_cells(0..40),
            picks in prop::collection::vec(any::<bool>(), 40),
        ) {
            let key = codec::escape(b"row");
            let Some(value) = encode(b"row", "f", &cells).unwrap() else {
                return Ok(());
            };
            let qualifiers: std::collections::BTreeSet<Vec<u8>> =
                cells.keys().map(|k| k.0.clone()).collect();
            let kept: std::collections::BTreeSet<Vec<u8>> = qualifiers
                .into_iter()
                .zip(&picks)
                .filter(|(_, pick)| **pick)
                .map(|(q, _)| q)
                .collect();
            let mut buf = RowBuf::default();
            buf.pairs.push((key.into(), value.into()));
            decode(0, &mut buf, 0, None, &QualifierFilter::Set(kept.clone()), Prune::NONE).unwrap();
            let got: Cells = buf
                .view()
                .cells()
                .map(|c| ((c.qualifier.to_vec(), Reverse(c.timestamp)), c.value.to_vec()))
                .collect();
            let want: Cells = cells
                .into_iter()
                .filter(|((q, _), _)| kept.contains(q))
                .collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn only_the_newest_cells_of_each_column(cells in any_cells(0..40), k in 0usize..4) {
            let key = codec::escape(b"row");
            let Some(value) = encode(b"row", "f", &cells).unwrap() else {
                return Ok(());
            };
            let mut buf = RowBuf::default();
            buf.pairs.push((key.into(), value.into()));
            decode(0, &mut buf, 0, None, &QualifierFilter::All, Prune { newest: Some(k), ..Prune::NONE }).unwrap();
            let got: Vec<_> = buf
                .view()
                .cells()
                .map(|c| ((c.qualifier.to_vec(), Reverse(c.timestamp)), c.value.to_vec()))
                .collect();
            // Cells come by qualifier, newest first: a column's first k.
            let mut want = Vec::new();
            let mut taken: std::collections::BTreeMap<Vec<u8>, usize> = Default::default();
            for ((q, t), v) in cells {
                let n = taken.entry(q.clone()).or_default();
                if *n < k {
                    *n += 1;
                    want.push(((q, t), v));
                }
            }
            prop_assert_eq!(got, want);
        }

        #[test]
        fn cells_round_trip(cells in any_cells(0..40)) {
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
        fn measurements_round_trip(
            columns in prop::collection::vec((0u8..8, 1usize..70, -1_000_000i64..1_000_000, 0u32..4), 1..6),
            spacing in prop_oneof![Just(60_000_000i64), 1i64..5_000_000],
        ) {
            // Columns of evenly or unevenly spaced cells holding decimals,
            // integers or text: what time buckets and tall rows hold.
            let mut cells = Cells::new();
            for (q, count, seed, kind) in columns {
                for i in 0..count {
                    let x = seed.wrapping_mul(31).wrapping_add(i as i64 * 7919) % 1_000_000;
                    let value = match kind {
                        0 => (x as f64 / 100.0).to_be_bytes().to_vec(),
                        1 => x.to_be_bytes().to_vec(),
                        2 => format!("v{x}").into_bytes(),
                        _ => (x as f64 / 3.0).to_be_bytes().to_vec(),
                    };
                    let ts = 1_767_225_600_000_000 + i as i64 * spacing + i64::from(q);
                    cells.insert((vec![b'q', q], Reverse(ts)), value);
                }
            }
            let value = encode(b"r", "f", &cells).unwrap().unwrap();
            prop_assert_eq!(cells_of(&codec::escape(b"r"), &value).unwrap(), cells);
        }

        #[test]
        fn garbage_never_panics(value in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = cells_of(&codec::escape(b"r"), &value);
        }

        #[test]
        fn damaged_values_never_panic(
            cells in prop::collection::btree_map(
                (prop::collection::vec(any::<u8>(), 0..3), (0i64..1_000_000).prop_map(Reverse)),
                prop::collection::vec(any::<u8>(), 8..9),
                1..30,
            ),
            damage in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let value = encode(b"r", "f", &cells).unwrap().unwrap();
            let mut damaged = value.clone();
            for (at, byte) in damage {
                let i = at.index(damaged.len());
                damaged[i] = byte;
            }
            let _ = cells_of(&codec::escape(b"r"), &damaged);
            damaged.truncate(cut.index(damaged.len()));
            let _ = cells_of(&codec::escape(b"r"), &damaged);
            // A cut value is an error (a damaged one may have been made
            // shorter, and then cut where it ends).
            let mut cut_short = value;
            cut_short.truncate(cut.index(cut_short.len()));
            prop_assert!(cells_of(&codec::escape(b"r"), &cut_short).is_err());
        }
    }

    #[test]
    fn a_time_bucket_takes_the_bits_of_its_measurements() {
        // One balloon-hour: four measures a minute apart, one decimal each.
        let mut cells = Cells::new();
        for (q, name) in ["altitude", "humidity", "pressure", "temperature"]
            .iter()
            .enumerate()
        {
            for minute in 0..60i64 {
                let x = (minute * 7919 + q as i64 * 104_729) % 1000;
                let value = (90_000.0 + x as f64 / 10.0).to_be_bytes().to_vec();
                let ts = 1_767_225_600_000_000 + minute * 60_000_000;
                cells.insert((name.as_bytes().to_vec(), Reverse(ts)), value);
            }
        }
        let value = encode(b"r", "f", &cells).unwrap().unwrap();
        // 240 values of 10 bits, 300 bytes; qualifiers, headers and runs
        // that repeat take the rest.
        assert!(value.len() <= 420, "{} bytes", value.len());
        assert_eq!(cells_of(&codec::escape(b"r"), &value).unwrap(), cells);
    }

    #[test]
    fn a_bucket_of_new_columns_takes_the_bits_of_its_measurements() {
        // One balloon-hour of one measure, a column per minute (`00` to
        // `59`) stamped with its minute.
        let mut cells = Cells::new();
        for minute in 0..60i64 {
            let x = (minute * 7919) % 1000;
            let value = (90_000.0 + x as f64 / 10.0).to_be_bytes().to_vec();
            let ts = 1_767_225_600_000_000 + minute * 60_000_000;
            cells.insert((format!("{minute:02}").into_bytes(), Reverse(ts)), value);
        }
        let value = encode(b"r", "f", &cells).unwrap().unwrap();
        // 60 values of 10 bits in one segment, 75 bytes; the qualifiers
        // (12 bytes), the columns' times (a linear run of ages, 11) and the
        // other runs take headers.
        assert!(value.len() <= 130, "{} bytes", value.len());
        assert_eq!(cells_of(&codec::escape(b"r"), &value).unwrap(), cells);
    }

    #[test]
    fn rows_share_their_numbered_qualifiers() {
        // One buffer reads row after row, a row of one or two pairs, with
        // the same numbered qualifiers or others (more kinds than the
        // buffer keeps built), as a scan does.
        let row = |prefix: &str, columns: usize, seed: i64| {
            let mut cells = Cells::new();
            for c in 0..columns {
                let q = format!("{prefix}{c:02}").into_bytes();
                let value = ((seed + c as i64) as f64 / 4.0).to_be_bytes().to_vec();
                cells.insert((q, Reverse(1_000 + c as i64)), value);
            }
            cells
        };
        let key = codec::escape(b"r");
        let mut buf = RowBuf::default();
        for i in 0..40i64 {
            let mut rows = vec![row("", 10 + (i % 3) as usize, i)];
            if i % 4 == 1 {
                rows.push(row(&format!("p{}#", i % 11), 12, i * 7));
            }
            buf.clear();
            let mut want = Vec::new();
            for cells in &rows {
                let value = encode(b"r", "f", cells).unwrap().unwrap();
                assert_eq!(value[11], 1, "numbered");
                buf.pairs.push((key.clone().into(), value.into()));
                want.extend(cells.iter().map(|((q, t), v)| (q.clone(), t.0, v.clone())));
            }
            decode(0, &mut buf, 0, None, &QualifierFilter::All, Prune::NONE).unwrap();
            let got: Vec<_> = buf
                .view()
                .cells()
                .map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec()))
                .collect();
            assert_eq!(got, want, "row {i}");
        }
    }

    /// The largest timestamp is a cell's like any other: kept by a
    /// decode with nothing to leave out, and by one bounded below only.
    #[test]
    fn the_largest_timestamp_is_decoded() {
        let mut cells = Cells::new();
        cells.insert((b"q".to_vec(), Reverse(i64::MAX)), b"newest".to_vec());
        cells.insert((b"q".to_vec(), Reverse(5)), b"older".to_vec());
        let value = encode(b"row", "f", &cells).unwrap().unwrap();
        let from_now_on = Prune {
            time: crate::store::TimeRange {
                start: 6,
                end: None,
            },
            ..Prune::NONE
        };
        for (prune, want) in [(Prune::NONE, 2), (from_now_on, 1)] {
            let mut buf = RowBuf::default();
            buf.pairs
                .push((codec::escape(b"row").into(), value.clone().into()));
            decode(0, &mut buf, 0, None, &QualifierFilter::All, prune).unwrap();
            let got: Vec<(i64, Vec<u8>)> = buf
                .view()
                .cells()
                .map(|c| (c.timestamp, c.value.to_vec()))
                .collect();
            assert_eq!(got.len(), want, "{prune:?}: {got:?}");
            assert_eq!(got[0], (i64::MAX, b"newest".to_vec()), "{prune:?}");
        }
    }

    #[test]
    fn versions_2_and_3_still_read() {
        // Version 3 is version 4 with each column's newest timestamp
        // stored as itself; version 2 is version 3 with the qualifiers
        // listed and no kind byte (and no linear run: these cells have
        // none).
        let mut cells = Cells::new();
        for (i, q) in ["altitude", "humidity", "pressure"].iter().enumerate() {
            let value = (1000.0 + i as f64 / 4.0).to_be_bytes().to_vec();
            let ts = 1_000_000 + (i as i64 % 2) * 60_000_000;
            cells.insert((q.as_bytes().to_vec(), Reverse(ts)), value);
        }
        let v4 = encode(b"r", "f", &cells).unwrap().unwrap();
        assert_eq!((v4[0], v4[11]), (4, 0), "version 4, listed");
        let mut at = 11;
        Qualifiers::read(&v4, &mut at, 3, 4).unwrap();
        Run::read(&v4, &mut at, 3).unwrap();
        let firsts_at = at;
        Run::read(&v4, &mut at, 3).unwrap();
        let mut v3 = v4[..firsts_at].to_vec();
        v3[0] = 3;
        Plan::write_run(&[1_000_000, 61_000_000, 1_000_000], &mut v3);
        v3.extend_from_slice(&v4[at..]);
        let key = codec::escape(b"r");
        assert_eq!(cells_of(&key, &v3).unwrap(), cells);
        let mut v2 = v3;
        v2.remove(11);
        v2[0] = 2;
        assert_eq!(cells_of(&key, &v2).unwrap(), cells);
        // Their numbers read alike too.
        for value in [&v4, &v2] {
            let wanted = [(b"humidity".to_vec(), 0)];
            let selection = Selection {
                selects: &|_: &[u8]| true,
                keep: &|times: &[i64]| 0..times.len(),
                keeps_all: true,
            };
            let mut out = crate::store::format::NumberRow::default();
            out.reset(1);
            let mut shape = Shape::default();
            decode_numbers(&key, value, &wanted, &selection, &mut out, &mut shape).unwrap();
            assert_eq!(out.times_since(0), &[61_000_000], "{}", value[0]);
        }
    }

    #[test]
    fn the_limit_counts_cells_and_says_so() {
        let mut cells = Cells::new();
        cells.insert((b"q".to_vec(), Reverse(1)), vec![0; MAX_PACKED_LEN]);
        let e = encode(b"big", "m", &cells).unwrap_err().to_string();
        assert!(
            e.contains("row big ") && e.contains("\"m\"") && e.contains("128 MiB"),
            "{e}"
        );
    }
}
