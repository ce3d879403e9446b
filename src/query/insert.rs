//! `InsertExec` writes the rows of an INSERT as row mutations; `DeleteExec`
//! deletes the rows a scan selected.
//!
//! The row key comes from `_key` when given, otherwise it is built from the
//! segment columns (field promotion). Declared columns become cells of their
//! family and qualifier; entries of a family's map column become cells with
//! those qualifiers; aggregate families merge the value in.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Float64Array, Int64Array, MapArray, RecordBatch,
    StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::Result as DfResult;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use super::dml::{blocking, count_batches, count_properties};
use super::to_df;
use super::wide::{ColumnSource, Layout};
use crate::Error;
use crate::schema::{KeyValue, Value};
use crate::store::{FamilyKind, Mutation, RowMutation, Store, now_micros};

/// Writes its input into a table and returns `count`.
pub struct InsertExec {
    store: Store,
    layout: Arc<Layout>,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for InsertExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InsertExec({})", self.layout.table)
    }
}

impl InsertExec {
    pub(crate) fn new(store: Store, layout: Arc<Layout>, input: Arc<dyn ExecutionPlan>) -> Self {
        InsertExec {
            store,
            layout,
            input,
            properties: count_properties(),
        }
    }
}

impl DisplayAs for InsertExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "InsertExec: table={}", self.layout.table)
    }
}

/// One column of the input, typed once per batch.
fn text_at(a: &ArrayRef, row: usize) -> DfResult<Option<String>> {
    if a.is_null(row) {
        return Ok(None);
    }
    let a = cast(a, &DataType::Utf8)?;
    Ok(Some(a.as_string::<i32>().value(row).to_string()))
}

pub(crate) fn value_at(a: &ArrayRef, row: usize) -> Option<Value> {
    if a.is_null(row) {
        return None;
    }
    let any = a.as_any();
    if let Some(a) = any.downcast_ref::<Int64Array>() {
        return Some(Value::Int64(a.value(row)));
    }
    if let Some(a) = any.downcast_ref::<Float64Array>() {
        return Some(Value::Float64(a.value(row)));
    }
    if let Some(a) = any.downcast_ref::<StringArray>() {
        return Some(Value::Text(a.value(row).to_string()));
    }
    if let Some(a) = any.downcast_ref::<BinaryArray>() {
        return Some(Value::Bytes(a.value(row).to_vec()));
    }
    None
}

