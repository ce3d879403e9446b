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
//! table's `_key` or key segment) or an expression of `date_trunc(unit,
//! time)` for a unit of fixed length (second to week) or of
//! `date_bin(stride, time[, origin])` for a stride of fixed length (time
//! buckets nesting in the finest), where the time is a series' time, a
//! version's `_timestamp`, or in the wide view a time segment of the key:
//! `SELECT region, balloon, date_trunc('hour', ts), avg(pressure) FROM t
//! GROUP BY 1, 2, 3` over a tall table keyed `region#balloon#ts`, where
//! rows read in key order share their leading segments and each key is
//! read from the first it does not share (`KeySchema::decode_next`).
//! Every aggregate takes one measure (maybe cast; in the wide
//! view a BIGINT or DOUBLE) or is `count(*)` of a series or a wide view,
//! with no DISTINCT, ORDER BY or FILTER, and the scan re-checks nothing
//! its key ranges and cell time range do not already answer (the wide
//! view: nothing at all). Otherwise the plan is left as it was.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result as DfResult, ScalarValue, config::ConfigOptions};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::{CastExpr, Column, Literal, TryCastExpr};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

mod groups;
mod part;
mod shape;

use shape::{AggregateShape, Group, Input, MAX_TIMES, Presum, is_number};

