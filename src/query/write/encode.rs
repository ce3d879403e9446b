//! Arrow batches to cell writes: each column of a batch is typed once (an
//! accessor chosen per batch, not per value), then every row becomes a
//! row key and its cells in a [`CellBatch`].
//!
//! The row key comes from `_key` when given, otherwise it is built from
//! the segment columns (field promotion). Declared columns become cells of
//! their family and qualifier; entries of a family's map column become
//! cells with those qualifiers; aggregate families merge the value in.

use std::collections::HashMap;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, MapArray, RecordBatch, StringArray, StringViewArray,
    StructArray, TimestampMicrosecondArray, new_null_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;

use super::values::{Values, negative_timestamp};
use crate::error::Error;
use crate::query::view::{ColumnSource, Layout};
use crate::schema::{KeyRef, SeriesLayout};
use crate::store::{BatchColumn, BatchFamily, CellBatch, MAX_QUALIFIER_LEN};

/// A row of the input that cannot be written, and why.
pub(crate) type BadRow = (usize, Error);

/// Which input rows each row of an encoded batch holds: one, or a
/// series' events of one bucket.
#[derive(Debug, Default)]
pub(crate) struct BatchRows {
    inputs: Vec<usize>,
    /// Per batch row, where its input rows end in `inputs`.
    ends: Vec<usize>,
}

impl BatchRows {
    /// Input row `row` is the next batch row's, or (`joins`) the last's.
    fn push(&mut self, row: usize, joins: bool) {
        self.inputs.push(row);
        match self.ends.last_mut() {
            Some(end) if joins => *end = self.inputs.len(),
            _ => self.ends.push(self.inputs.len()),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// How many input rows in all.
    pub(crate) fn inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The input rows of batch row `i`.
    pub(crate) fn of(&self, i: usize) -> &[usize] {
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        &self.inputs[start..self.ends[i]]
    }
}

/// The cell times of one INSERT without `_timestamp`: the statement's
/// time, except that a row whose key an earlier row of the statement also
/// wrote gets a later microsecond, so every row written is a version of
/// its own and the last row of a key is the newest (as separate writes
/// would be). Batches are stamped in order, each a microsecond after the
/// last time the one before used, so a repeat in a later batch is later
/// too without remembering every key of a long statement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatementClock {
    /// The earliest time the next batch may use.
    next: i64,
    /// The backend's timestamp granularity: times are multiples of it.
    step: i64,
}

impl StatementClock {
    /// A clock from `start` (rounded down to a whole `step`), stepping by
    /// `step` microseconds.
    pub fn new(start: i64, step: i64) -> Self {
        StatementClock {
            next: crate::store::align_down(start, step),
            step: step.max(1),
        }
    }
}

/// A family's map column typed for one batch.
struct MapValues<'a> {
    family: usize,
    map: &'a MapArray,
    /// The entries' keys as text (cast once per batch).
    keys: StringArray,
    values: Values<'a>,
    values_array: &'a ArrayRef,
}

/// One column of the input, typed for the batch.
enum Column<'a> {
    Cell {
        family: usize,
        qualifier: &'a [u8],
        values: Values<'a>,
        /// Which rows are NULL (none when there are no NULLs).
        nulls: Option<&'a NullBuffer>,
    },
    Map(MapValues<'a>),
}

/// Text of a batch: strings, or string views (a file's `_key` as read).
enum Texts {
    Strings(StringArray),
    Views(StringViewArray),
}

impl Texts {
    /// `array` as text: as it is when it is strings or string views,
    /// else cast to strings.
    fn of(array: &ArrayRef) -> crate::error::Result<Texts> {
        Ok(match array.data_type() {
            DataType::Utf8View => Texts::Views(array.as_string_view().clone()),
            _ => Texts::Strings(
                cast(array, &DataType::Utf8)
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?
                    .as_string::<i32>()
                    .clone(),
            ),
        })
    }

    fn is_valid(&self, row: usize) -> bool {
        match self {
            Texts::Strings(a) => a.is_valid(row),
            Texts::Views(a) => a.is_valid(row),
        }
    }

    fn value(&self, row: usize) -> &str {
        match self {
            Texts::Strings(a) => a.value(row),
            Texts::Views(a) => a.value(row),
        }
    }
}

