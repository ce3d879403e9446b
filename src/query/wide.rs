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
use datafusion::arrow::array::{
    Array, ArrayBuilder, ArrayRef, BinaryBuilder, Float64Builder, Int64Builder, MapBuilder,
    StringBuilder, TimestampMicrosecondBuilder, make_builder, new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::insert::{DeleteExec, InsertExec};
use super::pushdown;
use super::scan::{KeyScanExec, ScanSpec};
use super::to_df;
use super::update::{UpdateExec, plan_assignments};
use crate::codec::show_bytes;
use crate::schema::{
    ColumnDef, FamilyTypes, KeySchema, KeyValue, SegmentKind, TableSchema, Value, ValueType,
    decode_as,
};
use prost_reflect::MessageDescriptor;

use crate::proto::{FieldMask, PValue};
use crate::store::{Cell, QualifierFilter, Row, Store, TableDef, TimeRange};

/// Which shape of a table a provider shows.
#[derive(Debug, Clone, PartialEq)]
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
    /// family -> qualifier -> declared column.
    declared_at: HashMap<String, HashMap<Vec<u8>, usize>>,
}

pub(crate) fn map_type(values: &DataType) -> DataType {
    let mut builder = MapBuilder::new(None, StringBuilder::new(), make_builder(values, 0));
    builder.finish().data_type().clone()
}

pub(crate) fn value_type(t: ValueType) -> DataType {
    match t {
        ValueType::Int64 => DataType::Int64,
        ValueType::Float64 => DataType::Float64,
        ValueType::Text => DataType::Utf8,
        ValueType::Bytes => DataType::Binary,
    }
}

