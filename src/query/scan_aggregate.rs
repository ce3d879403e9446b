//! Aggregates over time buckets and versions, answered inside the scan.
//!
//! `SELECT date_trunc('hour', ts), avg(pressure) FROM weather GROUP BY 1`
//! over a series kept a cell per event in time buckets: each bucket row
//! holds a measure's cells as one run, newest first, so the events of one
//! (row, hour) are a contiguous slice of it. The same holds for any
//! table read through `versions()` and grouped by its row key, key
//! segments or `date_trunc` of `_timestamp` (the guide's "new cell per
//! event" bucket tables), and for a table's rows themselves (its wide
//! view: `SELECT count(*), avg(pressure) FROM t WHERE _key >= ...`, each
//! row counted once and its columns' newest cells aggregated, grouped by
//! `_key`, key segments or not at all). [`ScanAggregate`], a physical
//! optimizer rule,
//! replaces the partial `AggregateExec` over such a scan with
//! [`ScanAggregateExec`], which reads the same rows through the same read
//! filter and gives the aggregate's own accumulator each slice at once: no
//! Arrow row per event, no hash lookup per event. Measures of 8-byte
//! numbers come as runs of numbers (a PACKED family decodes them with no
//! cell in between, `store::NumberRow`), and `avg`, `sum` and `count` of
//! them get each slice's count and total as a partial state to merge
//! ([`Presum`]) rather than its values. Its output is the partial
//! aggregate's (the accumulators' states), so DataFusion's final aggregate
//! above is unchanged.
//!
//! It applies when every grouping expression is a series key column (a
//! table's `_key` or key segment) or, but in the wide view, an expression
//! of `date_trunc(unit, time)` for a unit of fixed length (second to
//! week), every aggregate takes one measure (maybe cast; in the wide
//! view a BIGINT or DOUBLE) or is `count(*)` of a series or a wide view,
//! with no DISTINCT, ORDER BY or FILTER, and the scan re-checks nothing
//! its key ranges and cell time range do not already answer (the wide
//! view: nothing at all). Otherwise the plan is left as it was.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, RecordBatchOptions,
    TimestampMicrosecondArray, UInt64Array, new_null_array,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{HashMap, Result as DfResult, ScalarValue, config::ConfigOptions};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal, TryCastExpr};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::sort_batch;
use datafusion::physical_plan::stream::{
    RecordBatchReceiverStreamBuilder, RecordBatchStreamAdapter,
};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use super::batch::{Appender, Datum, decode_error};
use super::scan::{KeyScanExec, ScanSpec};
use super::to_df;
use super::wide::{ColumnSource, View};
use crate::schema::{Encoding, ValueType};
use crate::schema::{KeyValue, WEEK_ORIGIN};
use crate::store::{
    NumberRow, QualifierFilter, ReadFilter, ReadRequest, RowRange, RowSet, RowStream,
};

/// The physical optimizer rule putting partial aggregates into series
/// scans where they can be.
#[derive(Debug, Default)]
pub(crate) struct ScanAggregate;

impl PhysicalOptimizerRule for ScanAggregate {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            match ScanAggregateExec::try_new(aggregate)? {
                Some(exec) => Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>)),
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "cellar_scan_aggregate"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A grouping expression the scan computes.
#[derive(Debug, Clone)]
enum Group {
    /// A table's row key (`_key`), as the view shows it.
    Key,
    /// A series key column: its key segment.
    Segment(usize),
    /// An expression of `date_trunc(unit, time)`: the unit's length and
    /// origin (a group is a multiple of the length from the origin).
    Time { len: i64, origin: i64 },
}

/// What an aggregate takes.
#[derive(Debug, Clone)]
enum Input {
    /// `count(*)`: the events.
    Events,
    /// A measure's values (declared column `.0`), cast to `.1` if given.
    Measure(usize, Option<DataType>),
}

