//! The operator that reads a column-per-event series' events
//! ([`super::gather`]), its partitions and order as DataFusion sees them.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, SortOrderPushdownResult,
};

use super::gather::{Gather, GatherPlan, GatherStats};
use crate::query::inline_read::{self, PartRead};
use crate::query::scan::{BOUNDED_ROWS, describe_range, show_time};
use crate::store::{RowRange, TimeRange};

/// Events in a partition's first batch when no LIMIT says how many: a
/// selective read is answered without waiting for a whole batch.
const FIRST_EVENTS: usize = 64;

/// Reads a column-per-event series' events: one tall row per event.
pub(crate) struct GatherExec {
    plan: Arc<GatherPlan>,
    /// Per partition, the ranges whose series it owns, in key order.
    partitions: Arc<Vec<Vec<RowRange>>>,
    /// Rows read in descending key order.
    reverse: bool,
    /// Every event is of one series (its key pinned): they come in time
    /// order.
    one_series: bool,
    fetch: Option<usize>,
    batch_size: usize,
    /// The rows the series' ranges held when planned, when few.
    few_rows: Option<usize>,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for GatherExec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "GatherExec({})", self.plan.layout.table)
    }
}

impl GatherExec {
    pub fn new(
        plan: Arc<GatherPlan>,
        partitions: Vec<Vec<RowRange>>,
        one_series: bool,
        fetch: Option<usize>,
        batch_size: usize,
        few_rows: Option<usize>,
    ) -> Self {
        // One series' events are one ordered stream.
        let partitions = if one_series && partitions.len() > 1 {
            vec![partitions.into_iter().flatten().collect()]
        } else {
            partitions
        };
        let mut gather = Self::with(
            plan,
            Arc::new(partitions),
            false,
            one_series,
            fetch,
            batch_size,
        );
        gather.few_rows = few_rows;
        gather
    }

    /// Whether the gather reads a bounded number of rows: a LIMIT, few
    /// rows in its ranges, or one series over a few buckets (a row per
    /// measure and bucket).
    pub(crate) fn is_bounded(&self) -> bool {
        let def = &self.plan.series().def;
        let time = self.plan.time;
        let buckets = match (def.layout.bucket, time.end) {
            (Some(len), Some(end)) if self.one_series && len > 0 => {
                let first = def.layout.bucket_start(time.start);
                let last = def
                    .layout
                    .bucket_start(end.saturating_sub(1).max(time.start));
                Some(((last - first) / len + 1) as usize)
            }
            _ => None,
        };
        self.fetch.is_some_and(|n| n <= BOUNDED_ROWS)
            || self.few_rows.is_some()
            || buckets.is_some_and(|b| b.saturating_mul(def.measures.len()) <= BOUNDED_ROWS)
    }

    fn with(
        plan: Arc<GatherPlan>,
        partitions: Arc<Vec<Vec<RowRange>>>,
        reverse: bool,
        one_series: bool,
        fetch: Option<usize>,
        batch_size: usize,
    ) -> Self {
        let schema = Arc::clone(&plan.schema);
        let mut eq = EquivalenceProperties::new(Arc::clone(&schema));
        let time = plan.series().time_column;
        if one_series
            && partitions.len() == 1
            && let Some(at) = plan.columns.iter().position(|c| *c == time)
        {
            let descending = plan.newest_first(reverse);
            let column = Arc::new(Column::new(schema.field(at).name(), at));
            // Times are never NULL, so either NULLS option holds.
            for nulls_first in [true, false] {
                let options = datafusion::arrow::compute::SortOptions {
                    descending,
                    nulls_first,
                };
                let sort = PhysicalSortExpr::new(Arc::clone(&column) as _, options);
                if let Some(ordering) = LexOrdering::new(vec![sort]) {
                    eq.add_ordering(ordering);
                }
            }
        }
        let properties = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(partitions.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        GatherExec {
            plan,
            partitions,
            reverse,
            one_series,
            fetch,
            batch_size,
            few_rows: None,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    fn again(&self, reverse: bool, fetch: Option<usize>) -> Self {
        let mut again = Self::with(
            Arc::clone(&self.plan),
            Arc::clone(&self.partitions),
            reverse,
            self.one_series,
            fetch,
            self.batch_size,
        );
        again.few_rows = self.few_rows;
        again
    }
}

/// A gather's parts, as a plan sent to another process carries them.
#[cfg_attr(
    not(feature = "ballista"),
    allow(
        dead_code,
        reason = "a plan is sent to another process only with Ballista"
    )
)]
pub(crate) struct GatherParts {
    pub plan: Arc<GatherPlan>,
    pub partitions: Vec<Vec<RowRange>>,
    pub reverse: bool,
    pub one_series: bool,
    pub fetch: Option<usize>,
    pub batch_size: usize,
}

#[cfg_attr(
    not(feature = "ballista"),
    allow(
        dead_code,
        reason = "a plan is sent to another process only with Ballista"
    )
)]
impl GatherExec {
    /// What the gather is made of.
    pub(crate) fn parts(&self) -> GatherParts {
        GatherParts {
            plan: Arc::clone(&self.plan),
            partitions: self.partitions.as_ref().clone(),
            reverse: self.reverse,
            one_series: self.one_series,
            fetch: self.fetch,
            batch_size: self.batch_size,
        }
    }