fn row_mutation(
    layout: &Layout,
    batch: &RecordBatch,
    row: usize,
    timestamp: i64,
) -> crate::Result<RowMutation> {
    let mut key: Option<Vec<u8>> = None;
    let mut segments: Vec<Option<KeyValue>> = layout
        .key
        .as_ref()
        .map_or(Vec::new(), |k| vec![None; k.fields().count()]);
    let mut mutations = Vec::new();
    let df = |e: datafusion::error::DataFusionError| Error::InvalidArgument(e.to_string());
    // An explicit `_timestamp` applies to every cell of the row.
    let explicit = match layout
        .sources
        .iter()
        .position(|s| matches!(s, ColumnSource::Timestamp))
        .map(|i| batch.column(i))
        .filter(|a| !a.is_null(row))
        .and_then(|a| {
            a.as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
                .map(|a| a.value(row))
        }) {
        Some(t) if t < 0 => {
            return Err(Error::InvalidArgument(format!(
                "_timestamp {t} µs is before 1970-01-01; cell timestamps are not negative"
            )));
        }
        other => other,
    };
    let time = CellTime {
        at: explicit.unwrap_or(timestamp),
        explicit: explicit.is_some(),
    };
    for (i, source) in layout.sources.iter().enumerate() {
        let array = batch.column(i);
        if array.is_null(row) {
            continue;
        }
        match source {
            ColumnSource::Key => key = text_at(array, row).map_err(df)?.map(String::into_bytes),
            ColumnSource::Segment(s) => {
                let value = match array.data_type() {
                    DataType::Int64 => Some(KeyValue::Int(
                        array
                            .as_any()
                            .downcast_ref::<Int64Array>()
                            .map_or(0, |a| a.value(row)),
                    )),
                    DataType::Timestamp(TimeUnit::Microsecond, _) => Some(KeyValue::Time(
                        array
                            .as_any()
                            .downcast_ref::<TimestampMicrosecondArray>()
                            .map_or(0, |a| a.value(row)),
                    )),
                    _ => text_at(array, row).map_err(df)?.map(KeyValue::Text),
                };
                segments[*s] = value;
            }
            ColumnSource::Declared(_) | ColumnSource::FamilyMap(_) => {
                mutations.extend(cells_of(layout, source, array, row, time)?);
            }
            ColumnSource::Timestamp => {}
            ColumnSource::Family | ColumnSource::Qualifier | ColumnSource::Value => {
                return Err(Error::InvalidArgument(format!(
                    "the cells view of {} is read-only",
                    layout.table
                )));
            }
        }
    }
    let key = match (key, &layout.key) {
        (Some(k), _) => k,
        (None, Some(schema)) => schema.encode(&segments)?,
        (None, None) => {
            return Err(Error::InvalidArgument(format!(
                "INSERT INTO {} needs a value for _key",
                layout.table
            )));
        }
    };
    if let (Some(schema), false) = (&layout.key, segments.iter().all(Option::is_none)) {
        // Both _key and segments given: they must agree.
        let built = schema.encode(&segments)?;
        if built != key {
            return Err(Error::InvalidArgument(format!(
                "_key {} does not match its segments, which build {}",
                crate::codec::show_bytes(&key),
                crate::codec::show_bytes(&built)
            )));
        }
    }
    if mutations.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "row {} has no non-NULL column to write; a row exists only through its cells",
            crate::codec::show_bytes(&key)
        )));
    }
    Ok(RowMutation::new(key, mutations))
}

/// The cells a non-NULL value of a declared column or a family map writes.
pub(crate) fn cells_of(
    layout: &Layout,
    source: &ColumnSource,
    array: &ArrayRef,
    row: usize,
    timestamp: CellTime,
) -> crate::Result<Vec<Mutation>> {
    let mut mutations = Vec::new();
    match source {
        ColumnSource::Declared(d) if layout.protos[*d].is_some() => {
            let column = &layout.columns[*d];
            if let Some(p) = &layout.protos[*d]
                && !array.is_null(row)
            {
                mutations.push(cell(
                    layout,
                    &column.family,
                    column.qualifier.as_bytes().to_vec(),
                    crate::proto::encode(&p.message, array, row)?,
                    timestamp,
                ));
            }
        }
        ColumnSource::Declared(d) => {
            let column = &layout.columns[*d];
            if let Some(value) = value_at(array, row) {
                mutations.push(cell(
                    layout,
                    &column.family,
                    column.qualifier.as_bytes().to_vec(),
                    column.encode(&value)?,
                    timestamp,
                ));
            }
        }
        ColumnSource::FamilyMap(f) => {
            let family = &layout.def.families[*f].name;
            let Some(map) = array.as_any().downcast_ref::<MapArray>() else {
                return Ok(mutations);
            };
            if map.is_null(row) {
                return Ok(mutations);
            }
            let entries = map.value(row);
            let keys = cast(entries.column(0), &DataType::Utf8)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
            let keys = keys.as_string::<i32>();
            let values = entries.column(1);
            let def = &layout.map_values[*f];
            for j in 0..keys.len() {
                let Some(value) = value_at(values, j) else {
                    continue;
                };
                let qualifier = keys.value(j);
                let bytes = def.encode(&value)?;
                // A map entry under a declared column's qualifier must be a
                // value of that column, or every read of the column fails.
                if let Some(column) = layout
                    .declared_at(family, qualifier.as_bytes())
                    .filter(|&d| layout.protos[d].is_none())
                    .map(|d| &layout.columns[d])
                {
                    column.decode(&bytes).map_err(|why| {
                        Error::InvalidArgument(format!(
                            "the {family} map entry {qualifier:?} is declared column {}: {why}; write it through the column",
                            column.name
                        ))
                    })?;
                }
                mutations.push(cell(
                    layout,
                    family,
                    qualifier.as_bytes().to_vec(),
                    bytes,
                    timestamp,
                ));
            }
        }
        _ => {}
    }
    Ok(mutations)
}

