//! One block as read ([`Block`]) and a row in it ([`TallRow`]): the
//! places of its rows checked once, each row's key and PACKED value taken
//! as slices of the block. What `cursor.rs` walks and `mod.rs` builds.

use crate::codec::show_bytes;
use crate::error::{Error, Result};
use crate::store::format::numbers::{NumberRow, NumberRows};
use crate::store::format::packed;
use crate::store::format::packed::keys::Keys;
use crate::store::format::packed::{Selection, Shape, Tall, u32_at};
use crate::store::format::row::RowBuf;
use crate::store::request::QualifierFilter;
use byteview::ByteView;
use fjall::Slice;
use std::sync::OnceLock;

/// The versions: rows one after another; tall rows of one shape
/// column-wise, their keys whole (read, no longer written); and
/// column-wise, each key stored as what it adds to the one before
/// (`packed/keys.rs`).
pub(super) const ROWS: u8 = 1;
pub(super) const COLUMNS: u8 = 2;
pub(super) const COLUMNS_SHARED: u8 = 3;

pub(super) fn corrupt(what: &str, key: &[u8]) -> Error {
    Error::Corrupt {
        reason: format!("block {}: {what}", show_bytes(key)),
    }
}

/// A part of a [`Slice`], sharing its bytes.
pub(super) fn part(bytes: &Slice, range: std::ops::Range<usize>) -> Slice {
    Slice::from(ByteView::from(bytes.clone()).slice(range))
}

/// One block as read: its key and value, with its rows' places checked.
pub(crate) struct Block {
    key: Slice,
    value: Slice,
    rows: usize,
    /// Where the body starts in the value: rows' entries, or (column-wise)
    /// their keys.
    body: usize,
    /// Column-wise with keys stored by what they share: the key section,
    /// and the keys made of it once one is wanted (a read that takes no
    /// key, such as a count, makes none).
    keys: Option<Keys>,
    made_keys: OnceLock<Option<(Slice, Vec<u32>)>>,
    /// Column-wise: the columns, and every row's PACKED value once one is
    /// lent (`None` if they are malformed).
    tall: Option<Tall>,
    lent: OnceLock<Option<(Slice, Vec<usize>)>>,
    /// Column-wise: the first row lent, made alone.
    lent_one: OnceLock<Option<(usize, Slice)>>,
}

impl Block {
    /// Reads a block pair, checking that every row's entry lies in the
    /// value (not that the rows are ordered: see [`check`]).
    pub fn parse(key: Slice, value: Slice) -> Result<Block> {
        let bad = |what: &str| corrupt(what, &key);
        let version = value.first().copied();
        if !matches!(version, Some(ROWS | COLUMNS | COLUMNS_SHARED)) {
            return Err(bad("unknown block version"));
        }
        let rows = u32_at(&value, 1).ok_or_else(|| bad("truncated header"))?;
        if rows == 0 {
            return Err(bad("no rows"));
        }
        if version == Some(COLUMNS_SHARED) {
            let mut at = 5;
            let keys = Keys::read(&value, &mut at, rows).ok_or_else(|| bad("malformed keys"))?;
            let tall = Tall::parse(&value, at, rows).ok_or_else(|| bad("malformed columns"))?;
            return Ok(Block {
                key,
                value,
                rows,
                body: 5,
                keys: Some(keys),
                made_keys: OnceLock::new(),
                tall: Some(tall),
                lent: OnceLock::new(),
                lent_one: OnceLock::new(),
            });
        }
        let body = rows
            .checked_add(1)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| n.checked_add(5))
            .filter(|&b| b <= value.len())
            .ok_or_else(|| bad("truncated offset table"))?;
        let len = value.len() - body;
        let mut previous = 0;
        for i in 0..=rows {
            let at = u32_at(&value, 5 + 4 * i).ok_or_else(|| bad("truncated offset table"))?;
            let first_ok = i > 0 || at == 0;
            let last_ok = i < rows || version == Some(COLUMNS) || at == len;
            if at < previous || at > len || !first_ok || !last_ok {
                return Err(bad("row offsets out of order"));
            }
            if i > 0 && version == Some(ROWS) {
                let entry = at - previous;
                let key_len = u32_at(&value, body + previous).filter(|_| entry >= 4);
                if key_len.is_none_or(|k| k > entry - 4) {
                    return Err(bad("a row entry is cut short"));
                }
            }
            previous = at;
        }
        let tall = match version {
            Some(COLUMNS) => Some(
                Tall::parse(&value, body + previous, rows)
                    .ok_or_else(|| bad("malformed columns"))?,
            ),
            _ => None,
        };
        Ok(Block {
            key,
            value,
            rows,
            body,
            keys: None,
            made_keys: OnceLock::new(),
            tall,
            lent: OnceLock::new(),
            lent_one: OnceLock::new(),
        })
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// The block's own key (its last row's escaped key).
    pub fn key(&self) -> &Slice {
        &self.key
    }

    /// Keys stored by what they share: made once, when first wanted.
    fn made_keys(&self, keys: &Keys) -> &Option<(Slice, Vec<u32>)> {
        self.made_keys.get_or_init(|| {
            let (bytes, starts) = keys.decode(&self.value)?;
            Some((Slice::from(bytes), starts))
        })
    }

