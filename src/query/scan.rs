//! `KeyScanExec`: reads key ranges of one table through one snapshot per
//! partition and produces wide-view batches.

use std::fmt;
use std::sync::Arc;

use super::wide::{ColumnSource, Layout, View};
use crate::codec::show_bytes;
use crate::proto::FieldMask;
use crate::schema::KeyOrder;
use crate::store::{QualifierFilter, RowRange, Store, TimeRange};
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

/// Everything a scan needs, decided at planning time.
#[derive(Clone)]
pub(crate) struct ScanSpec {
    pub store: Store,
    pub layout: Arc<Layout>,
    pub projection: Vec<usize>,
    pub needed: Vec<bool>,
    pub families: Vec<String>,
    /// `None`: the whole table.
    pub ranges: Option<Vec<RowRange>>,
    pub pushed: Vec<String>,
    /// Cell timestamps read, and the predicates that narrowed them.
    pub time: TimeRange,
    pub time_used: Vec<String>,
    pub cells_per_column: Option<usize>,
    /// Qualifiers read (the cells view), and the predicate that chose them.
    pub qualifiers: QualifierFilter,
    pub qualifiers_used: Option<String>,
    /// Protobuf columns (by index) decoded only in part.
    pub proto_masks: std::collections::HashMap<usize, crate::proto::FieldMask>,
    /// Family map columns (by index) of which the query reads only these
    /// keys (`family['q']`): the other cells are not decoded.
    pub map_keys: HashMap<usize, std::collections::BTreeSet<String>>,
    /// A single large range cut into pieces for parallel partitions
    /// (unused when a LIMIT asks for an early stop).
    pub splits: Option<Vec<RowRange>>,
    /// The rows a small range held when planned: the estimate DataFusion
    /// is given, so that it does not spread so few rows over threads.
    pub few_rows: Option<usize>,
    pub residual: Option<Arc<dyn PhysicalExpr>>,
    pub residual_text: Vec<String>,
    /// Every re-checked filter is a time predicate the cell time range
    /// answers exactly (vacuously, when none is).
    pub residual_in_time: bool,
    /// Drop rows whose key does not fit the schema: segment filters the
    /// ranges answer exactly are not re-checked, and would have.
    pub drop_misfits: bool,
    pub limit: Option<usize>,
    /// Read in descending key order (ORDER BY _key DESC).
    pub reverse: bool,
    /// How key order orders segments in the ranges, if it does.
    pub order: Option<KeyOrder>,
    /// One partition per key group of `order`, so each partition is in
    /// segment order (what a merge in segment order needs).
    pub by_group: bool,
    pub batch_size: usize,
    pub target_partitions: usize,
}

impl ScanSpec {
    /// Cells per column the read keeps: the view's own count, and with a
    /// LIMIT of the versions view that nothing re-checks, at most the
    /// LIMIT. The view gives a row's timestamps newest first, so its first
    /// L rows are made of each column's newest L cells at most (a column
    /// has a cell at only some of those timestamps); the rows after them,
    /// which fewer cells may leave incomplete, are past the LIMIT.
    pub(crate) fn cells_read(&self) -> Option<usize> {
        let limited = match (&self.layout.view, &self.residual) {
            (View::Versions { .. }, None) if !self.events_oldest_first() => self.limit,
            _ => None,
        };
        [self.cells_per_column, limited].into_iter().flatten().min()
    }

    /// Whether the versions view gives each row's timestamps oldest
    /// first: for a series whose events are the cells of bucket rows,
    /// when the buckets are read from the oldest on (forwards, or
    /// backwards in a REVERSED layout), so that its events come in time
    /// order whichever way the rows are read, as a row per event's do.
    pub(crate) fn events_oldest_first(&self) -> bool {
        self.layout.series.as_ref().is_some_and(|s| {
            s.bucketed() && !s.column_per_event() && s.def.layout.reversed == self.reverse
        })
    }

    /// Rows a partition's batch builder starts with room for: what a
    /// LIMIT or the planned size of a small range says, at most 1024
    /// (builders grow past it).
    pub(crate) fn capacity(&self) -> usize {
        [self.limit, self.few_rows, Some(self.batch_size)]
            .into_iter()
            .flatten()
            .fold(1024, usize::min)
            .max(1)
    }