    /// The gather of `parts`, as planned.
    pub(crate) fn from_parts(parts: GatherParts) -> Self {
        Self::with(
            parts.plan,
            Arc::new(parts.partitions),
            parts.reverse,
            parts.one_series,
            parts.fetch,
            parts.batch_size,
        )
    }
}

impl DisplayAs for GatherExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let plan = &self.plan;
        let def = &plan.series().def;
        write!(
            f,
            "GatherExec: series={}, measures=[{}]",
            plan.layout.table,
            def.measures.join(", ")
        )?;
        let ranges: Vec<&RowRange> = self.partitions.iter().flatten().collect();
        if !(ranges.len() == 1 && ranges[0] == &RowRange::all()) {
            let shown: Vec<String> = ranges.iter().take(8).map(|r| describe_range(r)).collect();
            write!(f, ", series_ranges({})=[{}", ranges.len(), shown.join(", "))?;
            if ranges.len() > 8 {
                write!(f, ", ...")?;
            }
            write!(f, "]")?;
        } else {
            write!(f, ", series_ranges=FULL TABLE SCAN")?;
        }
        if self.partitions.len() > 1 {
            write!(f, ", partitions={}", self.partitions.len())?;
        }
        if plan.time != TimeRange::ALL {
            let end = plan.time.end.map_or("+inf".to_string(), show_time);
            write!(f, ", time=[{}, {end})", show_time(plan.time.start))?;
            // Each measure's rows of a series are read over these buckets.
            let layout = &def.layout;
            let first =
                (plan.time.start > 0).then(|| show_time(layout.bucket_start(plan.time.start)));
            let last = plan
                .time
                .end
                .map(|e| show_time(layout.bucket_start(e.saturating_sub(1))));
            write!(
                f,
                ", buckets=[{}, {}]",
                first.as_deref().unwrap_or("first"),
                last.as_deref().unwrap_or("last")
            )?;
        }
        if self.one_series {
            let order = if plan.newest_first(self.reverse) {
                "DESC"
            } else {
                "ASC"
            };
            write!(f, ", order={} {order}", def.time)?;
        }
        if let Some(n) = self.fetch {
            write!(f, ", limit={n}")?;
        }
        if self.reverse {
            write!(f, " (reverse scan)")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GatherExec {
    fn name(&self) -> &str {
        "GatherExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> DfResult<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    /// Fresh metrics, for a kept plan run again.
    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.again(self.reverse, self.fetch)))
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        Some(Arc::new(self.again(self.reverse, limit)))
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    /// A LIMIT's rows, when there is one: DataFusion then leaves so few
    /// rows in one partition.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<datafusion::common::Statistics>],
        _args: &datafusion::physical_plan::StatisticsArgs,
    ) -> DfResult<Arc<datafusion::common::Statistics>> {
        use datafusion::common::stats::Precision;
        let mut stats = datafusion::common::Statistics::new_unknown(&self.plan.schema);
        if let Some(n) = self.fetch {
            stats.num_rows = Precision::Inexact(n);
        }
        Ok(Arc::new(stats))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    /// One series' events in time order, either way: its rows read
    /// forwards or backwards. Its key columns are one value each, so an
    /// order that names them before the time holds too.
    fn try_pushdown_sort(
        &self,
        order: &[PhysicalSortExpr],
    ) -> DfResult<SortOrderPushdownResult<Arc<dyn ExecutionPlan>>> {
        if !self.one_series || self.partitions.len() != 1 {
            return Ok(SortOrderPushdownResult::Unsupported);
        }
        let series = self.plan.series();
        let column_of = |e: &PhysicalSortExpr| {
            (e.expr.as_ref() as &dyn Any)
                .downcast_ref::<Column>()
                .and_then(|c| self.plan.columns.get(c.index()).copied())
        };
        let Some(columns) = order.iter().map(column_of).collect::<Option<Vec<_>>>() else {
            return Ok(SortOrderPushdownResult::Unsupported);
        };
        let mut descending = None;
        for (sort, column) in order.iter().zip(&columns) {
            if *column == series.time_column {
                descending = Some(sort.options.descending);
                break;
            }
            if *column > series.time_column {
                return Ok(SortOrderPushdownResult::Unsupported);
            }
        }
        // Columns after the time do not matter: no two events share it.
        let reverse = match descending {
            Some(d) => d != series.def.layout.reversed,
            None => self.reverse,
        };
        Ok(SortOrderPushdownResult::Exact {
            inner: Arc::new(self.again(reverse, self.fetch)),
        })
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let ranges = self.partitions.get(partition).cloned().unwrap_or_default();
        let counter =
            |name: &'static str| MetricBuilder::new(&self.metrics).counter(name, partition);
        let counters = Counters {
            series: counter("series_read"),
            rows: counter("rows_scanned"),
            cells: counter("cells_scanned"),
            output: MetricBuilder::new(&self.metrics).output_rows(partition),
            reported: GatherStats::default(),
            emitted: 0,
        };
        let schema = Arc::clone(&self.plan.schema);
        let gather = Gather::new(
            Arc::clone(&self.plan),
            ranges,
            self.reverse,
            self.one_series,
            self.fetch,
            self.fetch.unwrap_or(self.batch_size).clamp(1, 1024),
        );
        // The first events in a small batch (a LIMIT's, or a few): a
        // selective read is answered without waiting for a whole one.
        let read = CountedGather {
            gather,
            counters,
            first_batch: Some(self.fetch.unwrap_or(FIRST_EVENTS).min(self.batch_size)),
            batch: self.batch_size,
        };
        let reading = if self.plan.store.capabilities().reads_in_place {
            inline_read::Reading::Polled {
                step: self.batch_size,
            }
        } else {
            inline_read::Reading::Blocking
        };
        Ok(inline_read::stream(schema, reading, move || Ok(Some(read))))
    }
}

