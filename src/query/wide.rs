//! `CellarTable`: a table as SQL sees it, in one of its views: wide (one
//! row per row key), versions (one row per row and timestamp) or cells.
//!
//! Columns: `_key`, the row-key segments, the declared qualifier columns
//! (latest cell, decoded by type), and per family a map of its undeclared
//! qualifiers to their latest values, so dynamic qualifiers show up in
//! `SELECT *`.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, MapBuilder, StringBuilder, make_builder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

use super::pushdown;
use super::scan::{KeyScanExec, ScanSpec};
use super::series::columns::ColumnEvents;
use super::series::{SeriesView, bucket_filters, physical_filters};
use super::to_df;
use super::write::update::{RowUpdate, plan_assignments};
use super::write::{Action, EventCells, TableSink, WriteOptions};
use crate::schema::{ColumnDef, FamilyTypes, KeySchema, SegmentKind, TableSchema, ValueType};
use datafusion::datasource::sink::DataSinkExec;
use prost_reflect::MessageDescriptor;

use crate::store::{FamilyKind, QualifierFilter, Store, TableDef, TimeRange};

/// Which shape of a table a provider shows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum View {
    /// One row per row key with the latest cells, as of a time (inclusive,
    /// microseconds) when given.
    Wide {
        /// Only cells written at or before this time.
        as_of: Option<i64>,
    },
    /// One row per (row key, cell timestamp); the latest N cells per column
    /// when given.
    Versions {
        /// Cells per column.
        latest: Option<usize>,
    },
    /// One row per cell, of one family when given.
    Cells {
        /// The family.
        family: Option<String>,
    },
}

/// What a column of a view is.
#[derive(Debug, Clone)]
pub(crate) enum ColumnSource {
    Key,
    Segment(usize),
    Timestamp,
    Declared(usize),
    /// Field `.1` of the message in declared column `.0`, which is not a
    /// column of the view itself (a serialized series' measures).
    ProtoField(usize, usize),
    /// Measure `.0` of a series kept a column per event: the qualifiers
    /// of its rows, which are not columns of the table's other views.
    Metric(usize),
    FamilyMap(usize),
    Family,
    Qualifier,
    Value,
}

/// A protobuf column's message type.
#[derive(Debug, Clone)]
pub(crate) struct ProtoDecl {
    pub message: MessageDescriptor,
    pub null_on_error: bool,
}

/// A table's SQL shape in one view, shared by its scans and writers.
#[derive(Debug)]
pub(crate) struct Layout {
    pub table: String,
    pub def: TableDef,
    pub view: View,
    pub key: Option<KeySchema>,
    pub columns: Vec<ColumnDef>,
    /// Per family (declaration order): how its map values decode.
    pub map_values: Vec<ColumnDef>,
    /// The cells view: how qualifiers and values decode.
    pub cell_types: FamilyTypes,
    /// Per declared column: its message type when it holds protobuf.
    pub protos: Vec<Option<ProtoDecl>>,
    pub sources: Vec<ColumnSource>,
    pub arrow: SchemaRef,
    /// Families by name and their declared qualifiers: what every batch
    /// builder and writer of this layout looks up, made once.
    pub(crate) families: Arc<FamilyIndex>,
    /// Set when the view is a time series' events (the table's default
    /// view when it holds one).
    pub series: Option<SeriesView>,
    /// A series' table as planned against: its scans read it even if a
    /// change of layout replaces it before they run.
    pub pinned: Option<crate::store::Pinned>,
}

/// The family a table function names: exactly, or folded as the DDL folds
/// unquoted names (`cells('quote', 'MD')` is family `md`) when that is
/// unambiguous. Otherwise an error listing the table's families.
fn family_named(def: &TableDef, name: &str) -> crate::error::Result<String> {
    if def.families.iter().any(|f| f.name == name) {
        return Ok(name.to_string());
    }
    let folded: Vec<&str> = def
        .families
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case(name))
        .map(|f| f.name.as_str())
        .collect();
    if let [only] = folded.as_slice() {
        return Ok((*only).to_string());
    }
    let names: Vec<&str> = def.families.iter().map(|f| f.name.as_str()).collect();
    Err(crate::error::Error::InvalidArgument(format!(
        "table {} has no family {name:?}; its families are {}",
        def.name,
        names.join(", ")
    )))
}

