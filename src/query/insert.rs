//! `InsertExec` writes the rows of an INSERT as row mutations; `DeleteExec`
//! deletes the rows a scan selected.
//!
//! The row key comes from `_key` when given, otherwise it is built from the
//! segment columns (field promotion). Declared columns become cells of their
//! family and qualifier; entries of a family's map column become cells with
//! those qualifiers; aggregate families merge the value in.

use std::collections::HashMap;
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
use datafusion::physical_expr::{LexOrdering, OrderingRequirements, PhysicalExpr};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    PlanProperties, SendableRecordBatchStream,
};

use super::dml::{blocking, count_batches, count_properties};
use super::to_df;
use super::wide::{ColumnSource, Layout};
use crate::Error;
use crate::schema::{KeyValue, Value};
use crate::store::{Mutation, Row, RowMutation, Store, now_micros};

/// Writes its input into a table and returns `count`.
pub struct InsertExec {
    store: Store,
    layout: Arc<Layout>,
    input: Arc<dyn ExecutionPlan>,
    /// The order of the SELECT (its ORDER BY), kept to the writer: a key
    /// repeated in the input takes its last row's values.
    ordering: Option<LexOrdering>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for InsertExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InsertExec({})", self.layout.table)
    }
}

impl InsertExec {
    pub(crate) fn new(store: Store, layout: Arc<Layout>, input: Arc<dyn ExecutionPlan>) -> Self {
        let ordering = input.output_ordering().cloned();
        InsertExec {
            store,
            layout,
            input,
            ordering,
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
    if let Some(a) = any.downcast_ref::<datafusion::arrow::array::BooleanArray>() {
        return Some(Value::Boolean(a.value(row)));
    }
    if let Some(a) = any.downcast_ref::<datafusion::arrow::array::Decimal128Array>() {
        return Some(Value::Decimal(a.value(row)));
    }
    None
}

fn row_mutation(
    layout: &Layout,
    batch: &RecordBatch,
    row: usize,
    timestamp: i64,
) -> crate::Result<(RowMutation, bool)> {
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
                mutations.extend(cells_of(
                    layout,
                    source,
                    array,
                    row,
                    time,
                    Accumulate::Merge,
                )?);
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
    Ok((RowMutation::new(key, mutations), time.explicit))
}

/// How a value written to an aggregate family meets its accumulator.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Accumulate<'a> {
    /// INSERT: merged into the accumulator (Bigtable's AddToCell): the one
    /// at timestamp 0, or at the row's `_timestamp` when given.
    Merge,
    /// UPDATE: replaces the accumulator the new value was computed from,
    /// the column's newest cell in the row as read under its lock (the one
    /// at timestamp 0 when there is none), or the one at `_timestamp`.
    Replace(Option<&'a Row>),
}

/// The cells a non-NULL value of a declared column or a family map writes.
pub(crate) fn cells_of(
    layout: &Layout,
    source: &ColumnSource,
    array: &ArrayRef,
    row: usize,
    timestamp: CellTime,
    accumulate: Accumulate<'_>,
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
                    accumulate,
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
                    accumulate,
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
                    accumulate,
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
/// An UPDATE replaces the accumulator instead (see [`Accumulate`]).
fn cell(
    layout: &Layout,
    family: &str,
    qualifier: Vec<u8>,
    value: Vec<u8>,
    time: CellTime,
    accumulate: Accumulate<'_>,
) -> Mutation {
    if !layout.family_kind(family).is_aggregate() {
        return Mutation::SetCell {
            family: family.to_string(),
            qualifier,
            timestamp: Some(time.at),
            value,
        };
    }
    match accumulate {
        Accumulate::Merge => Mutation::AddToCell {
            family: family.to_string(),
            qualifier,
            timestamp: Some(if time.explicit { time.at } else { 0 }),
            input: value,
        },
        Accumulate::Replace(row) => {
            let at = if time.explicit {
                time.at
            } else {
                row.and_then(|r| r.column(family, &qualifier).next())
                    .map_or(0, |c| c.timestamp)
            };
            Mutation::SetCell {
                family: family.to_string(),
                qualifier,
                timestamp: Some(at),
                value,
            }
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
        Ok(Arc::new(InsertExec {
            store: self.store.clone(),
            layout: Arc::clone(&self.layout),
            input,
            ordering: self.ordering.clone(),
            properties: count_properties(),
        }))
    }

    fn required_input_ordering(&self) -> Vec<Option<OrderingRequirements>> {
        vec![self.ordering.clone().map(Into::into)]
    }

    fn required_input_distribution(&self) -> Vec<Distribution> {
        vec![if self.ordering.is_some() {
            Distribution::SinglePartition
        } else {
            Distribution::UnspecifiedDistribution
        }]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        // Partitions are written one after the other: splitting the input
        // gains nothing and loses its order.
        vec![false]
    }

    fn execute(
        &self,
        _partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let store = self.store.clone();
        let layout = Arc::clone(&self.layout);
        let mut clock = StatementClock::new(now_micros());
        Ok(count_batches(
            Arc::clone(&self.input),
            context,
            move |batch| {
                let store = store.clone();
                let layout = Arc::clone(&layout);
                let rows = clock.stamp(&layout, &batch);
                async move {
                    let rows = rows.map_err(to_df)?;
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

/// The cell times of one INSERT without `_timestamp`: the statement's
/// time, except that a row whose key an earlier row of the statement also
/// wrote gets a later microsecond, so every row written is a version of
/// its own and the last row of a key is the newest (as separate writes
/// would be). Batches are stamped in order, each a microsecond after the
/// last time the one before used, so a repeat in a later batch is later
/// too without remembering every key of a long statement.
struct StatementClock {
    /// The earliest time the next batch may use.
    next: i64,
}

impl StatementClock {
    fn new(start: i64) -> Self {
        StatementClock { next: start }
    }

    /// The row mutations of `batch`, with repeated keys made later.
    fn stamp(&mut self, layout: &Layout, batch: &RecordBatch) -> crate::Result<Vec<RowMutation>> {
        let base = self.next;
        let mut rows = Vec::with_capacity(batch.num_rows());
        let mut implicit = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let (row, explicit) = row_mutation(layout, batch, r, base)?;
            rows.push(row);
            implicit.push(!explicit);
        }
        // Which rows repeat a key of the batch, and how many times before.
        let mut seen: HashMap<&[u8], i64> = HashMap::with_capacity(rows.len());
        let mut later: Vec<(usize, i64)> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            if !implicit[i] {
                continue;
            }
            let n = seen.entry(row.key.as_slice()).or_insert(0);
            if *n > 0 {
                later.push((i, *n));
            }
            *n += 1;
        }
        let mut last = 0;
        for (i, by) in later {
            last = last.max(by);
            for m in &mut rows[i].mutations {
                if let Mutation::SetCell {
                    timestamp: Some(t), ..
                } = m
                {
                    *t = base.saturating_add(by);
                }
            }
        }
        self.next = base.saturating_add(last).saturating_add(1);
        Ok(rows)
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
