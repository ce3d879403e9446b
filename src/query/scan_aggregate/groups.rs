//! The groups one partition of a scan aggregate has seen, and their
//! accumulators.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, RecordBatchOptions,
    TimestampMicrosecondArray, UInt64Array, new_null_array,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{HashMap, Result as DfResult};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::shape::{AggregateShape, Group, Input, MAX_TIMES, Presum, appender, total};
use crate::query::batch::Datum;
use crate::query::view::ColumnSource;
use crate::schema::KeyValue;
use crate::schema::ValueType;

/// A group's key: its row's key values (see [`Groups::row`]), then its
/// time groups' starts (the first as many as there are time groups), or
/// no time (a wide row whose key does not fit: its time segment is NULL).
type GroupKey = (usize, [i64; MAX_TIMES], bool);

/// What waits to be given to one aggregate, many rows' runs at a time:
/// per run its group, count and total (see [`Presum`]), or per value its
/// group and the value as read.
#[derive(Default)]
struct Pending {
    groups: Vec<usize>,
    counts: Vec<u64>,
    totals: Vec<f64>,
    words: Vec<u64>,
}

/// How many runs wait before they are merged.
const PENDING_RUNS: usize = 8192;

/// The groups one partition has seen, with one groups accumulator per
/// aggregate (what DataFusion's own partial aggregate keeps).
pub(super) struct Groups {
    exec: Arc<AggregateShape>,
    /// The key values (row key, key segments) rows had, each once.
    rows: HashMap<Vec<Option<KeyValue>>, usize>,
    row_values: Vec<Vec<Option<KeyValue>>>,
    index: HashMap<GroupKey, usize>,
    keys: Vec<GroupKey>,
    /// The group found last: runs of one row and hour often meet again;
    /// and the times `[.0, .1)` in its time groups.
    last: Option<(GroupKey, usize)>,
    span: (i64, i64),
    /// The key values found last (consecutive rows of a series, or of a
    /// read with no GROUP BY, share them).
    last_row: Option<usize>,
    pending: Vec<Pending>,
    /// Whether the groups take a time, and whether counted in
    /// nanoseconds (see [`Group::Time`]).
    timed: bool,
    in_nanos: bool,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    /// Group indices for one run (reused).
    indices: Vec<usize>,
    /// All true: what `count(*)` counts, sliced to a run's length.
    present: ArrayRef,
    /// Per aggregate, one NULL of its input's type: what each accumulator
    /// is first given for a new group, so that it knows the group and
    /// that no value of it has come yet (an accumulator given only
    /// non-null values takes every group it counts as having one).
    nulls: Vec<ArrayRef>,
}

impl Groups {
    pub(super) fn new(exec: Arc<AggregateShape>) -> DfResult<Self> {
        Ok(Groups {
            rows: HashMap::default(),
            row_values: Vec::new(),
            index: HashMap::default(),
            keys: Vec::new(),
            last: None,
            span: (i64::MIN, i64::MAX),
            last_row: None,
            pending: exec.aggregates.iter().map(|_| Pending::default()).collect(),
            timed: exec.groups.iter().any(|g| matches!(g, Group::Time { .. })),
            in_nanos: exec
                .groups
                .iter()
                .any(|g| matches!(g, Group::Time { in_nanos: true, .. })),
            accumulators: exec
                .aggregates
                .iter()
                .map(|a| a.create_groups_accumulator())
                .collect::<DfResult<_>>()?,
            indices: Vec::new(),
            present: Arc::new(BooleanArray::new(BooleanBuffer::new_set(0), None)),
            nulls: exec
                .inputs
                .iter()
                .zip(&exec.aggregates)
                .map(|(input, a)| {
                    Ok(match input {
                        Input::Events => new_null_array(&DataType::Boolean, 1),
                        Input::Measure(..) => {
                            new_null_array(&a.expressions()[0].data_type(&exec.input_schema)?, 1)
                        }
                    })
                })
                .collect::<DfResult<_>>()?,
            exec,
        })
    }

    /// Feeds `len` values to aggregate `a`, all of group `g`: `values`,
    /// or for `count(*)` as many events.
    pub(super) fn update(
        &mut self,
        a: usize,
        g: usize,
        values: Option<ArrayRef>,
        len: usize,
    ) -> DfResult<()> {
        let values = match values {
            Some(v) => v,
            None => {
                if self.present.len() < len {
                    self.present = Arc::new(BooleanArray::new(
                        BooleanBuffer::new_set(len.next_power_of_two()),
                        None,
                    ));
                }
                self.present.slice(0, len)
            }
        };
        self.indices.clear();
        self.indices.resize(len, g);
        self.accumulators[a].update_batch(&[values], &self.indices, None, self.keys.len())
    }