pub(crate) fn map_type(values: &DataType) -> DataType {
    let mut builder = MapBuilder::new(None, StringBuilder::new(), make_builder(values, 0));
    builder.finish().data_type().clone()
}

pub(crate) fn value_type(t: ValueType) -> DataType {
    match t {
        ValueType::Int64 => DataType::Int64,
        ValueType::Float64 => DataType::Float64,
        ValueType::Boolean => DataType::Boolean,
        ValueType::Decimal { precision, scale } => {
            DataType::Decimal128(precision, i8::try_from(scale).unwrap_or(i8::MAX))
        }
        ValueType::Text => DataType::Utf8,
        ValueType::Bytes => DataType::Binary,
    }
}

pub(crate) fn segment_type(kind: &SegmentKind) -> DataType {
    match kind {
        SegmentKind::Text | SegmentKind::Padded { .. } => DataType::Utf8,
        SegmentKind::Int { .. } | SegmentKind::Salt { .. } => DataType::Int64,
        SegmentKind::Time { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}

pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

impl Layout {
    /// What a read of numbers asks the store for declared columns
    /// `declared`: each as (its family's place among the `families` read,
    /// or one no family has when its family is not read; its qualifier).
    pub(crate) fn numbers_wanted(
        &self,
        families: &[Arc<str>],
        declared: &[usize],
    ) -> Vec<(usize, Vec<u8>)> {
        declared
            .iter()
            .map(|&d| {
                let def = &self.columns[d];
                let family = families.iter().position(|f| **f == *def.family);
                (
                    family.unwrap_or(usize::MAX),
                    def.qualifier.clone().into_bytes(),
                )
            })
            .collect()
    }

    pub fn new(store: &Store, def: TableDef, mut view: View) -> crate::error::Result<Layout> {
        let schema = TableSchema::of(&def)?;
        if view == (View::Wide { as_of: None })
            && let Some(series) = &schema.series
        {
            let series = series.clone();
            return Self::series(store, def, schema, series);
        }
        if let View::Cells { family: Some(f) } = &mut view {
            *f = family_named(&def, f)?;
        }
        // Nullable only so INSERT may leave it out and build it from the segments;
        // a scan never produces a NULL key.
        let mut fields = vec![Field::new("_key", DataType::Utf8, true)];
        let mut sources = vec![ColumnSource::Key];
        if let Some(key) = &schema.key {
            for (i, name, kind) in key.fields() {
                fields.push(Field::new(name, segment_type(kind), true));
                sources.push(ColumnSource::Segment(i));
            }
        }
        let map_values: Vec<ColumnDef> = def
            .families
            .iter()
            .map(|f| schema.family_types(&f.name).value)
            .collect();
        let cell_types = match &view {
            View::Cells { family: Some(f) } => schema.family_types(f),
            _ => FamilyTypes::untyped(""),
        };
        let protos: Vec<Option<ProtoDecl>> = if schema.columns.iter().any(|c| c.proto.is_some()) {
            let registry = crate::proto::ProtoRegistry::load(store)?;
            schema
                .columns
                .iter()
                .map(|c| {
                    c.proto
                        .as_ref()
                        .map(|p| {
                            registry.message(&p.message).map(|message| ProtoDecl {
                                message,
                                null_on_error: p.null_on_error,
                            })
                        })
                        .transpose()
                })
                .collect::<crate::error::Result<_>>()?
        } else {
            vec![None; schema.columns.len()]
        };
        let timestamp = Field::new("_timestamp", timestamp_type(), true);
        if let View::Cells { .. } = &view {
            fields.push(Field::new("family", DataType::Utf8, true));
            sources.push(ColumnSource::Family);
            fields.push(Field::new(
                "qualifier",
                value_type(cell_types.qualifier.value_type),
                true,
            ));
            sources.push(ColumnSource::Qualifier);
            fields.push(timestamp);
            sources.push(ColumnSource::Timestamp);
            fields.push(Field::new(
                "value",
                value_type(cell_types.value.value_type),
                true,
            ));
            sources.push(ColumnSource::Value);
        } else {
            fields.push(timestamp);
            sources.push(ColumnSource::Timestamp);
            for (i, c) in schema.columns.iter().enumerate() {
                let data_type = match &protos[i] {
                    Some(p) => crate::proto::message_type(&p.message),
                    None => value_type(c.value_type),
                };
                fields.push(Field::new(&c.name, data_type, true));
                sources.push(ColumnSource::Declared(i));
            }
            for (i, f) in def.families.iter().enumerate() {
                let values = value_type(map_values[i].value_type);
                fields.push(Field::new(
                    schema.map_column(&f.name),
                    map_type(&values),
                    true,
                ));
                sources.push(ColumnSource::FamilyMap(i));
            }
        }
        Ok(Layout {
            families: FamilyIndex::of(&def, &schema.columns),
            table: def.name.clone(),
            view,
            key: schema.key,
            columns: schema.columns,
            map_values,
            cell_types,
            protos,
            sources,
            arrow: Arc::new(Schema::new(fields)),
            def,
            series: None,
            pinned: None,
        })
    }

    /// The declared column holding `qualifier` of `family`, if any.
    pub fn declared_at(&self, family: &str, qualifier: &[u8]) -> Option<usize> {
        let declared = &self.families.declared[*self.families.by_name.get(family)?];
        let at = declared
            .binary_search_by(|(q, _)| q.as_slice().cmp(qualifier))
            .ok()?;
        Some(declared[at].1)
    }

    /// The kind of a family (normal when there is no such family).
    pub fn family_kind(&self, family: &str) -> FamilyKind {
        self.def
            .families
            .iter()
            .find(|f| f.name == family)
            .map_or(FamilyKind::Normal, |f| f.kind)
    }

    /// Whether a column is (or is in) an aggregate family.
    pub fn is_aggregate(&self, source: &ColumnSource) -> bool {
        match source {
            ColumnSource::Declared(d) => self.family_kind(&self.columns[*d].family).is_aggregate(),
            ColumnSource::FamilyMap(f) => self.def.families[*f].kind.is_aggregate(),
            _ => false,
        }
    }

    /// The families a set of columns needs; all of them (or the view's
    /// family) when the columns need none in particular.
    pub fn families_for(&self, columns: &[usize]) -> Vec<String> {
        if let View::Cells { family } = &self.view {
            return match family {
                Some(f) => vec![f.clone()],
                None => self.def.families.iter().map(|f| f.name.clone()).collect(),
            };
        }
        let mut out: Vec<String> = Vec::new();
        for &c in columns {
            let family = match &self.sources[c] {
                ColumnSource::Declared(i) => self.columns[*i].family.clone(),
                ColumnSource::FamilyMap(i) => self.def.families[*i].name.clone(),
                _ => continue,
            };
            if !out.contains(&family) {
                out.push(family);
            }
        }
        if out.is_empty() {
            out = self.def.families.iter().map(|f| f.name.clone()).collect();
        }
        out
    }

    /// Whether the scan answers `filter` itself: a deterministic predicate
    /// over columns every scanned row carries without decoding cell values
    /// (key, segments, timestamp, family, qualifier).
    pub fn answers(&self, filter: &Expr) -> bool {
        let refs = filter.column_refs();
        !refs.is_empty()
            && !filter.is_volatile()
            && refs.iter().all(|c| {
                self.arrow.index_of(&c.name).ok().is_some_and(|i| {
                    matches!(
                        self.sources[i],
                        ColumnSource::Key
                            | ColumnSource::Segment(_)
                            | ColumnSource::Timestamp
                            | ColumnSource::Family
                            | ColumnSource::Qualifier
                    )
                })
            })
    }
}

/// A table's families by name, and per family its declared qualifiers.
#[derive(Debug, Default)]
pub(crate) struct FamilyIndex {
    /// Family name -> declaration index.
    pub by_name: HashMap<String, usize>,
    /// Per family (declaration order): its declared qualifiers, sorted,
    /// with their declared column.
    pub declared: Vec<Vec<(Vec<u8>, usize)>>,
}

impl FamilyIndex {
    pub fn of(def: &TableDef, columns: &[ColumnDef]) -> Arc<FamilyIndex> {
        let by_name = def
            .families
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        let mut declared: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); def.families.len()];
        for (d, c) in columns.iter().enumerate() {
            if let Some(f) = def.families.iter().position(|f| f.name == c.family) {
                declared[f].push((c.qualifier.clone().into_bytes(), d));
            }
        }
        for qualifiers in &mut declared {
            qualifiers.sort();
        }
        Arc::new(FamilyIndex { by_name, declared })
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
    let mut key_plan = match bucketed {
        None => pushdown::plan(filters, layout.key.as_ref()),
        Some(s) => {
            let (range, _) = pushdown::time_range(filters, time_column);
            let mut with_buckets = filters.to_vec();
            with_buckets.extend(bucket_filters(s, range));
            pushdown::plan(&with_buckets, layout.key.as_ref())
        }
    };
    let exact_segments = !recheck_all && !key_plan.exact.is_empty();
    let recheck: Vec<Expr> = filters
        .iter()
        .filter(|f| {
            (recheck_all || layout.answers(f))
                && !pushdown::is_exact_key_filter(f)
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
        View::Versions { latest: None } | View::Cells { .. } => {
            let (range, used) = pushdown::time_range(filters, time_column);
            (range, used, None)
        }
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
    let mut families = layout.families_for(&needed_columns);
    // A table's row exists when any family holds a cell of it: its wide
    // and versions views read every family for that, whatever columns
    // the query names (values only where they are used).
    if layout.series.is_none() && !matches!(layout.view, View::Cells { .. }) {
        families = layout.def.families.iter().map(|f| f.name.clone()).collect();
    }
    if let View::Cells { .. } = layout.view
        && let Some(named) = pushdown::families(filters)
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
        && let Some((q, used)) = pushdown::qualifiers(filters)
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
        Some(_) => super::scan::Split {
            pieces: None,
            rows: None,
        },
        None => super::scan::split_ranges(
            store,
            &layout.table,
            &families,
            key_plan.ranges.as_ref(),
            state.config().target_partitions(),
        ),
    };
    let residual_in_time = recheck
        .iter()
        .all(|f| pushdown::time_exact(f, time_column) && time_used.contains(&f.to_string()));
    Ok(ScanSpec {
        splits: split.pieces,
        few_rows: split.rows,
        store: store.clone(),
        layout: Arc::clone(layout),
        projection,
        needed,
        families,
        ranges: key_plan.ranges.clone(),
        pushed: key_plan.used.clone(),
        time,
        time_used,
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
    })
}

/// The DataFusion table provider of one cellar table in one view.
#[derive(Debug)]
pub struct CellarTable {
    store: Store,
    layout: Arc<Layout>,
}

impl CellarTable {
    /// The wide view of `table` as it is defined now.
    pub fn new(store: Store, table: &str) -> crate::error::Result<CellarTable> {
        Self::with_view(store, table, View::Wide { as_of: None })
    }

    /// Writes batches from outside (a file, a Flight ingest), their
    /// columns matched to the table's by name, through the table's sink;
    /// the rows written.
    pub(crate) async fn load(
        &self,
        data: datafusion::physical_plan::SendableRecordBatchStream,
        options: &WriteOptions,
    ) -> DfResult<u64> {
        let sink = TableSink::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            Action::Insert(options.clone()),
            data.schema(),
        );
        sink.insert(data, options).await
    }

    /// The table's shape in its view.
    #[cfg(feature = "ballista")]
    pub(crate) fn layout(&self) -> &Arc<Layout> {
        &self.layout
    }

    /// The store it reads.
    #[cfg(feature = "ballista")]
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A table in a view built already.
    pub(crate) fn from_layout(store: Store, layout: Layout) -> CellarTable {
        CellarTable {
            store,
            layout: Arc::new(layout),
        }
    }

    /// The series kept a column per event this view shows, if it is one.
    fn column_events(&self) -> Option<ColumnEvents<'_>> {
        let series = self.layout.series.as_ref()?;
        series
            .column_per_event()
            .then(|| ColumnEvents::new(&self.store, &self.layout, series))
    }

    /// `table` in `view`.
    pub fn with_view(store: Store, table: &str, view: View) -> crate::error::Result<CellarTable> {
        let pinned = store.pin(table)?;
        let mut layout = Layout::new(&store, pinned.def().clone(), view)?;
        if layout.series.is_some() {
            layout.pinned = Some(pinned);
        }
        Ok(CellarTable {
            store,
            layout: Arc::new(layout),
        })
    }
}

