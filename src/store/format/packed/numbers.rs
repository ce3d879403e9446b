//! A packed row's wanted columns decoded straight into runs of numbers
//! (`format/numbers.rs`): timestamps from the gap run, values from their
//! segments as words, with no cell in between.

use super::layout::{Firsts, MAX_CELLS, columnar, corrupt};
use super::qualifiers::{Lies, Qualifiers};
use super::runs::{Run, varint};
use super::tall::{Tall, Word};
use super::values::Segments;
use crate::error::Result;
use crate::store::format::numbers::{NumberRow, NumberRows};
use std::ops::Range;

/// Which cells of a packed row a numbers read selects: of the columns
/// whose qualifier `selects` takes, the cells `keep` chooses of each one's
/// timestamps (newest first); `keeps_all` when it chooses every cell.
pub(crate) struct Selection<'a> {
    pub selects: &'a dyn Fn(&[u8]) -> bool,
    pub keep: &'a dyn Fn(&[i64]) -> Range<usize>,
    pub keeps_all: bool,
}

/// What a packed value holds before its timestamps: its column and cell
/// counts, qualifiers and each column's cell count, as a numbers read
/// decides about them. Rows of a table often share these bytes exactly (a
/// tall table's rows: the same columns, a cell each), so a read keeps the
/// last shape it parsed and compares bytes instead of parsing them again.
/// The header is read front to back, each part delimiting itself, so a
/// value that starts with the same bytes parses the same way to the same
/// end.
#[derive(Default)]
pub(crate) struct Shape {
    /// The value's version, then its bytes after the newest timestamp up
    /// to the timestamps' run; empty before the first parse.
    bytes: Vec<u8>,
    n: usize,
    columns: Vec<ColumnShape>,
    /// Whether any column is wanted, and whether any is selected.
    wanted: bool,
    selects: bool,
    /// The column-wise block whose shape this is known to be (its
    /// [`Tall::id`]), so that its rows need no comparison; 0: none.
    tall: u64,
}

struct ColumnShape {
    count: usize,
    /// Its place in the read's output, when wanted.
    place: Option<usize>,
    /// Whether the read's qualifier filter selects it.
    selects: bool,
}

impl Shape {
    /// Parses `value`'s shape (a version 2 or 3 value's), deciding each column
    /// as `wanted` and `selection` say; `None` when it is malformed (the
    /// shape then fits no value: its bytes are empty).
    fn parse(
        &mut self,
        value: &[u8],
        wanted: &[(Vec<u8>, usize)],
        selection: &Selection<'_>,
    ) -> Option<()> {
        self.bytes.clear();
        self.columns.clear();
        self.tall = 0;
        let mut at = 9;
        let columns = usize::try_from(varint(value, &mut at)?).ok()?;
        let n = usize::try_from(varint(value, &mut at)?).ok()?;
        if columns == 0 || columns > n || n > MAX_CELLS {
            return None;
        }
        let mut qualifiers = Qualifiers::read(value, &mut at, columns, value[0])?;
        let counts = Run::read(value, &mut at, columns)?;
        let mut cells = 0usize;
        let mut built = Vec::new();
        for column in 0..columns {
            built.clear();
            let qualifier = match qualifiers.next(value, &mut built)? {
                Lies::Value(range) => &value[range],
                Lies::Built(range) => &built[range],
            };
            let count = usize::try_from(counts.get(column)).ok()?;
            if count == 0 || count > n - cells {
                return None;
            }
            cells += count;
            self.columns.push(ColumnShape {
                count,
                place: wanted
                    .binary_search_by(|(q, _)| q.as_slice().cmp(qualifier))
                    .ok()
                    .map(|i| wanted[i].1),
                selects: (selection.selects)(qualifier),
            });
        }
        if cells != n {
            return None;
        }
        self.wanted = self.columns.iter().any(|c| c.place.is_some());
        self.selects = self.columns.iter().any(|c| c.selects);
        self.n = n;
        self.bytes.push(value[0]);
        self.bytes.extend_from_slice(&value[9..at]);
        Some(())
    }