    /// The runs of `times` (one column's cells, newest first) that share
    /// their groups, with the row's key values `row`: (group, end), each
    /// run starting where the one before ends.
    pub(super) fn runs_of(
        &mut self,
        row: usize,
        times: &[i64],
        runs: &mut Vec<(usize, usize)>,
    ) -> DfResult<()> {
        runs.clear();
        let mut at = 0;
        while at < times.len() {
            let floor = self.floor(times[at]);
            let mut until = at + 1;
            while until < times.len() && times[until] >= floor {
                until += 1;
            }
            runs.push((self.group(row, Some(times[at]))?, until));
            at = until;
        }
        Ok(())
    }

    /// Gives aggregate `a` the `runs` of `words` (a measure's values as
    /// read, or for `count(*)` one per event): as partial states (see
    /// [`Presum`]) or value by value, batched over many rows.
    pub(super) fn push_runs(
        &mut self,
        a: usize,
        runs: &[(usize, usize)],
        words: &[u64],
    ) -> DfResult<()> {
        let float = |w: u64| match self.exec.input_types[a] {
            Some(ValueType::Int64) => w as i64 as f64,
            _ => f64::from_bits(w),
        };
        let pending = &mut self.pending[a];
        let mut start = 0;
        match self.exec.presums[a] {
            Some(presum) => {
                for &(group, end) in runs {
                    pending.groups.push(group);
                    pending.counts.push((end - start) as u64);
                    if presum != Presum::Count {
                        pending
                            .totals
                            .push(total(words[start..end].iter().map(|&w| float(w))));
                    }
                    start = end;
                }
            }
            None => {
                for &(group, end) in runs {
                    pending
                        .groups
                        .resize(pending.groups.len() + end - start, group);
                    pending.words.extend_from_slice(&words[start..end]);
                    start = end;
                }
            }
        }
        if pending.groups.len() >= PENDING_RUNS {
            self.flush(a)?;
        }
        Ok(())
    }

    /// Gives aggregate `a` what waits for it.
    pub(super) fn flush(&mut self, a: usize) -> DfResult<()> {
        let pending = std::mem::take(&mut self.pending[a]);
        if pending.groups.is_empty() {
            return Ok(());
        }
        let total_groups = self.keys.len();
        match self.exec.presums[a] {
            Some(presum) => {
                let states: Vec<ArrayRef> = match presum {
                    Presum::Count => vec![Arc::new(Int64Array::from_iter_values(
                        pending.counts.iter().map(|&n| n as i64),
                    ))],
                    Presum::Avg => vec![
                        Arc::new(UInt64Array::from(pending.counts)),
                        Arc::new(Float64Array::from(pending.totals)),
                    ],
                    Presum::Sum => vec![Arc::new(Float64Array::from(pending.totals))],
                };
                self.accumulators[a].merge_batch(&states, &pending.groups, total_groups)
            }
            None => {
                let words = pending.words;
                let values: ArrayRef = match self.exec.input_types[a] {
                    Some(ValueType::Float64) => Arc::new(Float64Array::from_iter_values(
                        words.iter().map(|w| f64::from_bits(*w)),
                    )),
                    _ => Arc::new(Int64Array::from_iter_values(
                        words.iter().map(|w| *w as i64),
                    )),
                };
                let values = match &self.exec.inputs[a] {
                    Input::Measure(_, Some(t)) if t != values.data_type() => cast(&values, t)?,
                    _ => values,
                };
                self.accumulators[a].update_batch(&[values], &pending.groups, None, total_groups)
            }
        }
    }

    /// Merges every partial state still waiting.
    pub(super) fn flush_all(&mut self) -> DfResult<()> {
        for a in 0..self.pending.len() {
            self.flush(a)?;
        }
        Ok(())
    }

    /// The place of a row's key values (row key, key segments, in the
    /// order of the groups) among those seen.
    pub(super) fn row(&mut self, values: &[Option<KeyValue>]) -> usize {
        if let Some(i) = self.last_row
            && self.row_values[i] == values
        {
            return i;
        }
        if let Some(&i) = self.rows.get(values) {
            self.last_row = Some(i);
            return i;
        }
        let i = self.row_values.len();
        self.last_row = Some(i);
        self.rows.insert(values.to_vec(), i);
        self.row_values.push(values.to_vec());
        i
    }