fn segment_type(kind: &SegmentKind) -> DataType {
    match kind {
        SegmentKind::Text => DataType::Utf8,
        SegmentKind::Int { .. } | SegmentKind::Salt { .. } => DataType::Int64,
        SegmentKind::Time { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

impl Layout {
    pub fn new(store: &Store, def: TableDef, view: View) -> crate::Result<Layout> {
        let schema = TableSchema::of(&def)?;
        if let View::Cells { family: Some(f) } = &view
            && !def.families.iter().any(|d| &d.name == f)
        {
            return Err(crate::Error::FamilyNotFound {
                table: def.name.clone(),
                family: f.clone(),
            });
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
                .collect::<crate::Result<_>>()?
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
                fields.push(Field::new(&f.name, map_type(&values), true));
                sources.push(ColumnSource::FamilyMap(i));
            }
        }
        let mut declared_at: HashMap<String, HashMap<Vec<u8>, usize>> = HashMap::new();
        for (i, c) in schema.columns.iter().enumerate() {
            declared_at
                .entry(c.family.clone())
                .or_default()
                .insert(c.qualifier.clone().into_bytes(), i);
        }
        Ok(Layout {
            declared_at,
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
        })
    }

    /// The declared column holding `qualifier` of `family`, if any.
    pub fn declared_at(&self, family: &str, qualifier: &[u8]) -> Option<usize> {
        self.declared_at.get(family)?.get(qualifier).copied()
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

/// One value on its way into a builder.
#[derive(Clone, Copy)]
enum Datum<'a> {
    Int(i64),
    Float(f64),
    Text(&'a str),
    Bytes(&'a [u8]),
    Time(i64),
}

impl<'a> Datum<'a> {
    fn of(value: &'a Value) -> Datum<'a> {
        match value {
            Value::Int64(n) => Datum::Int(*n),
            Value::Float64(f) => Datum::Float(*f),
            Value::Text(t) => Datum::Text(t),
            Value::Bytes(b) => Datum::Bytes(b),
        }
    }

    fn key(value: &'a KeyValue) -> Datum<'a> {
        match value {
            KeyValue::Text(t) => Datum::Text(t),
            KeyValue::Int(n) => Datum::Int(*n),
            KeyValue::Time(n) => Datum::Time(*n),
        }
    }
}

/// Appends to a builder made by `make_builder` for one of our types; a
/// value of another type, or `None`, appends NULL.
fn put(builder: &mut dyn ArrayBuilder, value: Option<Datum>) {
    let any = builder.as_any_mut();
    if let Some(b) = any.downcast_mut::<StringBuilder>() {
        match value {
            Some(Datum::Text(t)) => b.append_value(t),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<Int64Builder>() {
        match value {
            Some(Datum::Int(n)) => b.append_value(n),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<Float64Builder>() {
        match value {
            Some(Datum::Float(f)) => b.append_value(f),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<BinaryBuilder>() {
        match value {
            Some(Datum::Bytes(v)) => b.append_value(v),
            _ => b.append_null(),
        }
    } else if let Some(b) = any.downcast_mut::<TimestampMicrosecondBuilder>() {
        match value {
            Some(Datum::Time(n)) => b.append_value(n),
            _ => b.append_null(),
        }
    }
}

type MapColumn = MapBuilder<StringBuilder, Box<dyn ArrayBuilder>>;

/// Builds record batches of a view from store rows.
pub(crate) struct ViewBatchBuilder {
    layout: Arc<Layout>,
    needed: Vec<bool>,
    /// One per column; `None` for maps and for columns not needed.
    builders: Vec<Option<Box<dyn ArrayBuilder>>>,
    maps: Vec<Option<MapColumn>>,
    ts_column: Option<usize>,
    /// Whether any segment column is wanted (else keys are not decoded).
    segments_needed: bool,
    family_index: HashMap<String, usize>,
    /// Decoded protobuf values of needed proto columns, and their masks.
    proto_values: HashMap<usize, Vec<PValue>>,
    proto_masks: HashMap<usize, FieldMask>,
    /// Column index of each segment, declared column and family map.
    segment_columns: Vec<usize>,
    declared_columns: Vec<usize>,
    map_columns: Vec<usize>,
    rows: usize,
    pub misfits: usize,
    /// Cells that did not decode, by output row of the current batch: an
    /// error only if the row survives the scan's own predicate.
    pub errors: Vec<(usize, crate::Error)>,
}

impl ViewBatchBuilder {
    pub fn new(
        layout: Arc<Layout>,
        needed: Vec<bool>,
        proto_masks: &HashMap<usize, FieldMask>,
    ) -> Self {
        let mut builders = Vec::new();
        let mut proto_values = HashMap::new();
        let mut masks = HashMap::new();
        let mut maps = Vec::new();
        let (mut segment_columns, mut declared_columns, mut map_columns) =
            (Vec::new(), Vec::new(), Vec::new());
        for (i, source) in layout.sources.iter().enumerate() {
            match source {
                ColumnSource::Segment(_) => segment_columns.push(i),
                ColumnSource::Declared(_) => declared_columns.push(i),
                ColumnSource::FamilyMap(_) => map_columns.push(i),
                _ => {}
            }
            if let ColumnSource::FamilyMap(f) = source {
                let values = value_type(layout.map_values[*f].value_type);
                maps.push(needed[i].then(|| {
                    MapBuilder::new(None, StringBuilder::new(), make_builder(&values, 0))
                }));
                builders.push(None);
            } else if let ColumnSource::Declared(d) = source
                && layout.protos[*d].is_some()
            {
                maps.push(None);
                builders.push(None);
                if needed[i] {
                    proto_values.insert(i, Vec::new());
                    masks.insert(i, proto_masks.get(&i).cloned().unwrap_or_default());
                }
            } else {
                maps.push(None);
                builders
                    .push(needed[i].then(|| make_builder(layout.arrow.field(i).data_type(), 0)));
            }
        }
        let ts_column = layout
            .sources
            .iter()
            .position(|s| matches!(s, ColumnSource::Timestamp));
        let family_index = layout
            .def
            .families
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        ViewBatchBuilder {
            segments_needed: segment_columns.iter().any(|c| needed[*c]),
            layout,
            needed,
            builders,
            maps,
            ts_column,
            family_index,
            proto_values,
            proto_masks: masks,
            segment_columns,
            declared_columns,
            map_columns,
            rows: 0,
            misfits: 0,
            errors: Vec::new(),
        }
    }

    /// Output rows so far.
    pub fn len(&self) -> usize {
        self.rows
    }

    fn put(&mut self, column: usize, value: Option<Datum>) {
        if let Some(b) = &mut self.builders[column] {
            put(b.as_mut(), value);
        }
    }

    /// The key and segment columns of one output row.
    fn start_row(&mut self, key: &str, segments: Option<&[KeyValue]>) {
        self.rows += 1;
        self.put(0, Some(Datum::Text(key)));
        for s in 0..self.segment_columns.len() {
            let column = self.segment_columns[s];
            self.put(column, segments.and_then(|v| v.get(s)).map(Datum::key));
        }
    }

    fn decode_error(row: &Row, e: String) -> crate::Error {
        crate::Error::InvalidArgument(format!("row {}: {e}", crate::codec::show_bytes(&row.key)))
    }

    /// Adds the output rows of one store row (its cells: by family,
    /// qualifier, newest first).
    pub fn push(&mut self, row: &Row) -> crate::Result<()> {
        let key = if self.needed[0] {
            String::from_utf8_lossy(&row.key)
        } else {
            std::borrow::Cow::Borrowed("")
        };
        let segments = match &self.layout.key {
            Some(schema) if self.segments_needed => {
                let decoded = schema.decode(&row.key);
                if decoded.is_none() {
                    self.misfits += 1;
                }
                decoded
            }
            _ => None,
        };
        let ts_column = self.ts_column;
        let layout = Arc::clone(&self.layout);
        match &layout.view {
            View::Wide { .. } => {
                self.start_row(&key, segments.as_deref());
                if let Some(c) = ts_column {
                    let newest = row.cells.iter().map(|c| c.timestamp).max();
                    self.put(c, newest.map(Datum::Time));
                }
                let mut last: Option<(&str, &[u8])> = None;
                let latest: Vec<&Cell> = row
                    .cells
                    .iter()
                    .filter(|cell| {
                        let column = (&*cell.family, cell.qualifier.as_slice());
                        let first = last != Some(column);
                        last = Some(column);
                        first
                    })
                    .collect();
                self.columns_of(row, &latest)?;
            }
            View::Versions { .. } => {
                // Newest first; a stable sort keeps each timestamp's cells in
                // column order.
                let mut by_time: Vec<&Cell> = row.cells.iter().collect();
                by_time.sort_by_key(|c| std::cmp::Reverse(c.timestamp));
                for cells in by_time.chunk_by(|a, b| a.timestamp == b.timestamp) {
                    self.start_row(&key, segments.as_deref());
                    if let Some(c) = ts_column {
                        self.put(c, Some(Datum::Time(cells[0].timestamp)));
                    }
                    self.columns_of(row, cells)?;
                }
            }
            View::Cells { .. } => {
                let column = |s: fn(&ColumnSource) -> bool| layout.sources.iter().position(s);
                let family = column(|s| matches!(s, ColumnSource::Family));
                let qualifier = column(|s| matches!(s, ColumnSource::Qualifier));
                let value = column(|s| matches!(s, ColumnSource::Value));
                let (q_type, v_type) = (&layout.cell_types.qualifier, &layout.cell_types.value);
                let fail = |what: String, why: &str, bytes: &[u8]| {
                    Self::decode_error(row, format!("{what} {why}: {}", show_bytes(bytes)))
                };
                for cell in &row.cells {
                    self.start_row(&key, segments.as_deref());
                    if let Some(c) = family {
                        self.put(c, Some(Datum::Text(&cell.family)));
                    }
                    if let Some(c) = ts_column {
                        self.put(c, Some(Datum::Time(cell.timestamp)));
                    }
                    if let Some(c) = qualifier.filter(|c| self.needed[*c]) {
                        let q = decode_as(q_type.value_type, q_type.encoding, &cell.qualifier)
                            .map_err(|why| {
                                fail(
                                    format!("a qualifier of family {}", cell.family),
                                    why,
                                    &cell.qualifier,
                                )
                            })?;
                        self.put(c, Some(Datum::of(&q)));
                    }
                    if let Some(c) = value.filter(|c| self.needed[*c]) {
                        let v = decode_as(v_type.value_type, v_type.encoding, &cell.value)
                            .map_err(|why| {
                                fail(
                                    format!(
                                        "the value of {}:{}",
                                        cell.family,
                                        show_bytes(&cell.qualifier)
                                    ),
                                    why,
                                    &cell.value,
                                )
                            })?;
                        self.put(c, Some(Datum::of(&v)));
                    }
                }
            }
        }
        Ok(())
    }

    /// Declared columns and family maps of one output row from its cells
    /// (at most one per column).
    fn columns_of(&mut self, row: &Row, cells: &[&Cell]) -> crate::Result<()> {
        let mut declared: Vec<Option<&[u8]>> = vec![None; self.declared_columns.len()];
        for cell in cells {
            if let Some(i) = self.layout.declared_at(&cell.family, &cell.qualifier) {
                declared[i] = Some(&cell.value);
            } else if let Some(&f) = self.family_index.get(&*cell.family)
                && let Some(map) = &mut self.maps[self.map_columns[f]]
            {
                let value = self.layout.map_values[f].decode(&cell.value).map_err(|e| {
                    Self::decode_error(
                        row,
                        format!(
                            "{e} (qualifier {})",
                            crate::codec::show_bytes(&cell.qualifier)
                        ),
                    )
                })?;
                map.keys()
                    .append_value(String::from_utf8_lossy(&cell.qualifier));
                put(map.values().as_mut(), Some(Datum::of(&value)));
            }
        }
        for (i, bytes) in declared.into_iter().enumerate() {
            let column = self.declared_columns[i];
            if !self.needed[column] {
                continue;
            }
            if let Some(values) = self.proto_values.get_mut(&column) {
                let value = match (bytes, &self.layout.protos[i]) {
                    (Some(bytes), Some(p)) => {
                        let all = FieldMask::all();
                        let mask = self.proto_masks.get(&column).unwrap_or(&all);
                        match crate::proto::decode(&p.message, bytes, mask) {
                            Ok(v) => v,
                            Err(_) if p.null_on_error => PValue::Null,
                            Err(e) => {
                                let e = format!("column {}: {e}", self.layout.columns[i].name);
                                self.errors
                                    .push((self.rows - 1, Self::decode_error(row, e)));
                                PValue::Null
                            }
                        }
                    }
                    _ => PValue::Null,
                };
                values.push(value);
                continue;
            }
            match bytes {
                None => self.put(column, None),
                Some(bytes) => match self.layout.columns[i].decode(bytes) {
                    Ok(value) => self.put(column, Some(Datum::of(&value))),
                    Err(e) => {
                        let fix = format!(
                            "{e}; UPDATE {} SET {} = NULL WHERE _key = '{}' removes the bad value",
                            self.layout.table,
                            self.layout.columns[i].name,
                            String::from_utf8_lossy(&row.key).replace('\'', "''")
                        );
                        self.errors
                            .push((self.rows - 1, Self::decode_error(row, fix)));
                        self.put(column, None);
                    }
                },
            }
        }
        for map in self.maps.iter_mut().flatten() {
            map.append(true)
                .map_err(|e| crate::Error::InvalidArgument(e.to_string()))?;
        }
        Ok(())
    }

    /// The rows so far as a batch of the full view schema; columns not
    /// needed are all-null.
    pub fn finish(&mut self) -> DfResult<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.sources.len());
        for i in 0..self.layout.sources.len() {
            let array: Option<ArrayRef> = match (&mut self.builders[i], &mut self.maps[i]) {
                (Some(b), _) => Some(b.finish()),
                (None, Some(m)) => Some(Arc::new(m.finish())),
                (None, None) => match self.proto_values.get_mut(&i) {
                    Some(values) => Some(
                        crate::proto::to_array(
                            self.layout.arrow.field(i).data_type(),
                            &std::mem::take(values),
                        )
                        .map_err(to_df)?,
                    ),
                    None => None,
                },
            };
            columns.push(
                array.unwrap_or_else(|| {
                    new_null_array(self.layout.arrow.field(i).data_type(), rows)
                }),
            );
        }
        Ok(RecordBatch::try_new(
            Arc::clone(&self.layout.arrow),
            columns,
        )?)
    }
}

/// Plans a scan: key ranges from the filters, the columns to build, the
/// families to read, and the predicate the scan re-checks on every row
/// (the key-column filters; all filters when `recheck_all`).
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
    let recheck: Vec<Expr> = filters
        .iter()
        .filter(|f| recheck_all || layout.answers(f))
        .cloned()
        .collect();
    let mut key_plan = pushdown::plan(filters, layout.key.as_ref());
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
            let (range, used) = pushdown::time_range(filters);
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
    let splits = match limit {
        Some(_) => None,
        None => super::scan::split_ranges(
            store,
            &layout.table,
            &families,
            key_plan.ranges.as_ref(),
            state.config().target_partitions(),
        ),
    };
    Ok(ScanSpec {
        splits,
        store: store.clone(),
        layout: Arc::clone(layout),
        projection,
        needed,
        families,
        ranges: key_plan.ranges,
        pushed: key_plan.used,
        time,
        time_used,
        cells_per_column,
        qualifiers: qualifiers.0,
        qualifiers_used: qualifiers.1,
        proto_masks: HashMap::new(),
        residual,
        residual_text: recheck.iter().map(ToString::to_string).collect(),
        limit,
        reverse: false,
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
    pub fn new(store: Store, table: &str) -> crate::Result<CellarTable> {
        Self::with_view(store, table, View::Wide { as_of: None })
    }

    /// `table` in `view`.
    pub fn with_view(store: Store, table: &str, view: View) -> crate::Result<CellarTable> {
        let def = store.table(table)?;
        let layout = Arc::new(Layout::new(&store, def, view)?);
        Ok(CellarTable { store, layout })
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

    fn writable(&self, what: &str) -> DfResult<()> {
        match self.layout.view {
            View::Wide { as_of: None } => Ok(()),
            _ => Err(to_df(crate::Error::InvalidArgument(format!(
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
        // Exact. Others DataFusion applies.
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
        let scan = self.key_scan(state, &filters)?;
        Ok(Arc::new(DeleteExec::new(
            self.store.clone(),
            self.layout.table.clone(),
            scan,
        )))
    }

    async fn update(
        &self,
        state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("UPDATE")?;
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
        Ok(Arc::new(UpdateExec::new(
            self.store.clone(),
            Arc::clone(layout),
            assignments,
            filter,
            needed,
            scan,
        )))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.writable("INSERT INTO")?;
        if insert_op != InsertOp::Append {
            return Err(to_df(crate::Error::InvalidArgument(format!(
                "{insert_op} is not supported; cellar tables take INSERT INTO (writes new cells)"
            ))));
        }
        Ok(Arc::new(InsertExec::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            input,
        )))
    }
}
