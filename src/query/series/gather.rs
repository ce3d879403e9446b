//! Gathering a column-per-event series' events back from its rows.
//!
//! Each measure of a series has its own rows (`series#measure#bucket`),
//! and in a row the cells sort by qualifier, which is the value, not by
//! time. A series' events are therefore a merge: one read per measure
//! over that measure's rows of the series (narrowed to the buckets of the
//! time range), each row's cells put in time order, the reads merged by
//! time, and the cells of one time across the measures made one event.
//!
//! Series are found in key order: a one-row read finds the next row's
//! series (the key up to its measure), the measures' reads gather its
//! events, and the next search starts past the series. Events then come
//! series after series, each series in time order (newest first when the
//! rows are read backwards, or in a REVERSED layout read forwards), and a
//! reader stops after its LIMIT: the latest event of one series reads
//! each measure's newest bucket row only.
//!
//! A partition owns the series whose key prefix falls in its ranges;
//! a series whose rows straddle a split is read whole by the partition
//! where it starts.

use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Builder, StringBuilder, TimestampMicrosecondBuilder, new_null_array,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{Error, Result};
use crate::query::view::{ColumnSource, Layout, SeriesView, value_type};
use crate::schema::{KeyRef, KeySchema, KeyValue, ValueType};
use crate::store::{
    ReadFilter, ReadRequest, RowRange, RowSet, RowStream, ScanStats, Store, TimeRange,
};

/// What every partition of a gather shares, decided when planned.
pub(crate) struct GatherPlan {
    pub store: Store,
    /// The series' layout: its table (pinned when planned), row key and
    /// columns.
    pub layout: Arc<Layout>,
    /// Cell times read.
    pub time: TimeRange,
    /// The series' columns produced (indexes of the layout's columns).
    pub columns: Vec<usize>,
    /// `layout`'s columns of `columns`.
    pub schema: SchemaRef,
    /// The layout's series and row key, which a gather needs (checked
    /// when planned, so a gather never meets a layout without them).
    series: SeriesView,
    key: KeySchema,
}

impl GatherPlan {
    /// A gather over `layout`'s series; an error when the layout is not a
    /// series kept a column per event with a row-key schema.
    pub fn new(
        store: Store,
        layout: Arc<Layout>,
        time: TimeRange,
        columns: Vec<usize>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let (Some(series), Some(key)) = (&layout.series, &layout.key) else {
            return Err(Error::Internal(format!(
                "a gather was planned for table {}, which is not a series with a row-key schema",
                layout.table
            )));
        };
        let (series, key) = (series.clone(), key.clone());
        Ok(GatherPlan {
            store,
            layout,
            time,
            columns,
            schema,
            series,
            key,
        })
    }

    pub fn series(&self) -> &SeriesView {
        &self.series
    }

    fn key(&self) -> &KeySchema {
        &self.key
    }

    /// Whether events come newest first when rows are read in
    /// `reverse` key order.
    pub fn newest_first(&self, reverse: bool) -> bool {
        reverse != self.series().def.layout.reversed
    }

    fn read(&self, request: ReadRequest) -> crate::error::Result<RowStream> {
        match &self.layout.pinned {
            Some(pinned) => self.store.read_pinned(pinned, request),
            None => self.store.read_rows(&self.layout.table, request),
        }
    }
}

/// Counters of a gather (EXPLAIN ANALYZE).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct GatherStats {
    pub series: usize,
    pub rows: u64,
    pub cells: u64,
}

impl GatherStats {
    fn add(&mut self, stats: ScanStats) {
        self.rows += stats.rows_returned;
        self.cells += stats.cells_scanned;
    }
}

/// One partition's gather under way.
pub(crate) struct Gather {
    plan: Arc<GatherPlan>,
    reverse: bool,
    newest_first: bool,
    /// The ranges hold one series, whose key they start with.
    one_series: bool,
    /// The ranges whose series this partition owns, in read order.
    ranges: Vec<RowRange>,
    next_range: usize,
    /// What is left to search of the range being read, and where that
    /// range began (a series starting before it is another's).
    searching: Option<(RowRange, Bound<Vec<u8>>)>,
    series: Option<Series>,
    out: Out,
    /// Events sent so far, and how many are wanted.
    pub emitted: usize,
    fetch: Option<usize>,
    pub stats: GatherStats,
}

