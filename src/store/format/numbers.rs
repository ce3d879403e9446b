//! A row's chosen columns read as runs of numbers rather than as cells.
//!
//! An aggregate over measures (`avg(pressure)` by hour over time buckets)
//! wants, per row, each measure's timestamps and its 8-byte values as
//! numbers, nothing else. [`NumberRow`] holds exactly that: per column
//! asked for, a run of timestamps (newest first) and a run of values read
//! as big-endian `u64` words, which the reader turns into `f64` or `i64`
//! by the column's type. A PACKED family decodes its value segments
//! straight into the runs (no cell, no byte copy, no per-value dispatch);
//! any other family, or another backend, fills them from the row's cells.
//! Either way the cells are the ones the read selects: GC first, then the
//! filter's time range and cells per column, as [`super::select`] does.

use super::row::RowView;
use crate::codec::{self, TERMINATOR};
use crate::store::policy::GcPolicy;
use crate::store::request::ReadFilter;
use std::borrow::Cow;
use std::ops::Range;

/// The columns a numbers read wants: (family, by its place among the
/// families read; qualifier).
pub type NumberColumns = [(usize, Vec<u8>)];

/// One row's wanted columns as runs of numbers (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct NumberRow {
    /// The row key.
    pub key: Vec<u8>,
    times: Vec<i64>,
    words: Vec<u64>,
    /// Per column asked for: its cells in `times` and `words`.
    columns: Vec<Range<usize>>,
    /// The first value of a wanted column that is not 8 bytes long:
    /// (column, value). Its column's run stops short of it.
    misfit: Option<(usize, Vec<u8>)>,
}

impl NumberRow {
    /// Column `i`'s cells (as asked for): timestamps, newest first, and
    /// values as big-endian words; empty when the row has none.
    pub fn column(&self, i: usize) -> (&[i64], &[u64]) {
        match self.columns.get(i) {
            Some(r) => (&self.times[r.clone()], &self.words[r.clone()]),
            None => (&[], &[]),
        }
    }

    /// A value of a wanted column that is not 8 bytes long, if the row
    /// has one: (column, value).
    pub fn misfit(&self) -> Option<(usize, &[u8])> {
        self.misfit.as_ref().map(|(c, v)| (*c, v.as_slice()))
    }

    /// How many wanted cells the row has.
    pub fn cells(&self) -> usize {
        self.words.len()
    }

    /// Whether the row has no wanted cell.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty() && self.misfit.is_none()
    }

    /// Empties the row for `columns` wanted columns.
    pub(crate) fn reset(&mut self, columns: usize) {
        self.key.clear();
        self.times.clear();
        self.words.clear();
        self.columns.clear();
        self.columns.resize(columns, 0..0);
        self.misfit = None;
    }

    /// Starts a column's run, returning where it starts; its cells
    /// follow until [`NumberRow::close`].
    pub(crate) fn open(&self) -> usize {
        self.times.len()
    }

    /// Appends timestamp `time` to the open column: values come after,
    /// with [`NumberRow::push_word`], one per timestamp kept.
    pub(crate) fn push_time(&mut self, time: i64) {
        self.times.push(time);
    }

    /// The timestamps pushed since `start`.
    pub(crate) fn times_since(&self, start: usize) -> &[i64] {
        &self.times[start..]
    }

    /// Drops the timestamps pushed since `start`.
    pub(crate) fn discard_times(&mut self, start: usize) {
        self.times.truncate(start);
    }

    /// Keeps only `keep` of the timestamps pushed since `start`.
    pub(crate) fn keep_times(&mut self, start: usize, keep: Range<usize>) {
        let len = keep.len();
        self.times
            .copy_within(start + keep.start..start + keep.end, start);
        self.times.truncate(start + len);
    }

    /// Appends a value to the open column.
    pub(crate) fn push_word(&mut self, word: u64) {
        self.words.push(word);
    }

    /// Lets `read` append values to the open column.
    pub(crate) fn words<T>(&mut self, read: impl FnOnce(&mut Vec<u64>) -> T) -> T {
        read(&mut self.words)
    }

    /// Records a value that is not 8 bytes long and ends the column's
    /// run before it.
    pub(crate) fn set_misfit(&mut self, column: usize, value: &[u8]) {
        self.times.truncate(self.words.len());
        if self.misfit.is_none() {
            self.misfit = Some((column, value.to_vec()));
        }
    }

    /// Closes column `column`, opened at `start`.
    pub(crate) fn close(&mut self, column: usize, start: usize) {
        self.times.truncate(self.words.len());
        if let Some(c) = self.columns.get_mut(column) {
            *c = start..self.words.len();
        }
    }

    /// Takes the wanted columns' cells from a row as read (its cells
    /// already selected).
    pub(crate) fn take_cells(&mut self, row: &RowView<'_>, wanted: &NumberColumns) {
        let mut column: Option<(usize, usize)> = None;
        for i in 0..row.len() {
            if row.first(i) {
                if let Some((c, start)) = column.take() {
                    self.close(c, start);
                }
                let (family, qualifier) = (row.family(i), row.qualifier(i));
                column = wanted
                    .iter()
                    .position(|(f, q)| *f == family && q.as_slice() == qualifier)
                    .map(|c| (c, self.open()));
            }
            let Some((c, _)) = column else {
                continue;
            };
            let value = row.value(i);
            match <[u8; 8]>::try_from(value) {
                Ok(bytes) => {
                    self.push_time(row.timestamp(i));
                    self.push_word(u64::from_be_bytes(bytes));
                }
                Err(_) => {
                    self.set_misfit(c, value);
                    if let Some((c, start)) = column.take() {
                        self.close(c, start);
                    }
                }
            }
        }
        if let Some((c, start)) = column {
            self.close(c, start);
        }
    }
}