    /// Makes this the shape of the column-wise block `tall` (parsed once
    /// per block, compared once per block); `None` when it is malformed.
    fn of_tall(
        &mut self,
        tall: &Tall,
        wanted: &[(Vec<u8>, usize)],
        selection: &Selection<'_>,
    ) -> Option<()> {
        if self.tall != tall.id() {
            let header = tall.header();
            if !self.fits(header) {
                self.parse(header, wanted, selection)?;
            }
            self.tall = tall.id();
        }
        Some(())
    }

    /// Whether `value` has this shape.
    fn fits(&self, value: &[u8]) -> bool {
        self.bytes.split_first().is_some_and(|(version, bytes)| {
            value.first() == Some(version) && value.get(9..9 + bytes.len()) == Some(bytes)
        })
    }
}

/// Decodes the columns `wanted` of a packed pair into `out`: each as
/// (qualifier, the column's place in `out`), sorted by qualifier, and
/// among those `selection` selects. Returns whether the pair holds any
/// cell the selection selects, wanted or not; `None`, with `out`
/// untouched, when the value is of an older version (the caller decodes
/// its cells instead). `shape` is the read's last (see [`Shape`]): the
/// same `wanted` and `selection` on every call with it.
pub(crate) fn decode_numbers(
    key: &[u8],
    value: &[u8],
    wanted: &[(Vec<u8>, usize)],
    selection: &Selection<'_>,
    out: &mut NumberRow,
    shape: &mut Shape,
) -> Result<Option<bool>> {
    if value.len() < 9 || !columnar(value.first()) {
        return if value.first() == Some(&1) && value.len() >= 9 {
            Ok(None)
        } else {
            Err(corrupt("the value is not a packed row", key))
        };
    }
    if !shape.fits(value) {
        shape
            .parse(value, wanted, selection)
            .ok_or_else(|| corrupt("the value is not a packed row", key))?;
    }
    decode(value, selection, out, shape)
        .map(Some)
        .ok_or_else(|| corrupt("the value is not a packed row", key))
}

/// [`decode_numbers`] of row `row` of a column-wise block (`tall`, read
/// from the block's value `value`), taken from the block's columns as
/// decoded once for all its rows: what it gives for the PACKED value the
/// row was.
#[allow(
    clippy::too_many_arguments,
    reason = "the per-row state of a hot decode, passed as it is rather than packed per call"
)]
pub(crate) fn decode_tall_numbers(
    key: &[u8],
    tall: &Tall,
    value: &[u8],
    row: usize,
    wanted: &[(Vec<u8>, usize)],
    selection: &Selection<'_>,
    out: &mut NumberRow,
    shape: &mut Shape,
) -> Result<bool> {
    let bad = || corrupt("malformed columns", key);
    shape.of_tall(tall, wanted, selection).ok_or_else(bad)?;
    if !shape.wanted && selection.keeps_all {
        return Ok(shape.selects);
    }
    let mut selected = false;
    for (j, c) in shape.columns.iter().enumerate() {
        let Some(place) = c.place else {
            if !selected && c.selects {
                selected = selection.keeps_all || {
                    let column = tall.column(value, j).ok_or_else(bad)?;
                    !(selection.keep)(&column.times[row..row + 1]).is_empty()
                };
            }
            continue;
        };
        let column = tall.column(value, j).ok_or_else(bad)?;
        let start = out.open();
        let time = column.times[row];
        // (A selection that keeps every cell keeps a column's one.)
        if selection.keeps_all || !(selection.keep)(std::slice::from_ref(&time)).is_empty() {
            selected = true;
            out.push_time(time);
            match column.word(row) {
                Word::Word(word) => out.push_word(word),
                Word::Other(s, e) => out.set_misfit(place, &value[s..e]),
            }
        }
        out.close(place, start);
    }
    Ok(selected)
}

