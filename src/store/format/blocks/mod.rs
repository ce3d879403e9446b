//! Blocks: runs of a PACKED family's rows merged into one pair each, in a
//! second keyspace of the family, so that a scan pays fjall's cost per
//! pair once per run of rows instead of once per row.
//!
//! ```text
//! key   = the escaped key of the block's last row
//! value = 0x01                                   block version
//!         u32 LE: row count R (at least one)
//!         R + 1 × u32 LE: where each row's entry starts in the body
//!           (the last: the body's length)
//!         body: per row, ascending by key:
//!           u32 LE key length, the escaped row key, the row's PACKED value
//! ```
//!
//! A block of tall rows of one shape (a tall table's) is stored
//! column-wise instead, version 3: the rows' keys, each as what it adds
//! to the key before (`packed/keys.rs`), then their values as the
//! block's columns (`packed/tall.rs` has that body's layout). Version 2,
//! written before, held the keys whole after an offset table; it is read
//! as before.
//!
//! Blocks are written only by a merge (`COMPACT TABLE`, and a format
//! change moving rows out) under every row lock; between merges they are
//! read-only. Writes go to the family's own keyspace as before, and a
//! row there *shadows* its copy in a block: a read takes the row keyspace's
//! pair where both hold the row, and an empty value there (a *tombstone*,
//! never a PACKED value) hides a row a block holds. A read of the family
//! merges the two keyspaces by row key ([`Pairs`]) and lends each block
//! row as a *virtual pair*: its key and value are slices of the block's
//! value (column-wise, of the PACKED values made of its columns when a
//! reader asks for one; a numbers read takes the columns, [`TallRow`]),
//! so everything downstream decodes it as the PACKED pair it is.

mod block;
mod cursor;

use super::packed;
use crate::error::Result;
pub(crate) use block::{Block, TallRow};
use block::{COLUMNS_SHARED, ROWS, corrupt};
pub(crate) use cursor::{Merged, Pairs};
use fjall::{Keyspace, Readable, Slice, Snapshot};

/// A block closes at this many rows...
pub(crate) const BLOCK_ROWS: usize = 512;
/// ...or once its rows hold this many bytes.
pub(crate) const BLOCK_BYTES: usize = 64 << 10;

/// How the values of rows encoded `raw` (see
/// `FamilyFormat::fresh_pairs`) take their smallest form, given each
/// row's (escaped key, value).
pub(crate) type Compress<'a> = &'a (dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>> + Sync);