/// A run of rows' wanted columns as numbers, a column at a time: what a
/// numbers read gives for rows of which each holds at most one cell of
/// each wanted column (the rows of a column-wise block: see
/// `packed/tall.rs`), all at once. Each column either holds one cell of
/// every row or none of any.
#[derive(Debug, Default, Clone)]
pub struct NumberRows {
    /// The rows' keys as stored (escaped), back to back, and where each
    /// ends: most rows' keys are read as they lie, unescaped only if
    /// asked for.
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    /// How many rows; and whether their keys are left unread (a reader
    /// that groups by nothing of the key).
    count: usize,
    keyless: bool,
    /// Whether no key needed escaping (each is its body and the
    /// terminator): nearly always, and then a key is read as it lies.
    plain: bool,
    /// Per column asked for: each row's cell (timestamp, value as a
    /// big-endian word), when the rows have one.
    columns: Vec<Option<(Vec<i64>, Vec<u64>)>>,
    /// Columns' runs kept from earlier rows, reused.
    spare: Vec<(Vec<i64>, Vec<u64>)>,
}

impl NumberRows {
    /// Rows whose keys are not read: [`NumberRows::key`] is an error.
    pub fn without_keys() -> Self {
        NumberRows {
            keyless: true,
            ..NumberRows::default()
        }
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether the rows' keys are read (see [`NumberRows::without_keys`]).
    pub(crate) fn wants_keys(&self) -> bool {
        !self.keyless
    }

    /// Row `i`'s key: borrowed when it needed no escaping (nearly every
    /// key), else decoded; an error when the stored key is damaged.
    pub fn key(&self, i: usize) -> crate::error::Result<Cow<'_, [u8]>> {
        if self.keyless {
            return Err(crate::error::Error::Internal(
                "rows read without their keys".into(),
            ));
        }
        let from = i.checked_sub(1).map_or(0, |p| self.key_ends[p]);
        let escaped = &self.keys[from..self.key_ends[i]];
        if self.plain {
            return Ok(Cow::Borrowed(&escaped[..escaped.len() - TERMINATOR.len()]));
        }
        if let Some(plain) = codec::plain_body(escaped) {
            return Ok(Cow::Borrowed(plain));
        }
        let mut key = Vec::new();
        codec::unescape_into(escaped, &mut key)?;
        Ok(Cow::Owned(key))
    }

    /// Column `i` (as asked for): every row's cell, timestamps and values
    /// as big-endian words, or `None` when no row has one.
    pub fn column(&self, i: usize) -> Option<(&[i64], &[u64])> {
        let (times, words) = self.columns.get(i)?.as_ref()?;
        Some((times, words))
    }

    /// How many wanted cells the rows have.
    pub fn cells(&self) -> usize {
        self.columns.iter().flatten().map(|(_, w)| w.len()).sum()
    }

    /// Empties the rows for `columns` wanted columns.
    pub(crate) fn reset(&mut self, columns: usize) {
        self.keys.clear();
        self.key_ends.clear();
        self.count = 0;
        self.plain = true;
        for column in self.columns.drain(..).flatten() {
            self.spare.push(column);
        }
        self.columns.resize(columns, None);
    }

    /// Appends a row's key as stored (escaped).
    pub(crate) fn push_escaped_key(&mut self, escaped: &[u8]) {
        self.plain &= codec::plain_body(escaped).is_some();
        self.keys.extend_from_slice(escaped);
        self.key_ends.push(self.keys.len());
        self.count += 1;
    }