/// The series being merged.
struct Series {
    /// Its row key's fields (measure and bucket those of a row read),
    /// once a row is.
    values: Option<Vec<KeyValue>>,
    measures: Vec<Cursor>,
    /// Each measure's next event time.
    heads: Vec<Option<i64>>,
}

/// One measure's rows of a series, a row's cells at a time.
struct Cursor {
    rows: RowStream,
    /// The row's key.
    key: Vec<u8>,
    /// The row's cells in event order: time, and the qualifier's place
    /// in `qualifiers`.
    cells: Vec<(i64, u32, u32)>,
    qualifiers: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Cursor {
    /// The time of the next cell, reading the next row when this one is
    /// used up (skipping rows whose key does not fit `key`: another
    /// tool's).
    fn head(&mut self, newest_first: bool, key: &KeySchema) -> crate::error::Result<Option<i64>> {
        while self.pos == self.cells.len() {
            if self.done {
                return Ok(None);
            }
            let Some(row) = self.rows.next_view()? else {
                self.done = true;
                return Ok(None);
            };
            if !key.fits(row.key()) {
                continue;
            }
            self.key.clear();
            self.key.extend_from_slice(row.key());
            self.cells.clear();
            self.qualifiers.clear();
            self.pos = 0;
            for i in 0..row.len() {
                let q = row.qualifier(i);
                self.cells.push((
                    row.timestamp(i),
                    self.qualifiers.len() as u32,
                    q.len() as u32,
                ));
                self.qualifiers.extend_from_slice(q);
            }
            if newest_first {
                self.cells.sort_by_key(|c| std::cmp::Reverse(c.0));
            } else {
                self.cells.sort_by_key(|c| c.0);
            }
        }
        Ok(Some(self.cells[self.pos].0))
    }

    fn qualifier(&self, i: usize) -> &[u8] {
        let (_, at, len) = self.cells[i];
        &self.qualifiers[at as usize..(at + len) as usize]
    }

    /// Takes the cells at `time` (the head): their value, the greatest
    /// should another tool have written two.
    fn take(&mut self, time: i64, value_type: ValueType) -> &[u8] {
        let mut best = self.pos;
        self.pos += 1;
        while self.pos < self.cells.len() && self.cells[self.pos].0 == time {
            if greater(self.qualifier(self.pos), self.qualifier(best), value_type) {
                best = self.pos;
            }
            self.pos += 1;
        }
        self.qualifier(best)
    }
}

/// Whether value text `a` is greater than `b` as `value_type`; text that
/// does not parse counts as greater, so that reading it fails as it would
/// alone.
fn greater(a: &[u8], b: &[u8], value_type: ValueType) -> bool {
    use std::cmp::Ordering;
    fn by<T>(
        a: &[u8],
        b: &[u8],
        parse: impl Fn(&str) -> Option<T>,
        cmp: impl Fn(&T, &T) -> Ordering,
    ) -> bool {
        let parsed = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|t| parse(t.trim()));
        match (parsed(a), parsed(b)) {
            (Some(x), Some(y)) => cmp(&x, &y).is_gt(),
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (None, None) => a > b,
        }
    }
    match value_type {
        ValueType::Int64 => by(a, b, |t| t.parse::<i64>().ok(), i64::cmp),
        ValueType::Float64 => by(a, b, |t| t.parse::<f64>().ok(), f64::total_cmp),
        ValueType::Boolean => by(
            a,
            b,
            |t| match t.to_ascii_lowercase().as_str() {
                "true" | "t" | "1" | "yes" | "y" | "on" => Some(true),
                "false" | "f" | "0" | "no" | "n" | "off" => Some(false),
                _ => None,
            },
            bool::cmp,
        ),
        // Text compares as its bytes, as Utf8 does.
        _ => a > b,
    }
}