    /// Checks that the rows' keys can be read (stored by what they share,
    /// they are made and checked when first wanted, not by
    /// [`Block::parse`]); every reader of keys checks first, a malformed
    /// key section an error rather than keys read as empty.
    pub fn check_keys(&self) -> Result<()> {
        match &self.keys {
            Some(keys) if self.made_keys(keys).is_none() => {
                Err(corrupt("malformed keys", &self.key))
            }
            _ => Ok(()),
        }
    }

    /// The bytes row `i`'s escaped key lies in, and where. Checked by
    /// [`Block::parse`], or (keys stored by what they share) by
    /// [`Block::check_keys`].
    #[inline]
    fn key_place(&self, i: usize) -> (&Slice, std::ops::Range<usize>) {
        match &self.keys {
            None => (&self.value, self.whole_key_place(i)),
            Some(keys) => match self.made_keys(keys) {
                Some((bytes, starts)) => {
                    let at = |j: usize| starts.get(j).map_or(0, |&s| s as usize);
                    (bytes, at(i)..at(i + 1).max(at(i)))
                }
                None => (&self.key, 0..0),
            },
        }
    }

    /// [`Block::key_place`] of a block whose keys are stored whole.
    fn whole_key_place(&self, i: usize) -> std::ops::Range<usize> {
        let offset = |j: usize| u32_at(&self.value, 5 + 4 * j).unwrap_or(0);
        let start = self.body + offset(i);
        match self.tall {
            Some(_) => start..self.body + offset(i + 1),
            None => {
                let key_len = u32_at(&self.value, start).unwrap_or(0);
                start + 4..start + 4 + key_len
            }
        }
    }

    /// Row `i`'s PACKED value: the bytes it lies in and where. Column-wise
    /// and malformed, it is empty, which no reader takes for a row.
    /// Column-wise, the first row asked for is made alone (a point read,
    /// the newest row of a series read backwards, take one), and all of
    /// them once another is.
    fn value_place(&self, i: usize) -> (&Slice, std::ops::Range<usize>) {
        let Some(tall) = &self.tall else {
            let offset = u32_at(&self.value, 5 + 4 * (i + 1)).unwrap_or(0);
            return (&self.value, self.whole_key_place(i).end..self.body + offset);
        };
        if self.lent.get().is_none() {
            let one = self.lent_one.get_or_init(|| {
                let mut out = Vec::new();
                tall.row_value(&self.value, i, &mut out)?;
                Some((i, Slice::from(out)))
            });
            if let Some((row, bytes)) = one
                && *row == i
            {
                return (bytes, 0..bytes.len());
            }
        }
        match self.lent() {
            Some((bytes, ends)) => {
                let from = i.checked_sub(1).map_or(0, |p| ends[p]);
                (bytes, from..ends[i])
            }
            None => (&self.key, 0..0),
        }
    }

    /// Column-wise: every row's PACKED value, made once.
    fn lent(&self) -> Option<&(Slice, Vec<usize>)> {
        let tall = self.tall.as_ref()?;
        self.lent
            .get_or_init(|| {
                let (bytes, ends) = tall.row_values(&self.value)?;
                Some((Slice::from(bytes), ends))
            })
            .as_ref()
    }

    /// Row `i`'s escaped key.
    #[inline]
    pub fn row_key(&self, i: usize) -> &[u8] {
        let (bytes, place) = self.key_place(i);
        &bytes[place]
    }

    /// Row `i`'s escaped key where it is at hand (the keys stored whole,
    /// or made already), else the block's first row's, which is made
    /// alone: where a run of rows from `i` lies, near enough for the key
    /// activity, without making every key of the block for a read that
    /// takes none (a count). An error when the keys are malformed.
    pub fn row_key_near(&self, i: usize) -> Result<&[u8]> {
        match &self.keys {
            Some(keys) if self.made_keys.get().is_none() => keys
                .first(&self.value)
                .ok_or_else(|| corrupt("malformed keys", &self.key)),
            _ => {
                self.check_keys()?;
                Ok(self.row_key(i))
            }
        }
    }

    /// Row `i`'s (escaped key, PACKED value), borrowed.
    #[inline]
    pub fn row_bytes(&self, i: usize) -> (&[u8], &[u8]) {
        let (bytes, place) = self.value_place(i);
        (self.row_key(i), &bytes[place])
    }

    /// Row `i` as a pair (escaped key, PACKED value) sharing the block's
    /// bytes (column-wise, those of the rows made of its columns).
    pub fn row(&self, i: usize) -> (Slice, Slice) {
        let (bytes, place) = self.value_place(i);
        let (keys, key) = self.key_place(i);
        (part(keys, key), part(bytes, place))
    }

    /// Row `i`'s PACKED value alone (what a point read takes: column-wise,
    /// only that row is made).
    pub fn value_of(&self, i: usize) -> Result<Slice> {
        match &self.tall {
            None => Ok(self.row(i).1),
            Some(tall) => {
                let mut out = Vec::new();
                tall.row_value(&self.value, i, &mut out)
                    .ok_or_else(|| corrupt("malformed columns", &self.key))?;
                Ok(Slice::from(out))
            }
        }
    }