    /// Appends rows' keys as stored (escaped) that lie back to back in
    /// `escaped`, each ending where `ends` says (offsets in `escaped`,
    /// ascending, the last its length).
    pub(crate) fn push_escaped_keys(
        &mut self,
        escaped: &[u8],
        ends: impl ExactSizeIterator<Item = usize>,
    ) {
        let base = self.keys.len();
        let n = ends.len();
        self.keys.extend_from_slice(escaped);
        let mut from = 0;
        let mut plain = true;
        for end in ends {
            // (A key shorter than its terminator is no escaped key.)
            plain &= end >= from + TERMINATOR.len()
                && escaped.get(end - TERMINATOR.len()..end) == Some(&TERMINATOR[..]);
            self.key_ends.push(base + end);
            from = end;
        }
        // Plain keys hold no 0 but their terminators' one each.
        self.plain &=
            plain && from == escaped.len() && escaped.iter().filter(|&&b| b == 0).count() == n;
        self.count += n;
    }

    /// Counts `n` more rows whose keys are not read.
    pub(crate) fn push_keyless(&mut self, n: usize) {
        self.count += n;
    }

    /// Sets column `i`'s cells, one a row.
    pub(crate) fn set_column(&mut self, i: usize, times: &[i64], words: &[u64]) {
        let Some(column) = self.columns.get_mut(i) else {
            return;
        };
        let (mut t, mut w) = self.spare.pop().unwrap_or_default();
        t.clear();
        w.clear();
        t.extend_from_slice(times);
        w.extend_from_slice(words);
        *column = Some((t, w));
    }
}

/// Whether a read keeps every cell a column holds (no GC, no time range,
/// at least one cell a column): what [`super::Selection::keeps_all`] says.
pub(crate) fn keeps_every_cell(gc: &GcPolicy, filter: &ReadFilter) -> bool {
    matches!(gc, GcPolicy::KeepAll)
        && filter.time_range == crate::store::request::TimeRange::ALL
        && filter.cells_per_column != Some(0)
}

/// Which of one column's cells (`times`: all it holds, newest first) a
/// read keeps: those GC keeps (a prefix, as GC discards from some version
/// or some age on), then those in the filter's time range (a window, the
/// times being ordered), then at most its cells per column. What
/// [`super::select`] keeps, as a range.
pub(crate) fn window(gc: &GcPolicy, filter: &ReadFilter, now: i64, times: &[i64]) -> Range<usize> {
    let kept = match gc {
        GcPolicy::KeepAll => times.len(),
        gc => times
            .iter()
            .enumerate()
            .position(|(i, &t)| gc.is_garbage(i, t, now))
            .unwrap_or(times.len()),
    };
    let times = &times[..kept];
    let range = filter.time_range;
    let start = match range.end {
        Some(end) => times.partition_point(|&t| t >= end),
        None => 0,
    };
    let end = times.partition_point(|&t| t >= range.start).max(start);
    let end = match filter.cells_per_column {
        Some(n) => end.min(start.saturating_add(n)),
        None => end,
    };
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys pushed at once read back as pushed one by one, whether or
    /// not any needed escaping.
    #[test]
    fn keys_pushed_at_once_read_back() {
        let sets: [&[&[u8]]; 3] = [
            &[b"a#1", b"a#2", b"b"],
            &[b"a#1", b"a\x00b", b""],
            &[b"", b"zz"],
        ];
        for keys in sets {
            let escaped: Vec<Vec<u8>> = keys.iter().map(|k| codec::escape(k)).collect();
            let (mut one, mut all) = (NumberRows::default(), NumberRows::default());
            one.reset(0);
            all.reset(0);
            // A key before, alone, then the run.
            one.push_escaped_key(&codec::escape(b"0"));
            all.push_escaped_key(&codec::escape(b"0"));
            for e in &escaped {
                one.push_escaped_key(e);
            }
            let ends = escaped.iter().scan(0, |end, e| {
                *end += e.len();
                Some(*end)
            });
            all.push_escaped_keys(&escaped.concat(), ends.collect::<Vec<_>>().into_iter());
            assert_eq!(all.len(), keys.len() + 1);
            for (i, key) in std::iter::once(&&b"0"[..]).chain(keys).enumerate() {
                assert_eq!(&*one.key(i).unwrap(), *key);
                assert_eq!(&*all.key(i).unwrap(), *key);
            }
        }
    }

    /// Bytes that are not escaped keys (no terminator, a 0 inside) are
    /// never read as plain keys.
    #[test]
    fn keys_without_terminators_are_not_plain() {
        let mut rows = NumberRows::default();
        rows.reset(0);
        rows.push_escaped_keys(b"ab\x00\x01c", [4, 5].into_iter());
        assert!(!rows.plain);
        assert_eq!(&*rows.key(0).unwrap(), b"ab");
        assert!(rows.key(1).is_err());
    }
}