    /// The starts of the time groups `time` is in.
    pub(super) fn starts(&self, time: i64) -> impl Iterator<Item = i64> + '_ {
        self.exec.groups.iter().filter_map(move |g| match g {
            Group::Time { len, origin, .. } => {
                Some(origin + (time - origin).div_euclid(*len) * len)
            }
            Group::Segment(_) | Group::Key => None,
        })
    }

    /// The group of a row's key values (see [`Groups::row`]) and the time
    /// groups of `time` (none: a row with no time, in no time group).
    pub(super) fn group(&mut self, row: usize, time: Option<i64>) -> DfResult<usize> {
        // (A time beyond nanoseconds has no bucket counted in them.)
        let time = time.filter(|t| !self.in_nanos || t.checked_mul(1_000).is_some());
        // Rows of one group come in runs: the last group's, if its key
        // values and the span of times its time groups share.
        if let Some(((last_row, _, timeless), i)) = self.last
            && last_row == row
            && match time {
                Some(t) => !timeless && self.span.0 <= t && t < self.span.1,
                None => timeless || !self.timed,
            }
        {
            return Ok(i);
        }
        let mut times = [0i64; MAX_TIMES];
        // The times sharing this one's time groups: from the latest of
        // their starts to the earliest of their ends.
        let mut span = (i64::MIN, i64::MAX);
        if let Some(time) = time {
            let lens = self.exec.groups.iter().filter_map(|g| match g {
                Group::Time { len, .. } => Some(*len),
                Group::Segment(_) | Group::Key => None,
            });
            for ((slot, start), len) in times.iter_mut().zip(self.starts(time)).zip(lens) {
                *slot = start;
                span.1 = span.1.min(start.saturating_add(len));
            }
            span.0 = self.floor(time);
        }
        // (Without time groups, every row is in the one time.)
        let key = (row, times, time.is_none() && self.timed);
        self.span = span;
        if let Some(&i) = self.index.get(&key) {
            self.last = Some((key, i));
            return Ok(i);
        }
        let i = self.keys.len();
        self.index.insert(key, i);
        self.keys.push(key);
        self.last = Some((key, i));
        for (accumulator, null) in self.accumulators.iter_mut().zip(&self.nulls) {
            accumulator.update_batch(&[Arc::clone(null)], &[i], None, i + 1)?;
        }
        Ok(i)
    }

    /// The earliest time in all of `time`'s time groups: a time at or
    /// before `time` shares its groups exactly when it is not earlier.
    pub(super) fn floor(&self, time: i64) -> i64 {
        let floor = self.starts(time).max().unwrap_or(i64::MIN);
        if !self.in_nanos {
            return floor;
        }
        // Times beyond nanoseconds are in no bucket: one group of those
        // after them, none of those within.
        let (first, last) = (i64::MIN / 1_000, i64::MAX / 1_000);
        if time > last {
            last + 1
        } else {
            floor.max(first)
        }
    }

    /// The partial aggregate's rows: the grouping expressions evaluated on
    /// each group's values, then each accumulator's state.
    pub(super) fn finish(&mut self) -> DfResult<RecordBatch> {
        self.flush_all()?;
        let exec = Arc::clone(&self.exec);
        let n = self.keys.len();
        // A batch of the scan's columns holding each group's series key
        // and time group start (other columns NULL), for the grouping
        // expressions to read.
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(exec.input_schema.fields().len());
        for (i, field) in exec.input_schema.fields().iter().enumerate() {
            let source = exec
                .spec
                .projection
                .columns()
                .get(i)
                .and_then(|&c| exec.spec.layout.sources.get(c));
            let array: ArrayRef = if Some(i) == exec.time_column {
                // The start of the finest time group: in every coarser one
                // too, as fixed units nest.
                let finest = exec
                    .groups
                    .iter()
                    .filter_map(|g| match g {
                        Group::Time { len, .. } => Some(*len),
                        Group::Segment(_) | Group::Key => None,
                    })
                    .enumerate()
                    .min_by_key(|(_, len)| *len)
                    .map(|(i, _)| i);
                let times = self
                    .keys
                    .iter()
                    .map(|k| finest.filter(|_| !k.2).and_then(|f| k.1.get(f).copied()));
                Arc::new(TimestampMicrosecondArray::from_iter(times))
            } else if let Some(at) = exec
                .groups
                .iter()
                .filter(|g| !matches!(g, Group::Time { .. }))
                .position(|g| match (g, source) {
                    (Group::Segment(x), Some(ColumnSource::Segment(s))) => x == s,
                    (Group::Key, Some(ColumnSource::Key)) => true,
                    _ => false,
                })
            {
                let mut column = appender(field.data_type())?;
                for k in &self.keys {
                    column.put(self.row_values[k.0][at].as_ref().map(Datum::key));
                }
                column.finish()
            } else {
                new_null_array(field.data_type(), n)
            };
            columns.push(array);
        }
        let input = RecordBatch::try_new_with_options(
            Arc::clone(&exec.input_schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let mut out: Vec<ArrayRef> = Vec::new();
        for expr in &exec.group_exprs {
            out.push(expr.evaluate(&input)?.into_array(n)?);
        }
        for accumulator in &mut self.accumulators {
            if exec.finishes {
                out.push(accumulator.evaluate(EmitTo::All)?);
            } else {
                out.extend(accumulator.state(EmitTo::All)?);
            }
        }
        Ok(RecordBatch::try_new(Arc::clone(&exec.schema), out)?)
    }
}
