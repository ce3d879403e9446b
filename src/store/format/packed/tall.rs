//! Tall rows stored column-wise: the body of a block (`format/blocks`)
//! whose rows are all *tall* (each column holds one cell) and of one shape
//! (the same columns, their qualifiers stored alike), as a tall table's
//! rows and a serialized layout's are. Their values are stored as the
//! block's columns, each one segment of its rows' values, so that a block
//! is encoded with one segment a column instead of one a row, a scan
//! decodes a column of a block's rows as one run, and what repeats from row to
//! row (a series' timestamps a minute apart, a measure's few decimals)
//! takes the bits its change needs.
//!
//! ```text
//! body = varint S, S bytes: the rows' shape: a PACKED value's bytes after
//!          its newest timestamp up to its timestamps (column count C,
//!          cell count C, the qualifiers, the run of counts, all ones)
//!        run of R numbers: each row's newest timestamp
//!        run of R × C numbers: each cell's age (its row's newest
//!          timestamp minus its own), column by column
//!        run of R × C numbers: each value's length, column by column
//!        C + 1 × u32 LE: where each column's segment starts, from the
//!          first segment's start (the last: where the segments end)
//!        C segments (values.rs): column j's R values, in row order
//! ```
//!
//! A row is lent as the PACKED value it was ([`Tall::row_value`]): the
//! same header, its runs, and one raw segment of its values. The numbers
//! read decodes a block's wanted columns once and takes each row's cells
//! from them ([`Tall::column`]).

use super::layout::{MAX_CELLS, VERSION, newest};
use super::qualifiers::{Lies, Qualifiers};
use super::runs::{Plan, Run, put_varint, varint};
use super::values::{self, Piece, Segments};
use crate::store::format::row::{CellPos, Place, RowBuf};
use crate::store::request::QualifierFilter;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A PACKED value's parts, when it is a tall row of the version written.
struct TallRow<'a> {
    shape: &'a [u8],
    columns: usize,
    newest: i64,
    ages: Run<'a>,
    lengths: Run<'a>,
    values_at: usize,
}

/// The column count of a shape (see the layout), read from `value` at
/// `*at` (past the newest timestamp) and checked tall; `at` ends past it.
fn tall_shape(value: &[u8], at: &mut usize) -> Option<usize> {
    let columns = usize::try_from(varint(value, at)?).ok()?;
    let n = usize::try_from(varint(value, at)?).ok()?;
    if columns == 0 || columns != n || n > MAX_CELLS {
        return None;
    }
    Qualifiers::read(value, at, columns, VERSION)?;
    let counts = Run::read(value, at, columns)?;
    counts.all_equal(0, columns, 1).then_some(columns)
}

/// A PACKED value's shape (see the layout), if it is a tall row of the
/// version written: rows of one shape may share a column-wise block.
pub(crate) fn shape_of(value: &[u8]) -> Option<&[u8]> {
    if value.first() != Some(&VERSION) || value.len() < 9 {
        return None;
    }
    let mut at = 9;
    tall_shape(value, &mut at)?;
    Some(&value[9..at])
}

fn tall_row(value: &[u8]) -> Option<TallRow<'_>> {
    if value.first() != Some(&VERSION) {
        return None;
    }
    let newest = newest(value)?;
    let mut at = 9;
    let columns = tall_shape(value, &mut at)?;
    let shape = &value[9..at];
    let ages = Run::read(value, &mut at, columns)?;
    Run::read(value, &mut at, 0)?;
    let lengths = Run::read(value, &mut at, columns)?;
    Some(TallRow {
        shape,
        columns,
        newest,
        ages,
        lengths,
        values_at: at,
    })
}