/// Whether `key` lies at or after a range's start.
fn after_start(start: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match start {
        Bound::Included(s) => key >= s.as_slice(),
        Bound::Excluded(s) => key > s.as_slice(),
        Bound::Unbounded => true,
    }
}

/// Whether a range holds no key.
fn empty(range: &RowRange) -> bool {
    match (&range.start, &range.end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        _ => false,
    }
}

/// The series' part of a row key: everything before its measure and
/// bucket (the last two fields, which hold no delimiter), delimiter
/// included.
fn series_prefix(key: &[u8], delimiter: u8) -> Option<&[u8]> {
    let last = key.iter().rposition(|b| *b == delimiter)?;
    let measure = key[..last].iter().rposition(|b| *b == delimiter)?;
    Some(&key[..=measure])
}

impl Gather {
    pub fn new(
        plan: Arc<GatherPlan>,
        mut ranges: Vec<RowRange>,
        reverse: bool,
        one_series: bool,
        fetch: Option<usize>,
        capacity: usize,
    ) -> Self {
        if reverse {
            ranges.reverse();
        }
        let out = Out::new(&plan, capacity);
        Gather {
            newest_first: plan.newest_first(reverse),
            plan,
            reverse,
            one_series: one_series && ranges.len() == 1,
            ranges,
            next_range: 0,
            searching: None,
            series: None,
            out,
            emitted: 0,
            fetch,
            stats: GatherStats::default(),
        }
    }

    fn wanted(&self) -> usize {
        self.fetch
            .map_or(usize::MAX, |f| f.saturating_sub(self.emitted))
    }