use super::inline_read::{self, Reading};
use super::plan::ScanSpec;
use super::scan::KeyScanExec;
use super::view::{ColumnSource, View};
use crate::schema::{SegmentKind, ValueType, WEEK_ORIGIN};
use crate::store::RowRange;

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
        plan.transform_up(|node| match ScanAggregateExec::try_new(&node)? {
            Some(exec) => Ok(Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>)),
            None => Ok(Transformed::no(node)),
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

/// A partial aggregate computed by the scan it sits on.
#[derive(Clone)]
pub(crate) struct ScanAggregateExec {
    /// What it computes, shared with its partitions' reads.
    shape: Arc<AggregateShape>,
    partitions: Vec<Vec<RowRange>>,
    /// The scan it replaces the input of: what EXPLAIN shows.
    scan: Arc<dyn ExecutionPlan>,
    /// The aggregate it replaces (an [`AggregateExec`]): what it is made
    /// from again over another scan ([`ScanAggregateExec::rebound`]).
    replaced: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for ScanAggregateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScanAggregateExec({})", self.shape.spec.layout.table)
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

/// `date_trunc(unit, time)` or `date_bin(stride, time[, origin])` under
/// casts: the length and origin of its buckets.
fn time_group(expr: &Arc<dyn PhysicalExpr>, time: usize) -> Option<TimeBuckets> {
    if let Some(c) = expr.downcast_ref::<CastExpr>() {
        return time_group(c.expr(), time);
    }
    if let Some(c) = expr.downcast_ref::<TryCastExpr>() {
        return time_group(c.expr(), time);
    }
    let f = expr.downcast_ref::<ScalarFunctionExpr>()?;
    let (literal, column, origin) = match (f.name(), f.args()) {
        ("date_trunc", [unit, column]) => (unit, column, None),
        ("date_bin", [stride, column]) => (stride, column, None),
        ("date_bin", [stride, column, origin]) => (stride, column, Some(origin)),
        _ => return None,
    };
    if column.downcast_ref::<Column>()?.index() != time {
        return None;
    }
    let literal = literal.downcast_ref::<Literal>()?.value();
    if f.name() == "date_trunc" {
        let (len, origin) = match literal {
            ScalarValue::Utf8(Some(u)) | ScalarValue::Utf8View(Some(u)) => unit(u.as_str())?,
            _ => return None,
        };
        return Some(TimeBuckets {
            len,
            origin,
            in_nanos: false,
        });
    }
    // DataFusion bins a microsecond time as nanoseconds (no bin for a
    // time beyond them), from the epoch unless told another origin; a
    // stride of months has no fixed length.
    const NANOS_PER_DAY: i64 = 86_400_000_000_000;
    let stride = match literal {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => i64::from(v.days)
            .checked_mul(NANOS_PER_DAY)?
            .checked_add(v.nanoseconds)?,
        ScalarValue::IntervalDayTime(Some(v)) => i64::from(v.days)
            .checked_mul(NANOS_PER_DAY)?
            .checked_add(i64::from(v.milliseconds).checked_mul(1_000_000)?)?,
        _ => return None,
    };
    let origin = match origin {
        None => 0,
        Some(o) => match o.downcast_ref::<Literal>()?.value() {
            ScalarValue::TimestampNanosecond(Some(o), _) => *o,
            _ => return None,
        },
    };
    // In whole microseconds, its bins are those of the microseconds.
    (stride > 0 && stride % 1_000 == 0 && origin % 1_000 == 0).then_some(TimeBuckets {
        len: stride / 1_000,
        origin: origin / 1_000,
        in_nanos: true,
    })
}

/// The buckets of a time group: a multiple of `len` from `origin` (in
/// microseconds); `in_nanos`: counted in nanoseconds, as `date_bin`
/// counts, so that a time beyond them is in none.
struct TimeBuckets {
    len: i64,
    origin: i64,
    in_nanos: bool,
}

/// Whether a scan can compute time groups `groups` together: each
/// group's buckets are whole buckets of the finest (the scan keeps the
/// finest one's start and computes the others from it), and a group
/// counted in nanoseconds is alone (a time beyond them is in no bucket
/// of it, but in one of another).
fn times_nest(groups: &[Group]) -> bool {
    let times: Vec<(i64, i64, bool)> = groups
        .iter()
        .filter_map(|g| match g {
            Group::Time {
                len,
                origin,
                in_nanos,
            } => Some((*len, *origin, *in_nanos)),
            Group::Segment(_) | Group::Key => None,
        })
        .collect();
    let Some(&(finest, origin, _)) = times.iter().min_by_key(|t| t.0) else {
        return true;
    };
    times.len() <= MAX_TIMES
        && (times.len() == 1 || times.iter().all(|t| !t.2))
        && times
            .iter()
            .all(|&(len, o, _)| len % finest == 0 && (o - origin) % finest == 0)
}

impl ScanAggregateExec {
    /// The scan-side partial aggregate of `aggregate`, if it is one of
    /// the kind this answers: a partial aggregate, or a whole one over
    /// partitions no group spans (grouped by `_key` over a scan whose
    /// partitions are key ranges), which the scan then finishes.
    fn try_new(node: &Arc<dyn ExecutionPlan>) -> DfResult<Option<ScanAggregateExec>> {
        let Some(aggregate) = node.downcast_ref::<AggregateExec>() else {
            return Ok(None);
        };
        let finishes = Self::finishes(aggregate);
        let Some(input) = finishes.and_then(|finishes| scan_below(aggregate, finishes)) else {
            return Ok(None);
        };
        Self::over(node, aggregate, input)
    }

    /// Whether a scan-side `aggregate` gives its values (it is whole)
    /// rather than its states (it is partial); `None` for another mode.
    fn finishes(aggregate: &AggregateExec) -> Option<bool> {
        match aggregate.mode() {
            AggregateMode::Partial => Some(false),
            AggregateMode::Single | AggregateMode::SinglePartitioned => Some(true),
            _ => None,
        }
    }

    /// The same partial aggregate over `scan` (a [`KeyScanExec`] made
    /// anew for other values of the same statement shape, declaring what
    /// this one's scan declared), if it is still one this answers and
    /// cut into as many partitions: what a kept physical plan runs
    /// instead of this one. It shares this one's properties, which the
    /// operators above were planned for.
    pub(crate) fn rebound(&self, scan: Arc<dyn ExecutionPlan>) -> Option<ScanAggregateExec> {
        let aggregate = self.replaced.downcast_ref::<AggregateExec>()?;
        let fresh = Self::over(&self.replaced, aggregate, &scan).ok()??;
        (fresh.partitions.len() == self.partitions.len()).then(|| ScanAggregateExec {
            properties: Arc::clone(&self.properties),
            ..fresh
        })
    }

    /// [`ScanAggregateExec::try_new`] with `input`, the scan below
    /// `aggregate` (the plan `node`), found.
    fn over(
        node: &Arc<dyn ExecutionPlan>,
        aggregate: &AggregateExec,
        input: &Arc<dyn ExecutionPlan>,
    ) -> DfResult<Option<ScanAggregateExec>> {
        let Some(finishes) = Self::finishes(aggregate) else {
            return Ok(None);
        };
        if aggregate.limit_options().is_some()
            || !aggregate.group_expr().is_single()
            || aggregate.filter_expr().iter().any(Option::is_some)
        {
            return Ok(None);
        }
        let Some(scan) = input.downcast_ref::<KeyScanExec>() else {
            return Ok(None);
        };
        let spec = scan.spec();
        let layout = &spec.layout;
        let series = layout.series.as_ref();
        // A table's wide view: a row each, its columns' newest cells. Its
        // rows hold a few cells each, so what the scan saves is small; a
        // large scan of one partition is left to DataFusion, whose
        // aggregate then runs beside the scan rather than after it. A
        // range of few rows (counted at planning: one thread reads it)
        // is aggregated in the scan.
        let wide = series.is_none()
            && layout.view == (View::Wide { as_of: None })
            && (scan.partition_ranges().len() > 1 || spec.few_rows.is_some());
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
        let source = |index: usize| source_of(spec, index);
        // The time: a series' time column, or a table's `_timestamp`; in
        // the wide view, a time segment of the key some group truncates
        // (a wide row's `_timestamp` is its newest cell's: no time of the
        // cells aggregated).
        let (time_column, time_segment) = match series {
            Some(series) => match input_schema.index_of(&series.def.time) {
                Ok(c) => (Some(c), None),
                Err(_) => return Ok(None),
            },
            None if wide => match wide_time(aggregate, spec) {
                Some((c, s)) => (Some(c), Some(s)),
                None => (None, None),
            },
            None => (
                (0..input_schema.fields().len())
                    .find(|&i| matches!(source(i), Some(ColumnSource::Timestamp))),
                None,
            ),
        };
        let Some((group_exprs, groups)) = groups_of(aggregate, spec, time_column, time_segment)
        else {
            return Ok(None);
        };
        if !times_nest(&groups) {
            return Ok(None);
        }
        let Some(inputs) = inputs_of(aggregate, spec, wide) else {
            return Ok(None);
        };
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
        let decodes = spec.drop_misfits
            || time_segment.is_some()
            || groups.iter().any(|g| matches!(g, Group::Segment(_)));
        let shape = AggregateShape {
            spec: spec.clone(),
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
            time_segment,
            decodes,
            ordering: properties.output_ordering().cloned(),
        };
        Ok(Some(ScanAggregateExec {
            shape: Arc::new(shape),
            partitions,
            scan: Arc::clone(input),
            replaced: Arc::clone(node),
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }
}

/// The operator a scan-side aggregate of `aggregate` would replace: its
/// input below repartitions (round robin only, and only for a partial
/// aggregate: rows dealt out may be aggregated in part, never whole) and
/// cooperative wrappers.
fn scan_below(aggregate: &AggregateExec, finishes: bool) -> Option<&Arc<dyn ExecutionPlan>> {
    let mut input = aggregate.input();
    loop {
        if let Some(r) = input.downcast_ref::<RepartitionExec>() {
            if finishes || !matches!(r.partitioning(), Partitioning::RoundRobinBatch(_)) {
                return None;
            }
            input = r.input();
        } else if let Some(c) = input.downcast_ref::<CooperativeExec>() {
            input = c.input();
        } else {
            return Some(input);
        }
    }
}

/// Where the scan's output column `index` comes from.
fn source_of(spec: &ScanSpec, index: usize) -> Option<&ColumnSource> {
    spec.projection
        .columns()
        .get(index)
        .and_then(|&c| spec.layout.sources.get(c))
}

/// In the wide view, the time segment of the key (its column in the
/// scan's output, its field) that a group of `aggregate` truncates.
fn wide_time(aggregate: &AggregateExec, spec: &ScanSpec) -> Option<(usize, usize)> {
    let key = spec.layout.key.as_ref()?;
    (0..spec.projection.columns().len()).find_map(|c| {
        let &ColumnSource::Segment(s) = source_of(spec, c)? else {
            return None;
        };
        let (_, _, kind) = key.fields().nth(s)?;
        let truncated = aggregate
            .group_expr()
            .expr()
            .iter()
            .any(|(e, _)| time_group(e, c).is_some());
        (matches!(kind, SegmentKind::Time { .. }) && truncated).then_some((c, s))
    })
}

/// The group expressions of an aggregate and the groups the scan makes of
/// them.
type GroupedBy = (Vec<Arc<dyn PhysicalExpr>>, Vec<Group>);

/// The aggregate's groups as the scan can make them (key segments, `_key`,
/// time buckets of `time_column`) with their expressions; `None` when one
/// is not such a group.
fn groups_of(
    aggregate: &AggregateExec,
    spec: &ScanSpec,
    time_column: Option<usize>,
    time_segment: Option<usize>,
) -> Option<GroupedBy> {
    let series = spec.layout.series.as_ref();
    let source = |index: usize| source_of(spec, index);
    let mut group_exprs = Vec::new();
    let mut groups = Vec::new();
    for (expr, _) in aggregate.group_expr().expr() {
        let group = if let Some(c) = expr.downcast_ref::<Column>() {
            match source(c.index()) {
                // (The time segment itself is not a group: the scan
                // gives the time column its groups' starts.)
                Some(&ColumnSource::Segment(s))
                    if series.is_none_or(|series| s != series.time_segment)
                        && time_segment != Some(s) =>
                {
                    Group::Segment(s)
                }
                Some(ColumnSource::Key) if series.is_none() => Group::Key,
                _ => return None,
            }
        } else if let Some(time_column) = time_column
            && let Some(TimeBuckets {
                len,
                origin,
                in_nanos,
            }) = time_group(expr, time_column)
        {
            Group::Time {
                len,
                origin,
                in_nanos,
            }
        } else {
            return None;
        };
        groups.push(group);
        group_exprs.push(Arc::clone(expr));
    }
    Some((group_exprs, groups))
}

/// What each aggregate function reads: a measure (a declared column, cast
/// or not) or the events themselves (`count(*)` of a series or the wide
/// view); `None` when one reads anything else.
fn inputs_of(aggregate: &AggregateExec, spec: &ScanSpec, wide: bool) -> Option<Vec<Input>> {
    let layout = &spec.layout;
    let series = layout.series.as_ref();
    let source = |index: usize| source_of(spec, index);
    let mut inputs = Vec::new();
    for a in aggregate.aggr_expr() {
        if a.is_distinct() || !a.order_bys().is_empty() || !a.groups_accumulator_supported() {
            return None;
        }
        let args = a.expressions();
        let [arg] = args.as_slice() else {
            return None;
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
                return None;
            }
            Input::Events
        } else if let Some(c) = column.downcast_ref::<Column>() {
            match source(c.index()) {
                Some(ColumnSource::Declared(d)) if layout.protos[*d].is_none() => {
                    Input::Measure(*d, cast_to)
                }
                _ => return None,
            }
        } else {
            return None;
        };
        inputs.push(input);
    }
    Some(inputs)
}

impl ScanAggregateExec {
    /// The scan it reads through (what decides whether it is light).
    pub(crate) fn scan(&self) -> &Arc<dyn ExecutionPlan> {
        &self.scan
    }
}

impl DisplayAs for ScanAggregateExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let groups: Vec<String> = self
            .shape
            .group_exprs
            .iter()
            .map(|e| e.to_string())
            .collect();
        let aggregates: Vec<&str> = self.shape.aggregates.iter().map(|a| a.name()).collect();
        write!(
            f,
            "ScanAggregateExec: {} aggregate in the scan, gby=[{}], aggr=[{}]; ",
            if self.shape.finishes {
                "whole"
            } else {
                "partial"
            },
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
        for e in &self.shape.group_exprs {
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
        let output_rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let scanned = MetricBuilder::new(&self.metrics).counter("rows_scanned", partition);
        let misfits = MetricBuilder::new(&self.metrics).counter("key_misfits", partition);
        let decoded = MetricBuilder::new(&self.metrics).counter("values_decoded", partition);
        let report = Box::new(move |c: &part::Counts| {
            scanned.add(c.rows);
            misfits.add(c.misfits);
            decoded.add(c.values);
            output_rows.add(c.groups);
        });
        // The embedded store is read where the stream is polled, a batch
        // of rows a poll (no hand-off to a blocking thread, which costs
        // more than a short range's read; see `inline_read`); a remote
        // backend on a blocking thread, as it waits on a network.
        let reading = if self.shape.spec.store.capabilities().reads_in_place {
            Reading::Polled {
                step: self.shape.spec.batch_size,
            }
        } else {
            Reading::Blocking
        };
        let shape = Arc::clone(&self.shape);
        Ok(inline_read::stream(
            Arc::clone(&self.shape.schema),
            reading,
            move || part::PartAggregate::open(shape, ranges, report).map(Some),
        ))
    }
}