/// Appends the body of a block of `values` (PACKED values, at least one)
/// to `out`, if they are all tall rows of one shape; `None`, with `out`
/// as it was, if not.
pub(crate) fn encode<V: AsRef<[u8]>>(values: &[V], out: &mut Vec<u8>) -> Option<()> {
    let first = tall_row(values.first()?.as_ref())?;
    let (shape, c, r) = (first.shape, first.columns, values.len());
    let cells = r.checked_mul(c)?;
    let mut newest = Vec::with_capacity(r);
    let mut ages = vec![0i64; cells];
    // Each column's values, back to back, and where each ends.
    let mut bytes: Vec<Vec<u8>> = vec![Vec::new(); c];
    let mut ends: Vec<Vec<usize>> = vec![Vec::with_capacity(r); c];
    for (i, value) in values.iter().enumerate() {
        let value = value.as_ref();
        let row = tall_row(value).filter(|row| row.shape == shape)?;
        newest.push(row.newest);
        let mut segments = Segments::new(value, row.values_at);
        for j in 0..c {
            ages[j * r + i] = row.ages.get(j);
            let len = usize::try_from(row.lengths.get(j)).ok()?;
            match segments.next(len)? {
                Piece::Value(s, e) => bytes[j].extend_from_slice(value.get(s..e)?),
                Piece::Bytes(b) => bytes[j].extend_from_slice(&b),
            }
            ends[j].push(bytes[j].len());
        }
        if segments.end()? != value.len() {
            return None;
        }
    }
    let columns: Vec<Vec<&[u8]>> = (0..c)
        .map(|j| {
            let mut from = 0;
            ends[j]
                .iter()
                .map(|&end| {
                    let value = &bytes[j][from..end];
                    from = end;
                    value
                })
                .collect()
        })
        .collect();
    write_body(shape, &newest, &ages, &columns, out);
    Some(())
}

/// Appends the body of a block of tall rows of the shape `shape` (see
/// [`write_shape`]): each row's newest timestamp, each cell's age
/// (column by column: cell `j · rows + i` is row i's of column j), and
/// each column's values in row order.
pub(crate) fn write_body(
    shape: &[u8],
    newest: &[i64],
    ages: &[i64],
    columns: &[Vec<&[u8]>],
    out: &mut Vec<u8>,
) {
    put_varint(out, shape.len() as u64);
    out.extend_from_slice(shape);
    Plan::write_run(newest, out);
    Plan::write_run(ages, out);
    let lengths: Vec<i64> = columns
        .iter()
        .flat_map(|column| column.iter().map(|v| v.len() as i64))
        .collect();
    Plan::write_run(&lengths, out);
    let c = columns.len();
    let table = out.len();
    out.resize(table + 4 * (c + 1), 0);
    let start = out.len();
    for (j, column) in columns.iter().enumerate() {
        let at = (out.len() - start) as u32;
        out[table + 4 * j..table + 4 * j + 4].copy_from_slice(&at.to_le_bytes());
        values::write_segment(column, out);
    }
    let at = (out.len() - start) as u32;
    out[table + 4 * c..table + 4 * c + 4].copy_from_slice(&at.to_le_bytes());
}

/// A value of a column as the numbers read takes it: an 8-byte value as
/// its big-endian word, any other by where it lies in the block.
#[derive(Clone, Copy)]
pub(crate) enum Word {
    Word(u64),
    Other(usize, usize),
}

/// One column of a block decoded: its rows' timestamps and values.
pub(crate) struct Column {
    pub times: Vec<i64>,
    /// Each row's value as its big-endian word (0 for a value that is
    /// not 8 bytes long).
    pub words: Vec<u64>,
    /// The rows whose values are not 8 bytes long, in order, with where
    /// each lies in the block.
    pub others: Vec<(usize, usize, usize)>,
}

impl Column {
    /// Row `i`'s value.
    pub fn word(&self, i: usize) -> Word {
        match self.others.binary_search_by_key(&i, |o| o.0) {
            Ok(k) => Word::Other(self.others[k].1, self.others[k].2),
            Err(_) => Word::Word(self.words[i]),
        }
    }

    /// The first of rows `rows` whose value is not 8 bytes long, if any.
    pub fn first_other(&self, rows: Range<usize>) -> Option<usize> {
        let k = self.others.partition_point(|o| o.0 < rows.start);
        self.others.get(k).map(|o| o.0).filter(|&i| i < rows.end)
    }
}