/// A partition's gather, counting what it reads.
struct CountedGather {
    gather: Gather,
    counters: Counters,
    /// The first batch's size, until it is read.
    first_batch: Option<usize>,
    batch: usize,
}

impl PartRead for CountedGather {
    fn read(&mut self, rows: usize, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool> {
        // The first events come in a small batch, the rest in whole ones.
        let (rows, batch) = match self.first_batch.take() {
            Some(first) => (rows.min(first), first),
            None => (rows, self.batch),
        };
        let done = self
            .gather
            .read(rows, batch, send)
            .map_err(datafusion::error::DataFusionError::from);
        self.counters.report(&mut self.gather);
        done
    }
}

/// A partition's counters.
struct Counters {
    series: datafusion::physical_plan::metrics::Count,
    rows: datafusion::physical_plan::metrics::Count,
    cells: datafusion::physical_plan::metrics::Count,
    output: datafusion::physical_plan::metrics::Count,
    reported: GatherStats,
    emitted: usize,
}

impl Counters {
    /// Adds what the gather read since the last report.
    fn report(&mut self, gather: &mut Gather) {
        let now = gather.stats;
        self.series.add(now.series - self.reported.series);
        self.rows.add((now.rows - self.reported.rows) as usize);
        self.cells.add((now.cells - self.reported.cells) as usize);
        self.output.add(gather.emitted - self.emitted);
        self.reported = now;
        self.emitted = gather.emitted;
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::physical_plan::collect_partitioned;

    use super::*;
    use crate::sql::SqlSession;
    use crate::store::{ReadRequest, Store};

    fn the_gather(plan: &Arc<dyn ExecutionPlan>) -> Option<&GatherExec> {
        if let Some(g) = plan.downcast_ref::<GatherExec>() {
            return Some(g);
        }
        plan.children().into_iter().find_map(the_gather)
    }

    /// The events of every partition, as sorted lines.
    async fn events(exec: GatherExec, session: &SqlSession) -> Vec<String> {
        let task = session.context().task_ctx();
        let parts = collect_partitioned(Arc::new(exec), task).await.unwrap();
        let batches: Vec<RecordBatch> = parts.into_iter().flatten().collect();
        let text = pretty_format_batches(&batches).unwrap().to_string();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("| ") && !l.contains("| dev"))
            .map(String::from)
            .collect();
        lines.sort();
        lines
    }

