//! `KeyScanExec`: reads key ranges of one table through one snapshot per
//! partition and produces wide-view batches.

use std::fmt;
use std::sync::Arc;

use super::plan::ScanSpec;
use super::view::{ColumnSource, View};
use crate::codec::{self, show_bytes};
use crate::proto::FieldMask;
use crate::schema::KeyOrder;
use crate::store::{RowRange, TimeRange};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::Result as DfResult;
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr, RangePartitioning,
    SplitPoint,
};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream, SortOrderPushdownResult,
};
use std::collections::{BTreeSet, HashMap};

/// A scan of at most this many rows counts as light (see `is_bounded`).
pub(crate) const BOUNDED_ROWS: usize = 10_000;

/// The physical scan of a cellar table.
pub struct KeyScanExec {
    /// Shared by the partitions' reads and by the copies `reset_state`
    /// makes of a kept plan.
    spec: Arc<ScanSpec>,
    /// Ranges per partition, in key order within each.
    partitions: Arc<Vec<Vec<RowRange>>>,
    schema: SchemaRef,
    properties: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl fmt::Debug for KeyScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyScanExec({})", self.spec.layout.table)
    }
}

/// A range as the user wrote keys, and as the cell-key bytes read.
pub(crate) fn describe_range(r: &RowRange) -> String {
    use std::ops::Bound;
    let start = match &r.start {
        Bound::Included(k) => format!("[{}", show_bytes(k)),
        Bound::Excluded(k) => format!("({}", show_bytes(k)),
        Bound::Unbounded => "(-inf".to_string(),
    };
    let end = match &r.end {
        Bound::Included(k) => format!("{}]", show_bytes(k)),
        Bound::Excluded(k) => format!("{})", show_bytes(k)),
        Bound::Unbounded => "+inf)".to_string(),
    };
    let encoded = r.encode();
    let hex = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let bytes_end = encoded.end.as_deref().map_or("+inf".to_string(), hex);
    format!(
        "{start}..{end} bytes [{}, {bytes_end})",
        hex(&encoded.start)
    )
}

/// Adds to `masks` the protobuf field paths `expr` reads: `get_field(col,
/// 'a', 'b')` reads a.b; any other use of the column reads all of it.
fn field_paths(
    expr: &Arc<dyn PhysicalExpr>,
    protos: &HashMap<usize, usize>,
    masks: &mut HashMap<usize, FieldMask>,
) {
    let any = expr.as_ref() as &dyn std::any::Any;
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>()
        && f.name() == "get_field"
        && let Some((first, rest)) = f.args().split_first()
        && let Some(col) = (first.as_ref() as &dyn std::any::Any).downcast_ref::<Column>()
        && let Some(layout_index) = protos.get(&col.index())
    {
        let path: Option<Vec<String>> = rest
            .iter()
            .map(|a| {
                (a.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<Literal>()
                    .and_then(|l| match l.value() {
                        ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
                            Some(s.clone())
                        }
                        _ => None,
                    })
            })
            .collect();
        if let Some(mask) = masks.get_mut(layout_index) {
            match path {
                Some(path) => mask.add_path(&path),
                None => mask.fields = None,
            }
        }
        return;
    }
    if let Some(col) = any.downcast_ref::<Column>() {
        if let Some(layout_index) = protos.get(&col.index())
            && let Some(mask) = masks.get_mut(layout_index)
        {
            mask.fields = None;
        }
        return;
    }
    for child in expr.children() {
        field_paths(child, protos, masks);
    }
}