/// When the cells of a write are stamped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CellTime {
    /// The statement's time, or the row's `_timestamp`.
    pub at: i64,
    /// Whether `_timestamp` was given.
    pub explicit: bool,
}

/// A cell write. Aggregate families accumulate into the cell at timestamp
/// 0 unless a `_timestamp` names another accumulator (a time bucket):
/// Bigtable merges AddToCell input into the cell of the same timestamp.
fn cell(
    layout: &Layout,
    family: &str,
    qualifier: Vec<u8>,
    value: Vec<u8>,
    time: CellTime,
) -> Mutation {
    let kind = layout
        .def
        .families
        .iter()
        .find(|f| f.name == family)
        .map_or(FamilyKind::Normal, |f| f.kind);
    if kind == FamilyKind::Normal {
        Mutation::SetCell {
            family: family.to_string(),
            qualifier,
            timestamp: Some(time.at),
            value,
        }
    } else {
        Mutation::AddToCell {
            family: family.to_string(),
            qualifier,
            timestamp: Some(if time.explicit { time.at } else { 0 }),
            input: value,
        }
    }
}

impl ExecutionPlan for InsertExec {
    fn name(&self) -> &str {
        "InsertExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .into_iter()
            .next()
            .unwrap_or_else(|| Arc::clone(&self.input));
        Ok(Arc::new(InsertExec::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            input,
        )))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let store = self.store.clone();
        let layout = Arc::clone(&self.layout);
        let timestamp = now_micros();
        Ok(count_batches(
            Arc::clone(&self.input),
            context,
            move |batch| {
                let store = store.clone();
                let layout = Arc::clone(&layout);
                async move {
                    let rows = (0..batch.num_rows())
                        .map(|r| row_mutation(&layout, &batch, r, timestamp))
                        .collect::<crate::Result<Vec<_>>>()
                        .map_err(to_df)?;
                    blocking("insert", move || {
                        let mut written = 0u64;
                        for r in store.mutate_rows(&layout.table, rows)? {
                            r?;
                            written += 1;
                        }
                        Ok(written)
                    })
                    .await
                }
            },
        ))
    }
}

/// Deletes the rows whose `_key` its input (a scan) produces.
pub struct DeleteExec {
    store: Store,
    table: String,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for DeleteExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeleteExec({})", self.table)
    }
}

impl DeleteExec {
    pub(crate) fn new(store: Store, table: String, input: Arc<dyn ExecutionPlan>) -> Self {
        DeleteExec {
            store,
            table,
            input,
            properties: count_properties(),
        }
    }
}

impl DisplayAs for DeleteExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DeleteExec: table={}", self.table)
    }
}

impl ExecutionPlan for DeleteExec {
    fn name(&self) -> &str {
        "DeleteExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .into_iter()
            .next()
            .unwrap_or_else(|| Arc::clone(&self.input));
        Ok(Arc::new(DeleteExec::new(
            self.store.clone(),
            self.table.clone(),
            input,
        )))
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let store = self.store.clone();
        let table = self.table.clone();
        Ok(count_batches(
            Arc::clone(&self.input),
            context,
            move |batch| {
                let store = store.clone();
                let table = table.clone();
                async move {
                    let keys = cast(batch.column(0), &DataType::Utf8)?;
                    let keys = keys.as_string::<i32>();
                    let rows: Vec<RowMutation> = (0..keys.len())
                        .filter(|i| !keys.is_null(*i))
                        .map(|i| {
                            RowMutation::new(
                                keys.value(i).as_bytes().to_vec(),
                                vec![Mutation::DeleteRow],
                            )
                        })
                        .collect();
                    blocking("delete", move || {
                        let mut deleted = 0u64;
                        for r in store.mutate_rows(&table, rows)? {
                            r?;
                            deleted += 1;
                        }
                        Ok(deleted)
                    })
                    .await
                }
            },
        ))
    }
}
