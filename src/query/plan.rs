//! Planning a scan: what the filters make of it (key ranges, the time
//! range, the families and qualifiers to read, the predicate re-checked
//! per row), built into a [`ScanSpec`].

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::PhysicalExpr;

use super::pushdown;
use super::series::bucket_filters;
use super::view::{Layout, View};
use crate::schema::{KeyOrder, ValueType};
use crate::store::{QualifierFilter, RowRange, Store, TimeRange};

/// The view's columns a scan outputs and their schema, made together
/// and checked, so that no operator has a shape to fall back from.
#[derive(Clone, Debug)]
pub(crate) struct Projection {
    columns: Vec<usize>,
    schema: SchemaRef,
}

impl Projection {
    /// Columns `columns` of `layout`'s view; an error names a column the
    /// view does not have.
    pub(crate) fn new(layout: &Layout, columns: Vec<usize>) -> DfResult<Self> {
        let schema = Arc::new(layout.arrow.project(&columns)?);
        Ok(Projection { columns, schema })
    }

    /// The view's columns, in output order.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.columns
    }

    /// The output's schema.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

/// Everything a scan needs, decided at planning time.
#[derive(Clone)]
pub(crate) struct ScanSpec {
    pub store: Store,
    pub layout: Arc<Layout>,
    /// The view's columns the scan outputs.
    pub projection: Projection,
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
    pub proto_masks: HashMap<usize, crate::proto::FieldMask>,
    /// Family map columns (by index) of which the query reads only these
    /// keys (`family['q']`): the other cells are not decoded.
    pub map_keys: HashMap<usize, BTreeSet<String>>,
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

/// Plans a scan: key ranges from the filters, the columns to build, the
/// families to read, and the predicate the scan re-checks on every row
/// (the key-column filters the ranges do not answer exactly; all such
/// filters when `recheck_all`).
pub(crate) fn scan_spec(
    store: &Store,
    layout: &Arc<Layout>,
    state: &dyn Session,
    projection: Option<Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
    recheck_all: bool,
) -> DfResult<ScanSpec> {
    scan_spec_answering(
        store,
        layout,
        state,
        projection,
        filters,
        limit,
        recheck_all,
    )
    .map(|(spec, _)| spec)
}

/// What a [`ScanSpec`] did with the filters it was given, as expressions
/// (the spec keeps only their text, for EXPLAIN): a planner that reads
/// through the scan decides by these which filters it must check itself.
pub(crate) struct Answered {
    /// The filters the cell time range was drawn from.
    pub time: Vec<Expr>,
    /// The filters the scan checks row by row (the others the key ranges
    /// answer exactly).
    pub rechecked: Vec<Expr>,
}

/// [`scan_spec`], with what it did with each filter.
pub(crate) fn scan_spec_answering(
    store: &Store,
    layout: &Arc<Layout>,
    state: &dyn Session,
    projection: Option<Vec<usize>>,
    filters: &[Expr],
    limit: Option<usize>,
    recheck_all: bool,
) -> DfResult<(ScanSpec, Answered)> {
    let projection: Vec<usize> = projection.unwrap_or_else(|| (0..layout.sources.len()).collect());
    // Filters the key ranges answer exactly are not re-checked: no `_key`
    // text is built per row for them.
    // Segment filters the ranges answer exactly are not re-checked either;
    // the scan then drops rows whose key does not fit the schema (their
    // segments read as NULL, which those filters would turn away).
    // A series in bucket rows: its time predicates narrow the cell times
    // and, through the bucket they fall in, the key ranges.
    let bucketed = layout.series.as_ref().filter(|s| s.bucketed());
    let time_column = bucketed.map_or("_timestamp", |s| s.def.time.as_str());
    // One pass over the filters; a series' buckets then narrow the keys.
    let mut bounds = pushdown::Bounds::of(filters, layout.key.as_ref(), time_column);
    if let Some(s) = bucketed {
        for f in bucket_filters(s, bounds.time_range()) {
            bounds.add_key_filter(&f);
        }
    }
    let found = bounds.finish();
    let mut key_plan = found.keys;
    let exact_segments = !recheck_all && !key_plan.exact.is_empty();
    let recheck: Vec<Expr> = filters
        .iter()
        .filter(|f| {
            (recheck_all || layout.answers(f))
                && !key_plan.exact_keys.contains(f)
                && (recheck_all || !key_plan.exact.contains(f))
        })
        .cloned()
        .collect();
    let (time, time_used, cells_per_column) = match &layout.view {
        View::Wide { as_of } => (
            TimeRange {
                start: 0,
                end: as_of.map(|t| t.saturating_add(1).max(0)),
            },
            Vec::new(),
            Some(1),
        ),
        // Latest N is taken before SQL filters apply, so a time predicate
        // is only re-checked, never pushed, there.
        View::Versions { latest: Some(n) } => (TimeRange::ALL, Vec::new(), Some(*n)),
        View::Versions { latest: None } | View::Cells { .. } => (found.time, found.time_used, None),
    };
    let mut needed = vec![false; layout.sources.len()];
    for &p in &projection {
        needed[p] = true;
    }
    for f in &recheck {
        for c in f.column_refs() {
            if let Ok(i) = layout.arrow.index_of(&c.name) {
                needed[i] = true;
            }
        }
    }
    let needed_columns: Vec<usize> = (0..needed.len()).filter(|i| needed[*i]).collect();
    let (families, qualifiers) = families_read(
        layout,
        found.families,
        found.qualifiers,
        &needed_columns,
        &mut key_plan,
    );
    if time.end.is_some_and(|end| end <= time.start) {
        key_plan.ranges = Some(Vec::new());
    }
    let residual = match recheck.iter().cloned().reduce(Expr::and) {
        None => None,
        Some(e) => {
            let df_schema = DFSchema::try_from(layout.arrow.as_ref().clone())?;
            Some(state.create_physical_expr(e, &df_schema)?)
        }
    };
    let split = match limit {
        Some(_) => super::split::Split {
            pieces: None,
            rows: None,
        },
        None => super::split::split_ranges(
            store,
            &layout.table,
            &families,
            key_plan.ranges.as_ref(),
            state.config().target_partitions(),
        ),
    };
    let residual_in_time = recheck
        .iter()
        .all(|f| pushdown::time_exact(f, time_column) && time_used.contains(f));
    let spec = ScanSpec {
        splits: split.pieces,
        few_rows: split.rows,
        store: store.clone(),
        layout: Arc::clone(layout),
        projection: Projection::new(layout, projection)?,
        needed,
        families,
        ranges: key_plan.ranges.clone(),
        pushed: key_plan.used.clone(),
        time,
        time_used: time_used.iter().map(ToString::to_string).collect(),
        cells_per_column,
        qualifiers: qualifiers.0,
        qualifiers_used: qualifiers.1,
        proto_masks: HashMap::new(),
        map_keys: HashMap::new(),
        residual,
        residual_text: recheck.iter().map(ToString::to_string).collect(),
        residual_in_time,
        drop_misfits: exact_segments,
        limit,
        reverse: false,
        order: key_plan.order,
        by_group: false,
        batch_size: state.config().batch_size(),
        target_partitions: state.config().target_partitions(),
    };
    let answered = Answered {
        time: time_used,
        rechecked: recheck,
    };
    Ok((spec, answered))
}

/// The families a scan reads and the qualifiers it reads of them (with
/// the predicate that chose them), for the columns it needs: a table's
/// wide and versions views read every family (a row exists when any holds
/// a cell of it), the cells view those its filters name, a series its
/// measures' cells only.
fn families_read(
    layout: &Layout,
    named_families: Option<Vec<String>>,
    named_qualifiers: Option<(QualifierFilter, String)>,
    needed_columns: &[usize],
    key_plan: &mut pushdown::KeyPlan,
) -> (Vec<String>, (QualifierFilter, Option<String>)) {
    let mut families = layout.families_for(needed_columns);
    // A table's row exists when any family holds a cell of it: its wide
    // and versions views read every family for that, whatever columns
    // the query names (values only where they are used).
    if layout.series.is_none() && !matches!(layout.view, View::Cells { .. }) {
        families = layout.def.families.iter().map(|f| f.name.clone()).collect();
    }
    if let View::Cells { .. } = layout.view
        && let Some(named) = named_families
    {
        families.retain(|f| named.contains(f));
        key_plan
            .used
            .push(format!("family IN ({})", named.join(", ")));
        if families.is_empty() {
            key_plan.ranges = Some(Vec::new());
        }
    }
    let mut qualifiers = (QualifierFilter::All, None);
    if let View::Cells { .. } = layout.view
        && layout.cell_types.qualifier.encoding == crate::schema::Encoding::Binary
        && matches!(
            layout.cell_types.qualifier.value_type,
            ValueType::Text | ValueType::Bytes
        )
        && let Some((q, used)) = named_qualifiers
    {
        qualifiers = (q, Some(used));
    }
    // A series reads only its measures' cells: another tool's cell in
    // its family is no event (nor, at a time of its own, one of NULLs).
    if layout.series.is_some() {
        let declared = layout
            .columns
            .iter()
            .map(|c| c.qualifier.clone().into_bytes())
            .collect();
        qualifiers.0 = QualifierFilter::Set(declared);
    }
    (families, qualifiers)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests fail loudly on purpose"
    )]

    use super::*;
    use crate::store::{FamilySpec, TableSpec};

    #[test]
    fn a_projection_of_a_column_the_view_lacks_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let def = store
            .create_table(TableSpec::new("t").family(FamilySpec::new("cf")))
            .unwrap();
        let layout = Layout::new(&store, def, View::Wide { as_of: None }).unwrap();
        let all = layout.arrow.fields().len();
        let p = Projection::new(&layout, vec![0]).unwrap();
        assert_eq!(p.columns(), [0]);
        assert_eq!(p.schema().field(0).name(), "_key");
        let e = Projection::new(&layout, vec![0, all + 5])
            .unwrap_err()
            .to_string();
        assert!(e.contains(&(all + 5).to_string()), "{e}");
    }
}