/// Encodes rows (escaped key, PACKED value), ascending by key and at
/// least one, into a block's value: column-wise when they are tall rows
/// of one shape, else one after another (then values encoded raw are
/// compressed with `compress` first).
pub(crate) fn encode<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    rows: &[(K, V)],
    compress: Option<Compress<'_>>,
) -> Result<Vec<u8>> {
    let values: Vec<&[u8]> = rows.iter().map(|(_, v)| v.as_ref()).collect();
    let mut out = Vec::with_capacity(64 + values.len() * 24);
    let keys: Vec<&[u8]> = rows.iter().map(|(k, _)| k.as_ref()).collect();
    columns_header(&mut out, &keys);
    if packed::encode_tall(&values, &mut out).is_some() {
        return Ok(out);
    }
    if let Some(compress) = compress {
        let rows = rows
            .iter()
            .map(|(k, v)| Ok((k.as_ref(), compress(k.as_ref(), v.as_ref())?)))
            .collect::<Result<Vec<_>>>()?;
        return encode(&rows, None);
    }
    let body: usize = rows
        .iter()
        .map(|(k, v)| 4 + k.as_ref().len() + v.as_ref().len())
        .sum();
    out.clear();
    out.reserve(5 + 4 * (rows.len() + 1) + body);
    let entry = |(k, v): &(K, V)| 4 + k.as_ref().len() + v.as_ref().len();
    header(&mut out, ROWS, rows.iter().map(entry));
    for (k, v) in rows {
        let (k, v) = (k.as_ref(), v.as_ref());
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    Ok(out)
}

/// Writes a column-wise block's version, row count and rows' keys (its
/// columns follow).
fn columns_header(out: &mut Vec<u8>, keys: &[&[u8]]) {
    out.push(COLUMNS_SHARED);
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    packed::keys::write(keys, out);
}

/// Writes a block's version, row count and offset table: where each of
/// the entries `lengths` long starts, and where the last ends.
fn header(out: &mut Vec<u8>, version: u8, lengths: impl ExactSizeIterator<Item = usize>) {
    out.push(version);
    out.extend_from_slice(&(lengths.len() as u32).to_le_bytes());
    let mut at = 0usize;
    for len in lengths {
        out.extend_from_slice(&(at as u32).to_le_bytes());
        at += len;
    }
    out.extend_from_slice(&(at as u32).to_le_bytes());
}

/// The first block holding rows at or after `key` (escaped), its keys
/// checked; `None` past the last block.
fn block_from(snapshot: &Snapshot, blocks: &Keyspace, key: &[u8]) -> Result<Option<Block>> {
    let Some(guard) = snapshot.range(blocks, key..).next() else {
        return Ok(None);
    };
    let (key, value) = guard.into_inner()?;
    let block = Block::parse(key, value)?;
    block.check_keys()?;
    Ok(Some(block))
}

/// The row `escaped_row`'s value in `block`, if it holds the row.
fn value_in(block: &Block, escaped_row: &[u8]) -> Result<Option<Slice>> {
    let i = block.lower_bound(escaped_row);
    match i < block.len() && block.row_key(i) == escaped_row {
        true => block.value_of(i).map(Some),
        false => Ok(None),
    }
}

/// The block the last lookup read, kept for the next ([`LastBlock::get`]):
/// rows looked up in key order (a load over rows stored already) mostly
/// fall in one block, and reading a block makes all of its keys, so a
/// block read again for each of its rows cost a load time in proportion
/// to the block's rows. A clone starts empty.
#[derive(Default)]
pub(crate) struct LastBlock(std::sync::Mutex<Option<Kept>>);

/// A block as read, and from which snapshot and keyspace.
struct Kept {
    seqno: fjall::SeqNo,
    keyspace: Keyspace,
    block: Block,
}

impl Clone for LastBlock {
    fn clone(&self) -> LastBlock {
        LastBlock::default()
    }
}

impl LastBlock {
    /// The row `escaped_row`'s PACKED value in the family's blocks, if a
    /// block holds it: answered from the block kept when that was read
    /// from the same snapshot and keyspace and spans `escaped_row` (blocks
    /// never span each other's rows, so no other block can hold it);
    /// otherwise the block is sought and kept.
    pub(crate) fn get(
        &self,
        snapshot: &Snapshot,
        blocks: &Keyspace,
        escaped_row: &[u8],
    ) -> Result<Option<Slice>> {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(k) = kept.as_ref()
            && k.seqno == snapshot.seqno()
            && k.keyspace == *blocks
            && k.block.len() > 0
            && k.block.row_key(0) <= escaped_row
            && escaped_row <= k.block.row_key(k.block.len() - 1)
        {
            return value_in(&k.block, escaped_row);
        }
        let Some(block) = block_from(snapshot, blocks, escaped_row)? else {
            return Ok(None);
        };
        let found = value_in(&block, escaped_row);
        *kept = Some(Kept {
            seqno: snapshot.seqno(),
            keyspace: blocks.clone(),
            block,
        });
        found
    }
}

/// Whether the blocks hold any row from `first` to `last` (escaped, both
/// included).
pub(crate) fn any_in(
    snapshot: &Snapshot,
    blocks: &Keyspace,
    first: &[u8],
    last: &[u8],
) -> Result<bool> {
    let Some(block) = block_from(snapshot, blocks, first)? else {
        return Ok(false);
    };
    let i = block.lower_bound(first);
    Ok(i < block.len() && block.row_key(i) <= last)
}

/// Where new blocks of the rows `keys` (escaped, strictly ascending) may
/// go among the blocks stored: the indexes at which the runs of rows
/// between stored blocks start (after the first run, which starts at 0),
/// so that no block ever spans another's rows; `None` when a row falls
/// within a stored block's rows. One seek per stored block the rows
/// surround, and one more.
pub(crate) fn gaps<K: AsRef<[u8]>>(
    snapshot: &Snapshot,
    blocks: &Keyspace,
    keys: &[K],
) -> Result<Option<Vec<usize>>> {
    let mut cuts = Vec::new();
    let mut i = 0;
    while i < keys.len() {
        let at = keys[i].as_ref();
        let Some(block) = block_from(snapshot, blocks, at)? else {
            break;
        };
        let (first, last) = (block.row_key(0), block.row_key(block.len() - 1));
        if first <= at {
            return Ok(None);
        }
        // The rows before the block's first go in the gap before it.
        let j = i + keys[i..].partition_point(|k| k.as_ref() < first);
        if j < keys.len() && keys[j].as_ref() <= last {
            return Ok(None);
        }
        if j < keys.len() && j > 0 {
            cuts.push(j);
        }
        i = j;
    }
    Ok(Some(cuts))
}

/// Rows (escaped key, PACKED value), strictly ascending, as blocks: runs
/// of up to `block_rows` rows, closed early at [`BLOCK_BYTES`] and at each
/// of `cuts` (see [`gaps`]); (block key, block value). `compress`: as
/// [`encode`] takes it.
pub(crate) fn build<K: AsRef<[u8]> + Sync, V: AsRef<[u8]> + Sync>(
    rows: &[(K, V)],
    cuts: &[usize],
    block_rows: usize,
    compress: Option<Compress<'_>>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    // Where each block's rows start and end, then the blocks encoded,
    // spread over the cores. Blocks are also cut around runs of rows of
    // one shape (see [`SHAPE_RUN`]), so that a tall table's rows go
    // column-wise even where a row lacks a column.
    let size = |i: usize| rows[i].0.as_ref().len() + rows[i].1.as_ref().len();
    let mut spans = Spans::new(rows.len(), cuts, block_rows);
    // The shape of the rows since `run`, where it began.
    let (mut shape, mut run) = (None, 0);
    for (i, (_, value)) in rows.iter().enumerate() {
        let this = packed::shape_of(value.as_ref());
        let from = spans.from;
        if i == 0 || this != shape {
            // A block of one shape closes where its shape ends.
            if i > from && run <= from && i - from >= SHAPE_RUN {
                spans.close(i, 0);
            }
            (shape, run) = (this, i);
        } else if run > from && i + 1 - run >= SHAPE_RUN {
            // A long run of one shape starts a block of its own.
            spans.close(run, (run..i).map(size).sum());
        }
        spans.row(i, size(i));
    }
    let spans = spans.spans;
    let parts = super::super::parallel::in_parts(&spans, PARALLEL_MIN_BLOCKS, |spans| {
        spans
            .iter()
            .map(|&(from, end)| {
                let value = encode(&rows[from..end], compress)?;
                Ok((rows[end - 1].0.as_ref().to_vec(), value))
            })
            .collect::<Result<Vec<_>>>()
    });
    let mut out = Vec::with_capacity(spans.len());
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// The cells of tall rows, read where they lie.
pub(crate) trait TallCells: Sync {
    /// Row `row`'s cell of column `column` (in the shape's order): its
    /// timestamp and value.
    fn cell(&self, row: usize, column: usize) -> (i64, &[u8]);
}

/// Tall rows of one shape given by their cells, to be built into blocks
/// with no PACKED value made of each: what a bulk load of a tall table
/// brings.
pub(crate) struct TallRows<'a, C> {
    /// The rows' escaped keys, strictly ascending.
    pub keys: Vec<&'a [u8]>,
    /// Their shape (`packed::tall_shape`) and how many columns it has.
    pub shape: &'a [u8],
    pub columns: usize,
    pub cells: C,
}

impl<C: TallCells> TallRows<'_, C> {
    /// Row `i`'s cell of column `j`.
    fn cell(&self, i: usize, j: usize) -> (i64, &[u8]) {
        self.cells.cell(i, j)
    }

    /// About what row `i` takes in a block: its key and values.
    fn size(&self, i: usize) -> usize {
        let values: usize = (0..self.columns).map(|j| 2 + self.cell(i, j).1.len()).sum();
        self.keys[i].len() + values
    }

    /// The column-wise block of rows `from..end`.
    fn block(&self, from: usize, end: usize) -> Vec<u8> {
        let keys = &self.keys[from..end];
        let r = end - from;
        // Each cell taken once, a column at a time.
        let mut times = Vec::with_capacity(r * self.columns);
        let mut columns: Vec<Vec<&[u8]>> = Vec::with_capacity(self.columns);
        let mut bytes: usize = keys.iter().map(|k| k.len()).sum();
        for j in 0..self.columns {
            let mut values = Vec::with_capacity(r);
            for i in from..end {
                let (ts, v) = self.cell(i, j);
                times.push(ts);
                bytes += 2 + v.len();
                values.push(v);
            }
            columns.push(values);
        }
        let mut newest = vec![i64::MIN; r];
        for column in times.chunks_exact(r.max(1)) {
            for (n, &ts) in newest.iter_mut().zip(column) {
                *n = (*n).max(ts);
            }
        }
        let ages: Vec<i64> = times
            .chunks_exact(r.max(1))
            .flat_map(|column| column.iter().zip(&newest).map(|(ts, n)| n - ts))
            .collect();
        let mut out = Vec::with_capacity(64 + bytes / 2);
        columns_header(&mut out, keys);
        packed::write_tall_body(self.shape, &newest, &ages, &columns, &mut out);
        out
    }
}