/// An aggregate whose partial state the scan computes for a run of
/// values of one group (their count, their total) and merges in, rather
/// than handing it each value: a run is a bucket row's slice of one
/// hour, and the accumulator's add per value is the scan's largest cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presum {
    /// `avg` of DOUBLE values: state (count, total).
    Avg,
    /// `sum` of DOUBLE values: state (total).
    Sum,
    /// `count` of a measure: state (count); the runs hold no NULLs.
    Count,
}

impl Presum {
    /// The presum of aggregate `a` (of a measure, or `count(*)`), if its
    /// state is the one this computes.
    fn of(a: &AggregateFunctionExpr, input_schema: &SchemaRef) -> Option<Self> {
        let takes = a.expressions()[0].data_type(input_schema).ok()?;
        let state: Vec<DataType> = a
            .state_fields()
            .ok()?
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let presum = match a.fun().name() {
            "avg" => Presum::Avg,
            "sum" => Presum::Sum,
            "count" => Presum::Count,
            _ => return None,
        };
        let fits = match presum {
            Presum::Avg => {
                takes == DataType::Float64 && state == [DataType::UInt64, DataType::Float64]
            }
            Presum::Sum => takes == DataType::Float64 && state == [DataType::Float64],
            Presum::Count => state == [DataType::Int64],
        };
        fits.then_some(presum)
    }
}

/// The total of `values`, added in four lanes.
fn total(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let mut lanes = [0.0f64; 4];
    for (i, v) in values.enumerate() {
        lanes[i % 4] += v;
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
}

/// A partial aggregate computed by the scan it sits on.
#[derive(Clone)]
pub(crate) struct ScanAggregateExec {
    spec: ScanSpec,
    partitions: Vec<Vec<RowRange>>,
    /// The scan's output schema: what the grouping expressions read.
    input_schema: SchemaRef,
    /// The partial aggregate's.
    schema: SchemaRef,
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    groups: Vec<Group>,
    aggregates: Vec<Arc<AggregateFunctionExpr>>,
    inputs: Vec<Input>,
    /// Per aggregate, the type of the measure it takes as stored.
    input_types: Vec<Option<ValueType>>,
    /// Whether the scan reads a table's wide view (a row each).
    wide: bool,
    /// Whether the scan gives the aggregates' values (the aggregate it
    /// replaces was whole) rather than their states.
    finishes: bool,
    /// Per aggregate, whether the scan may hand it partial states of
    /// runs of values rather than the values.
    presums: Vec<Option<Presum>>,
    /// The time column in `input_schema`, if the scan has one.
    time_column: Option<usize>,
    /// The scan it replaces the input of: what EXPLAIN shows.
    scan: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for ScanAggregateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScanAggregateExec({})", self.spec.layout.table)
    }
}

/// The fixed length and origin of a `date_trunc` unit (weeks start on a
/// Monday, as series' week buckets do).
fn unit(name: &str) -> Option<(i64, i64)> {
    let second = 1_000_000;
    Some(match name.to_ascii_lowercase().as_str() {
        "second" => (second, 0),
        "minute" => (60 * second, 0),
        "hour" => (3_600 * second, 0),
        "day" => (86_400 * second, 0),
        "week" => (7 * 86_400 * second, WEEK_ORIGIN),
        _ => return None,
    })
}

/// `date_trunc(unit, time)` under casts: the unit's length and origin.
fn time_group(expr: &Arc<dyn PhysicalExpr>, time: usize) -> Option<(i64, i64)> {
    if let Some(c) = expr.downcast_ref::<CastExpr>() {
        return time_group(c.expr(), time);
    }
    if let Some(c) = expr.downcast_ref::<TryCastExpr>() {
        return time_group(c.expr(), time);
    }
    let f = expr.downcast_ref::<ScalarFunctionExpr>()?;
    if f.name() != "date_trunc" {
        return None;
    }
    let [granularity, column] = f.args() else {
        return None;
    };
    let column = column.downcast_ref::<Column>()?;
    if column.index() != time {
        return None;
    }
    let literal = granularity.downcast_ref::<Literal>()?;
    match literal.value() {
        ScalarValue::Utf8(Some(u)) | ScalarValue::Utf8View(Some(u)) => unit(u.as_str()),
        _ => None,
    }
}