/// Where a row's key comes from in one batch.
struct KeyColumns<'a> {
    key: Option<Texts>,
    /// Per key field: its column, if the input has it.
    segments: Vec<Option<Segment<'a>>>,
    /// A series' event times, which every event needs.
    times: Option<&'a TimestampMicrosecondArray>,
}

enum Segment<'a> {
    Int(&'a Int64Array),
    Time(&'a TimestampMicrosecondArray),
    Text(StringArray),
    /// A series' bucket: the start of the one its event's time is in.
    Bucket(&'a TimestampMicrosecondArray, SeriesLayout),
    /// The same text in every row (a column per event's measure name).
    Fixed(&'a str),
}

/// A column per event's cell: a measure's value as the qualifier of a
/// cell in its row, stamped with the event's time.
pub(crate) struct EventCell {
    pub key: Vec<u8>,
    pub time: i64,
    pub qualifier: Vec<u8>,
    /// The input row (event) it is of.
    pub row: usize,
}

impl Segment<'_> {
    fn is_valid(&self, row: usize) -> bool {
        match self {
            Segment::Int(a) => a.is_valid(row),
            Segment::Time(a) | Segment::Bucket(a, _) => a.is_valid(row),
            Segment::Text(a) => a.is_valid(row),
            Segment::Fixed(_) => true,
        }
    }

    fn value(&self, row: usize) -> Option<KeyRef<'_>> {
        if !self.is_valid(row) {
            return None;
        }
        Some(match self {
            Segment::Int(a) => KeyRef::Int(a.value(row)),
            Segment::Time(a) => KeyRef::Time(a.value(row)),
            Segment::Text(a) => KeyRef::Text(a.value(row)),
            Segment::Bucket(a, layout) => KeyRef::Time(layout.bucket_start(a.value(row))),
            Segment::Fixed(text) => KeyRef::Text(text),
        })
    }
}

/// Turns batches of a layout's columns (the view's types, in its order)
/// into cell writes.
pub(crate) struct Encoder<'l> {
    layout: &'l Layout,
}

impl<'l> Encoder<'l> {
    pub fn new(layout: &'l Layout) -> Self {
        Encoder { layout }
    }

