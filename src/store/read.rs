//! Reads: the streaming [`FjallRows`] that walks one fjall snapshot for a
//! [`ReadRequest`], one family's [`Cursor`] per family read.

use super::activity::ReadTally;
use super::cursor::{Cursor, FamilyScan, Source, column_start, long_after, take_newest};
use super::engine::{FjallStore, TableHandle};
use super::format;
use super::format::{NumberColumns, NumberRow, NumberRows, RowBuf, RowView};
use super::request::{ReadFilter, ReadRequest, Row, ScanStats};
use super::source::Numbers;
use crate::codec::{self, EncodedRange};
use crate::error::{Error, Result};
use fjall::Snapshot;
use std::collections::VecDeque;
use std::sync::Arc;

/// Rows of a read, produced lazily from one snapshot: memory is bounded by
/// the largest row, not by the table. [`FjallRows::next_view`] lends each
/// row from buffers reused for the next (no allocation per cell); as an
/// iterator it yields owned [`Row`]s.
pub struct FjallRows {
    snapshot: Snapshot,
    families: Vec<FamilyScan>,
    ranges: VecDeque<EncodedRange>,
    cursors: Vec<Cursor>,
    /// The keys of the range the cursors read.
    range: EncodedRange,
    filter: ReadFilter,
    reverse: bool,
    remaining: Option<usize>,
    now: i64,
    stats: ScanStats,
    failed: bool,
    buf: RowBuf,
    escaped_row: Vec<u8>,
    /// Per family read: the only qualifiers whose values are decoded.
    values_of: Vec<Option<Vec<Vec<u8>>>>,
    /// Per family read: the cells a decode may leave out (its GC and the
    /// filter say which, once for the read).
    prune: Vec<format::Prune>,
    /// What the last numbers read asked for (see [`FjallRows::next_numbers`]).
    numbers: Option<NumbersPlan>,
    /// Rows of which nothing is selected that a call steps over before it
    /// gives up (see [`super::RowSource::pause_after`]), and whether the
    /// last call did.
    pause_after: Option<usize>,
    paused: bool,
    /// Cursors to move on to before the escaped row `behind_row` before
    /// the next row is read (see [`FjallRows::seek_behind`]).
    behind: Vec<usize>,
    behind_row: Vec<u8>,
    /// What the read counts in its table's key activity, if anything.
    tally: Option<ReadTally>,
    /// A run's first key, unescaped for the tally.
    tally_key: Vec<u8>,
}

/// A numbers read's columns: as asked, and per family read the qualifiers
/// of those the filter selects, sorted, with their places.
struct NumbersPlan {
    wanted: Vec<(usize, Vec<u8>)>,
    by_family: Vec<Vec<(Vec<u8>, usize)>>,
    /// Per family, the last packed header read (see [`format::Shape`]).
    shapes: Vec<format::Shape>,
}

impl NumbersPlan {
    fn new(wanted: &NumberColumns, families: usize, filter: &ReadFilter) -> Self {
        let mut by_family = vec![Vec::new(); families];
        for (place, (family, qualifier)) in wanted.iter().enumerate() {
            if let Some(f) = by_family.get_mut(*family)
                && filter.qualifiers.matches(qualifier)
            {
                f.push((qualifier.clone(), place));
            }
        }
        for f in &mut by_family {
            f.sort();
        }
        NumbersPlan {
            wanted: wanted.to_vec(),
            shapes: by_family.iter().map(|_| format::Shape::default()).collect(),
            by_family,
        }
    }
}

impl Drop for FjallRows {
    fn drop(&mut self) {
        std::mem::take(&mut self.buf).give_back();
    }
}