impl ScanAggregateExec {
    /// The scan-side partial aggregate of `aggregate`, if it is one of
    /// the kind this answers: a partial aggregate, or a whole one over
    /// partitions no group spans (grouped by `_key` over a scan whose
    /// partitions are key ranges), which the scan then finishes.
    fn try_new(aggregate: &AggregateExec) -> DfResult<Option<ScanAggregateExec>> {
        let finishes = match aggregate.mode() {
            AggregateMode::Partial => false,
            AggregateMode::Single | AggregateMode::SinglePartitioned => true,
            _ => return Ok(None),
        };
        if aggregate.limit_options().is_some()
            || !aggregate.group_expr().is_single()
            || aggregate.filter_expr().iter().any(Option::is_some)
        {
            return Ok(None);
        }
        let mut input = aggregate.input();
        loop {
            if let Some(r) = input.downcast_ref::<RepartitionExec>() {
                // Rows dealt out round robin may be aggregated in part,
                // never whole.
                if finishes || !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
                    return Ok(None);
                }
                input = r.input();
            } else if let Some(c) = input.downcast_ref::<CooperativeExec>() {
                input = c.input();
            } else {
                break;
            }
        }
        let Some(scan) = input.downcast_ref::<KeyScanExec>() else {
            return Ok(None);
        };
        let spec = scan.spec();
        let layout = &spec.layout;
        let series = layout.series.as_ref();
        // A table's wide view: a row each, its columns' newest cells. Its
        // rows hold a few cells each, so what the scan saves is small; a
        // scan of one partition is left to DataFusion, whose aggregate
        // then runs beside the scan rather than after it.
        let wide = series.is_none()
            && layout.view == (View::Wide { as_of: None })
            && scan.partition_ranges().len() > 1;
        if series.is_none() && layout.view == (View::Wide { as_of: None }) && !wide {
            return Ok(None);
        }
        if series.is_some_and(|s| !s.bucketed() || s.column_per_event() || s.def.event.is_some())
            || !(wide || layout.view == (View::Versions { latest: None }))
            || spec.limit.is_some()
            || !spec.residual_in_time
            || (wide && spec.residual.is_some())
        {
            return Ok(None);
        }
        let input_schema = scan.schema();
        let source = |index: usize| {
            spec.projection
                .get(index)
                .and_then(|&c| layout.sources.get(c))
        };
        // The time: a series' time column, or a table's `_timestamp`.
        // (A wide row's `_timestamp` is its newest cell's: no time of
        // the cells aggregated.)
        let time_column = match series {
            Some(series) => match input_schema.index_of(&series.def.time) {
                Ok(c) => Some(c),
                Err(_) => return Ok(None),
            },
            None if wide => None,
            None => (0..input_schema.fields().len())
                .find(|&i| matches!(source(i), Some(ColumnSource::Timestamp))),
        };
        let mut group_exprs = Vec::new();
        let mut groups = Vec::new();
        for (expr, _) in aggregate.group_expr().expr() {
            let group = if let Some(c) = expr.downcast_ref::<Column>() {
                match source(c.index()) {
                    Some(&ColumnSource::Segment(s))
                        if series.is_none_or(|series| s != series.time_segment) =>
                    {
                        Group::Segment(s)
                    }
                    Some(ColumnSource::Key) if series.is_none() => Group::Key,
                    _ => return Ok(None),
                }
            } else if let Some(time_column) = time_column
                && let Some((len, origin)) = time_group(expr, time_column)
            {
                Group::Time { len, origin }
            } else {
                return Ok(None);
            };
            groups.push(group);
            group_exprs.push(Arc::clone(expr));
        }
        if groups
            .iter()
            .filter(|g| matches!(g, Group::Time { .. }))
            .count()
            > MAX_TIMES
        {
            return Ok(None);
        }
        let mut inputs = Vec::new();
        for a in aggregate.aggr_expr() {
            if a.is_distinct() || !a.order_bys().is_empty() || !a.groups_accumulator_supported() {
                return Ok(None);
            }
            let args = a.expressions();
            let [arg] = args.as_slice() else {
                return Ok(None);
            };
            let (column, cast_to) = if let Some(c) = arg.downcast_ref::<CastExpr>() {
                (c.expr(), Some(c.cast_type().clone()))
            } else {
                (arg, None)
            };
            let input = if let Some(l) = arg.downcast_ref::<Literal>() {
                // A series' events and a table's rows are counted here; a
                // table's versions count what its columns read hold.
                if a.fun().name() != "count" || l.value().is_null() || !(wide || series.is_some()) {
                    return Ok(None);
                }
                Input::Events
            } else if let Some(c) = column.downcast_ref::<Column>() {
                match source(c.index()) {
                    Some(ColumnSource::Declared(d)) if layout.protos[*d].is_none() => {
                        Input::Measure(*d, cast_to)
                    }
                    _ => return Ok(None),
                }
            } else {
                return Ok(None);
            };
            inputs.push(input);
        }
        let presums: Vec<Option<Presum>> = aggregate
            .aggr_expr()
            .iter()
            .map(|a| Presum::of(a, &input_schema))
            .collect();
        let input_types: Vec<Option<ValueType>> = inputs
            .iter()
            .map(|input| match input {
                Input::Measure(d, _) => Some(layout.columns[*d].value_type),
                Input::Events => None,
            })
            .collect();
        // The wide view is read as numbers only: its measures must be
        // 8-byte numbers, and its rows counted as partial states.
        if wide
            && inputs
                .iter()
                .zip(&presums)
                .any(|(input, presum)| match input {
                    Input::Events => presum.is_none(),
                    Input::Measure(d, _) => !is_number(&layout.columns[*d]),
                })
        {
            return Ok(None);
        }
        let partitions = scan.partition_ranges().to_vec();
        // What the aggregate promised of its output, ordering included
        // (grouped by `_key` over a scan in key order, its groups come in
        // key order, and the final aggregate may count on it): each
        // partition's groups are sorted so before they go.
        let properties = PlanProperties::new(
            aggregate.properties().equivalence_properties().clone(),
            Partitioning::UnknownPartitioning(partitions.len()),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Some(ScanAggregateExec {
            spec: spec.clone(),
            partitions,
            input_schema,
            schema: aggregate.schema(),
            group_exprs,
            groups,
            aggregates: aggregate.aggr_expr().to_vec(),
            inputs,
            input_types,
            wide,
            finishes,
            presums,
            time_column,
            scan: Arc::clone(input),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

/// The most time groups (`date_trunc` expressions) a scan computes.
const MAX_TIMES: usize = 4;

/// A group's key: its row's key values (see [`Groups::row`]), then its
/// time groups' starts (the first as many as there are time groups).
type GroupKey = (usize, [i64; MAX_TIMES]);

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
struct Groups<'a> {
    exec: &'a ScanAggregateExec,
    /// The key values (row key, key segments) rows had, each once.
    rows: HashMap<Vec<Option<KeyValue>>, usize>,
    row_values: Vec<Vec<Option<KeyValue>>>,
    index: HashMap<GroupKey, usize>,
    keys: Vec<GroupKey>,
    /// The group found last: runs of one row and hour often meet again.
    last: Option<(GroupKey, usize)>,
    /// The key values found last (consecutive rows of a series, or of a
    /// read with no GROUP BY, share them).
    last_row: Option<usize>,
    pending: Vec<Pending>,
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

impl<'a> Groups<'a> {
    fn new(exec: &'a ScanAggregateExec) -> DfResult<Self> {
        Ok(Groups {
            exec,
            rows: HashMap::default(),
            row_values: Vec::new(),
            index: HashMap::default(),
            keys: Vec::new(),
            last: None,
            last_row: None,
            pending: exec.aggregates.iter().map(|_| Pending::default()).collect(),
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
        })
    }

    /// Feeds `len` values to aggregate `a`, all of group `g`: `values`,
    /// or for `count(*)` as many events.
    fn update(&mut self, a: usize, g: usize, values: Option<ArrayRef>, len: usize) -> DfResult<()> {
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
    fn runs_of(
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
            runs.push((self.group(row, times[at])?, until));
            at = until;
        }
        Ok(())
    }

    /// Gives aggregate `a` the `runs` of `words` (a measure's values as
    /// read, or for `count(*)` one per event): as partial states (see
    /// [`Presum`]) or value by value, batched over many rows.
    fn push_runs(&mut self, a: usize, runs: &[(usize, usize)], words: &[u64]) -> DfResult<()> {
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
    fn flush(&mut self, a: usize) -> DfResult<()> {
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
    fn flush_all(&mut self) -> DfResult<()> {
        for a in 0..self.pending.len() {
            self.flush(a)?;
        }
        Ok(())
    }

    /// The place of a row's key values (row key, key segments, in the
    /// order of the groups) among those seen.
    fn row(&mut self, values: &[Option<KeyValue>]) -> usize {
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
    fn starts(&self, time: i64) -> impl Iterator<Item = i64> + '_ {
        self.exec.groups.iter().filter_map(move |g| match g {
            Group::Time { len, origin } => Some(origin + (time - origin).div_euclid(*len) * len),
            Group::Segment(_) | Group::Key => None,
        })
    }

    /// The group of a row's key values (see [`Groups::row`]) and the time
    /// groups of `time`.
    fn group(&mut self, row: usize, time: i64) -> DfResult<usize> {
        let mut times = [0i64; MAX_TIMES];
        for (slot, start) in times.iter_mut().zip(self.starts(time)) {
            *slot = start;
        }
        let key = (row, times);
        if let Some((last, i)) = self.last
            && last == key
        {
            return Ok(i);
        }
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
    fn floor(&self, time: i64) -> i64 {
        self.starts(time).max().unwrap_or(i64::MIN)
    }

    /// The partial aggregate's rows: the grouping expressions evaluated on
    /// each group's values, then each accumulator's state.
    fn finish(mut self) -> DfResult<RecordBatch> {
        self.flush_all()?;
        let exec = self.exec;
        let n = self.keys.len();
        // A batch of the scan's columns holding each group's series key
        // and time group start (other columns NULL), for the grouping
        // expressions to read.
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(exec.input_schema.fields().len());
        for (i, field) in exec.input_schema.fields().iter().enumerate() {
            let source = exec
                .spec
                .projection
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
                    .map(|k| finest.and_then(|f| k.1.get(f).copied()));
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

/// What a scan aggregate read, for EXPLAIN ANALYZE (as a scan reports).
#[derive(Debug, Default)]
struct Counts {
    rows: usize,
    /// Rows passed over: their key does not fit the schema.
    misfits: usize,
    /// Values decoded.
    values: usize,
}

/// Whether a declared column holds 8-byte numbers (BIGINT or DOUBLE,
/// binary): what a read as numbers gives.
fn is_number(def: &crate::schema::ColumnDef) -> bool {
    matches!(def.value_type, ValueType::Int64 | ValueType::Float64)
        && def.encoding == Encoding::Binary
}

/// A builder of `data_type`, one of the view's.
fn appender(data_type: &DataType) -> DfResult<Appender> {
    Appender::for_type(data_type).ok_or_else(|| {
        to_df(crate::Error::Internal(format!(
            "no appender for {data_type}"
        )))
    })
}

impl ScanAggregateExec {
    /// Reads partition `ranges` and aggregates its events.
    fn run(&self, ranges: Vec<RowRange>, report: &dyn Fn(&Counts)) -> DfResult<RecordBatch> {
        let spec = &self.spec;
        let layout = &spec.layout;
        let mut groups = Groups::new(self)?;
        if self.groups.is_empty() {
            // Without GROUP BY, one group, there even with no rows (as
            // DataFusion's partial aggregate has it).
            let all = groups.row(&[]);
            groups.group(all, 0)?;
        }
        if ranges.is_empty() {
            return groups.finish();
        }
        // The measures read, each once (declared column), with a builder
        // of its values reused from row to row.
        let mut measures: Vec<usize> = Vec::new();
        for input in &self.inputs {
            if let Input::Measure(d, _) = input
                && !measures.contains(d)
            {
                measures.push(*d);
            }
        }
        let mut appenders = measures
            .iter()
            .map(|&d| appender(&super::wide::value_type(layout.columns[d].value_type)))
            .collect::<DfResult<Vec<_>>>()?;
        // Without count(*), only the aggregated measures' columns are
        // read (a packed row skips the others whole).
        let counts_events = self.inputs.iter().any(|i| matches!(i, Input::Events));
        let qualifiers = if counts_events || self.wide {
            spec.qualifiers.clone()
        } else {
            QualifierFilter::Set(
                measures
                    .iter()
                    .map(|&d| layout.columns[d].qualifier.clone().into_bytes())
                    .collect(),
            )
        };
        let mut filter = ReadFilter::all()
            .families(spec.families.clone())
            .time_range(spec.time)
            .qualifiers(qualifiers);
        if self.wide {
            // A wide row holds its columns' newest cells.
            filter = filter.cells_per_column(1);
        }
        for family in &spec.families {
            let used: Vec<Vec<u8>> = measures
                .iter()
                .filter(|&&d| layout.columns[d].family == *family)
                .map(|&d| layout.columns[d].qualifier.clone().into_bytes())
                .collect();
            filter = filter.values_only(family, used);
        }
        let request = ReadRequest::rows(RowSet { ranges }).filter(filter);
        let mut stream = match &layout.pinned {
            Some(pinned) => spec.store.read_pinned(pinned, request),
            None => spec.store.read_rows(&layout.table, request),
        }
        .map_err(to_df)?;
        // Measures of 8-byte numbers are read as runs of numbers (a
        // series' events are counted from its cells).
        let numbers = (self.wide || !counts_events)
            && measures.iter().all(|&d| is_number(&layout.columns[d]));
        let counts = if numbers {
            self.aggregate_numbers(&mut stream, &measures, &mut groups)?
        } else {
            self.aggregate_cells(
                &mut stream,
                &measures,
                &mut appenders,
                counts_events,
                &mut groups,
            )?
        };
        report(&counts);
        groups.finish()
    }

    /// The aggregates taking measure `d`.
    fn aggregates_of(&self, d: usize) -> impl Iterator<Item = usize> + '_ {
        self.inputs
            .iter()
            .enumerate()
            .filter(move |(_, i)| matches!(i, Input::Measure(m, _) if *m == d))
            .map(|(a, _)| a)
    }

    /// The key values (row key, key segments) a row's groups take, in
    /// the order of the groups; false when the row is to be passed over
    /// (its key does not fit the schema).
    fn segments(&self, key: &[u8], segments: &mut Vec<Option<KeyValue>>) -> bool {
        segments.clear();
        let wanted = self
            .groups
            .iter()
            .filter(|g| !matches!(g, Group::Time { .. }));
        let decode = self.groups.iter().any(|g| matches!(g, Group::Segment(_)));
        let decoded = if decode {
            self.spec.layout.key.as_ref().and_then(|k| k.decode(key))
        } else {
            None
        };
        if self.spec.drop_misfits {
            // Whether the key fits, without building its values when no
            // group needs them.
            let fits = match (&decoded, &self.spec.layout.key) {
                (Some(_), _) => true,
                (None, Some(k)) => !decode && k.fits(key),
                (None, None) => false,
            };
            if !fits {
                return false;
            }
        }
        for g in wanted {
            segments.push(match g {
                Group::Segment(s) => decoded.as_ref().and_then(|d| d.get(*s).cloned()),
                Group::Key => Some(KeyValue::Text(String::from_utf8_lossy(key).into_owned())),
                Group::Time { .. } => None,
            });
        }
        true
    }

    /// Aggregates measures of 8-byte numbers, read as runs: per row and
    /// measure one array of its values and one call per aggregate.
    /// Returns the rows read.
    fn aggregate_numbers(
        &self,
        stream: &mut RowStream,
        measures: &[usize],
        groups: &mut Groups<'_>,
    ) -> DfResult<Counts> {
        let layout = &self.spec.layout;
        let wanted = layout.numbers_wanted(&stream.family_names(), measures);
        let mut row = NumberRow::default();
        let mut segments: Vec<Option<KeyValue>> = Vec::new();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut counts = Counts::default();
        while stream.next_numbers(&wanted, &mut row).map_err(to_df)? {
            counts.rows += 1;
            if let Some((m, value)) = row.misfit() {
                let def = &layout.columns[measures[m]];
                let mut check = appender(&super::wide::value_type(def.value_type))?;
                let why = check
                    .put_cell(def.encoding, value)
                    .err()
                    .unwrap_or("is not 8 bytes long");
                return Err(to_df(decode_error(&row.key, def.failure(why, value))));
            }
            if !self.segments(&row.key, &mut segments) {
                counts.misfits += 1;
                continue;
            }
            let key_values = groups.row(&segments);
            if self.wide {
                // A row of the wide view: counted once, each measure its
                // newest value (the read keeps one cell a column).
                let g = groups.group(key_values, 0)?;
                runs.clear();
                runs.push((g, 1));
                for (a, input) in self.inputs.iter().enumerate() {
                    if let Input::Events = input {
                        groups.push_runs(a, &runs, &[0])?;
                    }
                }
                for (m, &d) in measures.iter().enumerate() {
                    let (_, words) = row.column(m);
                    if let Some(first) = words.first() {
                        counts.values += 1;
                        for a in self.aggregates_of(d) {
                            groups.push_runs(a, &runs, std::slice::from_ref(first))?;
                        }
                    }
                }
                continue;
            }
            for (m, &d) in measures.iter().enumerate() {
                let (times, words) = row.column(m);
                if times.is_empty() {
                    continue;
                }
                groups.runs_of(key_values, times, &mut runs)?;
                counts.values += words.len();
                for a in self.aggregates_of(d) {
                    groups.push_runs(a, &runs, words)?;
                }
            }
        }
        Ok(counts)
    }

    /// Aggregates measures read as cells, and counts events. Returns the
    /// rows read.
    fn aggregate_cells(
        &self,
        stream: &mut RowStream,
        measures: &[usize],
        appenders: &mut [Appender],
        counts_events: bool,
        groups: &mut Groups<'_>,
    ) -> DfResult<Counts> {
        let layout = &self.spec.layout;
        let families = stream.family_names();
        let mut segments: Vec<Option<KeyValue>> = Vec::new();
        let mut inputs: Vec<(usize, ArrayRef)> = Vec::new();
        let mut times: Vec<i64> = Vec::new();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut counts = Counts::default();
        while let Some(row) = stream.next_view().map_err(to_df)? {
            counts.rows += 1;
            let key = row.key();
            if !self.segments(key, &mut segments) {
                counts.misfits += 1;
                continue;
            }
            let key_values = groups.row(&segments);
            // Each measure's cells: a run, newest first.
            for (&d, appender) in measures.iter().zip(appenders.iter_mut()) {
                let def = &layout.columns[d];
                let Some(family) = families.iter().position(|f| **f == *def.family) else {
                    continue;
                };
                // The measure's column: cells from one that is the first
                // of its column to the next such, each column compared once.
                let qualifier = def.qualifier.as_bytes();
                let mut column = None;
                let mut i = 0;
                while i < row.len() {
                    let mut next = i + 1;
                    while next < row.len() && !row.first(next) {
                        next += 1;
                    }
                    if row.family(i) == family && row.qualifier(i) == qualifier {
                        column = Some((i, next));
                        break;
                    }
                    i = next;
                }
                let Some((start, end)) = column else {
                    continue;
                };
                for i in start..end {
                    counts.values += 1;
                    if let Err(why) = appender.put_cell(def.encoding, row.value(i)) {
                        let e = def.failure(why, row.value(i));
                        return Err(to_df(decode_error(key, e)));
                    }
                }
                let values = appender.finish();
                // Each aggregate of this measure: its values, cast once.
                inputs.clear();
                for (a, input) in self.inputs.iter().enumerate() {
                    if let Input::Measure(m, cast_to) = input
                        && *m == d
                    {
                        let values = match cast_to {
                            Some(t) if t != values.data_type() => cast(&values, t)?,
                            _ => Arc::clone(&values),
                        };
                        inputs.push((a, values));
                    }
                }
                // Cells come newest first.
                times.clear();
                times.extend((start..end).map(|i| row.timestamp(i)));
                groups.runs_of(key_values, &times, &mut runs)?;
                let mut at = 0;
                for &(g, until) in &runs {
                    for (a, values) in &inputs {
                        groups.update(*a, g, Some(values.slice(at, until - at)), until - at)?;
                    }
                    at = until;
                }
            }
            if counts_events {
                // An event is a time any measure has a cell at.
                times.clear();
                times.extend((0..row.len()).map(|i| row.timestamp(i)));
                times.sort_unstable_by(|a, b| b.cmp(a));
                times.dedup();
                groups.runs_of(key_values, &times, &mut runs)?;
                let mut at = 0;
                for &(g, until) in &runs {
                    for (a, input) in self.inputs.iter().enumerate() {
                        if let Input::Events = input {
                            groups.update(a, g, None, until - at)?;
                        }
                    }
                    at = until;
                }
            }
        }
        Ok(counts)
    }
}

impl DisplayAs for ScanAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let groups: Vec<String> = self.group_exprs.iter().map(|e| e.to_string()).collect();
        let aggregates: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "ScanAggregateExec: {} aggregate in the scan, gby=[{}], aggr=[{}]; ",
            if self.finishes { "whole" } else { "partial" },
            groups.join(", "),
            aggregates.join(", ")
        )?;
        self.scan.fmt_as(t, f)
    }
}

impl ExecutionPlan for ScanAggregateExec {
    fn name(&self) -> &str {
        "ScanAggregateExec"
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        for e in &self.group_exprs {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let ranges = self.partitions.get(partition).cloned().unwrap_or_default();
        let this = self.clone();
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let scanned = MetricBuilder::new(&self.metrics).counter("rows_scanned", partition);
        let misfits = MetricBuilder::new(&self.metrics).counter("key_misfits", partition);
        let decoded = MetricBuilder::new(&self.metrics).counter("values_decoded", partition);
        let run = move || {
            let mut batch = this.run(ranges, &|c| {
                scanned.add(c.rows);
                misfits.add(c.misfits);
                decoded.add(c.values);
            })?;
            if let Some(ordering) = this.properties.output_ordering() {
                batch = sort_batch(&batch, ordering, None)?;
            }
            output_rows.add(batch.num_rows());
            Ok(batch)
        };
        // The embedded store is read where the stream is polled (no
        // hand-off to a blocking thread, which costs more than a short
        // range's read; see `inline_read`); a remote backend on a
        // blocking thread, as it waits on a network.
        if self.spec.store.local().is_some() {
            let once = futures::stream::once(async move { run() });
            return Ok(Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                once,
            )));
        }
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 1);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            let _ = tx.blocking_send(run());
            Ok(())
        });
        Ok(builder.build())
    }
}