impl CellarTable {
    /// A scan of the `_key` of the rows matching every filter, each
    /// re-checked in the scan: what DELETE and UPDATE act on.
    fn key_scan(&self, state: &dyn Session, filters: &[Expr]) -> DfResult<Arc<KeyScanExec>> {
        let key = self.layout.arrow.index_of("_key")?;
        let spec = scan_spec(
            &self.store,
            &self.layout,
            state,
            Some(vec![key]),
            filters,
            None,
            true,
        )?;
        Ok(Arc::new(KeyScanExec::new(spec)))
    }

    /// DELETE of a series' events: the events matching every filter,
    /// found in the table's versions view, lose their cells.
    async fn delete_events(
        &self,
        series: &SeriesView,
        state: &dyn Session,
        filters: &[Expr],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(events) = self.column_events() {
            let cells = events.cells_of_events(state, filters).await?;
            let sink = TableSink::new(
                self.store.clone(),
                Arc::clone(&self.layout),
                Action::DeleteEvents(EventCells::Qualified(series.def.family.clone())),
                cells.schema(),
            );
            return Ok(Arc::new(DataSinkExec::new(cells, Arc::new(sink), None)));
        }
        let physical = Arc::new(
            Layout::new(
                &self.store,
                self.layout.def.clone(),
                View::Versions { latest: None },
            )
            .map_err(to_df)?,
        );
        let filters = physical_filters(series, filters)?;
        let projection = vec![
            physical.arrow.index_of("_key")?,
            physical.arrow.index_of("_timestamp")?,
        ];
        let spec = scan_spec(
            &self.store,
            &physical,
            state,
            Some(projection),
            &filters,
            None,
            true,
        )?;
        let scan: Arc<dyn ExecutionPlan> = Arc::new(KeyScanExec::new(spec));
        let columns = self
            .layout
            .columns
            .iter()
            .map(|c| (c.family.clone(), c.qualifier.clone().into_bytes()))
            .collect();
        let sink = TableSink::new(
            self.store.clone(),
            physical,
            Action::DeleteEvents(EventCells::Columns(columns)),
            scan.schema(),
        );
        Ok(Arc::new(DataSinkExec::new(scan, Arc::new(sink), None)))
    }