impl FjallRows {
    pub(crate) fn new(
        snapshot: Snapshot,
        families: Vec<FamilyScan>,
        request: ReadRequest,
        now: i64,
    ) -> Self {
        let mut ranges: VecDeque<EncodedRange> = request.rows.encode().into();
        if request.reverse {
            ranges = ranges.into_iter().rev().collect();
        }
        let values_of = families
            .iter()
            .map(|f| request.filter.values_of.get(&*f.name).cloned())
            .collect();
        let prune = families
            .iter()
            .map(|f| format::Prune::of(&f.gc, &request.filter))
            .collect();
        FjallRows {
            values_of,
            prune,
            snapshot,
            families,
            ranges,
            cursors: Vec::new(),
            range: EncodedRange {
                start: Vec::new(),
                end: None,
            },
            filter: request.filter,
            reverse: request.reverse,
            remaining: request.limit,
            now,
            stats: ScanStats::default(),
            failed: false,
            buf: RowBuf::reused(),
            escaped_row: Vec::new(),
            numbers: None,
            pause_after: None,
            paused: false,
            behind: Vec::new(),
            behind_row: Vec::new(),
            tally: None,
            tally_key: Vec::new(),
        }
    }

    /// Counts the read's rows in its table's key activity.
    pub(crate) fn tallied(mut self, tally: Option<ReadTally>) -> Self {
        self.tally = tally;
        self
    }

    /// Counters so far.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    /// The names of the families read, in the order [`CellRef::family`]
    /// counts them.
    pub fn family_names(&self) -> Vec<Arc<str>> {
        self.families.iter().map(|f| f.name.clone()).collect()
    }

    fn open_range(&mut self, range: EncodedRange) -> Result<()> {
        self.cursors.clear();
        self.behind.clear();
        for (i, family) in self.families.iter().enumerate() {
            for source in &family.sources {
                let iter = source.pairs(
                    &self.snapshot,
                    &range.start,
                    range.end.as_deref(),
                    self.reverse,
                )?;
                let mut cursor = Cursor {
                    family: i,
                    source: source.clone(),
                    iter,
                    head: None,
                    ended: false,
                    head_row_len: 0,
                };
                cursor.start(self.reverse)?;
                self.cursors.push(cursor);
            }
        }
        self.range = range;
        Ok(())
    }

    /// Moves each cursor that a reverse read of a row left in it
    /// ([`FjallRows::take_row`]) on to before that row.
    fn seek_behind(&mut self) -> Result<()> {
        let mut behind = std::mem::take(&mut self.behind);
        for &c in &behind {
            let before = Some(self.behind_row.as_slice());
            self.cursors[c].seek(&self.snapshot, &self.range.start, before, true)?;
        }
        behind.clear();
        self.behind = behind;
        Ok(())
    }