/// Adds to `keys` the keys `expr` reads of family map columns:
/// `get_field(map, 'q')` reads q; any other use of a map reads all of it
/// (`None`).
fn map_keys_read(
    expr: &Arc<dyn PhysicalExpr>,
    maps: &HashMap<usize, usize>,
    keys: &mut HashMap<usize, Option<BTreeSet<String>>>,
) {
    let any = expr.as_ref() as &dyn std::any::Any;
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>()
        && f.name() == "get_field"
        && let [first, key] = f.args()
        && let Some(col) = (first.as_ref() as &dyn std::any::Any).downcast_ref::<Column>()
        && let Some(layout_index) = maps.get(&col.index())
    {
        let literal = (key.as_ref() as &dyn std::any::Any)
            .downcast_ref::<Literal>()
            .and_then(|l| match l.value() {
                ScalarValue::Utf8(Some(s))
                | ScalarValue::Utf8View(Some(s))
                | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone()),
                _ => None,
            });
        if let Some(wanted) = keys.get_mut(layout_index) {
            match (literal, wanted.as_mut()) {
                (Some(k), Some(set)) => {
                    set.insert(k);
                }
                _ => *wanted = None,
            }
        }
        return;
    }
    if let Some(col) = any.downcast_ref::<Column>() {
        if let Some(layout_index) = maps.get(&col.index())
            && let Some(wanted) = keys.get_mut(layout_index)
        {
            *wanted = None;
        }
        return;
    }
    for child in expr.children() {
        map_keys_read(child, maps, keys);
    }
}

/// A cell timestamp as an ISO time (UTC), or microseconds when out of range.
pub(crate) fn show_time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || format!("{micros}µs"),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string(),
    )
}

/// Whether every range lies within one key group.
fn one_group(ranges: &[RowRange], groups: &[Vec<u8>]) -> bool {
    let Some(first) = ranges.first() else {
        return true;
    };
    groups
        .iter()
        .find(|g| in_group(first, g))
        .is_some_and(|g| ranges.iter().all(|r| in_group(r, g)))
}

/// A key order's fields (and whether each descends) and constants.
type SegmentOrder<'a> = (&'a [(usize, bool)], &'a [usize]);

/// Whether a scan's partitions are in segment order (see
/// [`segment_order`]): each reads within one key group.
fn segment_ordered(spec: &ScanSpec, partitions: &[Vec<RowRange>]) -> bool {
    spec.order
        .as_ref()
        .is_some_and(|order| partitions.iter().all(|p| one_group(p, &order.groups)))
}

/// Whether every key of `range` starts with `group`.
fn in_group(range: &RowRange, group: &[u8]) -> bool {
    use std::ops::Bound;
    let start = match &range.start {
        Bound::Included(k) | Bound::Excluded(k) => k.starts_with(group),
        Bound::Unbounded => group.is_empty(),
    };
    let end = match &range.end {
        Bound::Included(k) => k.starts_with(group),
        Bound::Excluded(k) => {
            k.starts_with(group) || crate::codec::prefix_successor(group).is_some_and(|s| *k <= s)
        }
        Bound::Unbounded => crate::codec::prefix_successor(group).is_none(),
    };
    start && end
}

/// Sorted ranges as one partition per key group, or `None` when a range
/// spans groups.
fn by_group(sorted: &[RowRange], groups: &[Vec<u8>]) -> Option<Vec<Vec<RowRange>>> {
    let mut out: Vec<Vec<RowRange>> = Vec::new();
    let mut current: Option<usize> = None;
    for range in sorted {
        let g = groups.iter().position(|g| in_group(range, g))?;
        match out.last_mut() {
            Some(last) if current == Some(g) => last.push(range.clone()),
            _ => {
                out.push(vec![range.clone()]);
                current = Some(g);
            }
        }
    }
    if out.is_empty() {
        out.push(Vec::new());
    }
    Some(out)
}