    /// Encodes the rows of `batch` into `out` (emptied first), but for
    /// those already known `bad`, and returns which input row each row of
    /// `out` is, and every row that cannot be written with why. Rows are
    /// stamped by `clock` unless `_timestamp` gives their time.
    pub fn encode(
        &self,
        batch: &RecordBatch,
        clock: &mut StatementClock,
        out: &mut CellBatch,
        mut bad: Vec<BadRow>,
    ) -> crate::error::Result<(BatchRows, Vec<BadRow>)> {
        let layout = self.layout;
        out.clear();
        let families: Vec<BatchFamily> = layout
            .def
            .families
            .iter()
            .map(|f| out.family(&f.name))
            .collect();
        let key_columns = self.key_columns(batch)?;
        let event = self.event_messages(batch)?;
        let (columns, explicit) = self.columns(batch, event.as_ref())?;

        // Keys first: which rows repeat a key decides their times.
        let mut keys: Vec<u8> = Vec::new();
        let mut ends: Vec<usize> = Vec::with_capacity(batch.num_rows());
        let mut ok = vec![true; batch.num_rows()];
        for (row, _) in &bad {
            if let Some(ok) = ok.get_mut(*row) {
                *ok = false;
            }
        }
        for (row, ok) in ok.iter_mut().enumerate() {
            if *ok && let Err(e) = self.key(&key_columns, row, &mut keys) {
                *ok = false;
                bad.push((row, e));
            }
            ends.push(keys.len());
        }
        let key_of = |row: usize| &keys[if row == 0 { 0 } else { ends[row - 1] }..ends[row]];

        // Row times: explicit, or the clock's, later for a repeated key.
        let base = clock.next;
        let mut last = 0i64;
        let mut times = vec![base; batch.num_rows()];
        let mut implicit_rows = (0..batch.num_rows()).filter(|&r| ok[r]);
        let ascending = {
            let mut previous: Option<&[u8]> = None;
            implicit_rows.all(|r| {
                let k = key_of(r);
                let up = previous.is_none_or(|p| p < k);
                previous = Some(k);
                up
            })
        };
        if !ascending {
            let mut seen: HashMap<&[u8], i64> = HashMap::with_capacity(batch.num_rows());
            for row in (0..batch.num_rows()).filter(|&r| ok[r]) {
                if explicit.is_some_and(|a| a.is_valid(row)) {
                    continue;
                }
                let n = seen.entry(key_of(row)).or_insert(0);
                times[row] = base.saturating_add(n.saturating_mul(clock.step));
                last = last.max(*n);
                *n += 1;
            }
        }
        clock.next = base.saturating_add(last.saturating_add(1).saturating_mul(clock.step));

        if let Some(family) = self.column_wise(&columns, batch.num_rows()) {
            return self.encode_columns(
                (&columns, families[family]),
                explicit,
                (&ok, &times),
                &key_of,
                out,
                bad,
            );
        }
        let mut rows = BatchRows::default();
        let mut scratch = Vec::new();
        // A series' events of one bucket, one after another, add their
        // cells to one row of the batch: written as one row each, every
        // event after the first would be a repeated key, which the store
        // applies row by row.
        let bucketed = layout.series.as_ref().is_some_and(|s| s.bucketed());
        for row in 0..batch.num_rows() {
            if !ok[row] {
                continue;
            }
            let (at, is_explicit) = match explicit.filter(|a| a.is_valid(row)) {
                Some(a) if a.value(row) < 0 => {
                    bad.push((row, negative_timestamp(a.value(row))));
                    continue;
                }
                Some(a) => (a.value(row), true),
                None => (times[row], false),
            };
            let joins = bucketed && !rows.is_empty() && out.key(out.len() - 1) == key_of(row);
            if !joins {
                out.begin_row(key_of(row));
            }
            let mark = out.mark();
            let drop_own = |out: &mut CellBatch| match joins {
                true => out.truncate_row(mark),
                false => out.discard_row(),
            };
            match self.cells(
                &columns,
                &families,
                row,
                (at, is_explicit),
                out,
                &mut scratch,
            ) {
                Ok(()) if out.largest_value_since(mark) > crate::store::MAX_VALUE_LEN => {
                    // (What the store would refuse the row for, found
                    // here so that it refuses this event alone.)
                    let len = out.largest_value_since(mark);
                    drop_own(out);
                    let max = crate::store::MAX_VALUE_LEN;
                    bad.push((row, Error::ValueTooLarge { len, max }));
                }
                Ok(()) if out.mark() == mark => {
                    drop_own(out);
                    bad.push((
                        row,
                        Error::InvalidArgument(format!(
                            "row {} has no non-NULL column to write; a row exists only through its cells",
                            crate::codec::show_bytes(key_of(row))
                        )),
                    ));
                }
                Ok(()) => rows.push(row, joins),
                Err(e) => {
                    drop_own(out);
                    bad.push((row, e));
                }
            }
        }
        bad.sort_by_key(|(row, _)| *row);
        Ok((rows, bad))
    }