    /// The plan writing `input` through this table's sink.
    fn sink(
        &self,
        action: Action,
        input: Arc<dyn ExecutionPlan>,
        order: Option<datafusion::physical_expr::LexRequirement>,
    ) -> Arc<dyn ExecutionPlan> {
        let sink = TableSink::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            action,
            input.schema(),
        );
        Arc::new(DataSinkExec::new(input, Arc::new(sink), order))
    }

    fn writable(&self, what: &str) -> DfResult<()> {
        if self.layout.series.is_some() {
            return Ok(());
        }
        match self.layout.view {
            View::Wide { as_of: None } => Ok(()),
            _ => Err(to_df(crate::error::Error::InvalidArgument(format!(
                "{what} needs the table {} itself; versions, cells and as-of views are read-only",
                self.layout.table
            )))),
        }
    }
}

#[async_trait]
impl TableProvider for CellarTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.layout.arrow)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters over key columns (and timestamps, families, qualifiers)
        // narrow the read and are re-checked row by row inside the scan:
        // Exact. Others DataFusion applies. Events kept a column per event
        // are gathered from several rows: filters on the series key and
        // time narrow the gather, which checks them on the events; those
        // on measures DataFusion checks.
        if let Some(events) = self.column_events() {
            return Ok(filters
                .iter()
                .map(|f| {
                    if events.per_cell(f) {
                        TableProviderFilterPushDown::Exact
                    } else {
                        TableProviderFilterPushDown::Inexact
                    }
                })
                .collect());
        }
        Ok(filters
            .iter()
            .map(|f| {
                if self.layout.answers(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Inexact
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if let Some(events) = self.column_events() {
            return events.scan(state, projection, filters, limit).await;
        }
        let spec = scan_spec(
            &self.store,
            &self.layout,
            state,
            projection.cloned(),
            filters,
            limit,
            false,
        )?;
        Ok(Arc::new(KeyScanExec::new(spec)))
    }

    async fn delete_from(
        &self,
        state: &dyn Session,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("DELETE FROM")?;
        if let Some(series) = &self.layout.series {
            return self.delete_events(series, state, &filters).await;
        }
        let scan = self.key_scan(state, &filters)?;
        Ok(self.sink(Action::Delete, scan, None))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("UPDATE")?;
        if let Some(series) = &self.layout.series {
            return Err(to_df(crate::error::Error::InvalidArgument(format!(
                "UPDATE of series {}: INSERT the events again instead; an event written at a stored \
                 ({}, {}) replaces the measures it gives",
                self.layout.table,
                series.def.key.join(", "),
                series.def.time
            ))));
        }
        let layout = &self.layout;
        // The columns read afresh under each row's lock: those the
        // assignments and the WHERE clause use, and the key.
        let key = layout.arrow.index_of("_key")?;
        let mut needed = vec![false; layout.sources.len()];
        needed[key] = true;
        for e in assignments.iter().map(|(_, e)| e).chain(&filters) {
            for c in e.column_refs() {
                if let Ok(i) = layout.arrow.index_of(&c.name) {
                    needed[i] = true;
                }
            }
        }
        // An assignment to an aggregate family replaces the accumulator it
        // reads: the newest cell of the column, whose timestamp it keeps.
        for (name, _) in &assignments {
            if let Ok(i) = layout.arrow.index_of(name)
                && layout.is_aggregate(&layout.sources[i])
            {
                needed[i] = true;
            }
        }
        let filter = match filters.iter().cloned().reduce(Expr::and) {
            None => None,
            Some(e) => {
                let df_schema = DFSchema::try_from(layout.arrow.as_ref().clone())?;
                Some(state.create_physical_expr(e, &df_schema)?)
            }
        };
        let assignments = plan_assignments(layout, state, assignments)?;
        // The scan selects candidate keys; each is checked again when locked.
        let scan = self.key_scan(state, &filters)?;
        let update = RowUpdate::new(
            self.store.clone(),
            Arc::clone(layout),
            assignments,
            filter,
            needed,
        );
        Ok(self.sink(Action::Update(Arc::new(update)), scan, None))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("INSERT INTO")?;
        if insert_op != InsertOp::Append {
            return Err(to_df(crate::error::Error::InvalidArgument(format!(
                "{insert_op} is not supported; cellar tables take INSERT INTO (writes new cells)"
            ))));
        }
        // The order of the SELECT (its ORDER BY) is kept to the writer: a
        // key repeated in the input takes its last row's values.
        let order = input.output_ordering().cloned().map(Into::into);
        Ok(self.sink(Action::Insert(WriteOptions::default()), input, order))
    }
}