/// Rows `rows` of a column-wise block (`tall`, read from the block's
/// value `value`) as a numbers read takes them, all at once into `out`
/// (reset for as many columns as `wanted` has places): each wanted
/// column's cells, one a row. Returns how many rows it took, from the
/// first on, stopping before a row whose wanted value is not 8 bytes long;
/// `None` when the read cannot take them so (its selection does not keep
/// every cell, or selects no column of the rows, or the first row has such
/// a value): the caller reads them a row at a time
/// ([`decode_tall_numbers`]), which says what is selected and what fails.
#[allow(
    clippy::too_many_arguments,
    reason = "the per-row state of a hot decode, passed as it is rather than packed per call"
)]
pub(crate) fn decode_tall_rows(
    key: &[u8],
    tall: &Tall,
    value: &[u8],
    rows: Range<usize>,
    wanted: &[(Vec<u8>, usize)],
    selection: &Selection<'_>,
    out: &mut NumberRows,
    shape: &mut Shape,
) -> Result<Option<usize>> {
    let bad = || corrupt("malformed columns", key);
    shape.of_tall(tall, wanted, selection).ok_or_else(bad)?;
    // Every row is selected: each holds a cell of every column, all kept.
    if !selection.keeps_all || !shape.selects {
        return Ok(None);
    }
    let mut end = rows.end;
    for (j, c) in shape.columns.iter().enumerate() {
        if c.place.is_some() {
            let column = tall.column(value, j).ok_or_else(bad)?;
            if let Some(i) = column.first_other(rows.start..end) {
                end = i;
            }
        }
    }
    if end <= rows.start {
        return Ok(None);
    }
    for (j, c) in shape.columns.iter().enumerate() {
        if let Some(place) = c.place {
            let column = tall.column(value, j).ok_or_else(bad)?;
            out.set_column(
                place,
                &column.times[rows.start..end],
                &column.words[rows.start..end],
            );
        }
    }
    Ok(Some(end - rows.start))
}

/// Pushes a column's `count` timestamps into `out`: the newest `first`,
/// then each the one before minus the next of `gaps` (from `*gap` on).
fn push_times(
    out: &mut NumberRow,
    first: i64,
    gaps: &Run<'_>,
    gap: &mut usize,
    count: usize,
) -> Option<()> {
    let mut timestamp = first;
    if timestamp < 0 {
        return None;
    }
    out.push_time(timestamp);
    for _ in 1..count {
        let step = gaps.get(*gap);
        *gap += 1;
        timestamp = timestamp
            .checked_sub(step)
            .filter(|t| step > 0 && *t >= 0)?;
        out.push_time(timestamp);
    }
    Some(())
}

/// Decodes a value of `shape` (which it fits).
fn decode(
    value: &[u8],
    selection: &Selection<'_>,
    out: &mut NumberRow,
    shape: &Shape,
) -> Option<bool> {
    // Nothing wanted and every cell of a selected column kept (a count,
    // or a read of keys only): whether the row has a selected cell is its
    // shape's to say, each column holding a cell at least, and neither
    // timestamps nor values are read. (Damage past the shape then shows
    // in reads of the values and in `cellar check`, not in a count.)
    if !shape.wanted && selection.keeps_all {
        return Some(shape.selects);
    }
    let (n, columns) = (shape.n, shape.columns.len());
    let mut at = 8 + shape.bytes.len();
    let firsts = Firsts::read(value, &mut at, columns)?;
    let gaps = Run::read(value, &mut at, n - columns)?;
    let lengths = Run::read(value, &mut at, n)?;
    let mut segments = Segments::new(value, at);
    let (mut cell, mut gap) = (0usize, 0usize);
    let mut selected = false;
    for (column, c) in shape.columns.iter().enumerate() {
        let count = c.count;
        let Some(place) = c.place else {
            // Whether the row has a selected cell: in a column not
            // wanted, only its timestamps tell.
            if !selected && c.selects {
                if selection.keeps_all {
                    selected = true;
                    gap += count - 1;
                } else {
                    let start = out.open();
                    push_times(out, firsts.get(column)?, &gaps, &mut gap, count)?;
                    selected = !(selection.keep)(out.times_since(start)).is_empty();
                    out.discard_times(start);
                }
            } else {
                gap += count - 1;
            }
            segments.skip_many(&lengths, cell, count)?;
            cell += count;
            continue;
        };
        let start = out.open();
        push_times(out, firsts.get(column)?, &gaps, &mut gap, count)?;
        let kept = (selection.keep)(out.times_since(start));
        selected |= !kept.is_empty();
        out.keep_times(start, kept.clone());
        segments.skip_many(&lengths, cell, kept.start)?;
        let read =
            out.words(|words| segments.words(&lengths, cell + kept.start, kept.len(), words))?;
        let rest = match read {
            Ok(()) => kept.end,
            Err((s, e)) => {
                out.set_misfit(place, value.get(s..e)?);
                // Where the value after the misfit lies.
                let at = cell + kept.start + out.cells() - start + 1;
                at - cell
            }
        };
        segments.skip_many(&lengths, cell + rest, count - rest)?;
        cell += count;
        out.close(place, start);
    }
    (cell == n && segments.end()? == value.len()).then_some(selected)
}