    /// Gathers up to `events` more events, sending a batch each time
    /// `batch` are in; true when the partition is done (its series read,
    /// its LIMIT reached, or the consumer gone).
    pub fn read(
        &mut self,
        events: usize,
        batch: usize,
        send: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> crate::error::Result<bool> {
        self.read_events(events, batch, send).map_err(|e| match e {
            // Name what the damage is in, as a scan does.
            crate::error::Error::Storage(inner) => crate::error::Error::DamagedData {
                table: self.plan.layout.table.clone(),
                reason: crate::error::engine_words(&inner),
            },
            other => other,
        })
    }

    fn read_events(
        &mut self,
        events: usize,
        batch: usize,
        send: &mut dyn FnMut(RecordBatch) -> bool,
    ) -> crate::error::Result<bool> {
        let batch = batch.max(1);
        for _ in 0..events {
            if self.wanted() == 0 || !self.step()? {
                self.finish_series();
                if self.out.rows > 0 {
                    let rows = self.flush()?;
                    send(rows);
                }
                return Ok(true);
            }
            if self.out.rows >= batch.min(self.wanted()) {
                let rows = self.flush()?;
                if !send(rows) {
                    self.finish_series();
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn flush(&mut self) -> crate::error::Result<RecordBatch> {
        let rows = self.out.rows;
        let batch = self.out.finish(&self.plan)?;
        self.emitted += rows;
        Ok(batch)
    }

    fn finish_series(&mut self) {
        if let Some(series) = self.series.take() {
            for c in &series.measures {
                self.stats.add(c.rows.stats());
            }
        }
    }

    /// Gathers one event into `out`; false when no series has more.
    fn step(&mut self) -> crate::error::Result<bool> {
        loop {
            if self.series.is_none() {
                match self.next_series()? {
                    Some(series) => self.series = Some(series),
                    None => return Ok(false),
                }
            }
            let newest_first = self.newest_first;
            let key = self.plan.key();
            let Some(series) = self.series.as_mut() else {
                continue;
            };
            let mut at: Option<i64> = None;
            for (c, head) in series.measures.iter_mut().zip(&mut series.heads) {
                *head = c.head(newest_first, key)?;
                if let Some(t) = *head {
                    at = Some(match at {
                        None => t,
                        Some(a) if newest_first => a.max(t),
                        Some(a) => a.min(t),
                    });
                }
            }
            let Some(time) = at else {
                self.finish_series();
                continue;
            };
            let def = &self.plan.series().def;
            if series.values.is_none() {
                let read = series.heads.iter().position(|h| h.is_some()).unwrap_or(0);
                series.values = self.plan.key().decode(&series.measures[read].key);
            }
            self.out
                .event(series.values.as_deref().unwrap_or_default(), time);
            for (m, c) in series.measures.iter_mut().enumerate() {
                let value =
                    (series.heads[m] == Some(time)).then(|| c.take(time, def.measure_types[m]));
                self.out.measure(m, value);
            }
            return Ok(true);
        }
    }

    /// Finds the next series this partition owns, and opens its
    /// measures' reads.
    fn next_series(&mut self) -> crate::error::Result<Option<Series>> {
        let plan = Arc::clone(&self.plan);
        let key = plan.key();
        let delimiter = key.delimiter as u8;
        let family = plan.series().def.family.clone();
        if self.one_series {
            // The ranges hold one series: its key is the range's start.
            self.one_series = false;
            self.next_range = self.ranges.len();
            if let Some(RowRange {
                start: Bound::Included(prefix),
                ..
            }) = self.ranges.first()
            {
                let prefix = prefix.clone();
                self.stats.series += 1;
                return self.open_series(&prefix).map(Some);
            }
        }
        loop {
            let Some((range, began)) = self.searching.as_mut() else {
                let Some(range) = self.ranges.get(self.next_range) else {
                    return Ok(None);
                };
                self.next_range += 1;
                self.searching = Some((range.clone(), range.start.clone()));
                continue;
            };
            if empty(range) {
                self.searching = None;
                continue;
            }
            // The next row's key: one row, no values decoded.
            let filter = ReadFilter::all()
                .families([family.as_str()])
                .cells_per_column(1)
                .values_only(family.as_str(), Vec::<Vec<u8>>::new());
            let mut request = ReadRequest::rows(RowSet {
                ranges: vec![range.clone()],
            })
            .filter(filter)
            .limit(1);
            request.reverse = self.reverse;
            let mut rows = plan.read(request)?;
            let found = rows.next_view()?.map(|row| row.key().to_vec());
            self.stats.add(rows.stats());
            let Some(found) = found else {
                self.searching = None;
                continue;
            };
            let (Some(prefix), true) = (series_prefix(&found, delimiter), key.fits(&found)) else {
                // Not a row of the series (another tool's): step past it.
                if self.reverse {
                    range.end = Bound::Excluded(found);
                } else {
                    range.start = Bound::Excluded(found);
                }
                continue;
            };
            let prefix = prefix.to_vec();
            // A series is read by the partition holding its first row.
            let began = began.clone();
            let owned = after_start(&began, &prefix) || !self.has_rows(&prefix, &began)?;
            let Some((range, _)) = self.searching.as_mut() else {
                continue;
            };
            if self.reverse {
                if !owned {
                    // The rest of the range is this series' rows, and its
                    // first row is in the partition before.
                    self.searching = None;
                    continue;
                }
                range.end = Bound::Excluded(prefix.clone());
            } else {
                match crate::codec::prefix_successor(&prefix) {
                    Some(next) => range.start = Bound::Included(next),
                    None => self.searching = None,
                }
                if !owned {
                    continue;
                }
            }
            self.stats.series += 1;
            return self.open_series(&prefix).map(Some);
        }
    }

    /// Whether the series of `prefix` has a row before `start`.
    fn has_rows(&mut self, prefix: &[u8], start: &Bound<Vec<u8>>) -> crate::error::Result<bool> {
        let end = match start {
            Bound::Included(s) => Bound::Excluded(s.clone()),
            Bound::Excluded(s) => Bound::Included(s.clone()),
            Bound::Unbounded => return Ok(false),
        };
        let family = &self.plan.series().def.family;
        let filter = ReadFilter::all()
            .families([family.as_str()])
            .cells_per_column(1)
            .values_only(family.as_str(), Vec::<Vec<u8>>::new());
        let request = ReadRequest::rows(RowSet {
            ranges: vec![RowRange::between(Bound::Included(prefix.to_vec()), end)],
        })
        .filter(filter)
        .limit(1);
        let mut rows = self.plan.read(request)?;
        let found = rows.next_view()?.is_some();
        self.stats.add(rows.stats());
        Ok(found)
    }

    /// The reads of a series' measures: each over that measure's rows of
    /// the series, narrowed to the buckets of the time range.
    fn open_series(&self, prefix: &[u8]) -> crate::error::Result<Series> {
        let plan = &self.plan;
        let series = plan.series();
        let def = &series.def;
        let key = plan.key();
        let bucket = series.time_segment;
        let time = plan.time;
        let first = (time.start > 0).then(|| def.layout.bucket_start(time.start));
        let last = time
            .end
            .map(|end| def.layout.bucket_start(end.saturating_sub(1)));
        // A reversed layout's keys run from the newest bucket.
        let (low, high) = if def.layout.reversed {
            (last, first)
        } else {
            (first, last)
        };
        let mut measures = Vec::with_capacity(def.measures.len());
        for name in &def.measures {
            let mut rows = prefix.to_vec();
            rows.extend_from_slice(name.as_bytes());
            rows.push(key.delimiter as u8);
            let at = |micros: i64| -> crate::error::Result<Vec<u8>> {
                let mut k = rows.clone();
                k.extend_from_slice(key.field_text(bucket, KeyRef::Time(micros))?.as_bytes());
                Ok(k)
            };
            let whole = RowRange::prefix(rows.clone());
            let start = match low {
                Some(t) => Bound::Included(at(t)?),
                None => whole.start,
            };
            let end = match high {
                Some(t) => Bound::Included(at(t)?),
                None => whole.end,
            };
            let filter = ReadFilter::all()
                .families([def.family.as_str()])
                .time_range(time)
                .values_only(def.family.as_str(), Vec::<Vec<u8>>::new());
            let mut request = ReadRequest::rows(RowSet {
                ranges: vec![RowRange::between(start, end)],
            })
            .filter(filter);
            request.reverse = self.reverse;
            measures.push(Cursor {
                rows: plan.read(request)?,
                key: Vec::new(),
                cells: Vec::with_capacity(64),
                qualifiers: Vec::with_capacity(512),
                pos: 0,
                done: time.end.is_some_and(|end| end <= time.start),
            });
        }
        Ok(Series {
            heads: vec![None; measures.len()],
            values: None,
            measures,
        })
    }
}

/// A series key column's values as gathered.
enum KeyColumn {
    Text(StringBuilder),
    Int(Int64Builder),
    Time(TimestampMicrosecondBuilder),
}

/// The events gathered for the next batch: only the columns produced.
struct Out {
    /// Per series key column: its key field, and its values if produced.
    keys: Vec<(usize, Option<KeyColumn>)>,
    times: Option<TimestampMicrosecondBuilder>,
    /// Per measure, its values as text if produced.
    measures: Vec<Option<StringBuilder>>,
    rows: usize,
}

impl Out {
    fn new(plan: &GatherPlan, capacity: usize) -> Self {
        let series = plan.series();
        let produced = |column: usize| plan.columns.contains(&column);
        // The series key's columns are the view's first, each a key
        // field of the type the view gives it.
        let keys = (0..series.time_column)
            .map(|c| {
                let ColumnSource::Segment(field) = plan.layout.sources[c] else {
                    return (usize::MAX, None);
                };
                let column = produced(c).then(|| match plan.layout.arrow.field(c).data_type() {
                    DataType::Int64 => KeyColumn::Int(Int64Builder::with_capacity(capacity)),
                    DataType::Timestamp(..) => {
                        KeyColumn::Time(TimestampMicrosecondBuilder::with_capacity(capacity))
                    }
                    _ => KeyColumn::Text(StringBuilder::with_capacity(capacity, capacity * 8)),
                });
                (field, column)
            })
            .collect();
        let first_measure = series.time_column + 1;
        Out {
            keys,
            times: produced(series.time_column)
                .then(|| TimestampMicrosecondBuilder::with_capacity(capacity)),
            measures: (0..series.def.measures.len())
                .map(|m| {
                    produced(first_measure + m)
                        .then(|| StringBuilder::with_capacity(capacity, capacity * 8))
                })
                .collect(),
            rows: 0,
        }
    }

    /// Starts an event of the series whose key holds `values`, at `time`.
    fn event(&mut self, values: &[KeyValue], time: i64) {
        self.rows += 1;
        for (field, column) in &mut self.keys {
            let value = values.get(*field);
            match (column, value) {
                (None, _) => {}
                (Some(KeyColumn::Text(b)), Some(KeyValue::Text(t))) => b.append_value(t),
                (Some(KeyColumn::Int(b)), Some(KeyValue::Int(n))) => b.append_value(*n),
                (Some(KeyColumn::Time(b)), Some(KeyValue::Time(t))) => b.append_value(*t),
                (Some(KeyColumn::Text(b)), _) => b.append_null(),
                (Some(KeyColumn::Int(b)), _) => b.append_null(),
                (Some(KeyColumn::Time(b)), _) => b.append_null(),
            }
        }
        if let Some(times) = &mut self.times {
            times.append_value(time);
        }
    }

    /// The event's value of measure `m` (its qualifier), if it gives one.
    fn measure(&mut self, m: usize, value: Option<&[u8]>) {
        let Some(column) = &mut self.measures[m] else {
            return;
        };
        match value {
            // Text that is not UTF-8 cannot be any measure's value: kept
            // as is (lossy), it fails the cast that reads it.
            Some(v) => match std::str::from_utf8(v) {
                Ok(t) => column.append_value(t),
                Err(_) => column.append_value(String::from_utf8_lossy(v)),
            },
            None => column.append_null(),
        }
    }

    /// The batch of the events gathered, in the plan's columns.
    fn finish(&mut self, plan: &GatherPlan) -> crate::error::Result<RecordBatch> {
        let series = plan.series();
        let rows = std::mem::take(&mut self.rows);
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(plan.columns.len());
        for &c in &plan.columns {
            let field = plan.layout.arrow.field(c);
            let array: ArrayRef = if c < series.time_column {
                match self.keys.get_mut(c).and_then(|(_, k)| k.as_mut()) {
                    Some(KeyColumn::Text(b)) => Arc::new(b.finish()),
                    Some(KeyColumn::Int(b)) => Arc::new(b.finish()),
                    Some(KeyColumn::Time(b)) => Arc::new(b.finish()),
                    None => new_null_array(field.data_type(), rows),
                }
            } else if c == series.time_column {
                match &mut self.times {
                    Some(b) => Arc::new(b.finish()),
                    None => new_null_array(field.data_type(), rows),
                }
            } else {
                let m = c - series.time_column - 1;
                match self.measures.get_mut(m).and_then(Option::as_mut) {
                    Some(b) => {
                        let text: ArrayRef = Arc::new(b.finish());
                        let to = value_type(series.def.measure_types[m]);
                        let options = CastOptions {
                            safe: false,
                            ..Default::default()
                        };
                        cast_with_options(&text, &to, &options).map_err(|e| {
                            crate::error::Error::InvalidArgument(format!(
                                "series {}: a {} qualifier of measure {} is not a {}: {e}",
                                plan.layout.table,
                                series.def.family,
                                series.def.measures[m],
                                series.def.measure_types[m].sql_name()
                            ))
                        })?
                    }
                    None => new_null_array(field.data_type(), rows),
                }
            };
            arrays.push(array);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(&plan.schema), arrays, &options)
            .map_err(|e| crate::error::Error::Internal(format!("a gathered batch: {e}")))
    }
}
