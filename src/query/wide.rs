//! `WideTable`: the table as SQL sees it, one row per row key.
//!
//! Columns: `_key`, the row-key segments, the declared qualifier columns
//! (latest cell, decoded by type), and per family a map of its undeclared
//! qualifiers to their latest values, so dynamic qualifiers show up in
//! `SELECT *`.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, BinaryBuilder, Float64Builder, Int64Builder, MapBuilder, StringBuilder,
    TimestampMicrosecondBuilder, new_null_array,
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
use crate::schema::{ColumnDef, KeySchema, SegmentKind, TableSchema, ValueType};
use crate::store::{Row, Store, TableDef};

/// What a column of the wide view is.
#[derive(Debug, Clone)]
pub(crate) enum ColumnSource {
    Key,
    Segment(usize),
    Declared(usize),
    FamilyMap(usize),
}

/// A table's SQL shape, shared by its scans and writers.
#[derive(Debug)]
pub(crate) struct Layout {
    pub table: String,
    pub def: TableDef,
    pub key: Option<KeySchema>,
    pub columns: Vec<ColumnDef>,
    pub sources: Vec<ColumnSource>,
    pub arrow: SchemaRef,
}

fn map_type() -> DataType {
    MapBuilder::new(None, StringBuilder::new(), BinaryBuilder::new())
        .finish()
        .data_type()
        .clone()
}