/// Declares the segment order each partition is read in, and the
/// segments pinned to one value.
fn segment_order(
    eq: &mut EquivalenceProperties,
    schema: &SchemaRef,
    spec: &ScanSpec,
    order: &KeyOrder,
) {
    use datafusion::physical_expr::{AcrossPartitions, ConstExpr};
    let Some(key) = spec.layout.key.as_ref() else {
        return;
    };
    let names: Vec<&str> = key.fields().map(|(_, n, _)| n).collect();
    let column = |field: usize| -> Option<Arc<dyn PhysicalExpr>> {
        let name = names.get(field)?;
        let index = schema.index_of(name).ok()?;
        Some(Arc::new(Column::new(name, index)))
    };
    // A series' events come in the order its buckets are read (see
    // `ScanSpec::events_oldest_first`): its time sorts as the bucket does.
    let bucket_time = spec
        .layout
        .series
        .as_ref()
        .filter(|s| s.bucketed() && !s.column_per_event())
        .and_then(|s| {
            let index = schema.index_of(&s.def.time).ok()?;
            let col: Arc<dyn PhysicalExpr> = Arc::new(Column::new(&s.def.time, index));
            Some((s.time_segment, col))
        });
    let mut sort = Vec::new();
    for &(field, descending) in &order.fields {
        let descending = descending != spec.reverse;
        let col = match &bucket_time {
            Some((segment, time)) if *segment == field => Arc::clone(time),
            _ => match column(field) {
                Some(col) => col,
                None => break,
            },
        };
        // Rows of keys that fit the schema have every segment: no NULLs.
        let options = datafusion::arrow::compute::SortOptions {
            descending,
            nulls_first: descending,
        };
        sort.push(PhysicalSortExpr::new(col, options));
    }
    let constants: Vec<ConstExpr> = order
        .constants
        .iter()
        .filter_map(|f| column(*f))
        .map(|c| ConstExpr::new(c, AcrossPartitions::Heterogeneous))
        .collect();
    if !constants.is_empty() {
        // Only fails on expressions that are not constants.
        let _ = eq.add_constants(constants);
    }
    if let Some(ordering) = LexOrdering::new(sort) {
        eq.add_ordering(ordering);
    }
}

/// The partitioning of a forward scan whose partitions read key ranges in
/// key order: each `_key` value lies in exactly one partition, so a GROUP
/// BY `_key` (or a join of two scans split alike) needs no repartition,
/// and partitions run in parallel rather than in merged key order. `None`
/// without `_key` among the columns, for reverse scans, and when a split
/// point is not text.
fn key_ranges(
    partitions: &[Vec<RowRange>],
    schema: &SchemaRef,
    reverse: bool,
) -> Option<Partitioning> {
    use std::ops::Bound;
    if reverse || partitions.len() < 2 {
        return None;
    }
    let key = schema.index_of("_key").ok()?;
    let mut splits = Vec::with_capacity(partitions.len() - 1);
    for pair in partitions.windows(2) {
        // Every key of the later partition is at or after its first
        // range's included start, every key of the earlier one before it.
        let (Some(last), Some(first)) = (pair[0].last(), pair[1].first()) else {
            return None;
        };
        let Bound::Included(start) = &first.start else {
            return None;
        };
        let before = match &last.end {
            Bound::Excluded(end) => end <= start,
            Bound::Included(end) => end < start,
            Bound::Unbounded => false,
        };
        if !before {
            return None;
        }
        let text = std::str::from_utf8(start).ok()?;
        splits.push(SplitPoint::new(vec![ScalarValue::Utf8(Some(
            text.to_string(),
        ))]));
    }
    let column: Arc<dyn PhysicalExpr> = Arc::new(Column::new("_key", key));
    let ordering = LexOrdering::new(vec![PhysicalSortExpr::new(
        column,
        datafusion::arrow::compute::SortOptions {
            descending: false,
            nulls_first: false,
        },
    )])?;
    RangePartitioning::try_new(ordering, splits)
        .ok()
        .map(Partitioning::Range)
}

impl KeyScanExec {
    /// Whether the scan reads a bounded number of rows: a small LIMIT, a
    /// short list of single keys (what a point lookup is), or a range that
    /// held few rows when planned.
    pub(crate) fn is_bounded(&self) -> bool {
        self.spec.limit.is_some_and(|n| n <= BOUNDED_ROWS)
            || self.single_keys(BOUNDED_ROWS)
            || self.spec.few_rows.is_some()
    }