    /// The batch's columns as the encoder writes them (a serialized
    /// series' `event` first), and the column giving rows their time, if
    /// any.
    fn columns<'b>(
        &'b self,
        batch: &'b RecordBatch,
        event: Option<&'b (usize, ArrayRef)>,
    ) -> crate::error::Result<(Vec<Column<'b>>, Option<&'b TimestampMicrosecondArray>)> {
        let layout = self.layout;
        // A declared column's cells: its family, qualifier and values.
        let cell = |d: usize, array: &'b ArrayRef| -> crate::error::Result<Column<'b>> {
            let def = &layout.columns[d];
            Ok(Column::Cell {
                family: family_index(layout, &def.family)?,
                qualifier: def.qualifier.as_bytes(),
                values: Values::of(array, def, layout.protos[d].as_ref())?,
                nulls: array.nulls(),
            })
        };
        let mut columns = Vec::new();
        if let Some((d, array)) = event {
            columns.push(cell(*d, array)?);
        }
        let mut explicit: Option<&TimestampMicrosecondArray> = None;
        for (i, source) in layout.sources.iter().enumerate() {
            let array = batch.column(i);
            if array.null_count() == array.len() {
                continue;
            }
            match source {
                ColumnSource::Declared(d) => columns.push(cell(*d, array)?),
                ColumnSource::FamilyMap(f) => {
                    let Some(map) = array.as_any().downcast_ref::<MapArray>() else {
                        return Err(Error::Internal(format!(
                            "map column of family {} arrived as {}",
                            layout.def.families[*f].name,
                            array.data_type()
                        )));
                    };
                    let keys = cast(map.keys(), &DataType::Utf8)
                        .map_err(|e| Error::InvalidArgument(e.to_string()))?
                        .as_string::<i32>()
                        .clone();
                    columns.push(Column::Map(MapValues {
                        family: *f,
                        map,
                        keys,
                        values: Values::of(map.values(), &layout.map_values[*f], None)?,
                        values_array: map.values(),
                    }));
                }
                ColumnSource::Timestamp => {
                    explicit = array.as_any().downcast_ref();
                }
                // A series' time in a row per event is also its cells' time.
                ColumnSource::Segment(_)
                    if layout.series.as_ref().is_some_and(|s| s.time_column == i) =>
                {
                    explicit = array.as_any().downcast_ref();
                }
                ColumnSource::Family | ColumnSource::Qualifier | ColumnSource::Value => {
                    return Err(Error::InvalidArgument(format!(
                        "the cells view of {} is read-only",
                        layout.table
                    )));
                }
                ColumnSource::Key
                | ColumnSource::Segment(_)
                | ColumnSource::ProtoField(..)
                | ColumnSource::Metric(_) => {}
            }
        }
        Ok((columns, explicit))
    }

    /// The family of `columns` when a batch of `rows` rows goes to the
    /// store a column at a time (`CellBatch::set_columns`): a load large
    /// enough to be ingested (see `INGEST_MIN_ROWS`), not into a series'
    /// buckets, of declared columns
    /// of one PACKED family that is no aggregate, none NULL and each of
    /// values of one size, so that every row sets one cell in each.
    fn column_wise(&self, columns: &[Column<'_>], rows: usize) -> Option<usize> {
        // (A series' bucket rows take many events each: not tall.)
        let bucketed = self.layout.series.as_ref().is_some_and(|s| s.bucketed());
        if rows < crate::store::INGEST_MIN_ROWS || bucketed {
            return None;
        }
        let Some(Column::Cell { family, .. }) = columns.first() else {
            return None;
        };
        let def = &self.layout.def.families[*family];
        if def.kind.is_aggregate() || !def.format.has_blocks() {
            return None;
        }
        columns
            .iter()
            .all(|c| match c {
                Column::Cell {
                    family: f,
                    values,
                    nulls,
                    ..
                } => {
                    f == family
                        && nulls.is_none_or(|n| n.null_count() == 0)
                        && values.width().is_some()
                }
                Column::Map(_) => false,
            })
            .then_some(*family)
    }

    /// [`Encoder::encode`]'s rows given to the store a column at a time
    /// (see [`Encoder::column_wise`]): the rows not already bad (`ok`),
    /// at their `times` unless `explicit` gives theirs.
    fn encode_columns<'k>(
        &self,
        (columns, family): (&[Column<'_>], BatchFamily),
        explicit: Option<&TimestampMicrosecondArray>,
        (ok, times): (&[bool], &[i64]),
        key_of: &dyn Fn(usize) -> &'k [u8],
        out: &mut CellBatch,
        mut bad: Vec<BadRow>,
    ) -> crate::error::Result<(BatchRows, Vec<BadRow>)> {
        let mut rows = Vec::with_capacity(ok.len());
        let mut at = Vec::with_capacity(ok.len());
        for (row, _) in ok.iter().enumerate().filter(|(_, ok)| **ok) {
            let time = match explicit.filter(|a| a.is_valid(row)) {
                Some(a) if a.value(row) < 0 => {
                    bad.push((row, negative_timestamp(a.value(row))));
                    continue;
                }
                Some(a) => a.value(row),
                None => times[row],
            };
            out.begin_row(key_of(row));
            rows.push(row);
            at.push(time);
        }
        let mut given = Vec::with_capacity(columns.len());
        for column in columns {
            if let Column::Cell {
                qualifier, values, ..
            } = column
            {
                let mut bytes = out.column_buffer();
                values.write_rows(&rows, &mut bytes)?;
                given.push(BatchColumn {
                    qualifier: qualifier.to_vec(),
                    width: values.width().unwrap_or_default(),
                    values: bytes,
                });
            }
        }
        out.set_columns(family, given, at)?;
        bad.sort_by_key(|(row, _)| *row);
        let mut batch_rows = BatchRows::default();
        for row in rows {
            batch_rows.push(row, false);
        }
        Ok((batch_rows, bad))
    }

    /// A column per event's cells: per event (input row) and measure it
    /// gives, a cell in the row of that measure and bucket whose
    /// qualifier is the value as text. An event with no measure, a value
    /// too long for a qualifier or a bad key is a bad row, none of its
    /// cells kept.
    pub fn event_columns(
        &self,
        batch: &RecordBatch,
        mut bad: Vec<BadRow>,
    ) -> crate::error::Result<(Vec<EventCell>, Vec<BadRow>)> {
        let layout = self.layout;
        let series = layout
            .series
            .as_ref()
            .filter(|s| s.column_per_event())
            .ok_or_else(|| Error::Internal(format!("{} is no column per event", layout.table)))?;
        let metric = series.metric_segment.unwrap_or_default();
        let mut columns = self.key_columns(batch)?;
        let times = columns
            .times
            .ok_or_else(|| Error::Internal("a series' batch without times".into()))?;
        let mut values: Vec<(usize, StringArray)> = Vec::new();
        for (i, source) in layout.sources.iter().enumerate() {
            let array = batch.column(i);
            if let ColumnSource::Metric(m) = source
                && array.null_count() < array.len()
            {
                let text = cast(array, &DataType::Utf8)
                    .map_err(|e| Error::InvalidArgument(e.to_string()))?;
                values.push((*m, text.as_string::<i32>().clone()));
            }
        }
        let mut ok = vec![true; batch.num_rows()];
        for (row, _) in &bad {
            if let Some(ok) = ok.get_mut(*row) {
                *ok = false;
            }
        }
        for (row, ok) in ok.iter_mut().enumerate().filter(|(_, ok)| **ok) {
            let mut given = values.iter().filter(|(_, v)| v.is_valid(row)).peekable();
            if given.peek().is_none() {
                *ok = false;
                bad.push((
                    row,
                    Error::InvalidArgument(format!(
                        "the event has no non-NULL column to write; an event of series {} exists \
                         only through its measures",
                        layout.table
                    )),
                ));
                continue;
            }
            if let Some((m, v)) = given.find(|(_, v)| v.value(row).len() > MAX_QUALIFIER_LEN) {
                *ok = false;
                bad.push((
                    row,
                    Error::InvalidArgument(format!(
                        "{} is {} bytes as text; COLUMN PER EVENT keeps it as a qualifier, \
                         at most {MAX_QUALIFIER_LEN} bytes",
                        series.def.measures[*m],
                        v.value(row).len()
                    )),
                ));
            }
        }
        let mut out = Vec::new();
        let mut key = Vec::new();
        for (m, v) in &values {
            columns.segments[metric] = Some(Segment::Fixed(&series.def.measures[*m]));
            for (row, ok) in ok.iter_mut().enumerate() {
                if !*ok || v.is_null(row) {
                    continue;
                }
                key.clear();
                if let Err(e) = self.key(&columns, row, &mut key) {
                    *ok = false;
                    bad.push((row, e));
                    continue;
                }
                out.push(EventCell {
                    key: key.clone(),
                    time: times.value(row),
                    qualifier: v.value(row).as_bytes().to_vec(),
                    row,
                });
            }
        }
        out.retain(|c| ok[c.row]);
        bad.sort_by_key(|(row, _)| *row);
        Ok((out, bad))
    }

    /// A serialized series' measures as one message per row: the declared
    /// column holding them and a struct array of its message type (NULL
    /// where a row gives no measure).
    fn event_messages(
        &self,
        batch: &RecordBatch,
    ) -> crate::error::Result<Option<(usize, ArrayRef)>> {
        let layout = self.layout;
        let mut event = None;
        let mut given = Vec::new();
        for (i, source) in layout.sources.iter().enumerate() {
            if let ColumnSource::ProtoField(d, f) = source {
                event = Some(*d);
                given.push((*f, batch.column(i)));
            }
        }
        let Some(d) = event else {
            return Ok(None);
        };
        let proto = layout.protos[d]
            .as_ref()
            .ok_or_else(|| Error::Internal(format!("{} has no message type", layout.table)))?;
        let DataType::Struct(fields) = crate::proto::message_type(&proto.message) else {
            return Err(Error::Internal(
                "a message type that is not a struct".into(),
            ));
        };
        let rows = batch.num_rows();
        let mut arrays: Vec<ArrayRef> = fields
            .iter()
            .map(|f| new_null_array(f.data_type(), rows))
            .collect();
        for (f, array) in given {
            let want = fields[f].data_type();
            arrays[f] = if array.data_type() == want {
                std::sync::Arc::clone(array)
            } else {
                cast(array, want).map_err(|e| Error::InvalidArgument(e.to_string()))?
            };
        }
        let valid: Vec<bool> = (0..rows)
            .map(|r| arrays.iter().any(|a| a.is_valid(r)))
            .collect();
        let messages = StructArray::try_new(fields, arrays, Some(NullBuffer::from(valid)))
            .map_err(|e| Error::Internal(e.to_string()))?;
        Ok(Some((d, std::sync::Arc::new(messages))))
    }

    fn key_columns<'b>(&self, batch: &'b RecordBatch) -> crate::error::Result<KeyColumns<'b>> {
        let layout = self.layout;
        let mut key = None;
        let mut segments: Vec<Option<Segment<'b>>> = layout
            .key
            .as_ref()
            .map_or(Vec::new(), |k| k.fields().map(|_| None).collect());
        let df = |e: datafusion::arrow::error::ArrowError| Error::InvalidArgument(e.to_string());
        for (i, source) in layout.sources.iter().enumerate() {
            let array = batch.column(i);
            if array.null_count() == array.len() {
                continue;
            }
            match source {
                ColumnSource::Key => key = Some(Texts::of(array)?),
                ColumnSource::Segment(s) => {
                    let any = array.as_any();
                    segments[*s] = Some(if let Some(a) = any.downcast_ref::<Int64Array>() {
                        Segment::Int(a)
                    } else if let Some(a) = any.downcast_ref::<TimestampMicrosecondArray>() {
                        Segment::Time(a)
                    } else {
                        Segment::Text(
                            cast(array, &DataType::Utf8)
                                .map_err(df)?
                                .as_string::<i32>()
                                .clone(),
                        )
                    });
                }
                _ => {}
            }
        }
        let mut times = None;
        if let Some(series) = &layout.series {
            let array = batch.column(series.time_column);
            let a = array
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .ok_or_else(|| {
                    Error::Internal(format!(
                        "{} arrived as {}, not a timestamp",
                        series.def.time,
                        array.data_type()
                    ))
                })?;
            times = Some(a);
            if series.bucketed() {
                segments[series.time_segment] = Some(Segment::Bucket(a, series.def.layout.clone()));
            }
        }
        Ok(KeyColumns {
            key,
            segments,
            times,
        })
    }

    /// Appends the key of `row` to `keys`.
    fn key(
        &self,
        columns: &KeyColumns<'_>,
        row: usize,
        keys: &mut Vec<u8>,
    ) -> crate::error::Result<()> {
        let layout = self.layout;
        if let (Some(series), Some(times)) = (&layout.series, columns.times) {
            if times.is_null(row) {
                return Err(Error::InvalidArgument(format!(
                    "{} is NULL; every event of series {} needs a time",
                    series.def.time, layout.table
                )));
            }
            series
                .def
                .check_time(times.value(row))
                .map_err(Error::InvalidArgument)?;
        }
        let given = columns
            .key
            .as_ref()
            .filter(|k| k.is_valid(row))
            .map(|k| k.value(row).as_bytes());
        let any_segment = columns
            .segments
            .iter()
            .any(|s| s.as_ref().is_some_and(|s| s.is_valid(row)));
        let segments = || -> Vec<Option<KeyRef<'_>>> {
            columns
                .segments
                .iter()
                .map(|s| s.as_ref().and_then(|s| s.value(row)))
                .collect()
        };
        match (given, &layout.key) {
            (Some(k), Some(schema)) if any_segment => {
                // Both _key and segments given: they must agree.
                let mut built = Vec::new();
                schema.encode_into(&segments(), &mut built)?;
                if built != k {
                    return Err(Error::InvalidArgument(format!(
                        "_key {} does not match its segments, which build {}",
                        crate::codec::show_bytes(k),
                        crate::codec::show_bytes(&built)
                    )));
                }
                keys.extend_from_slice(k);
            }
            (Some(k), _) => keys.extend_from_slice(k),
            (None, Some(schema)) => schema.encode_into(&segments(), keys)?,
            (None, None) => {
                return Err(Error::InvalidArgument(format!(
                    "INSERT INTO {} needs a value for _key",
                    layout.table
                )));
            }
        }
        Ok(())
    }

    /// Writes the cells of `row` into the row `out` is building.
    fn cells(
        &self,
        columns: &[Column<'_>],
        families: &[BatchFamily],
        row: usize,
        (at, explicit): (i64, bool),
        out: &mut CellBatch,
        value: &mut Vec<u8>,
    ) -> crate::error::Result<()> {
        let layout = self.layout;
        for column in columns {
            match column {
                Column::Cell {
                    family,
                    qualifier,
                    values,
                    nulls,
                } => {
                    if nulls.is_some_and(|n| n.is_null(row)) {
                        continue;
                    }
                    value.clear();
                    values.write(row, value)?;
                    put(
                        layout, families, out, *family, qualifier, at, explicit, value,
                    );
                }
                Column::Map(m) => {
                    if m.map.is_null(row) {
                        continue;
                    }
                    let offsets = m.map.value_offsets();
                    let keys = &m.keys;
                    let family = &layout.def.families[m.family].name;
                    for j in offsets[row] as usize..offsets[row + 1] as usize {
                        if m.values_array.is_null(j) || keys.is_null(j) {
                            continue;
                        }
                        let qualifier = keys.value(j);
                        value.clear();
                        m.values.write(j, value)?;
                        check_map_entry(layout, family, qualifier, value)?;
                        put(
                            layout,
                            families,
                            out,
                            m.family,
                            qualifier.as_bytes(),
                            at,
                            explicit,
                            value,
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// A map entry under a declared column's qualifier must be a value of
/// that column, or every read of the column fails.
pub(crate) fn check_map_entry(
    layout: &Layout,
    family: &str,
    qualifier: &str,
    value: &[u8],
) -> crate::error::Result<()> {
    if let Some(column) = layout
        .declared_at(family, qualifier.as_bytes())
        .filter(|&d| layout.protos[d].is_none())
        .map(|d| &layout.columns[d])
    {
        column.decode(value).map_err(|why| {
            Error::InvalidArgument(format!(
                "the {family} map entry {qualifier:?} is declared column {}: {why}; write it through the column",
                column.name
            ))
        })?;
    }
    Ok(())
}

fn family_index(layout: &Layout, name: &str) -> crate::error::Result<usize> {
    layout
        .def
        .families
        .iter()
        .position(|f| f.name == name)
        .ok_or_else(|| Error::Internal(format!("column of unknown family {name}")))
}

/// A cell write. Aggregate families accumulate into the cell at timestamp
/// 0 unless a `_timestamp` names another accumulator (a time bucket):
/// Bigtable merges AddToCell input into the cell of the same timestamp.
#[allow(clippy::too_many_arguments, reason = "a cell's coordinates")]
fn put(
    layout: &Layout,
    families: &[BatchFamily],
    out: &mut CellBatch,
    family: usize,
    qualifier: &[u8],
    at: i64,
    explicit: bool,
    value: &[u8],
) {
    if layout.def.families[family].kind.is_aggregate() {
        out.add(
            families[family],
            qualifier,
            if explicit { at } else { 0 },
            value,
        );
    } else {
        out.set(families[family], qualifier, at, value);
    }
}