#[cfg(test)]
mod tests {
    use super::super::{Cells, encode};
    use super::*;
    use crate::store::format::numbers::{keeps_every_cell, window};
    use crate::store::format::{Prune, QualifierFilter, RowBuf, select};
    use crate::store::{GcPolicy, ReadFilter, TimeRange};
    use proptest::prelude::*;
    use std::cmp::Reverse;

    /// A read's filter (time range, cells per column, qualifiers read),
    /// and its wanted columns among those read (as a numbers read asks):
    /// their qualifiers, and each with its place, sorted.
    #[allow(clippy::type_complexity, reason = "a test helper's one-off tuple")]
    fn read_of(
        range: Option<(i64, i64)>,
        per_column: Option<usize>,
        read: Option<&std::collections::BTreeSet<u8>>,
        wanted: &[u8],
    ) -> (ReadFilter, Vec<Vec<u8>>, Vec<(Vec<u8>, usize)>) {
        let mut filter = ReadFilter::all();
        if let Some((a, b)) = range {
            filter = filter.time_range(TimeRange::new(a.min(b), a.max(b)));
        }
        if let Some(n) = per_column {
            filter = filter.cells_per_column(n);
        }
        if let Some(read) = read {
            filter = filter.qualifiers(QualifierFilter::Set(
                read.iter().map(|q| qualifier(*q)).collect(),
            ));
        }
        let mut names: Vec<Vec<u8>> = wanted
            .iter()
            .map(|q| qualifier(*q))
            .filter(|q| filter.qualifiers.matches(q))
            .collect();
        names.sort();
        names.dedup();
        let sorted = names
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, q)| (q, i))
            .collect();
        (filter, names, sorted)
    }

    /// Column `q`'s qualifier: `q0` to `q5`, which rows of four or more
    /// columns store numbered.
    fn qualifier(q: u8) -> Vec<u8> {
        format!("q{q}").into_bytes()
    }

    proptest! {
        /// The runs hold exactly the cells a read selects, their values
        /// read as words, whatever GC, time range, cells per column and
        /// mix of 8-byte and other values.
        #[test]
        fn numbers_are_the_selected_cells(
            columns in prop::collection::vec(
                (0u8..6, 1usize..40, any::<i64>(), 0u8..4, 1i64..1000), 1..5),
            wanted in prop::collection::vec(0u8..6, 0..4),
            read in prop::option::of(prop::collection::btree_set(0u8..6, 0..4)),
            versions in prop::option::of(1u32..30),
            age in prop::option::of(0i64..40_000),
            range in prop::option::of((0i64..40_000, 0i64..40_000)),
            per_column in prop::option::of(0usize..10),
            // A row read before this one: of the same columns and cell
            // counts (its shape then kept), or of its own.
            before in prop::option::of((any::<bool>(), any::<i64>(), prop::collection::vec(
                (0u8..6, 1usize..40, any::<i64>(), 0u8..4, 1i64..1000), 1..5))),
        ) {
            let cells_of = |columns: &[(u8, usize, i64, u8, i64)]| {
                let mut cells = Cells::new();
                for &(q, count, seed, kind, spacing) in columns {
                    for i in 0..count {
                        let x = seed.wrapping_add(i as i64 * 7919) % 100_000;
                        let value = match kind {
                            0 => (x as f64 / 100.0).to_be_bytes().to_vec(),
                            1 => x.to_be_bytes().to_vec(),
                            2 if i == count / 2 => b"odd".to_vec(),
                            _ => seed.wrapping_mul(i as i64).to_be_bytes().to_vec(),
                        };
                        cells.insert((qualifier(q), Reverse(i as i64 * spacing)), value);
                    }
                }
                cells
            };
            let cells = cells_of(&columns);
            let other = before.map(|(same, seed, own)| {
                if same {
                    let shifted: Vec<_> = columns
                        .iter()
                        .map(|&(q, count, s, kind, spacing)| (q, count, s ^ seed, kind, spacing + 1))
                        .collect();
                    cells_of(&shifted)
                } else {
                    cells_of(&own)
                }
            });
            let value = encode(b"r", "f", &cells).unwrap().unwrap();
            let gc = match (versions, age) {
                (Some(v), Some(a)) => GcPolicy::Union(vec![GcPolicy::MaxVersions(v), GcPolicy::MaxAge(a)]),
                (Some(v), None) => GcPolicy::MaxVersions(v),
                (None, Some(a)) => GcPolicy::MaxAge(a),
                (None, None) => GcPolicy::KeepAll,
            };
            let now = 50_000;
            let (filter, names, sorted) = read_of(range, per_column, read.as_ref(), &wanted);
            let mut got = NumberRow::default();
            got.reset(names.len());
            let keep = |times: &[i64]| window(&gc, &filter, now, times);
            let selects = |q: &[u8]| filter.qualifiers.matches(q);
            let keeps_all = keeps_every_cell(&gc, &filter);
            let selection = Selection { selects: &selects, keep: &keep, keeps_all };
            let key = crate::codec::escape(b"r");
            // A shape parsed from another row (or none) and this row's own
            // decode the same.
            let mut shape = Shape::default();
            if let Some(other) = &other {
                let other = encode(b"o", "f", other).unwrap().unwrap();
                let mut scratch = NumberRow::default();
                scratch.reset(names.len());
                decode_numbers(b"o", &other, &sorted, &selection, &mut scratch, &mut shape).unwrap();
            }
            let selected = decode_numbers(&key, &value, &sorted, &selection, &mut got, &mut shape)
                .unwrap()
                .expect("a version 2 value");
            let mut again = NumberRow::default();
            again.reset(names.len());
            decode_numbers(&key, &value, &sorted, &selection, &mut again, &mut shape).unwrap();
            for c in 0..names.len() {
                prop_assert_eq!(again.column(c), got.column(c), "column {} from the kept shape", c);
            }

            let mut buf = RowBuf::default();
            buf.pairs.push((key.clone().into(), value.clone().into()));
            crate::store::format::packed::decode(0, &mut buf, 0, None, &QualifierFilter::All, Prune::NONE).unwrap();
            select(&gc, &filter, now, &mut buf, 0);
            // A decode that leaves out what the read drops anyway selects
            // the same cells.
            let mut pruned = RowBuf::default();
            pruned.pairs.push((key.clone().into(), value.clone().into()));
            crate::store::format::packed::decode(0, &mut pruned, 0, None, &QualifierFilter::All, Prune::of(&gc, &filter)).unwrap();
            select(&gc, &filter, now, &mut pruned, 0);
            let cells = |buf: &RowBuf| -> Vec<(Vec<u8>, i64, Vec<u8>, bool)> {
                buf.view()
                    .cells()
                    .map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec(), c.first))
                    .collect()
            };
            prop_assert_eq!(cells(&pruned), cells(&buf), "pruned by {:?}", Prune::of(&gc, &filter));
            let wanted: Vec<(usize, Vec<u8>)> = names.iter().map(|q| (0, q.clone())).collect();
            let mut want = NumberRow::default();
            want.reset(names.len());
            want.take_cells(&buf.view(), &wanted);
            for c in 0..names.len() {
                prop_assert_eq!(got.column(c), want.column(c), "column {}", c);
            }
            prop_assert_eq!(got.misfit(), want.misfit());
            prop_assert_eq!(selected, !buf.cells.is_empty(), "whether any cell is selected");
        }

        /// A row of a column-wise block reads as the PACKED value it was,
        /// whatever the selection, with one shape kept across both kinds
        /// of rows.
        #[test]
        fn tall_block_rows_read_as_their_values(
            columns in prop::collection::btree_map(0u8..6, 0u8..3, 1..5),
            times in prop::collection::vec((0i64..40_000, 0i64..3), 1..12),
            wanted in prop::collection::vec(0u8..6, 0..4),
            read in prop::option::of(prop::collection::btree_set(0u8..6, 0..4)),
            age in prop::option::of(0i64..40_000),
            range in prop::option::of((0i64..40_000, 0i64..40_000)),
            per_column in prop::option::of(0usize..2),
            seed in any::<i64>(),
        ) {
            let values: Vec<Vec<u8>> = times
                .iter()
                .enumerate()
                .map(|(r, &(time, spread))| {
                    let mut cells = Cells::new();
                    for (j, (&q, &kind)) in columns.iter().enumerate() {
                        let x = seed.wrapping_add(r as i64 * 7919 + j as i64) % 100_000;
                        let value = match kind {
                            0 => (x as f64 / 100.0).to_be_bytes().to_vec(),
                            1 => x.to_be_bytes().to_vec(),
                            _ => format!("s{x}").into_bytes(),
                        };
                        let ts = time + spread * j as i64;
                        cells.insert((qualifier(q), Reverse(ts)), value);
                    }
                    encode(b"r", "f", &cells).unwrap().unwrap()
                })
                .collect();
            let mut body = Vec::new();
            crate::store::format::packed::encode_tall(&values, &mut body).expect("tall rows");
            let tall = Tall::parse(&body, 0, values.len()).unwrap();
            let gc = match age {
                Some(a) => GcPolicy::MaxAge(a),
                None => GcPolicy::KeepAll,
            };
            let now = 50_000;
            let (filter, names, sorted) = read_of(range, per_column, read.as_ref(), &wanted);
            let keep = |times: &[i64]| window(&gc, &filter, now, times);
            let selects = |q: &[u8]| filter.qualifiers.matches(q);
            let keeps_all = keeps_every_cell(&gc, &filter);
            let selection = Selection { selects: &selects, keep: &keep, keeps_all };
            let mut shape = Shape::default();
            for (r, value) in values.iter().enumerate() {
                let mut want = NumberRow::default();
                want.reset(names.len());
                let want_any = decode_numbers(b"r", value, &sorted, &selection, &mut want, &mut shape)
                    .unwrap()
                    .unwrap();
                if r % 2 == 1 {
                    // A row of another shape read between: the block's
                    // shape is found again.
                    let mut cells = Cells::new();
                    cells.insert((qualifier(9), Reverse(1)), 1i64.to_be_bytes().to_vec());
                    let other = encode(b"o", "f", &cells).unwrap().unwrap();
                    let mut scratch = NumberRow::default();
                    scratch.reset(names.len());
                    decode_numbers(b"o", &other, &sorted, &selection, &mut scratch, &mut shape).unwrap();
                }
                let mut got = NumberRow::default();
                got.reset(names.len());
                let any = decode_tall_numbers(b"k", &tall, &body, r, &sorted, &selection, &mut got, &mut shape)
                    .unwrap();
                prop_assert_eq!(any, want_any, "row {}: whether any cell is selected", r);
                for c in 0..names.len() {
                    prop_assert_eq!(got.column(c), want.column(c), "row {} column {}", r, c);
                }
                prop_assert_eq!(got.misfit(), want.misfit());
            }
        }
    }
}