/// A tall body as read (offsets into the block's value, checked to lie in
/// it), with the columns decoded so far.
pub(crate) struct Tall {
    /// This body's own number among those read (from 1).
    id: u64,
    rows: usize,
    columns: usize,
    /// A PACKED value's header with the shape (its newest timestamp
    /// zero): what a numbers read parses the shape from.
    header: Vec<u8>,
    newest: usize,
    ages: usize,
    lengths: usize,
    /// Where the segments start, and each column's segment.
    segments: Vec<Range<usize>>,
    decoded: Vec<OnceLock<Option<Column>>>,
    /// Per column, whether a cell of it was lent before (see
    /// [`Tall::cell`]).
    lent: Vec<AtomicBool>,
}

/// Row `row` of a column-wise block (`tall`, read from the block's value
/// `value`, which is pair `index` of `buf`) decoded into `buf`'s cells as
/// [`super::decode`] decodes the PACKED value the row was, with no such
/// value made: the same cells (a column's one, `first`), qualifiers,
/// timestamps and values (an 8-byte value inline, any other where it lies
/// in the block), the same columns and values read (`values`,
/// `columns_read`, `newest`). `None` when the block is malformed.
#[allow(
    clippy::too_many_arguments,
    reason = "the per-row state of a hot decode, passed as it is rather than packed per call"
)]
pub(crate) fn decode_row_cells(
    family: u32,
    tall: &Tall,
    value: &[u8],
    index: u32,
    row: usize,
    buf: &mut RowBuf,
    values: Option<&[Vec<u8>]>,
    columns_read: &QualifierFilter,
    newest: Option<usize>,
) -> Option<()> {
    let header = tall.header();
    let mut at = 9;
    let columns = usize::try_from(varint(header, &mut at)?).ok()?;
    varint(header, &mut at)?;
    let mut qualifiers = Qualifiers::read(header, &mut at, columns, header[0])?;
    let RowBuf {
        cells,
        names,
        scratch,
        ..
    } = buf;
    let built = match qualifiers {
        Qualifiers::Numbered { .. } => Some(names.of(header, &mut qualifiers, columns)?),
        Qualifiers::Listed(_) => None,
    };
    let span =
        |start: usize, end: usize| Some((u32::try_from(start).ok()?, u32::try_from(end).ok()?));
    cells.reserve(columns);
    for j in 0..columns {
        let (qualifier, name) = match built {
            Some(first) => {
                let (start, end) = names.span(first + j)?;
                (
                    Place::Name { start, end },
                    names.bytes(start as usize..end as usize),
                )
            }
            // Listed: the row's copy of it, as no pair holds the shape.
            None => match qualifiers.next(header, &mut Vec::new())? {
                Lies::Value(range) => {
                    let name = &header[range];
                    let (start, end) = span(scratch.len(), scratch.len() + name.len())?;
                    scratch.extend_from_slice(name);
                    (Place::Scratch { start, end }, name)
                }
                Lies::Built(_) => return None,
            },
        };
        let read = matches!(columns_read, QualifierFilter::All) || columns_read.matches(name);
        if !read || newest == Some(0) {
            continue;
        }
        let wanted = values.is_none_or(|v| v.binary_search_by(|q| q.as_slice().cmp(name)).is_ok());
        let (timestamp, word) = tall.cell(value, j, row)?;
        let value = match word {
            _ if !wanted => Place::Value {
                pair: index,
                start: 0,
                end: 0,
            },
            Word::Word(word) => Place::Inline(word.to_be_bytes()),
            Word::Other(start, end) => {
                let (start, end) = span(start, end)?;
                Place::Value {
                    pair: index,
                    start,
                    end,
                }
            }
        };
        cells.push(CellPos {
            family,
            timestamp,
            first: true,
            qualifier,
            value,
        });
    }
    Some(())
}

/// The timestamp of row `i`'s cell of column `j` in a block of `r` rows:
/// the row's newest less the cell's age; `None` when that is not a valid
/// timestamp.
fn row_time(newest: &Run<'_>, ages: &Run<'_>, r: usize, j: usize, i: usize) -> Option<i64> {
    let age = ages.get(j * r + i);
    newest
        .get(i)
        .checked_sub(age)
        .filter(|t| age >= 0 && *t >= 0)
}

/// The little-endian u32 at `at` of `bytes`, if they hold one there.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes(b.try_into().ok()?) as usize)
}