    /// Visits the predicate the scan re-checks per row, if any: the one
    /// expression a scan (or a split scan) holds.
    pub(crate) fn apply_residual(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        match &self.residual {
            Some(e) => f(e),
            None => Ok(TreeNodeRecursion::Continue),
        }
    }
}

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

/// Tables with fewer pairs than this and fewer bytes on disk than
/// [`SPLIT_MIN_BYTES`] are read by one partition per range. Bytes count
/// too because a PACKED pair may hold thousands of cells: a mebibyte of
/// time buckets holds about 400 K of them, a few milliseconds' decoding.
const SPLIT_MIN_CELLS: u64 = 200_000;
const SPLIT_MIN_BYTES: u64 = 1 << 20;
/// A range of fewer rows than this is read by one partition: handing
/// rows between threads would cost more than reading them (one series'
/// hour or day).
const SPLIT_MIN_ROWS: usize = 256;

/// Cuts a single range of a large table into up to `n` ranges of about
/// equal key space between its first and last row, so that several
/// partitions read it in parallel. Probes the keys of the range's first
/// [`SPLIT_MIN_ROWS`] rows and of its last (`FjallStore::probe_rows`);
/// `None` when there is nothing worth splitting.
pub(crate) fn split_ranges(
    store: &Store,
    table: &str,
    families: &[String],
    ranges: Option<&Vec<RowRange>>,
    n: usize,
) -> Split {
    let mut rows = None;
    let pieces = cut_range(store, table, families, ranges, n, &mut rows);
    Split { pieces, rows }
}

/// How a scan reads its one range: in pieces, or whole.
pub(crate) struct Split {
    /// The pieces, when it is worth cutting.
    pub pieces: Option<Vec<RowRange>>,
    /// Rows the range held when planned, when it was counted (fewer than
    /// [`SPLIT_MIN_ROWS`]).
    pub rows: Option<usize>,
}

fn cut_range(
    store: &Store,
    table: &str,
    families: &[String],
    ranges: Option<&Vec<RowRange>>,
    n: usize,
    counted: &mut Option<usize>,
) -> Option<Vec<RowRange>> {
    use std::ops::Bound;
    let range = match ranges {
        None => RowRange::all(),
        Some(r) if r.len() == 1 => r[0].clone(),
        Some(_) => return None,
    };
    let single_key =
        matches!((&range.start, &range.end), (Bound::Included(a), Bound::Included(b)) if a == b);
    if single_key {
        return None;
    }
    // With one partition wanted nothing is cut, but a range of few rows
    // is counted all the same: it makes the query light (`is_bounded`).
    let cut = n >= 2;
    if store.local().is_none() {
        let pieces = cut
            .then(|| split_at_samples(store, table, range.clone(), n))
            .flatten();
        if pieces.is_none() {
            *counted = count_few_rows(store, table, families, range);
        }
        return pieces;
    }
    let small = store.approximate_cells(table).ok()? < SPLIT_MIN_CELLS
        && store.table_disk_space(table).ok()? < SPLIT_MIN_BYTES;
    // The first rows of the range: a range that ends within them is read
    // by one partition, and says so (its row count keeps DataFusion from
    // spreading a few rows over threads, which costs more than reading
    // them). A small table is read by one partition in any case, but
    // counted all the same.
    let family = families.first()?;
    let probe = store
        .local()?
        .probe_rows(table, family, &range, SPLIT_MIN_ROWS)
        .ok()?;
    let (Some(first), Some(last)) = (probe.first, probe.last) else {
        *counted = Some(0);
        return None;
    };
    if probe.rows < SPLIT_MIN_ROWS {
        *counted = Some(probe.rows);
        return None;
    }
    if small || !cut {
        return None;
    }
    let points = interpolate(&first, &last, n);
    if points.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut start = range.start.clone();
    for p in points {
        out.push(RowRange::between(start, Bound::Excluded(p.clone())));
        start = Bound::Included(p);
    }
    out.push(RowRange::between(start, range.end.clone()));
    Some(out)
}