/// [`build`] of tall rows of one shape (at least one; `cuts` and
/// `block_rows` as there): each block column-wise.
pub(crate) fn build_tall<C: TallCells>(
    rows: &TallRows<'_, C>,
    cuts: &[usize],
    block_rows: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let n = rows.keys.len();
    let mut spans = Spans::new(n, cuts, block_rows);
    for i in 0..n {
        spans.row(i, rows.size(i));
    }
    let spans = spans.spans;
    let parts = super::super::parallel::in_parts(&spans, PARALLEL_MIN_BLOCKS, |spans| {
        spans
            .iter()
            .map(|&(from, end)| (rows.keys[end - 1].to_vec(), rows.block(from, end)))
            .collect::<Vec<_>>()
    });
    // (Moved, not copied as `concat` would.)
    parts.into_iter().flatten().collect()
}

/// Where a build's blocks start and end: a block closes at `block_rows`
/// rows, once its rows hold [`BLOCK_BYTES`], at each of `cuts` and at the
/// last row.
struct Spans<'c> {
    rows: usize,
    cuts: &'c [usize],
    block_rows: usize,
    /// The open block's first row and its rows' bytes, and the next cut.
    from: usize,
    bytes: usize,
    next_cut: usize,
    spans: Vec<(usize, usize)>,
}