    /// Row `i` as a numbers read takes it, when the block is column-wise.
    #[inline]
    pub fn tall_row(&self, i: usize) -> Option<TallRow<'_>> {
        self.tall.as_ref().map(|tall| TallRow {
            block: self,
            tall,
            row: i,
        })
    }

    /// Checks that every row's value can be made.
    pub(super) fn check_values(&self) -> Result<()> {
        match &self.tall {
            Some(_) if self.lent().is_none() => Err(corrupt("malformed columns", &self.key)),
            _ => Ok(()),
        }
    }

    /// The first row whose key is at or after `key` (`len()` if none).
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.rows);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.row_key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// A row of a column-wise block, read by its columns (no PACKED value is
/// made of it).
pub(crate) struct TallRow<'a> {
    block: &'a Block,
    tall: &'a Tall,
    row: usize,
}

impl TallRow<'_> {
    /// What `FamilyFormat::decode_numbers` gives for the row's PACKED
    /// value, taken from the block's columns decoded once.
    pub fn decode_numbers(
        &self,
        wanted: &[(Vec<u8>, usize)],
        selection: &Selection<'_>,
        out: &mut NumberRow,
        shape: &mut Shape,
    ) -> Result<bool> {
        let Block { key, value, .. } = self.block;
        packed::decode_tall_numbers(
            key, self.tall, value, self.row, wanted, selection, out, shape,
        )
    }

    /// About the bytes `n` rows from this one take in the block as stored
    /// (its key and value shared evenly among its rows).
    pub fn stored_bytes(&self, n: usize) -> u64 {
        let Block { key, value, .. } = self.block;
        let rows = self.block.len().max(1);
        ((key.len() + value.len()) * n.min(rows) / rows) as u64
    }

    /// This row and the `n - 1` after it in the block, as
    /// [`packed::decode_tall_rows`] takes them: how many it took.
    pub fn decode_rows(
        &self,
        n: usize,
        wanted: &[(Vec<u8>, usize)],
        selection: &Selection<'_>,
        out: &mut NumberRows,
        shape: &mut Shape,
    ) -> Result<Option<usize>> {
        let Block { key, value, .. } = self.block;
        let rows = self.row..self.row + n.min(self.block.len() - self.row);
        packed::decode_tall_rows(key, self.tall, value, rows, wanted, selection, out, shape)
    }

    /// The row as a pair to put among a read's pairs: its escaped key and
    /// the whole block's value, which [`TallRow::decode_cells`] points
    /// into (it is not the row's PACKED value: only this row's cells may
    /// be taken from it).
    pub fn pair(&self) -> (Slice, Slice) {
        let (keys, key) = self.block.key_place(self.row);
        (part(keys, key), self.block.value.clone())
    }

    /// The row's cells into `buf`, as the format decodes the PACKED value
    /// it was (see [`packed::decode_row_cells`]); its pair
    /// ([`TallRow::pair`]) is pair `index` of `buf`.
    pub fn decode_cells(
        &self,
        family: u32,
        index: u32,
        buf: &mut RowBuf,
        values: Option<&[Vec<u8>]>,
        columns: &QualifierFilter,
        newest: Option<usize>,
    ) -> Result<()> {
        let Block { key, value, .. } = self.block;
        packed::decode_row_cells(
            family, self.tall, value, index, self.row, buf, values, columns, newest,
        )
        .ok_or_else(|| corrupt("malformed columns", key))
    }

    /// An escaped key of the run of `n` rows from this one: the block's
    /// own key when the run ends the block (its last row's: nothing to
    /// make), else the row's, or its block's first row's where only that
    /// is at hand ([`Block::row_key_near`]).
    pub fn key_in_run(&self, n: usize) -> Result<&[u8]> {
        if self.row + n == self.block.len() {
            Ok(self.block.key())
        } else {
            self.block.row_key_near(self.row)
        }
    }

    /// [`Block::check_keys`] of the row's block.
    pub fn check_keys(&self) -> Result<()> {
        self.block.check_keys()
    }

    /// The escaped keys of this row and the `n - 1` after it, into
    /// `out`: at once where they lie back to back (a column-wise block's
    /// keys do), else one by one.
    pub fn push_keys(&self, n: usize, out: &mut NumberRows) {
        let rows = self.row..self.row + n;
        let place = |i: usize| self.block.key_place(i);
        let Some((bytes, first)) = rows.clone().next().map(place) else {
            return;
        };
        let mut end = first.start;
        let together = rows.clone().all(|i| {
            let (b, p) = place(i);
            let next = std::ptr::eq(b, bytes) && p.start == end;
            end = p.end;
            next
        });
        if together {
            let start = first.start;
            out.push_escaped_keys(&bytes[start..end], rows.map(|i| place(i).1.end - start));
        } else {
            for i in rows {
                let (bytes, p) = place(i);
                out.push_escaped_key(&bytes[p]);
            }
        }
    }
}