    /// Puts the next escaped row among the cursors' heads, in scan order,
    /// in `escaped_row`; false when the cursors are done.
    fn next_row_key(&mut self) -> Result<bool> {
        let mut best: Option<&[u8]> = None;
        for cursor in &self.cursors {
            if let Some(row) = cursor.head_row() {
                let better = match best {
                    None => true,
                    Some(b) => (row < b) != self.reverse && row != b,
                };
                if better {
                    best = Some(row);
                }
            }
        }
        match best {
            Some(row) => {
                self.escaped_row.clear();
                self.escaped_row.extend_from_slice(row);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Reads the next row with any selected cell into `buf`; with
    /// `numbers`, the wanted columns of PACKED families go into it as
    /// runs instead (see [`FjallRows::next_numbers`]).
    fn advance_row(&mut self, mut numbers: Option<&mut NumberRow>) -> Result<bool> {
        self.paused = false;
        // Rows read of which nothing was selected.
        let mut passed = 0;
        loop {
            if self.remaining == Some(0) {
                return Ok(false);
            }
            if !self.behind.is_empty() {
                self.seek_behind()?;
            }
            // One PACKED keyspace read: each pair is a row of its own,
            // its key the escaped row (no row to find among cursors). So
            // is an AUTO keyspace's block row that no own cell joins.
            let lone_packed = matches!(
                self.cursors.as_slice(),
                [c] if c.lone_row()
            );
            let more = if lone_packed {
                self.cursors[0].head_key().is_some()
            } else {
                self.next_row_key()?
            };
            if !more {
                match self.ranges.pop_front() {
                    Some(range) => {
                        self.open_range(range)?;
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            self.buf.clear();
            if let (Some(out), Some(plan)) = (numbers.as_mut(), &self.numbers) {
                out.reset(plan.wanted.len());
            }
            // Whether a family decoded as numbers holds a selected cell,
            // and whether every pair read was decoded as numbers.
            let mut selected = false;
            let mut all_numbers = true;
            // A column's newest cells are all the read can keep when it
            // keeps the newest N with no upper time bound (GC drops a
            // column's oldest cells first, so its newest N hold every
            // cell `select` would keep).
            let newest = format::Prune::newest(&self.filter);
            // Cursors of one family are adjacent; its cells are selected
            // once all of its cursors have given theirs.
            let mut from_cell = 0;
            for c in 0..self.cursors.len() {
                let family = self.cursors[c].family;
                if c == 0 || self.cursors[c - 1].family != family {
                    from_cell = self.buf.cells.len();
                }
                let from_pair = self.buf.pairs.len();
                // A lone PACKED pair read as numbers is decoded where the
                // cursor holds it (in a block, no pair is made of it).
                let in_cursor = lone_packed && numbers.is_some() && self.numbers.is_some();
                // Whether the row's cells were taken from a column-wise
                // block's columns (no PACKED value made of the row).
                let mut from_columns = false;
                if lone_packed {
                    if !in_cursor {
                        from_columns = self.take_lone_packed(c, family, newest)?;
                    }
                } else {
                    self.take_row(c, newest)?;
                }
                if self.reverse {
                    self.buf.pairs[from_pair..].reverse();
                }
                let format = self.cursors[c].source.format;
                if let (Some(out), Some(plan)) = (numbers.as_mut(), &mut self.numbers)
                    && self.families[family].sources.len() == 1
                    && (in_cursor || self.buf.pairs.len() == from_pair + 1)
                {
                    let (gc, filter, now) = (&self.families[family].gc, &self.filter, self.now);
                    let selection = format::Selection {
                        selects: &|q: &[u8]| filter.qualifiers.matches(q),
                        keep: &|times: &[i64]| format::window(gc, filter, now, times),
                        keeps_all: format::keeps_every_cell(gc, filter),
                    };
                    let (wanted, shape) = (&plan.by_family[family], &mut plan.shapes[family]);
                    let cursor = &self.cursors[c];
                    let any = match cursor.head_tall().filter(|_| in_cursor) {
                        // A row of a column-wise block: read from its columns.
                        Some(row) => Some(row.decode_numbers(wanted, &selection, out, shape)?),
                        None => {
                            let (key, value) = match in_cursor {
                                true => cursor.head_pair().unwrap_or_default(),
                                false => {
                                    let (key, value) = &self.buf.pairs[from_pair];
                                    (&key[..], &value[..])
                                }
                            };
                            format.decode_numbers(key, value, wanted, &selection, out, shape)?
                        }
                    };
                    if in_cursor {
                        let key = self.cursors[c].head_key().unwrap_or_default();
                        self.escaped_row.clear();
                        self.escaped_row.extend_from_slice(key);
                        let cursor = &mut self.cursors[c];
                        if any.is_none() {
                            self.buf.pairs.extend(cursor.take_head());
                        }
                        self.stats.cells_scanned += 1;
                        cursor.advance(self.reverse)?;
                    }
                    if let Some(any) = any {
                        selected |= any;
                        continue;
                    }
                }
                all_numbers = false;
                if !from_columns {
                    let values = self.values_of[family].as_deref();
                    format.decode(
                        family as u32,
                        &mut self.buf,
                        from_pair,
                        values,
                        &self.filter.qualifiers,
                        self.prune[family],
                    )?;
                }
                if self
                    .cursors
                    .get(c + 1)
                    .is_none_or(|next| next.family != family)
                {
                    let gc = &self.families[family].gc;
                    format::select(gc, &self.filter, self.now, &mut self.buf, from_cell);
                }
            }
            if self.buf.cells.is_empty() && !selected {
                passed += 1;
                if self.pause_after.is_some_and(|n| passed >= n) {
                    self.paused = true;
                    return Ok(false);
                }
                continue;
            }
            self.finish_row(numbers, lone_packed, all_numbers)?;
            return Ok(true);
        }
    }

    /// A lone PACKED keyspace's next row into `buf` from cursor `c`:
    /// whether its cells were taken from a column-wise block's columns (no
    /// PACKED value made of the row).
    #[inline]
    fn take_lone_packed(&mut self, c: usize, family: usize, newest: Option<usize>) -> Result<bool> {
        let cursor = &mut self.cursors[c];
        let mut from_columns = false;
        if let Some(row) = cursor.head_tall() {
            let index = u32::try_from(self.buf.pairs.len())
                .map_err(|_| Error::Internal("a row read holds too many pairs".into()))?;
            self.buf.pairs.push(row.pair());
            row.decode_cells(
                family as u32,
                index,
                &mut self.buf,
                self.values_of[family].as_deref(),
                &self.filter.qualifiers,
                newest,
            )?;
            from_columns = true;
            self.stats.cells_scanned += 1;
        } else if let Some(pair) = cursor.take_head() {
            self.buf.pairs.push(pair);
            self.stats.cells_scanned += 1;
        }
        cursor.advance(self.reverse)?;
        Ok(from_columns)
    }

    /// Counts a row read and gives it its key: in `buf`, or in `numbers`
    /// when every pair of it was decoded as numbers.
    #[inline]
    fn finish_row(
        &mut self,
        mut numbers: Option<&mut NumberRow>,
        lone_packed: bool,
        all_numbers: bool,
    ) -> Result<()> {
        if let Some(n) = self.remaining.as_mut() {
            *n -= 1;
        }
        self.stats.rows_returned += 1;
        self.stats.cells_returned += self.buf.cells.len() as u64;
        // (A lone PACKED pair's whole key is its escaped row: `row_of`
        // found it so.)
        let RowBuf { pairs, key, .. } = &mut self.buf;
        let escaped = match pairs.first() {
            Some((key, _)) if lone_packed => &key[..],
            _ => self.escaped_row.as_slice(),
        };
        match numbers.as_mut() {
            // Its numbers are all in `out`, no cell: the key goes there.
            Some(out) if all_numbers => codec::unescape_into(escaped, &mut out.key)?,
            _ => {
                key.clear();
                codec::unescape_into(escaped, key)?;
            }
        }
        if let (Some(out), Some(plan)) = (numbers.as_mut(), &self.numbers) {
            if !all_numbers {
                out.key.extend_from_slice(&self.buf.key);
                out.take_cells(&self.buf.view(), &plan.wanted);
            }
            self.stats.cells_returned += out.cells() as u64;
        }
        if let Some(tally) = &mut self.tally {
            let pairs = &self.buf.pairs;
            let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
            let key = match numbers {
                Some(out) if all_numbers => &out.key[..],
                _ => &self.buf.key[..],
            };
            tally.row(key, pairs.len() as u64, bytes as u64);
        }
        Ok(())
    }

    /// Moves cursor `c`'s pairs of the row `escaped_row` into `buf.pairs`
    /// (in the cursor's order). With `newest`, the only cells of a column
    /// the read keeps, a column whose pairs hold one cell each gives only
    /// those, and a long history costs a seek rather than a pair per
    /// version (see [`take_newest`]). Reading backwards, where a column's
    /// newest pairs come last, the first long column met turns the read of
    /// the rest of the row forwards, then the cursor seeks to before the
    /// row.
    fn take_row(&mut self, c: usize, newest: Option<usize>) -> Result<()> {
        let cursor = &mut self.cursors[c];
        let row = self.escaped_row.as_slice();
        let pairs = &mut self.buf.pairs;
        let scanned = &mut self.stats.cells_scanned;
        let newest = newest.filter(|_| cursor.source.format.pair_per_cell());
        if !self.reverse {
            let end = self.range.end.as_deref();
            return take_newest(
                cursor,
                &self.snapshot,
                row,
                newest,
                end,
                pairs,
                scanned,
                false,
            );
        }
        // (Without `newest`, no column is long.)
        let n = newest.unwrap_or(usize::MAX);
        let long = long_after(n, false);
        // Where the pairs of the column being read start in `pairs`.
        let mut column_from = pairs.len();
        loop {
            if cursor.head_row() != Some(row) {
                return Ok(());
            }
            let key = cursor.head_key().unwrap_or_default();
            let column = cursor.source.format.column_of(key).unwrap_or_default();
            if pairs.len() - column_from >= long {
                column_from = column_start(cursor.source.format, pairs, column_from, column);
            }
            if pairs.len() - column_from < long {
                pairs.extend(cursor.take_head());
                *scanned += 1;
                cursor.advance_in(true, row)?;
                continue;
            }
            // A long column: the pairs read of it are its oldest. The
            // row up to its end is read forwards instead.
            pairs.truncate(column_from);
            let end = codec::prefix_successor(column);
            let mut forward = Cursor {
                iter: cursor
                    .source
                    .pairs(&self.snapshot, row, end.as_deref(), false)?,
                source: cursor.source.clone(),
                head: None,
                ended: false,
                head_row_len: 0,
                ..*cursor
            };
            forward.start(false)?;
            take_newest(
                &mut forward,
                &self.snapshot,
                row,
                newest,
                end.as_deref(),
                pairs,
                scanned,
                // The row's last column is long.
                true,
            )?;
            pairs[column_from..].reverse();
            // The cursor goes on before the row when the next row is asked
            // for (`seek_behind`): a read whose LIMIT this row meets never
            // pays for that seek.
            cursor.end();
            if self.behind.is_empty() {
                self.behind_row.clear();
                self.behind_row.extend_from_slice(row);
            }
            self.behind.push(c);
            return Ok(());
        }
    }

    /// The next row's `wanted` columns as runs of numbers, into `out`;
    /// false at the end. A PACKED family decodes them from its pair with
    /// no cell in between; other families give them from their cells.
    /// The rows are those [`FjallRows::next_view`] gives (any with a
    /// selected cell), wanted cells or not.
    pub fn next_numbers(&mut self, wanted: &NumberColumns, out: &mut NumberRow) -> Result<bool> {
        if self.failed {
            return Ok(false);
        }
        self.plan_numbers(wanted);
        self.advance_row(Some(out))
            .inspect_err(|_| self.failed = true)
    }

    /// Plans a numbers read of `wanted`, unless the last one was of them.
    fn plan_numbers(&mut self, wanted: &NumberColumns) {
        if self.numbers.as_ref().is_none_or(|p| p.wanted != wanted) {
            self.numbers = Some(NumbersPlan::new(wanted, self.families.len(), &self.filter));
        }
    }

    /// See [`super::RowSource::next_number_rows`]: the rows of a
    /// column-wise block, from the current one on, go into `rows` at once
    /// when the read takes them whole (see [`FjallRows::tall_rows`]); any
    /// other row into `row`.
    pub fn next_number_rows(
        &mut self,
        wanted: &NumberColumns,
        max: usize,
        row: &mut NumberRow,
        rows: &mut NumberRows,
    ) -> Result<Numbers> {
        if self.failed {
            return Ok(Numbers::End);
        }
        self.plan_numbers(wanted);
        match self.tall_rows(max, rows) {
            Ok(true) => return Ok(Numbers::Rows),
            Ok(false) => {}
            Err(e) => {
                self.failed = true;
                return Err(e);
            }
        }
        match self.advance_row(Some(row)) {
            Ok(true) => Ok(Numbers::Row),
            Ok(false) => Ok(Numbers::End),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// Takes up to `max` rows of a column-wise block at once, from the
    /// current row on, into `out`: when the read is forwards of one PACKED
    /// keyspace, keeps every cell, and selects every row (each holds a
    /// cell of a selected column), the rows then being exactly those
    /// [`FjallRows::advance_row`] would give one by one. False, with
    /// nothing read, when it cannot.
    fn tall_rows(&mut self, max: usize, out: &mut NumberRows) -> Result<bool> {
        self.paused = false;
        let Some(plan) = &mut self.numbers else {
            return Ok(false);
        };
        let max = max.min(self.remaining.unwrap_or(usize::MAX));
        let [cursor] = self.cursors.as_mut_slice() else {
            return Ok(false);
        };
        let family = cursor.family;
        if max == 0
            || !cursor.source.format.has_blocks()
            || self.families[family].sources.len() != 1
        {
            return Ok(false);
        }
        let Some((row, n)) = cursor.tall_run() else {
            return Ok(false);
        };
        let (gc, filter, now) = (&self.families[family].gc, &self.filter, self.now);
        let selection = format::Selection {
            selects: &|q: &[u8]| filter.qualifiers.matches(q),
            keep: &|times: &[i64]| format::window(gc, filter, now, times),
            keeps_all: format::keeps_every_cell(gc, filter),
        };
        out.reset(plan.wanted.len());
        let (wanted, shape) = (&plan.by_family[family], &mut plan.shapes[family]);
        let Some(taken) = row.decode_rows(n.min(max), wanted, &selection, out, shape)? else {
            return Ok(false);
        };
        if out.wants_keys() {
            row.check_keys()?;
            row.push_keys(taken, out);
        } else {
            out.push_keyless(taken);
        }
        let bytes = row.stored_bytes(taken);
        if let Some(tally) = &mut self.tally {
            // Where the run lies, for the key activity: a key of it that
            // is at hand (the block's own when the run ends the block).
            let key = row.key_in_run(taken)?;
            let n = taken as u64;
            tally.escaped_rows_at(key, n, n, bytes, &mut self.tally_key)?;
        }
        cursor.skip_tall(taken)?;
        if let Some(left) = self.remaining.as_mut() {
            *left -= taken;
        }
        let taken = taken as u64;
        self.stats.cells_scanned += taken;
        self.stats.rows_returned += taken;
        self.stats.cells_returned += out.cells() as u64;
        Ok(true)
    }

    /// The next row, borrowed until the next call.
    pub fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        if self.failed {
            return Ok(None);
        }
        match self.advance_row(None) {
            Ok(true) => Ok(Some(self.buf.view())),
            Ok(false) => Ok(None),
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }
}

impl Iterator for FjallRows {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_view() {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        }
        let families = &self.families;
        Some(Ok(self.buf.view().to_row(|i| families[i].name.clone())))
    }
}

impl super::RowSource for FjallRows {
    fn next_view(&mut self) -> Result<Option<RowView<'_>>> {
        FjallRows::next_view(self)
    }

    fn stats(&self) -> ScanStats {
        FjallRows::stats(self)
    }

    fn family_names(&self) -> Vec<Arc<str>> {
        FjallRows::family_names(self)
    }

    fn next_numbers(&mut self, wanted: &NumberColumns, out: &mut NumberRow) -> Result<bool> {
        FjallRows::next_numbers(self, wanted, out)
    }

    fn next_number_rows(
        &mut self,
        wanted: &NumberColumns,
        max: usize,
        row: &mut NumberRow,
        rows: &mut NumberRows,
    ) -> Result<Numbers> {
        FjallRows::next_number_rows(self, wanted, max, row, rows)
    }

    fn pause_after(&mut self, rows: usize) {
        self.pause_after = Some(rows.max(1));
    }

    fn paused(&self) -> bool {
        self.paused
    }
}

impl TableHandle {
    pub(super) fn family_scans(&self, only: Option<&[String]>) -> Result<Vec<FamilyScan>> {
        if let Some(names) = only {
            for name in names {
                self.def.family(name)?;
            }
        }
        Ok(self
            .def
            .families
            .iter()
            .enumerate()
            .filter(|(_, f)| only.is_none_or(|names| names.contains(&f.name)))
            .map(|(i, f)| FamilyScan {
                name: Arc::from(f.name.as_str()),
                gc: f.gc.clone(),
                sources: std::iter::once(i)
                    .chain(self.moving[i].as_ref().map(|m| m.slot))
                    .map(|slot| Source {
                        format: self.formats[slot],
                        keyspace: self.keyspaces[slot].clone(),
                        blocks: self.blocks[slot].clone(),
                    })
                    .collect(),
            })
            .collect())
    }
}

impl FjallStore {
    // ---- reads ---------------------------------------------------------

    /// Reads rows through one snapshot, lazily (through the trait:
    /// [`Backend::read_rows`]), as of `now` (microseconds since the
    /// epoch: where the families' age limits fall).
    pub(crate) fn read_rows(
        &self,
        table: &str,
        request: ReadRequest,
        now: i64,
    ) -> Result<FjallRows> {
        let (handle, snapshot) = self.handle_and_snapshot(table)?;
        let families = handle.family_scans(request.filter.families.as_deref())?;
        Ok(FjallRows::new(snapshot, families, request, now))
    }
}