impl<'c> Spans<'c> {
    fn new(rows: usize, cuts: &'c [usize], block_rows: usize) -> Spans<'c> {
        Spans {
            rows,
            cuts,
            block_rows,
            from: 0,
            bytes: 0,
            next_cut: 0,
            spans: Vec::with_capacity(rows / block_rows.max(1) + cuts.len() + 1),
        }
    }

    /// Row `i`, `size` bytes, joins the open block.
    fn row(&mut self, i: usize, size: usize) {
        self.bytes += size;
        let end = i + 1;
        let cut = self.cuts.get(self.next_cut) == Some(&end);
        if cut {
            self.next_cut += 1;
        }
        if cut
            || end == self.rows
            || end - self.from >= self.block_rows
            || self.bytes >= BLOCK_BYTES
        {
            self.close(end, 0);
        }
    }

    /// Closes the open block before row `at`; the next holds `bytes`.
    fn close(&mut self, at: usize, bytes: usize) {
        self.spans.push((self.from, at));
        self.from = at;
        self.bytes = bytes;
    }
}

/// Rows of one shape worth a block of their own among rows of others.
const SHAPE_RUN: usize = 16;

/// Blocks from which building them is shared among the cores.
const PARALLEL_MIN_BLOCKS: usize = 64;

/// Checks a block pair: well formed, its rows ascending, its key its last
/// row's; calls `row` with each row's pair. The number of rows.
pub(crate) fn check(
    key: Slice,
    value: Slice,
    mut row: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<usize> {
    let block = Block::parse(key, value)?;
    block.check_values()?;
    block.check_keys()?;
    for i in 0..block.len() {
        if i > 0 && block.row_key(i - 1) >= block.row_key(i) {
            return Err(corrupt("rows out of order", block.key()));
        }
        let (k, v) = block.row(i);
        row(&k, &v)?;
    }
    if block.row_key(block.len() - 1) != &block.key()[..] {
        return Err(corrupt("the key is not its last row's", block.key()));
    }
    Ok(block.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept block answers only for rows it spans, in the snapshot and
    /// keyspace it was read from: every lookup through one `LastBlock`,
    /// in any order, across two keyspaces holding the same keys and a
    /// later snapshot with another block, answers as a fresh seek does.
    #[test]
    fn the_kept_block_answers_as_a_fresh_seek() {
        use fjall::{Database, KeyspaceCreateOptions};
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder(dir.path()).open().unwrap();
        let one = db.keyspace("one", KeyspaceCreateOptions::default).unwrap();
        let two = db.keyspace("two", KeyspaceCreateOptions::default).unwrap();
        // Blocks of rows b, d, f | h, j | l, n, p (odd letters absent).
        let put = |ks: &Keyspace, rows: &[u8], tag: u8| {
            let rows: Vec<(Vec<u8>, Vec<u8>)> = rows
                .iter()
                .map(|&r| (vec![r, 0, 1], vec![4, r, tag, 0, 0, 0, 0, 0, 0]))
                .collect();
            let last = rows.last().unwrap().0.clone();
            ks.insert(last, encode(&rows, None).unwrap()).unwrap();
        };
        for (ks, tag) in [(&one, 1), (&two, 2)] {
            put(ks, b"bdf", tag);
            put(ks, b"hj", tag);
            put(ks, b"lnp", tag);
        }
        let before = db.snapshot();
        put(&one, b"r", 3);
        let after = db.snapshot();
        let kept = LastBlock::default();
        let mut asked: Vec<u8> = (b'a'..=b's').collect();
        // Ascending, then in an order that jumps back and forth.
        asked.extend((b'a'..=b's').rev().step_by(3));
        asked.extend([b'd', b'n', b'b', b'q', b'h', b'p', b'a']);
        let check = |snapshot: &Snapshot, ks: &Keyspace, r: u8| {
            let row = [r, 0, 1];
            let want = LastBlock::default().get(snapshot, ks, &row).unwrap();
            assert_eq!(
                kept.get(snapshot, ks, &row).unwrap(),
                want,
                "row {}",
                r as char
            );
        };
        // Runs of lookups in one snapshot and keyspace (answered from the
        // kept block), then each row in all four in turn (never).
        for snapshot in [&before, &after] {
            for ks in [&one, &two] {
                for &r in &asked {
                    check(snapshot, ks, r);
                }
            }
        }
        for &r in &asked {
            for snapshot in [&before, &after] {
                for ks in [&one, &two] {
                    check(snapshot, ks, r);
                }
            }
        }
        assert!(kept.get(&before, &one, &[b'r', 0, 1]).unwrap().is_none());
        assert_eq!(
            kept.get(&after, &one, &[b'r', 0, 1]).unwrap().unwrap()[2],
            3
        );
        assert_eq!(
            kept.get(&after, &two, &[b'd', 0, 1]).unwrap().unwrap()[2],
            2
        );
    }

    #[test]
    fn a_block_gives_back_its_rows() {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..5u8)
            .map(|i| (vec![b'a' + i, 0, 1], vec![4, i, i, i, i, i, i, i, i]))
            .collect();
        let value = encode(&rows, None).unwrap();
        let key = Slice::from(rows[4].0.clone());
        let block = Block::parse(key.clone(), Slice::from(value.clone())).unwrap();
        assert_eq!(block.len(), 5);
        for (i, (k, v)) in rows.iter().enumerate() {
            let (bk, bv) = block.row(i);
            assert_eq!((&bk[..], &bv[..]), (&k[..], &v[..]));
        }
        assert_eq!(block.lower_bound(b"c"), 2);
        assert_eq!(block.lower_bound(b"z"), 5);
        assert_eq!(check(key, Slice::from(value), |_, _| Ok(())).unwrap(), 5);
    }

    /// Tall rows of one shape go column-wise and come back as their
    /// cells in any order a reader asks for them, one alone first.
    #[test]
    fn a_column_wise_block_lends_its_rows_in_any_order() {
        use std::cmp::Reverse;
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..6i64)
            .map(|i| {
                let mut cells = packed::Cells::new();
                for (q, v) in [(b"a", i as f64 / 4.0), (b"b", 1000.0 + i as f64)] {
                    let value = v.to_be_bytes().to_vec();
                    cells.insert((q.to_vec(), Reverse(60 * i)), value);
                }
                let key = crate::codec::escape(format!("r{i}").as_bytes());
                (key, packed::encode(b"r", "f", &cells).unwrap().unwrap())
            })
            .collect();
        let value = encode(&rows, None).unwrap();
        assert_eq!(value[0], COLUMNS_SHARED);
        // Blocks written before keys were stored by what they share read
        // alike.
        let whole = keys_whole(&rows);
        assert_eq!(whole[0], block::COLUMNS);
        assert!(whole.len() > value.len());
        let key = Slice::from(rows[5].0.clone());
        let cells = |(k, v): (&[u8], &[u8])| packed::cells_of(k, v).unwrap();
        for value in [value, whole] {
            for order in [[2, 0, 5, 1, 4, 3], [3, 3, 1, 0, 2, 5]] {
                let block = Block::parse(key.clone(), Slice::from(value.clone())).unwrap();
                for i in order {
                    let (k, v) = block.row(i);
                    assert_eq!(&k[..], &rows[i].0[..]);
                    assert_eq!(block.row_key(i), &rows[i].0[..]);
                    assert_eq!(cells((&k, &v)), cells((&rows[i].0, &rows[i].1)));
                    assert_eq!(cells(block.row_bytes(i)), cells((&rows[i].0, &rows[i].1)));
                    assert_eq!(&block.value_of(i).unwrap()[..], &v[..]);
                }
                assert_eq!(block.lower_bound(&rows[3].0), 3);
                assert_eq!(block.lower_bound(b"r35"), 4);
            }
            assert_eq!(
                check(key.clone(), Slice::from(value), |_, _| Ok(())).unwrap(),
                6
            );
        }
    }

    /// A column-wise block as written before keys were stored by what
    /// they share: its keys whole, after an offset table.
    fn keys_whole(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        header(&mut out, block::COLUMNS, rows.iter().map(|(k, _)| k.len()));
        for (k, _) in rows {
            out.extend_from_slice(k);
        }
        let values: Vec<&[u8]> = rows.iter().map(|(_, v)| v.as_slice()).collect();
        packed::encode_tall(&values, &mut out).unwrap();
        out
    }

    /// Blocks are cut around runs of one shape, so that a tall table
    /// with a row lacking a column here and there stays column-wise, and
    /// rows of ever-changing shapes still fill blocks of [`BLOCK_ROWS`].
    #[test]
    fn blocks_are_cut_around_runs_of_one_shape() {
        use std::cmp::Reverse;
        let row = |i: usize, columns: &[&[u8]]| {
            let mut cells = packed::Cells::new();
            for q in columns {
                cells.insert(
                    (q.to_vec(), Reverse(i as i64)),
                    (i as f64).to_be_bytes().to_vec(),
                );
            }
            let key = crate::codec::escape(format!("r{i:05}").as_bytes());
            (key, packed::encode(b"r", "f", &cells).unwrap().unwrap())
        };
        let blocks_of = |rows: &[(Vec<u8>, Vec<u8>)]| {
            let blocks = build(rows, &[], BLOCK_ROWS, None).unwrap();
            let mut keys = Vec::new();
            let mut versions = Vec::new();
            for (key, value) in &blocks {
                let block =
                    Block::parse(Slice::from(key.clone()), Slice::from(value.clone())).unwrap();
                keys.extend((0..block.len()).map(|i| block.row_key(i).to_vec()));
                versions.push((value[0], block.len()));
            }
            let want: Vec<Vec<u8>> = rows.iter().map(|(k, _)| k.clone()).collect();
            assert_eq!(keys, want);
            versions
        };
        // A tall table: now and then a row lacks a column.
        let rows: Vec<_> = (0..300)
            .map(|i| match i % 97 {
                50 => row(i, &[b"a"]),
                _ => row(i, &[b"a", b"b"]),
            })
            .collect();
        let versions = blocks_of(&rows);
        assert!(
            versions.iter().all(|(v, _)| *v == COLUMNS_SHARED),
            "{versions:?}"
        );
        // Every row a shape of its own: full blocks, one after another.
        let n = 3 * BLOCK_ROWS + 8;
        let names: Vec<Vec<u8>> = (0..n).map(|i| format!("q{i}").into_bytes()).collect();
        let rows: Vec<_> = (0..n).map(|i| row(i, &[&names[i]])).collect();
        let versions = blocks_of(&rows);
        assert_eq!(versions.len(), 4, "{versions:?}");
        assert!(versions.iter().all(|(v, _)| *v == ROWS));
    }

    use proptest::strategy::Strategy as _;

    /// Cells held row by row, a row's in the shape's order, with the
    /// number of columns.
    impl TallCells for (Vec<(i64, &[u8])>, usize) {
        fn cell(&self, row: usize, column: usize) -> (i64, &[u8]) {
            self.0[row * self.1 + column]
        }
    }

    proptest::proptest! {
        /// Tall rows built into blocks from their cells are the blocks
        /// built from their PACKED values (made raw, as a load makes
        /// them): byte for byte, cut alike.
        #[test]
        fn tall_rows_from_their_cells_are_the_blocks_of_their_values(
            columns in proptest::collection::btree_set(
                proptest::collection::vec(0u8..4, 0..3), 1..5),
            rows in proptest::collection::vec(
                proptest::collection::vec(
                    (0i64..1_000_000, proptest::prop_oneof![
                        (-1000i64..1000).prop_map(|n| (n as f64 / 8.0).to_be_bytes().to_vec()),
                        proptest::collection::vec(0u8..255, 0..12),
                    ]),
                    5,
                ),
                1..200,
            ),
            cut in proptest::collection::btree_set(1usize..200, 0..4),
        ) {
            let qualifiers: Vec<&[u8]> = columns.iter().map(Vec::as_slice).collect();
            let c = qualifiers.len();
            let shape = packed::tall_shape(&qualifiers).unwrap();
            let keys: Vec<Vec<u8>> = (0..rows.len())
                .map(|i| crate::codec::escape(format!("r{i:04}").as_bytes()))
                .collect();
            let cuts: Vec<usize> = cut.into_iter().filter(|&k| k < rows.len()).collect();
            let cells: Vec<(i64, &[u8])> = rows
                .iter()
                .flat_map(|row| row[..c].iter().map(|(ts, v)| (*ts, v.as_slice())))
                .collect();
            let tall = TallRows {
                keys: keys.iter().map(Vec::as_slice).collect(),
                shape: &shape,
                columns: c,
                cells: (cells, c),
            };
            let values: Vec<(Vec<u8>, Vec<u8>)> = rows
                .iter()
                .zip(&keys)
                .map(|(row, key)| {
                    let cells: Vec<(&[u8], i64, &[u8])> = qualifiers
                        .iter()
                        .zip(row)
                        .map(|(q, (ts, v))| (*q, *ts, v.as_slice()))
                        .collect();
                    let value = packed::encode_sorted(key, "f", &cells, true).unwrap().unwrap();
                    (key.clone(), value)
                })
                .collect();
            let want = build(&values, &cuts, BLOCK_ROWS, None).unwrap();
            proptest::prop_assert_eq!(build_tall(&tall, &cuts, BLOCK_ROWS), want);
        }
    }

    /// Keys stored by what they share are checked when first made, not
    /// when the block is read: a section whose runs fit but whose keys
    /// do not (the first key sharing bytes with none) is an error to
    /// every reader of keys, never keys read as empty.
    #[test]
    fn keys_that_cannot_be_made_are_an_error() {
        use std::cmp::Reverse;
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..3i64)
            .map(|i| {
                let mut cells = packed::Cells::new();
                cells.insert(
                    (b"q".to_vec(), Reverse(i)),
                    (i as f64).to_be_bytes().to_vec(),
                );
                let key = crate::codec::escape(format!("r{i}").as_bytes());
                (key, packed::encode(b"r", "f", &cells).unwrap().unwrap())
            })
            .collect();
        let good = encode(&rows, None).unwrap();
        let key = Slice::from(rows[2].0.clone());
        // Where the good section ends and the columns start.
        let mut at = 5;
        packed::keys::Keys::read(&good, &mut at, 3).unwrap();
        // The same keys' bytes, but the first key claims to share one
        // byte with a key before it.
        let (k0, k1, k2) = (&rows[0].0, &rows[1].0, &rows[2].0);
        let rests = [&k0[1..], &k1[..], &k2[..]].concat();
        let lens = [k0.len() as i64 - 1, k1.len() as i64, k2.len() as i64];
        let mut bad = good[..5].to_vec();
        packed::keys::write_parts(&[1, 0, 0], &lens, &rests, &mut bad);
        bad.extend_from_slice(&good[at..]);
        let block = Block::parse(key.clone(), Slice::from(bad.clone())).unwrap();
        // The first key made alone (a count's key activity) is refused
        // too, as is any other.
        for i in 0..3 {
            let err = block.row_key_near(i).unwrap_err().to_string();
            assert!(err.contains("malformed keys"), "{err}");
        }
        let err = block.check_keys().unwrap_err().to_string();
        assert!(err.contains("malformed keys"), "{err}");
        let err = check(key, Slice::from(bad), |_, _| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("malformed keys"), "{err}");
        // The good block's keys are made and checked alike.
        let block = Block::parse(Slice::from(k2.clone()), Slice::from(good)).unwrap();
        // Before the keys are made, the first key stands for every row;
        // after, each row's own.
        assert_eq!(block.row_key_near(2).unwrap(), &k0[..]);
        assert_eq!(block.row_key_near(0).unwrap(), &k0[..]);
        block.check_keys().unwrap();
        assert_eq!(block.row_key(1), &k1[..]);
        for (i, k) in [k0, k1, k2].into_iter().enumerate() {
            assert_eq!(block.row_key_near(i).unwrap(), &k[..]);
        }
    }