    /// However the ranges are cut into partitions (between two series,
    /// between a series' measures, inside a key), every event is gathered
    /// once, by the partition its series starts in, read either way.
    #[tokio::test]
    async fn partitions_cut_anywhere_gather_each_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let session = SqlSession::new(store.clone());
        session
            .query(
                "CREATE SERIES s (KEY (dev TEXT, n INT(2)), TIME ts, a BIGINT, b DOUBLE) \
                 LAYOUT BUCKET '1 hour' COLUMN PER EVENT",
            )
            .await
            .unwrap();
        let mut values = Vec::new();
        for (d, dev) in ["a", "ab", "b"].iter().enumerate() {
            for n in 0..2 {
                for m in 0..6i64 {
                    let a = if (m + n) % 3 == 0 {
                        "NULL".into()
                    } else {
                        (m * 10 + n).to_string()
                    };
                    let b = if m % 4 == 1 && a != "NULL" {
                        "NULL".into()
                    } else {
                        format!("{d}.5")
                    };
                    values.push(format!(
                        "('{dev}', {n}, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL '{} minutes', {a}, {b})",
                        m * 25
                    ));
                }
            }
        }
        session
            .query(&format!("INSERT INTO s VALUES {}", values.join(", ")))
            .await
            .unwrap();
        let df = session.sql("SELECT * FROM s").await.unwrap();
        let plan = df.create_physical_plan().await.unwrap();
        let gather = the_gather(&plan).expect("a gather");
        let whole = events(gather.again(false, None), &session).await;
        assert_eq!(whole.len(), 36, "{whole:#?}");
        assert_eq!(events(gather.again(true, None), &session).await, whole);
        let keys: Vec<Vec<u8>> = store
            .read_rows("s", ReadRequest::all())
            .unwrap()
            .map(|row| row.unwrap().key)
            .collect();
        let mut cuts: Vec<Vec<u8>> = Vec::new();
        for key in &keys {
            cuts.push(key.clone());
            cuts.push(key[..key.len() / 2].to_vec());
            let mut after = key.clone();
            after.push(0);
            cuts.push(after);
        }
        for cut in cuts {
            let parts = vec![
                vec![RowRange::between(
                    Bound::Unbounded,
                    Bound::Excluded(cut.clone()),
                )],
                vec![RowRange::between(
                    Bound::Included(cut.clone()),
                    Bound::Unbounded,
                )],
            ];
            for reverse in [false, true] {
                let exec = GatherExec::with(
                    Arc::clone(&gather.plan),
                    Arc::new(parts.clone()),
                    reverse,
                    false,
                    None,
                    8192,
                );
                let got = events(exec, &session).await;
                assert_eq!(
                    got,
                    whole,
                    "cut at {:?}, reverse {reverse}",
                    String::from_utf8_lossy(&cut)
                );
            }
        }
    }
}