impl Tall {
    /// Reads the body of `rows` rows at `at` of `value`, which it ends;
    /// `None` when it is malformed.
    pub fn parse(value: &[u8], mut at: usize, rows: usize) -> Option<Tall> {
        let len = usize::try_from(varint(value, &mut at)?).ok()?;
        let shape = value.get(at..at.checked_add(len)?)?;
        at += len;
        let mut header = Vec::with_capacity(9 + len);
        header.push(VERSION);
        header.extend_from_slice(&[0; 8]);
        header.extend_from_slice(shape);
        let mut end = 9;
        let columns = tall_shape(&header, &mut end)?;
        if end != header.len() {
            return None;
        }
        let cells = rows.checked_mul(columns)?;
        let newest = at;
        Run::read(value, &mut at, rows)?;
        let ages = at;
        Run::read(value, &mut at, cells)?;
        let lengths = at;
        Run::read(value, &mut at, cells)?;
        let start = at.checked_add(columns.checked_add(1)?.checked_mul(4)?)?;
        let mut segments = Vec::with_capacity(columns);
        let mut previous = start;
        for j in 0..=columns {
            let here = start.checked_add(u32_at(value, at + 4 * j)?)?;
            let first_ok = j > 0 || here == start;
            if here < previous || here > value.len() || !first_ok {
                return None;
            }
            if j > 0 {
                segments.push(previous..here);
            }
            previous = here;
        }
        if previous != value.len() {
            return None;
        }
        static READ: AtomicU64 = AtomicU64::new(1);
        Some(Tall {
            id: READ.fetch_add(1, Ordering::Relaxed),
            rows,
            columns,
            header,
            newest,
            ages,
            lengths,
            segments,
            decoded: (0..columns).map(|_| OnceLock::new()).collect(),
            lent: (0..columns).map(|_| AtomicBool::new(false)).collect(),
        })
    }