fn value_type(t: ValueType) -> DataType {
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

impl Layout {
    pub fn new(def: TableDef) -> crate::Result<Layout> {
        let schema = TableSchema::of(&def)?;
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
        for (i, c) in schema.columns.iter().enumerate() {
            fields.push(Field::new(&c.name, value_type(c.value_type), true));
            sources.push(ColumnSource::Declared(i));
        }
        for (i, f) in def.families.iter().enumerate() {
            fields.push(Field::new(&f.name, map_type(), true));
            sources.push(ColumnSource::FamilyMap(i));
        }
        Ok(Layout {
            table: def.name.clone(),
            key: schema.key,
            columns: schema.columns,
            sources,
            arrow: Arc::new(Schema::new(fields)),
            def,
        })
    }

    /// The families a set of columns needs; all of them when the columns
    /// need none (the row keys alone).
    pub fn families_for(&self, columns: &[usize]) -> Vec<String> {
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
    /// over key columns only.
    pub fn answers(&self, filter: &Expr) -> bool {
        let refs = filter.column_refs();
        !refs.is_empty()
            && !filter.is_volatile()
            && refs.iter().all(|c| self.is_key_column(&c.name))
    }

    /// Whether column `c` is `_key` or a segment.
    pub fn is_key_column(&self, name: &str) -> bool {
        self.arrow.index_of(name).ok().is_some_and(|i| {
            matches!(
                self.sources[i],
                ColumnSource::Key | ColumnSource::Segment(_)
            )
        })
    }
}

/// Builds record batches of the wide view from store rows.
pub(crate) struct WideBatchBuilder {
    layout: Arc<Layout>,
    needed: Vec<bool>,
    key: StringBuilder,
    segments: Vec<Builder>,
    declared: Vec<Builder>,
    maps: Vec<MapBuilder<StringBuilder, BinaryBuilder>>,
    declared_by_column: HashMap<(String, Vec<u8>), usize>,
    family_index: HashMap<String, usize>,
    rows: usize,
    pub misfits: usize,
}

enum Builder {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bytes(BinaryBuilder),
    Time(TimestampMicrosecondBuilder),
}

impl Builder {
    fn new(t: &DataType) -> Builder {
        match t {
            DataType::Int64 => Builder::Int(Int64Builder::new()),
            DataType::Float64 => Builder::Float(Float64Builder::new()),
            DataType::Binary => Builder::Bytes(BinaryBuilder::new()),
            DataType::Timestamp(..) => Builder::Time(TimestampMicrosecondBuilder::new()),
            _ => Builder::Text(StringBuilder::new()),
        }
    }

    fn null(&mut self) {
        match self {
            Builder::Text(b) => b.append_null(),
            Builder::Int(b) => b.append_null(),
            Builder::Float(b) => b.append_null(),
            Builder::Bytes(b) => b.append_null(),
            Builder::Time(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Bytes(b) => Arc::new(b.finish()),
            Builder::Time(b) => Arc::new(b.finish()),
        }
    }
}

impl WideBatchBuilder {
    pub fn new(layout: Arc<Layout>, needed: Vec<bool>) -> Self {
        let segments = layout
            .key
            .as_ref()
            .map(|k| {
                k.fields()
                    .map(|(_, _, kind)| Builder::new(&segment_type(kind)))
                    .collect()
            })
            .unwrap_or_default();
        let declared = layout
            .columns
            .iter()
            .map(|c| Builder::new(&value_type(c.value_type)))
            .collect();
        let maps = layout
            .def
            .families
            .iter()
            .map(|_| MapBuilder::new(None, StringBuilder::new(), BinaryBuilder::new()))
            .collect();
        let declared_by_column = layout
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| ((c.family.clone(), c.qualifier.clone().into_bytes()), i))
            .collect();
        let family_index = layout
            .def
            .families
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        WideBatchBuilder {
            layout,
            needed,
            key: StringBuilder::new(),
            segments,
            declared,
            maps,
            declared_by_column,
            family_index,
            rows: 0,
            misfits: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    /// Adds one row (its cells: latest first per column).
    pub fn push(&mut self, row: &Row) -> crate::Result<()> {
        self.rows += 1;
        self.key.append_value(String::from_utf8_lossy(&row.key));
        if let Some(key) = &self.layout.key {
            match key.decode(&row.key) {
                Some(values) => {
                    for (b, v) in self.segments.iter_mut().zip(values) {
                        match (b, v) {
                            (Builder::Text(b), crate::schema::KeyValue::Text(t)) => {
                                b.append_value(t)
                            }
                            (Builder::Int(b), crate::schema::KeyValue::Int(n)) => b.append_value(n),
                            (Builder::Time(b), crate::schema::KeyValue::Time(n)) => {
                                b.append_value(n)
                            }
                            (b, _) => b.null(),
                        }
                    }
                }
                None => {
                    self.misfits += 1;
                    self.segments.iter_mut().for_each(Builder::null);
                }
            }
        }
        let mut declared: Vec<Option<&[u8]>> = vec![None; self.declared.len()];
        let mut last: Option<(&str, &[u8])> = None;
        for cell in &row.cells {
            let column = (&*cell.family, cell.qualifier.as_slice());
            if last == Some(column) {
                continue; // an older version
            }
            last = Some(column);
            if let Some(&i) = self
                .declared_by_column
                .get(&(cell.family.to_string(), cell.qualifier.clone()))
            {
                declared[i] = Some(&cell.value);
            } else if let Some(&f) = self.family_index.get(&*cell.family)
                && self.needed[self.map_column(f)]
            {
                let map = &mut self.maps[f];
                map.keys()
                    .append_value(String::from_utf8_lossy(&cell.qualifier));
                map.values().append_value(&cell.value);
            }
        }
        for (i, (b, value)) in self.declared.iter_mut().zip(declared).enumerate() {
            match value {
                None => b.null(),
                Some(bytes) => match self.layout.columns[i]
                    .decode(bytes)
                    .map_err(crate::Error::InvalidArgument)?
                {
                    crate::schema::Value::Int64(n) => match b {
                        Builder::Int(b) => b.append_value(n),
                        b => b.null(),
                    },
                    crate::schema::Value::Float64(n) => match b {
                        Builder::Float(b) => b.append_value(n),
                        b => b.null(),
                    },
                    crate::schema::Value::Text(t) => match b {
                        Builder::Text(b) => b.append_value(t),
                        b => b.null(),
                    },
                    crate::schema::Value::Bytes(v) => match b {
                        Builder::Bytes(b) => b.append_value(v),
                        b => b.null(),
                    },
                },
            }
        }
        for map in &mut self.maps {
            map.append(true)
                .map_err(|e| crate::Error::InvalidArgument(e.to_string()))?;
        }
        Ok(())
    }

    fn map_column(&self, family: usize) -> usize {
        1 + self.segments.len() + self.declared.len() + family
    }

    /// The rows so far as a batch of the full wide schema; columns not
    /// needed are all-null.
    pub fn finish(&mut self) -> DfResult<RecordBatch> {
        let rows = std::mem::take(&mut self.rows);
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.sources.len());
        for (i, source) in self.layout.sources.iter().enumerate() {
            let array: ArrayRef = match source {
                ColumnSource::Key => Arc::new(self.key.finish()),
                ColumnSource::Segment(s) => self.segments[*s].finish(),
                ColumnSource::Declared(d) => self.declared[*d].finish(),
                ColumnSource::FamilyMap(f) => Arc::new(self.maps[*f].finish()),
            };
            columns.push(if self.needed[i] {
                array
            } else {
                new_null_array(self.layout.arrow.field(i).data_type(), rows)
            });
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
    let key_plan = pushdown::plan(filters, layout.key.as_ref());
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
    let residual = match recheck.iter().cloned().reduce(Expr::and) {
        None => None,
        Some(e) => {
            let df_schema = DFSchema::try_from(layout.arrow.as_ref().clone())?;
            Some(state.create_physical_expr(e, &df_schema)?)
        }
    };
    Ok(ScanSpec {
        store: store.clone(),
        layout: Arc::clone(layout),
        projection,
        needed,
        families: layout.families_for(&needed_columns),
        ranges: key_plan.ranges,
        pushed: key_plan.used,
        residual,
        residual_text: recheck.iter().map(ToString::to_string).collect(),
        limit,
        batch_size: state.config().batch_size(),
        target_partitions: state.config().target_partitions(),
    })
}

/// The DataFusion table provider of one cellar table.
#[derive(Debug)]
pub struct WideTable {
    store: Store,
    layout: Arc<Layout>,
}

impl WideTable {
    /// The provider for `table` as it is defined now.
    pub fn new(store: Store, table: &str) -> crate::Result<WideTable> {
        let def = store.table(table)?;
        Ok(WideTable {
            store,
            layout: Arc::new(Layout::new(def)?),
        })
    }
}

#[async_trait]
impl TableProvider for WideTable {
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
        // Filters over key columns are answered by key ranges and re-checked
        // row by row inside the scan: Exact. Others DataFusion applies.
        Ok(filters
            .iter()
            .map(|f| {
                let refs = f.column_refs();
                let volatile = f.is_volatile();
                if !refs.is_empty()
                    && !volatile
                    && refs.iter().all(|c| self.layout.is_key_column(&c.name))
                {
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
        // Every filter is re-checked in the scan, so only matching rows come out.
        let key = self.layout.arrow.index_of("_key")?;
        let spec = scan_spec(
            &self.store,
            &self.layout,
            state,
            Some(vec![key]),
            &filters,
            None,
            true,
        )?;
        let scan = Arc::new(KeyScanExec::new(spec));
        Ok(Arc::new(DeleteExec::new(
            self.store.clone(),
            self.layout.table.clone(),
            scan,
        )))
    }

    async fn insert_into(
        &self,
        _state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
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