/// The rows of `range`, when fewer than [`SPLIT_MIN_ROWS`]: a backend
/// without [`FjallStore::probe_rows`](crate::store::FjallStore::probe_rows)
/// reads up to that many rows' newest cell of the first family. What the
/// embedded store's probe tells a plan that reads one partition anyway.
fn count_few_rows(
    store: &Store,
    table: &str,
    families: &[String],
    range: RowRange,
) -> Option<usize> {
    use crate::store::{ReadFilter, ReadRequest, RowSet};
    let family = families.first()?;
    let request = ReadRequest::rows(RowSet::range(range))
        .filter(
            ReadFilter::all()
                .families([family.as_str()])
                .cells_per_column(1),
        )
        .limit(SPLIT_MIN_ROWS);
    let mut rows = store.read_rows(table, request).ok()?;
    let mut count = 0;
    while rows.next_view().ok()?.is_some() {
        count += 1;
    }
    (count < SPLIT_MIN_ROWS).then_some(count)
}

/// Cuts `range` at up to `n - 1` of the keys the backend samples its table
/// at (Bigtable's `SampleRowKeys`: the ends of pieces of about equal
/// size, each with the bytes before it), evenly chosen among those inside
/// the range; `None` when none is, or when the table holds fewer than
/// [`SPLIT_MIN_BYTES`] (small tables are read by one partition, in key
/// order, as on the embedded store).
fn split_at_samples(
    store: &Store,
    table: &str,
    range: RowRange,
    n: usize,
) -> Option<Vec<RowRange>> {
    use std::ops::Bound;
    // Strictly after the start (a piece must not be empty), in the range.
    let inside_range = |key: &Vec<u8>| {
        let after = match &range.start {
            Bound::Included(s) | Bound::Excluded(s) => key > s,
            Bound::Unbounded => true,
        };
        let before = match &range.end {
            Bound::Included(e) => key <= e,
            Bound::Excluded(e) => key < e,
            Bound::Unbounded => true,
        };
        !key.is_empty() && after && before
    };
    let samples = store.sample_row_keys(table).ok()?;
    if samples.last().map_or(0, |(_, bytes)| *bytes) < SPLIT_MIN_BYTES {
        return None;
    }
    let inside: Vec<Vec<u8>> = samples
        .into_iter()
        .map(|(key, _)| key)
        .filter(inside_range)
        .collect();
    if inside.is_empty() {
        return None;
    }
    let mut points: Vec<Vec<u8>> = (1..n)
        .map(|i| inside[(i * inside.len() / n).min(inside.len() - 1)].clone())
        .collect();
    points.dedup();
    let mut out = Vec::with_capacity(points.len() + 1);
    let mut start = range.start.clone();
    for p in points {
        out.push(RowRange::between(start, Bound::Excluded(p.clone())));
        start = Bound::Included(p);
    }
    out.push(RowRange::between(start, range.end));
    Some(out)
}

/// `n - 1` keys strictly between `a` and `b` (a < b), evenly spaced over
/// the eight bytes after their common prefix (fewer where they lie too
/// close). Keys whose bytes there are ASCII are spaced as numbers of
/// eight base-128 digits, so that every point is ASCII text too: spaced
/// over whole bytes, a point between `…1083#…` and `…1084#…` has a byte
/// of 0x80 or more after the `3`, which is not text, and cut back to
/// text (`…1083`) it fell before `a` and the range was not split.
fn interpolate(a: &[u8], b: &[u8], n: usize) -> Vec<Vec<u8>> {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = |k: &[u8]| {
        let mut buf = [0u8; 8];
        for (i, byte) in k.iter().skip(common).take(8).enumerate() {
            buf[i] = *byte;
        }
        buf
    };
    let (ta, tb) = (tail(a), tail(b));
    let ascii = ta.iter().chain(&tb).all(|b| b.is_ascii());
    let radix: u64 = if ascii { 128 } else { 256 };
    let number = |t: &[u8; 8]| t.iter().fold(0u64, |x, &d| x * radix + u64::from(d));
    let digits = |mut x: u64| {
        let mut out = [0u8; 8];
        for d in out.iter_mut().rev() {
            *d = (x % radix) as u8;
            x /= radix;
        }
        out
    };
    let (lo, hi) = (number(&ta), number(&tb));
    let parts = n as u64;
    if hi <= lo || hi - lo < parts * 2 {
        return Vec::new();
    }
    let step = (hi - lo) / parts;
    let mut out: Vec<Vec<u8>> = Vec::new();
    for i in 1..parts {
        let mut key = a[..common].to_vec();
        key.extend(digits(lo + step * i));
        while key.len() > common + 1 && key.last() == Some(&0) {
            key.pop();
        }
        // Text split points, so that the plan can name them (`key_ranges`).
        if let Err(e) = std::str::from_utf8(&key) {
            key.truncate(e.valid_up_to());
        }
        if key.as_slice() > a && key.as_slice() <= b && out.last().is_none_or(|p| *p < key) {
            out.push(key);
        }
    }
    out
}