    /// This body's own number among those read in the process: two
    /// bodies read never share one.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A PACKED value's header with the rows' shape, its newest
    /// timestamp zero.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    fn runs<'a>(&self, value: &'a [u8]) -> Option<(Run<'a>, Run<'a>, Run<'a>)> {
        let cells = self.rows * self.columns;
        let newest = Run::read(value, &mut self.newest.clone(), self.rows)?;
        let ages = Run::read(value, &mut self.ages.clone(), cells)?;
        let lengths = Run::read(value, &mut self.lengths.clone(), cells)?;
        Some((newest, ages, lengths))
    }

    /// Column `j` of the block `value` (the value this was parsed from),
    /// decoded once; `None` when it is malformed.
    pub fn column(&self, value: &[u8], j: usize) -> Option<&Column> {
        self.decoded
            .get(j)?
            .get_or_init(|| self.decode_column(value, j))
            .as_ref()
    }

    /// Row `i`'s cell of column `j` of the block `value`: its timestamp
    /// and value. The first cell of a column lent is read alone; the next
    /// decodes the column once for every later one. So a read that wants
    /// one row of a block (a series' latest event) reads one cell a
    /// column, and a scan of its rows one cell more than the columns.
    pub fn cell(&self, value: &[u8], j: usize, i: usize) -> Option<(i64, Word)> {
        let decoded = self.decoded.get(j)?;
        if decoded.get().is_none() && !self.lent.get(j)?.swap(true, Ordering::Relaxed) {
            return self.read_cell(value, j, i);
        }
        let column = decoded
            .get_or_init(|| self.decode_column(value, j))
            .as_ref()?;
        Some((*column.times.get(i)?, column.word(i)))
    }

    /// [`Tall::cell`] read from the block alone, its column not decoded.
    fn read_cell(&self, value: &[u8], j: usize, i: usize) -> Option<(i64, Word)> {
        let r = self.rows;
        if i >= r {
            return None;
        }
        let (newest, ages, lengths) = self.runs(value)?;
        let time = row_time(&newest, &ages, r, j, i)?;
        let segment = self.segments.get(j)?;
        let mut segments = Segments::new(value.get(..segment.end)?, segment.start);
        segments.skip_many(&lengths, j * r, i)?;
        let len = usize::try_from(lengths.get(j * r + i)).ok()?;
        let word = match segments.next_word(len)? {
            Ok(word) => Word::Word(word),
            Err((start, end)) => Word::Other(start, end),
        };
        Some((time, word))
    }

    fn decode_column(&self, value: &[u8], j: usize) -> Option<Column> {
        let (newest, ages, lengths) = self.runs(value)?;
        let r = self.rows;
        let segment = self.segments.get(j)?;
        let mut segments = Segments::new(value.get(..segment.end)?, segment.start);
        let mut column = Column {
            times: Vec::with_capacity(r),
            words: Vec::with_capacity(r),
            others: Vec::new(),
        };
        match (newest.constant(), ages.all_zero()) {
            // Rows written at one time (a load), every cell at its row's:
            // one timestamp for all.
            (Some(t), true) if t >= 0 => column.times.resize(r, t),
            _ => {
                for i in 0..r {
                    column.times.push(row_time(&newest, &ages, r, j, i)?);
                }
            }
        }
        // The values a segment at a time, each value that is not 8 bytes
        // long a stop.
        while column.words.len() < r {
            let i = column.words.len();
            match segments.words(&lengths, j * r + i, r - i, &mut column.words)? {
                Ok(()) => {}
                Err((s, e)) => {
                    if column.others.is_empty() {
                        // A column of other values has them all so.
                        column.others.reserve(r - i);
                    }
                    column.others.push((column.words.len(), s, e));
                    column.words.push(0);
                }
            }
        }
        (segments.end()? == segment.end).then_some(column)
    }

    /// Row `i`'s PACKED value, appended to `out`; `None` when the body is
    /// malformed.
    pub fn row_value(&self, value: &[u8], i: usize, out: &mut Vec<u8>) -> Option<()> {
        let runs = self.runs(value)?;
        let lengths = &runs.2;
        let r = self.rows;
        self.write_row(value, &runs, i, out, |j| {
            let segment = self.segments.get(j)?;
            let mut segments = Segments::new(value.get(..segment.end)?, segment.start);
            segments.skip_many(lengths, j * r, i)?;
            segments.next(usize::try_from(lengths.get(j * r + i)).ok()?)
        })
    }

    /// Every row's PACKED value, back to back, and where each ends;
    /// `None` when the body is malformed.
    pub fn row_values(&self, value: &[u8]) -> Option<(Vec<u8>, Vec<usize>)> {
        let runs = self.runs(value)?;
        let (r, c) = (self.rows, self.columns);
        // Each column's values, read once.
        let mut pieces: Vec<Piece> = Vec::with_capacity(r * c);
        for j in 0..c {
            let segment = self.segments.get(j)?;
            let mut segments = Segments::new(value.get(..segment.end)?, segment.start);
            for i in 0..r {
                let len = usize::try_from(runs.2.get(j * r + i)).ok()?;
                pieces.push(segments.next(len)?);
            }
            if segments.end()? != segment.end {
                return None;
            }
        }
        let mut out = Vec::with_capacity(value.len() * 3);
        let mut ends = Vec::with_capacity(r);
        for i in 0..r {
            self.write_row(value, &runs, i, &mut out, |j| {
                pieces.get(j * r + i).copied()
            })?;
            ends.push(out.len());
        }
        Some((out, ends))
    }

    /// Appends row `i`'s PACKED value (`runs`: the body's, from `value`),
    /// its values given by column, one raw segment of them.
    fn write_row(
        &self,
        value: &[u8],
        (newest, ages, lengths): &(Run<'_>, Run<'_>, Run<'_>),
        i: usize,
        out: &mut Vec<u8>,
        mut piece: impl FnMut(usize) -> Option<Piece>,
    ) -> Option<()> {
        let (r, c) = (self.rows, self.columns);
        out.push(VERSION);
        out.extend_from_slice(&newest.get(i).to_be_bytes());
        out.extend_from_slice(&self.header[9..]);
        let of_row = |run: &Run<'_>| (0..c).map(|j| run.get(j * r + i)).collect::<Vec<i64>>();
        Plan::write_run(&of_row(ages), out);
        Plan::write_run(&[], out);
        Plan::write_run(&of_row(lengths), out);
        values::write_raw_header(c, out);
        for j in 0..c {
            match piece(j)? {
                Piece::Value(s, e) => out.extend_from_slice(value.get(s..e)?),
                Piece::Bytes(b) => out.extend_from_slice(&b),
            }
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cells, cells_of, encode as encode_row};
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;

    fn tall_value(row: u32, columns: &[(u8, u8)], seed: i64) -> Vec<u8> {
        tall_value_named(row, columns, seed, |q| vec![b'a' + q])
    }

    /// [`tall_value`] with qualifiers named by `name`.
    fn tall_value_named(
        row: u32,
        columns: &[(u8, u8)],
        seed: i64,
        name: impl Fn(u8) -> Vec<u8>,
    ) -> Vec<u8> {
        let mut cells = Cells::new();
        for (i, &(q, kind)) in columns.iter().enumerate() {
            let x = seed
                .wrapping_mul(31)
                .wrapping_add(i as i64 * 7 + row as i64)
                % 10_000;
            let value = match kind {
                0 => (x as f64 / 10.0).to_be_bytes().to_vec(),
                1 => x.to_be_bytes().to_vec(),
                _ => format!("v{x}").into_bytes(),
            };
            let ts = 60_000_000 * i64::from(row) + if kind == 1 { 5 } else { 0 };
            cells.insert((name(q), Reverse(ts)), value);
        }
        encode_row(b"r", "f", &cells).unwrap().unwrap()
    }

    proptest! {
        /// Tall rows of one shape come back as the cells they held, one
        /// row at a time or all, and their columns as their values.
        #[test]
        fn tall_rows_read_back(
            columns in prop::collection::btree_map(0u8..20, 0u8..3, 1..6),
            rows in 1u32..70,
            seed in any::<i64>(),
        ) {
            let columns: Vec<(u8, u8)> = columns.into_iter().collect();
            let values: Vec<Vec<u8>> = (0..rows).map(|r| tall_value(r, &columns, seed)).collect();
            let mut body = vec![0xaa];
            encode(&values, &mut body).expect("tall rows of one shape");
            let tall = Tall::parse(&body, 1, values.len()).expect("a well-formed body");
            let (all, ends) = tall.row_values(&body).unwrap();
            let mut from = 0;
            for (i, value) in values.iter().enumerate() {
                let mut one = Vec::new();
                tall.row_value(&body, i, &mut one).unwrap();
                prop_assert_eq!(&all[from..ends[i]], &one[..]);
                from = ends[i];
                let want = cells_of(b"r", value).unwrap();
                prop_assert_eq!(cells_of(b"r", &one).unwrap(), want.clone());
                for (j, ((_, Reverse(ts)), v)) in want.iter().enumerate() {
                    let column = tall.column(&body, j).unwrap();
                    prop_assert_eq!(column.times[i], *ts);
                    match column.word(i) {
                        Word::Word(w) => prop_assert_eq!(&w.to_be_bytes()[..], &v[..]),
                        Word::Other(s, e) => prop_assert_eq!(&body[s..e], &v[..]),
                    }
                }
            }
        }
    }

    /// A row's cells taken from the block's columns are those its PACKED
    /// value decodes to, whatever the read wants of them: the values of
    /// some columns, some columns only, the newest 0, 1 or all cells.
    #[test]
    fn tall_rows_decode_as_their_values() {
        use super::super::{QualifierFilter, RowBuf, decode};
        use proptest::test_runner::{Config, TestRunner};
        let strategy = (
            prop::collection::btree_map(0u8..20, 0u8..3, 1..6),
            1u32..70,
            any::<i64>(),
            any::<bool>(),
            prop::option::of(prop::collection::btree_set(0u8..20, 0..4)),
            prop::option::of(prop::collection::btree_set(0u8..20, 0..4)),
            prop::option::of(0usize..3),
        );
        TestRunner::new(Config::default())
            .run(
                &strategy,
                |(columns, rows, seed, numbered, values, read, newest)| {
                    let name = |q: u8| match numbered {
                        true => format!("{q:02}").into_bytes(),
                        false => vec![b'a' + q],
                    };
                    let columns: Vec<(u8, u8)> = columns.into_iter().collect();
                    let values_of: Vec<Vec<u8>> = (0..rows)
                        .map(|r| tall_value_named(r, &columns, seed, name))
                        .collect();
                    let mut body = vec![0xaa];
                    encode(&values_of, &mut body).expect("tall rows of one shape");
                    let tall = Tall::parse(&body, 1, values_of.len()).expect("a well-formed body");
                    let values: Option<Vec<Vec<u8>>> =
                        values.map(|v| v.into_iter().map(name).collect());
                    let read = match read {
                        Some(set) => QualifierFilter::Set(set.into_iter().map(name).collect()),
                        None => QualifierFilter::All,
                    };
                    let cells = |buf: &RowBuf| {
                        buf.view()
                            .cells()
                            .map(|c| {
                                (
                                    c.family,
                                    c.qualifier.to_vec(),
                                    c.timestamp,
                                    c.value.to_vec(),
                                    c.first,
                                )
                            })
                            .collect::<Vec<_>>()
                    };
                    let (mut by_value, mut by_columns) = (RowBuf::default(), RowBuf::default());
                    for (i, value) in values_of.iter().enumerate() {
                        by_value.clear();
                        by_value
                            .pairs
                            .push((b"r".as_slice().into(), value.as_slice().into()));
                        let prune = crate::store::format::Prune {
                            newest,
                            ..crate::store::format::Prune::NONE
                        };
                        decode(3, &mut by_value, 0, values.as_deref(), &read, prune).unwrap();
                        // From the block read row after row (its columns
                        // decoded after the first), and from a block read
                        // for this row alone (its cells read one by one).
                        let alone = Tall::parse(&body, 1, values_of.len()).unwrap();
                        for (tall, how) in [(&tall, "scanned"), (&alone, "alone")] {
                            by_columns.clear();
                            by_columns
                                .pairs
                                .push((b"r".as_slice().into(), body.as_slice().into()));
                            decode_row_cells(
                                3,
                                tall,
                                &body,
                                0,
                                i,
                                &mut by_columns,
                                values.as_deref(),
                                &read,
                                newest,
                            )
                            .expect("the row's cells");
                            prop_assert_eq!(
                                cells(&by_columns),
                                cells(&by_value),
                                "row {} {}",
                                i,
                                how
                            );
                        }
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn rows_of_other_shapes_are_not_tall() {
        let a = tall_value(0, &[(0, 0), (1, 0)], 1);
        let b = tall_value(1, &[(0, 0), (2, 0)], 1);
        assert!(encode(&[&a, &b], &mut Vec::new()).is_none());
        let mut cells = Cells::new();
        cells.insert((b"q".to_vec(), Reverse(2)), b"x".to_vec());
        cells.insert((b"q".to_vec(), Reverse(1)), b"y".to_vec());
        let two = encode_row(b"r", "f", &cells).unwrap().unwrap();
        assert!(encode(&[&two], &mut Vec::new()).is_none());
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let values: Vec<Vec<u8>> = (0..5)
            .map(|r| tall_value(r, &[(0, 0), (1, 2)], 9))
            .collect();
        let mut body = Vec::new();
        encode(&values, &mut body).unwrap();
        for cut in 0..body.len() {
            assert!(Tall::parse(&body[..cut], 0, 5).is_none());
        }
        for i in 0..body.len() {
            for byte in [0u8, 1, 0x7f, 0xff] {
                let mut bad = body.clone();
                bad[i] = byte;
                if let Some(tall) = Tall::parse(&bad, 0, 5) {
                    let _ = tall.row_values(&bad);
                    for r in 0..5 {
                        let _ = tall.row_value(&bad, r, &mut Vec::new());
                    }
                    for j in 0..2 {
                        let _ = tall.column(&bad, j);
                    }
                    for r in 0..6 {
                        for j in 0..3 {
                            let alone = Tall::parse(&bad, 0, 5).unwrap();
                            let _ = alone.cell(&bad, j, r);
                            let _ = alone.cell(&bad, j, r);
                        }
                    }
                }
            }
        }
    }
}
