//! Aggregates of a series in bucket rows, answered inside its scan.
//!
//! `SELECT date_trunc('hour', ts), avg(pressure) FROM weather GROUP BY 1`
//! over a series kept a cell per event in time buckets: each bucket row
//! holds a measure's cells as one run, newest first, so the events of one
//! (row, hour) are a contiguous slice of it. [`ScanAggregate`], a physical
//! optimizer rule, replaces the partial `AggregateExec` over such a scan
//! with [`ScanAggregateExec`], which reads the same rows through the same
//! read filter and feeds each slice of a measure's values to the
//! aggregate's own accumulator in one call: no Arrow row per event, no
//! hash lookup per event. Its output is the partial aggregate's (the
//! accumulators' states), so DataFusion's final aggregate above is
//! unchanged.
//!
//! It applies when every grouping expression is a series key column or
//! an expression of `date_trunc(unit, time)` for a unit of fixed length
//! (second to week), every aggregate takes one measure (maybe cast) or is
//! `count(*)`, with no DISTINCT, ORDER BY or FILTER, and the scan re-checks
//! nothing its key ranges and cell time range do not already answer.
//! Otherwise the plan is left as it was.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray, new_null_array,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result as DfResult, ScalarValue, config::ConfigOptions};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal, TryCastExpr};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use super::batch::{Appender, Datum, decode_error};
use super::scan::{KeyScanExec, ScanSpec};
use super::to_df;
use super::wide::{ColumnSource, View};
use crate::schema::{KeyValue, WEEK_ORIGIN};
use crate::store::{QualifierFilter, ReadFilter, ReadRequest, RowRange, RowSet};

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
    /// The time column in `input_schema`.
    time_column: usize,
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
    /// the kind this answers.
    fn try_new(aggregate: &AggregateExec) -> DfResult<Option<ScanAggregateExec>> {
        if *aggregate.mode() != AggregateMode::Partial
            || aggregate.limit_options().is_some()
            || !aggregate.group_expr().is_single()
            || aggregate.group_expr().expr().is_empty()
            || aggregate.filter_expr().iter().any(Option::is_some)
        {
            return Ok(None);
        }
        let mut input = aggregate.input();
        while let Some(r) = input.downcast_ref::<RepartitionExec>() {
            if !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return Ok(None);
            }
            input = r.input();
        }
        let Some(scan) = input.downcast_ref::<KeyScanExec>() else {
            return Ok(None);
        };
        let spec = scan.spec();
        let layout = &spec.layout;
        let Some(series) = layout.series.as_ref() else {
            return Ok(None);
        };
        if !series.bucketed()
            || series.column_per_event()
            || series.def.event.is_some()
            || layout.view != (View::Versions { latest: None })
            || spec.limit.is_some()
            || !spec.residual_in_time
        {
            return Ok(None);
        }
        let input_schema = scan.schema();
        let source = |index: usize| {
            spec.projection
                .get(index)
                .and_then(|&c| layout.sources.get(c))
        };
        let Ok(time_column) = input_schema.index_of(&series.def.time) else {
            return Ok(None);
        };
        let mut group_exprs = Vec::new();
        let mut groups = Vec::new();
        for (expr, _) in aggregate.group_expr().expr() {
            let group = if let Some(c) = expr.downcast_ref::<Column>() {
                match source(c.index()) {
                    Some(&ColumnSource::Segment(s)) if s != series.time_segment => {
                        Group::Segment(s)
                    }
                    _ => return Ok(None),
                }
            } else if let Some((len, origin)) = time_group(expr, time_column) {
                Group::Time { len, origin }
            } else {
                return Ok(None);
            };
            groups.push(group);
            group_exprs.push(Arc::clone(expr));
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
                if a.fun().name() != "count" || l.value().is_null() {
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
        let partitions = scan.partition_ranges().to_vec();
        let properties = PlanProperties::new(
            datafusion::physical_expr::EquivalenceProperties::new(aggregate.schema()),
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
            time_column,
            scan: Arc::clone(input),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

/// A group's key: its series key values, then its time groups' starts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    segments: Vec<Option<KeyValue>>,
    times: Vec<i64>,
}

/// The groups one partition has seen, with one groups accumulator per
/// aggregate (what DataFusion's own partial aggregate keeps).
struct Groups<'a> {
    exec: &'a ScanAggregateExec,
    index: HashMap<GroupKey, usize>,
    keys: Vec<GroupKey>,
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
            index: HashMap::new(),
            keys: Vec::new(),
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

    /// The starts of the time groups `time` is in.
    fn starts(&self, time: i64) -> impl Iterator<Item = i64> + '_ {
        self.exec.groups.iter().filter_map(move |g| match g {
            Group::Time { len, origin } => Some(origin + (time - origin).div_euclid(*len) * len),
            Group::Segment(_) => None,
        })
    }

    /// The group of `segments` and the time groups of `time`.
    fn group(&mut self, segments: &[Option<KeyValue>], time: i64) -> DfResult<usize> {
        let times = self.starts(time).collect();
        let key = GroupKey {
            segments: segments.to_vec(),
            times,
        };
        if let Some(&i) = self.index.get(&key) {
            return Ok(i);
        }
        let i = self.keys.len();
        self.index.insert(key.clone(), i);
        self.keys.push(key);
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
            let array: ArrayRef = if i == exec.time_column {
                // The start of the finest time group: in every coarser one
                // too, as fixed units nest.
                let finest = exec
                    .groups
                    .iter()
                    .filter_map(|g| match g {
                        Group::Time { len, .. } => Some(*len),
                        Group::Segment(_) => None,
                    })
                    .enumerate()
                    .min_by_key(|(_, len)| *len)
                    .map(|(i, _)| i);
                let times = self
                    .keys
                    .iter()
                    .map(|k| finest.and_then(|f| k.times.get(f).copied()));
                Arc::new(TimestampMicrosecondArray::from_iter(times))
            } else if let Some(ColumnSource::Segment(s)) = source
                && let Some(at) = exec
                    .groups
                    .iter()
                    .filter(|g| matches!(g, Group::Segment(_)))
                    .position(|g| matches!(g, Group::Segment(x) if x == s))
            {
                let mut column = appender(field.data_type())?;
                for k in &self.keys {
                    column.put(k.segments[at].as_ref().map(Datum::key));
                }
                column.finish()
            } else {
                new_null_array(field.data_type(), n)
            };
            columns.push(array);
        }
        let input = RecordBatch::try_new(Arc::clone(&exec.input_schema), columns)?;
        let mut out: Vec<ArrayRef> = Vec::new();
        for expr in &exec.group_exprs {
            out.push(expr.evaluate(&input)?.into_array(n)?);
        }
        for accumulator in &mut self.accumulators {
            out.extend(accumulator.state(EmitTo::All)?);
        }
        Ok(RecordBatch::try_new(Arc::clone(&exec.schema), out)?)
    }
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
    fn run(&self, ranges: Vec<RowRange>, rows_scanned: &dyn Fn(usize)) -> DfResult<RecordBatch> {
        let spec = &self.spec;
        let layout = &spec.layout;
        let mut groups = Groups::new(self)?;
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
        let mut inputs: Vec<(usize, ArrayRef)> = Vec::new();
        // Without count(*), only the aggregated measures' columns are
        // read (a packed row skips the others whole).
        let counts_events = self.inputs.iter().any(|i| matches!(i, Input::Events));
        let qualifiers = if counts_events {
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
        let families = stream.family_names();
        let key_schema = layout.key.as_ref();
        let segments_wanted: Vec<usize> = self
            .groups
            .iter()
            .filter_map(|g| match g {
                Group::Segment(s) => Some(*s),
                Group::Time { .. } => None,
            })
            .collect();
        let mut segments: Vec<Option<KeyValue>> = Vec::new();
        let mut times: Vec<i64> = Vec::new();
        let mut rows = 0usize;
        while let Some(row) = stream.next_view().map_err(to_df)? {
            rows += 1;
            let key = row.key();
            segments.clear();
            if !segments_wanted.is_empty() || spec.drop_misfits {
                let decoded = key_schema.and_then(|k| k.decode(key));
                if decoded.is_none() && spec.drop_misfits {
                    continue;
                }
                for &s in &segments_wanted {
                    segments.push(decoded.as_ref().and_then(|d| d.get(s).cloned()));
                }
            }
            // Each measure's cells: a run, newest first.
            for (&d, appender) in measures.iter().zip(&mut appenders) {
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
                let mut at = start;
                while at < end {
                    // Cells come newest first.
                    let first = row.timestamp(at);
                    let floor = groups.floor(first);
                    let mut until = at + 1;
                    while until < end && row.timestamp(until) >= floor {
                        until += 1;
                    }
                    let g = groups.group(&segments, first)?;
                    for (a, values) in &inputs {
                        let slice = values.slice(at - start, until - at);
                        groups.update(*a, g, Some(slice), until - at)?;
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
                let mut at = 0;
                while at < times.len() {
                    let floor = groups.floor(times[at]);
                    let mut until = at + 1;
                    while until < times.len() && times[until] >= floor {
                        until += 1;
                    }
                    let g = groups.group(&segments, times[at])?;
                    for (a, input) in self.inputs.iter().enumerate() {
                        if let Input::Events = input {
                            groups.update(a, g, None, until - at)?;
                        }
                    }
                    at = until;
                }
            }
        }
        rows_scanned(rows);
        groups.finish()
    }
}

impl DisplayAs for ScanAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let groups: Vec<String> = self.group_exprs.iter().map(|e| e.to_string()).collect();
        let aggregates: Vec<&str> = self.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "ScanAggregateExec: partial aggregate in the scan, gby=[{}], aggr=[{}]; ",
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
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 1);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            let batch = this.run(ranges, &|n| scanned.add(n))?;
            output_rows.add(batch.num_rows());
            let _ = tx.blocking_send(Ok(batch));
            Ok(())
        });
        Ok(builder.build())
    }
}