    /// Whether the scan reads at most `most` ranges, each a single key.
    fn single_keys(&self, most: usize) -> bool {
        use std::ops::Bound;
        self.spec.ranges.as_ref().is_some_and(|ranges| {
            ranges.len() <= most
                && ranges.iter().all(|r| match (&r.start, &r.end) {
                    (Bound::Included(a), Bound::Included(b)) => a == b,
                    _ => false,
                })
        })
    }

    /// What the scan reads, as planned.
    pub(crate) fn spec(&self) -> &ScanSpec {
        &self.spec
    }

    /// The key ranges of each partition.
    pub(crate) fn partition_ranges(&self) -> &[Vec<RowRange>] {
        &self.partitions
    }

    pub(crate) fn new(spec: ScanSpec) -> Self {
        let ranges = match (&spec.splits, spec.limit) {
            (Some(splits), None) => splits.clone(),
            _ => spec.ranges.clone().unwrap_or_else(|| vec![RowRange::all()]),
        };
        // Overlapping ranges merge, so that no row is read twice when
        // ranges are spread over partitions; touching ones are splits.
        let sorted: Vec<RowRange> = codec::merge_ranges(ranges, codec::Touching::KeepApart)
            .into_iter()
            .map(|(_, range)| range)
            .collect();
        let grouped = match &spec.order {
            Some(order) if spec.by_group => by_group(&sorted, &order.groups),
            _ => None,
        };
        let partitions: Vec<Vec<RowRange>> = if let Some(groups) = grouped {
            groups
        } else if sorted.is_empty() {
            vec![Vec::new()]
        } else {
            let parts = spec.target_partitions.clamp(1, sorted.len());
            let per = sorted.len().div_ceil(parts).max(1);
            sorted.chunks(per).map(<[RowRange]>::to_vec).collect()
        };
        Self::from_parts(spec, partitions)
    }

    /// The scan of `spec` in place of this one in a plan made over this
    /// one, for a statement of a kept shape (`sql/rebind.rs`): `spec` is
    /// this scan's made from the same filters with other values. What
    /// physical optimization set in this scan's spec (a fetch, the parts
    /// of columns read, the direction and grouping a sort asked for) is
    /// set in it too. `None` unless the new scan declares what this one
    /// does (its partitioning and orderings), which the plan above was
    /// made for; then it shares this one's properties, so that the nodes
    /// above keep theirs.
    pub(crate) fn rebound(&self, mut spec: ScanSpec) -> Option<KeyScanExec> {
        spec.limit = self.spec.limit;
        spec.proto_masks = self.spec.proto_masks.clone();
        spec.map_keys = self.spec.map_keys.clone();
        spec.reverse = self.spec.reverse;
        spec.by_group = self.spec.by_group;
        let fresh = KeyScanExec::new(spec);
        // (DataFusion's `Partitioning` equality holds no unknown
        // partitioning equal to another.)
        let partitioned = |scan: &KeyScanExec| match scan.properties.output_partitioning() {
            Partitioning::UnknownPartitioning(n) => Ok(*n),
            other => Err(other.clone()),
        };
        let same = fresh.schema == self.schema
            && fresh.declares() == self.declares()
            && partitioned(&fresh) == partitioned(self);
        same.then(|| KeyScanExec {
            properties: Arc::clone(&self.properties),
            ..fresh
        })
    }

    /// What the scan's orderings are made of (see
    /// [`KeyScanExec::from_parts`]) but its schema: whether its
    /// partitions are in segment order, the key order's fields and
    /// constants, and its direction.
    fn declares(&self) -> (bool, Option<SegmentOrder<'_>>, bool) {
        let order = self.spec.order.as_ref();
        (
            segment_ordered(&self.spec, &self.partitions),
            order.map(|o| (o.fields.as_slice(), o.constants.as_slice())),
            self.spec.reverse,
        )
    }