    #[test]
    fn damaged_blocks_are_errors_not_panics() {
        use std::cmp::Reverse;
        let rows = [(b"k\0\x01".to_vec(), vec![4u8; 12])];
        let tall: Vec<(Vec<u8>, Vec<u8>)> = (0..3i64)
            .map(|i| {
                let mut cells = packed::Cells::new();
                cells.insert(
                    (b"q".to_vec(), Reverse(i)),
                    (i as f64).to_be_bytes().to_vec(),
                );
                cells.insert((b"s".to_vec(), Reverse(i)), b"text".to_vec());
                (
                    vec![b'k', i as u8, 0, 1],
                    packed::encode(b"k", "f", &cells).unwrap().unwrap(),
                )
            })
            .collect();
        let values = [
            encode(&rows, None).unwrap(),
            encode(&tall, None).unwrap(),
            keys_whole(&tall),
        ];
        for value in values {
            for cut in 0..value.len() {
                let _ = Block::parse(Slice::from(&b"k"[..]), Slice::from(&value[..cut]));
            }
            for i in 0..value.len() {
                for byte in [0u8, 1, 0x7f, 0xff] {
                    let mut bad = value.clone();
                    bad[i] = byte;
                    if let Ok(block) = Block::parse(Slice::from(&b"k"[..]), Slice::from(bad)) {
                        for r in (0..block.len()).rev() {
                            let _ = block.value_of(r);
                            let _ = block.row(r);
                            let _ = block.row_bytes(r);
                        }
                        let _ = block.check_values();
                    }
                }
            }
        }
    }
}