/// A cell timestamp as an ISO time (UTC), or microseconds when out of range.
pub(crate) fn show_time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || format!("{micros}µs"),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.fZ").to_string(),
    )
}

/// Sorts ranges and merges overlapping ones, so that no row is read twice
/// when ranges are spread over partitions.
fn merge_ranges(ranges: Vec<RowRange>) -> Vec<RowRange> {
    let mut keyed: Vec<(crate::codec::EncodedRange, RowRange)> = ranges
        .into_iter()
        .map(|r| (r.encode(), r))
        .filter(|(e, _)| !e.is_empty())
        .collect();
    keyed.sort_by(|a, b| a.0.start.cmp(&b.0.start));
    let mut out: Vec<(crate::codec::EncodedRange, RowRange)> = Vec::with_capacity(keyed.len());
    for (enc, range) in keyed {
        if let Some((last_enc, last)) = out.last_mut()
            // Overlapping ranges merge; touching ones stay apart (splits).
            && last_enc.end.as_ref().is_none_or(|end| *end > enc.start)
        {
            let extends = match (&last_enc.end, &enc.end) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(a), Some(b)) => b > a,
            };
            if extends {
                last.end = range.end;
                last_enc.end = enc.end;
            }
            continue;
        }
        out.push((enc, range));
    }
    out.into_iter().map(|(_, r)| r).collect()
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
        let sorted = merge_ranges(ranges);
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

    /// The scan of `spec` over these partitions (ranges in key order in
    /// each): what `new` decided, or a part of it a distributed task runs.
    pub(crate) fn from_parts(spec: ScanSpec, partitions: Vec<Vec<RowRange>>) -> Self {
        let schema = Arc::new(
            spec.layout
                .arrow
                .project(&spec.projection)
                .unwrap_or_else(|_| spec.layout.arrow.as_ref().clone()),
        );
        let mut eq = EquivalenceProperties::new(Arc::clone(&schema));
        if let Some(order) = &spec.order
            && partitions.iter().all(|p| one_group(p, &order.groups))
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

#[cfg(test)]
mod tests {
    use super::interpolate;

    #[test]
    fn split_points_lie_strictly_between() {
        let (a, b): (&[u8], &[u8]) = (b"h00#00000000", b"h99#00009999");
        let points = interpolate(a, b, 4);
        assert_eq!(points.len(), 3);
        let mut last = a;
        for p in &points {
            assert!(p.as_slice() > last && p.as_slice() <= b, "{p:?}");
            last = p;
        }
        assert!(interpolate(b"a", b"a\x00", 4).is_empty());
        // Neighbouring text keys split into text between them.
        for (a, b) in [
            (
                &b"europe-west1#1083#2026-01-01-0000"[..],
                &b"europe-west1#1084#2026-01-03-1839"[..],
            ),
            (
                b"europe-west1#1083#2026-01-01-0000",
                b"europe-west1#1092#2026-01-03-1839",
            ),
            (b"a", b"b"),
        ] {
            let points = interpolate(a, b, 2);
            assert_eq!(points.len(), 1, "{a:?} {b:?}");
            let p = &points[0];
            assert!(
                p.as_slice() > a && p.as_slice() <= b && p.is_ascii(),
                "{p:?}"
            );
        }
        // Bytes that are not text still split, over whole bytes.
        let (a, b): (&[u8], &[u8]) = (b"\x10\xff", b"\x90\x00");
        let points = interpolate(a, b, 2);
        assert_eq!(points.len(), 1);
        assert!(
            points[0].as_slice() > a && points[0].as_slice() <= b,
            "{points:?}"
        );
        assert!(interpolate(b"b", b"a", 2).is_empty());
    }
}