    /// The scan of `spec` over these partitions (ranges in key order in
    /// each): what `new` decided, or a part of it a distributed task runs.
    pub(crate) fn from_parts(spec: ScanSpec, partitions: Vec<Vec<RowRange>>) -> Self {
        let schema = Arc::clone(spec.projection.schema());
        let mut eq = EquivalenceProperties::new(Arc::clone(&schema));
        if let Some(order) = &spec.order
            && segment_ordered(&spec, &partitions)
        {
            segment_order(&mut eq, &schema, &spec, order);
        }
        if let Ok(key_index) = schema.index_of("_key") {
            let col: Arc<dyn PhysicalExpr> = Arc::new(
                datafusion::physical_expr::expressions::Column::new("_key", key_index),
            );
            // Keys are never NULL, so either NULLS option holds; both are
            // declared, as the column is nullable to DataFusion (a sort
            // merge join asks for `_key ASC`, NULLS FIRST).
            for nulls_first in [spec.reverse, !spec.reverse] {
                let options = datafusion::arrow::compute::SortOptions {
                    descending: spec.reverse,
                    nulls_first,
                };
                let key = PhysicalSortExpr::new(Arc::clone(&col), options);
                if let Some(ordering) = LexOrdering::new(vec![key]) {
                    eq.add_ordering(ordering);
                }
            }
        }
        let partitioning = key_ranges(&partitions, &schema, spec.reverse)
            .unwrap_or(Partitioning::UnknownPartitioning(partitions.len()));
        let properties = PlanProperties::new(
            eq,
            partitioning,
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        KeyScanExec {
            spec: Arc::new(spec),
            partitions: Arc::new(partitions),
            schema,
            properties: Arc::new(properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
}

impl DisplayAs for KeyScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let spec = &self.spec;
        write!(f, "KeyScanExec: table={}", spec.layout.table)?;
        match &spec.layout.view {
            View::Wide { as_of: None } => {}
            View::Wide { as_of: Some(t) } => write!(f, ", view=as_of({})", show_time(*t))?,
            View::Versions { latest: None } => write!(f, ", view=versions")?,
            View::Versions { latest: Some(n) } => write!(f, ", view=versions(latest {n})")?,
            View::Cells { family: None } => write!(f, ", view=cells")?,
            View::Cells { family: Some(fam) } => write!(f, ", view=cells({fam})")?,
        }
        match &spec.ranges {
            None => write!(f, ", ranges=FULL TABLE SCAN")?,
            Some(r) if r.is_empty() => write!(f, ", ranges=NONE (no row can match)")?,
            Some(r) => {
                let shown: Vec<String> = r.iter().take(8).map(describe_range).collect();
                write!(f, ", ranges({})=[{}", r.len(), shown.join(", "))?;
                if r.len() > 8 {
                    write!(f, ", ...")?;
                }
                write!(f, "]")?;
            }
        }
        if self.partitions.len() > 1 {
            write!(f, ", partitions={}", self.partitions.len())?;
        }
        if !spec.pushed.is_empty() {
            write!(f, ", key_predicates=[{}]", spec.pushed.join(", "))?;
        }
        if !spec.residual_text.is_empty() {
            write!(f, ", rechecked=[{}]", spec.residual_text.join(", "))?;
        }
        if spec.time != TimeRange::ALL {
            let end = spec.time.end.map_or("+inf".to_string(), show_time);
            write!(f, ", time=[{}, {end})", show_time(spec.time.start))?;
        }
        if !spec.time_used.is_empty() {
            write!(f, ", time_predicates=[{}]", spec.time_used.join(", "))?;
        }
        if let Some(n) = spec.cells_per_column
            && n != 1
        {
            write!(f, ", cells_per_column={n}")?;
        }
        if !spec.proto_masks.is_empty() {
            let mut shown: Vec<String> = spec
                .proto_masks
                .iter()
                .map(|(c, m)| format!("{}: {}", spec.layout.arrow.field(*c).name(), m.describe()))
                .collect();
            shown.sort();
            write!(f, ", protobuf_fields=[{}]", shown.join("; "))?;
        }
        if !spec.map_keys.is_empty() {
            let mut shown: Vec<String> = spec
                .map_keys
                .iter()
                .map(|(c, keys)| {
                    let keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
                    format!(
                        "{}: {}",
                        spec.layout.arrow.field(*c).name(),
                        keys.join(", ")
                    )
                })
                .collect();
            shown.sort();
            write!(f, ", map_keys=[{}]", shown.join("; "))?;
        }
        if let Some(q) = &spec.qualifiers_used {
            write!(f, ", qualifier_predicate=[{q}]")?;
        }
        write!(f, ", families=[{}]", spec.families.join(", "))?;
        if let Some(limit) = spec.limit {
            write!(f, ", limit={limit}")?;
        }
        if spec.reverse {
            write!(f, ", order=_key DESC (reverse scan)")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for KeyScanExec {
    fn name(&self) -> &str {
        "KeyScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.spec.apply_residual(f)
    }

    /// An estimate of the rows read when the scan knows it is small (a
    /// range counted when planned, a LIMIT, a few keys): DataFusion then
    /// leaves the read in one partition rather than spread it over
    /// threads.
    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<datafusion::common::Statistics>],
        args: &datafusion::physical_plan::StatisticsArgs,
    ) -> DfResult<Arc<datafusion::common::Statistics>> {
        use datafusion::common::stats::Precision;
        let mut stats = datafusion::common::Statistics::new_unknown(&self.schema);
        let whole = args.partition().is_none() || self.partitions.len() == 1;
        let keys = self
            .spec
            .ranges
            .as_ref()
            .filter(|_| self.single_keys(BOUNDED_ROWS))
            .map(Vec::len);
        if let Some(rows) = self.spec.few_rows.or(keys).filter(|_| whole) {
            let rows = self.spec.limit.map_or(rows, |limit| rows.min(limit));
            stats.num_rows = Precision::Inexact(rows);
        }
        Ok(Arc::new(stats))
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    /// The same scan with fresh metrics, for a kept plan run again (its
    /// runs' metrics would pile up in one set otherwise).
    fn reset_state(self: Arc<Self>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(KeyScanExec {
            spec: Arc::clone(&self.spec),
            partitions: Arc::clone(&self.partitions),
            schema: Arc::clone(&self.schema),
            properties: Arc::clone(&self.properties),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    fn with_fetch(&self, limit: Option<usize>) -> Option<Arc<dyn ExecutionPlan>> {
        let mut spec = ScanSpec::clone(&self.spec);
        spec.limit = limit;
        Some(Arc::new(KeyScanExec::new(spec)))
    }

    fn try_swapping_with_projection(
        &self,
        projection: &ProjectionExec,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let layout = &self.spec.layout;
        // Output column -> layout column, for protobuf and family map columns.
        let of_kind = |map: bool| -> HashMap<usize, usize> {
            self.spec
                .projection
                .columns()
                .iter()
                .enumerate()
                .filter(|(_, l)| match layout.sources[**l] {
                    ColumnSource::Declared(d) => !map && layout.protos[d].is_some(),
                    ColumnSource::FamilyMap(_) => map,
                    _ => false,
                })
                .map(|(o, l)| (o, *l))
                .collect()
        };
        let (protos, maps) = (of_kind(false), of_kind(true));
        if protos.is_empty() && maps.is_empty() {
            return Ok(None);
        }
        let mut masks: HashMap<usize, FieldMask> = protos
            .values()
            .map(|l| {
                (
                    *l,
                    FieldMask {
                        fields: Some(HashMap::new()),
                    },
                )
            })
            .collect();
        let mut keys: HashMap<usize, Option<BTreeSet<String>>> =
            maps.values().map(|l| (*l, Some(BTreeSet::new()))).collect();
        for e in projection.expr() {
            field_paths(&e.expr, &protos, &mut masks);
            map_keys_read(&e.expr, &maps, &mut keys);
        }
        masks.retain(|_, m| m.fields.is_some());
        let keys: HashMap<usize, BTreeSet<String>> = keys
            .into_iter()
            .filter_map(|(c, k)| Some((c, k?)))
            .collect();
        if (masks == self.spec.proto_masks || masks.is_empty())
            && (keys == self.spec.map_keys || keys.is_empty())
        {
            return Ok(None);
        }
        let mut spec = ScanSpec::clone(&self.spec);
        if !masks.is_empty() {
            spec.proto_masks = masks;
        }
        if !keys.is_empty() {
            spec.map_keys = keys;
        }
        let scan: Arc<dyn ExecutionPlan> = Arc::new(KeyScanExec::new(spec));
        Ok(Some(Arc::new(ProjectionExec::try_new(
            projection.expr().to_vec(),
            scan,
        )?)))
    }

    fn try_pushdown_sort(
        &self,
        order: &[PhysicalSortExpr],
    ) -> DfResult<SortOrderPushdownResult<Arc<dyn ExecutionPlan>>> {
        let name_of = |e: &PhysicalSortExpr| -> Option<String> {
            (e.expr.as_ref() as &dyn std::any::Any)
                .downcast_ref::<Column>()
                .map(|c| self.schema.field(c.index()).name().clone())
        };
        let Some(names) = order.iter().map(name_of).collect::<Option<Vec<_>>>() else {
            return Ok(SortOrderPushdownResult::Unsupported);
        };
        let mut spec = ScanSpec::clone(&self.spec);
        if let [only] = order
            && names[0] == "_key"
        {
            spec.reverse = only.options.descending;
            return Ok(SortOrderPushdownResult::Exact {
                inner: Arc::new(KeyScanExec::new(spec)),
            });
        }
        // Segments in the order the key holds them (after the pinned ones),
        // all ascending or all descending relative to it.
        let (Some(key_order), Some(key)) = (&spec.order, spec.layout.key.as_ref()) else {
            return Ok(SortOrderPushdownResult::Unsupported);
        };
        // A series' time in bucket rows sorts as its bucket does (its
        // events come in the order the buckets are read).
        let bucket_time = spec
            .layout
            .series
            .as_ref()
            .filter(|s| s.bucketed() && !s.column_per_event())
            .map(|s| (s.def.time.as_str(), s.time_segment));
        let field = |name: &str| match bucket_time {
            Some((time, segment)) if time == name => Some(segment),
            _ => key.field_index(name),
        };
        let mut wanted = order
            .iter()
            .zip(&names)
            .filter(|(_, n)| !field(n).is_some_and(|f| key_order.constants.contains(&f)));
        let mut reverse = None;
        let mut matched = 0;
        for &(f, descending) in &key_order.fields {
            let Some((sort, name)) = wanted.next() else {
                break;
            };
            let backwards = sort.options.descending != descending;
            if field(name) != Some(f) || reverse.is_some_and(|r| r != backwards) {
                return Ok(SortOrderPushdownResult::Unsupported);
            }
            reverse = Some(backwards);
            matched += 1;
        }
        let (Some(reverse), None) = (reverse, wanted.next()) else {
            return Ok(SortOrderPushdownResult::Unsupported);
        };
        if matched == 0 {
            return Ok(SortOrderPushdownResult::Unsupported);
        }
        spec.reverse = reverse;
        spec.by_group = true;
        let scan = KeyScanExec::new(spec);
        // Ranges that do not fall in one group each keep their sort.
        let ordered = match &scan.spec.order {
            Some(o) => scan.partitions.iter().all(|p| one_group(p, &o.groups)),
            None => false,
        };
        if !ordered {
            return Ok(SortOrderPushdownResult::Unsupported);
        }
        Ok(SortOrderPushdownResult::Exact {
            inner: Arc::new(scan),
        })
    }

    fn fetch(&self) -> Option<usize> {
        self.spec.limit
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
        Ok(super::partition_read::execute(
            Arc::clone(&self.spec),
            ranges,
            Arc::clone(&self.schema),
            &self.metrics,
            partition,
        ))
    }
}
