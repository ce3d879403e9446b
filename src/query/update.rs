//! `UpdateExec`: UPDATE writes new cells for the assigned columns of the
//! rows a scan selected. `SET n = n + k` on a binary BIGINT column and
//! `SET s = s || 'x'` on a text or bytes column run as atomic
//! read-modify-write operations (absent values count as 0 or empty, as in
//! Bigtable); every other assignment is evaluated on the row as read and
//! written as a new cell. Assigning NULL deletes the column's cells.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};

use super::dml::{blocking, count_batches, count_properties};
use super::insert::{CellTime, cells_of};
use super::to_df;
use super::wide::{ColumnSource, Layout};
use crate::Error;
use crate::schema::{Encoding, ValueType};
use crate::store::{Mutation, ReadModifyWrite, RowMutation, Store, TimeRange, now_micros};

/// One assignment of an UPDATE, planned.
#[derive(Debug, Clone)]
pub(crate) enum Assignment {
    /// A new value for a declared column or family map.
    Value {
        column: usize,
        expr: Arc<dyn PhysicalExpr>,
    },
    /// The timestamp of the cells written.
    Timestamp(Arc<dyn PhysicalExpr>),
    /// Atomic `n = n + delta`.
    Increment { declared: usize, delta: i64 },
    /// Atomic `s = s || suffix`.
    Append { declared: usize, suffix: Vec<u8> },
}

fn strip_casts(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip_casts(&c.expr),
        Expr::TryCast(c) => strip_casts(&c.expr),
        other => other,
    }
}

fn is_column_named(e: &Expr, name: &str) -> bool {
    matches!(strip_casts(e), Expr::Column(c) if c.name == name)
}

fn literal(e: &Expr) -> Option<&ScalarValue> {
    match strip_casts(e) {
        Expr::Literal(v, _) => Some(v),
        _ => None,
    }
}

/// `name + k` or `k + name` or `name - k` with an integer literal.
fn increment_of(e: &Expr, name: &str) -> Option<i64> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = strip_casts(e) else {
        return None;
    };
    let int = |v: &ScalarValue| {
        v.cast_to(&DataType::Int64).ok().and_then(|v| match v {
            ScalarValue::Int64(Some(n)) => Some(n),
            _ => None,
        })
    };
    match op {
        Operator::Plus if is_column_named(left, name) => literal(right).and_then(int),
        Operator::Plus if is_column_named(right, name) => literal(left).and_then(int),
        Operator::Minus if is_column_named(left, name) => {
            literal(right).and_then(int).and_then(i64::checked_neg)
        }
        _ => None,
    }
}

/// `name || 'suffix'`.
fn append_of(e: &Expr, name: &str) -> Option<Vec<u8>> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = strip_casts(e) else {
        return None;
    };
    if *op != Operator::StringConcat || !is_column_named(left, name) {
        return None;
    }
    match literal(right)? {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
        | ScalarValue::LargeUtf8(Some(s)) => Some(s.clone().into_bytes()),
        ScalarValue::Binary(Some(b)) | ScalarValue::BinaryView(Some(b)) => Some(b.clone()),
        _ => None,
    }
}

/// Plans the assignments of an UPDATE of `layout`'s table.
pub(crate) fn plan_assignments(
    layout: &Layout,
    state: &dyn Session,
    assignments: Vec<(String, Expr)>,
) -> DfResult<Vec<Assignment>> {
    let df_schema = DFSchema::try_from(layout.arrow.as_ref().clone())?;
    let mut out = Vec::new();
    for (name, expr) in assignments {
        let expr = unnormalize_col(expr);
        let Ok(column) = layout.arrow.index_of(&name) else {
            let names: Vec<&str> = layout
                .arrow
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect();
            return Err(to_df(Error::InvalidArgument(format!(
                "UPDATE {}: no column named {name}; columns are {}",
                layout.table,
                names.join(", ")
            ))));
        };
        let physical = || state.create_physical_expr(expr.clone(), &df_schema);
        out.push(match &layout.sources[column] {
            ColumnSource::Key | ColumnSource::Segment(_) => {
                return Err(to_df(Error::InvalidArgument(format!(
                    "UPDATE cannot change the row key ({name}); INSERT the row under its new key and DELETE the old one"
                ))));
            }
            ColumnSource::Timestamp => Assignment::Timestamp(physical()?),
            ColumnSource::Declared(d) => {
                let def = &layout.columns[*d];
                let binary_int = def.value_type == ValueType::Int64 && def.encoding == Encoding::Binary;
                let bytes_like = matches!(def.value_type, ValueType::Text | ValueType::Bytes);
                let aggregate = layout
                    .def
                    .families
                    .iter()
                    .any(|f| f.name == def.family && f.kind != crate::store::FamilyKind::Normal);
                match (increment_of(&expr, &name), append_of(&expr, &name)) {
                    (Some(delta), _) if binary_int && !aggregate => Assignment::Increment { declared: *d, delta },
                    (_, Some(suffix)) if bytes_like && !aggregate => Assignment::Append { declared: *d, suffix },
                    _ => Assignment::Value { column, expr: physical()? },
                }
            }
            ColumnSource::FamilyMap(_) => Assignment::Value { column, expr: physical()? },
            ColumnSource::Family | ColumnSource::Qualifier | ColumnSource::Value => {
                return Err(to_df(Error::InvalidArgument(format!(
                    "UPDATE {}: {name} is not writable",
                    layout.table
                ))));
            }
        });
    }
    Ok(out)
}

/// Applies planned assignments to the rows of its input (a scan of every
/// column) and returns `count`.
pub struct UpdateExec {
    store: Store,
    layout: Arc<Layout>,
    assignments: Vec<Assignment>,
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for UpdateExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UpdateExec({})", self.layout.table)
    }
}

impl UpdateExec {
    pub(crate) fn new(
        store: Store,
        layout: Arc<Layout>,
        assignments: Vec<Assignment>,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        UpdateExec {
            store,
            layout,
            assignments,
            input,
            properties: count_properties(),
        }
    }
}

impl DisplayAs for UpdateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let shown: Vec<String> = self
            .assignments
            .iter()
            .map(|a| match a {
                Assignment::Value { column, expr } => {
                    format!("{} = {expr}", self.layout.arrow.field(*column).name())
                }
                Assignment::Timestamp(expr) => format!("_timestamp = {expr}"),
                Assignment::Increment { declared, delta } => {
                    format!(
                        "{} += {delta} (atomic)",
                        self.layout.columns[*declared].name
                    )
                }
                Assignment::Append { declared, suffix } => format!(
                    "{} ||= {} (atomic)",
                    self.layout.columns[*declared].name,
                    crate::codec::show_bytes(suffix)
                ),
            })
            .collect();
        write!(
            f,
            "UpdateExec: table={}, set=[{}]",
            self.layout.table,
            shown.join(", ")
        )
    }
}

/// The mutations and read-modify-write rules of one selected row.
fn row_changes(
    layout: &Layout,
    assignments: &[Assignment],
    values: &[Option<ArrayRef>],
    timestamps: Option<&TimestampMicrosecondArray>,
    row: usize,
    now: i64,
) -> crate::Result<(Vec<Mutation>, Vec<ReadModifyWrite>)> {
    let timestamp = match timestamps {
        Some(t) if !t.is_null(row) && t.value(row) < 0 => {
            return Err(Error::InvalidArgument(format!(
                "_timestamp {} µs is before 1970-01-01; cell timestamps are not negative",
                t.value(row)
            )));
        }
        Some(t) if !t.is_null(row) => CellTime {
            at: t.value(row),
            explicit: true,
        },
        _ => CellTime {
            at: now,
            explicit: false,
        },
    };
    let mut mutations = Vec::new();
    let mut rules = Vec::new();
    for (a, value) in assignments.iter().zip(values) {
        match (a, value) {
            (Assignment::Value { column, .. }, Some(array)) => {
                let source = &layout.sources[*column];
                if array.is_null(row) {
                    match source {
                        ColumnSource::Declared(d) => {
                            let def = &layout.columns[*d];
                            mutations.push(Mutation::DeleteCells {
                                family: def.family.clone(),
                                qualifier: def.qualifier.clone().into_bytes(),
                                time_range: TimeRange::ALL,
                            });
                        }
                        _ => {
                            return Err(Error::InvalidArgument(format!(
                                "UPDATE {}: a family map cannot be set to NULL; delete its columns with NULL map values",
                                layout.table
                            )));
                        }
                    }
                } else {
                    mutations.extend(cells_of(layout, source, array, row, timestamp)?);
                }
            }
            (Assignment::Increment { declared, delta }, _) => {
                let def = &layout.columns[*declared];
                rules.push(ReadModifyWrite::Increment {
                    family: def.family.clone(),
                    qualifier: def.qualifier.clone().into_bytes(),
                    delta: *delta,
                });
            }
            (Assignment::Append { declared, suffix }, _) => {
                let def = &layout.columns[*declared];
                rules.push(ReadModifyWrite::Append {
                    family: def.family.clone(),
                    qualifier: def.qualifier.clone().into_bytes(),
                    suffix: suffix.clone(),
                });
            }
            _ => {}
        }
    }
    Ok((mutations, rules))
}

impl ExecutionPlan for UpdateExec {
    fn name(&self) -> &str {
        "UpdateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        for a in &self.assignments {
            if let Assignment::Value { expr, .. } | Assignment::Timestamp(expr) = a
                && f(expr)? == TreeNodeRecursion::Stop
            {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
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
        Ok(Arc::new(UpdateExec::new(
            self.store.clone(),
            Arc::clone(&self.layout),
            self.assignments.clone(),
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
        let assignments = Arc::new(self.assignments.clone());
        let now = now_micros();
        Ok(count_batches(
            Arc::clone(&self.input),
            context,
            move |batch| {
                let store = store.clone();
                let layout = Arc::clone(&layout);
                let assignments = Arc::clone(&assignments);
                async move {
                    let (bulk, rmw) = batch_changes(&layout, &assignments, &batch, now)?;
                    let rows = batch.num_rows() as u64;
                    blocking("update", move || {
                        for r in store.mutate_rows(&layout.table, bulk)? {
                            r?;
                        }
                        for (key, rules) in rmw {
                            store.read_modify_write(&layout.table, &key, rules)?;
                        }
                        Ok(rows)
                    })
                    .await
                }
            },
        ))
    }
}

/// Rows to mutate in bulk, and rows to read-modify-write with their rules.
type Changes = (Vec<RowMutation>, Vec<(Vec<u8>, Vec<ReadModifyWrite>)>);

/// The row mutations and read-modify-write rules an UPDATE makes of one
/// batch of selected rows.
fn batch_changes(
    layout: &Layout,
    assignments: &[Assignment],
    batch: &RecordBatch,
    now: i64,
) -> DfResult<Changes> {
    let rows = batch.num_rows();
    let mut values: Vec<Option<ArrayRef>> = Vec::with_capacity(assignments.len());
    let mut timestamps = None;
    for a in assignments {
        match a {
            Assignment::Value { column, expr } => {
                let array = expr.evaluate(batch)?.into_array(rows)?;
                values.push(Some(cast(&array, layout.arrow.field(*column).data_type())?));
            }
            Assignment::Timestamp(expr) => {
                let array = expr.evaluate(batch)?.into_array(rows)?;
                let target = layout
                    .arrow
                    .field(layout.arrow.index_of("_timestamp")?)
                    .data_type()
                    .clone();
                timestamps = Some(cast(&array, &target)?);
                values.push(None);
            }
            _ => values.push(None),
        }
    }
    let timestamps = timestamps.as_ref().map(|t| {
        t.as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>()
            .clone()
    });
    let keys = cast(batch.column(0), &DataType::Utf8)?;
    let keys = keys.as_string::<i32>();
    let mut bulk = Vec::new();
    let mut rmw = Vec::new();
    for r in 0..rows {
        let key = keys.value(r).as_bytes().to_vec();
        let (mutations, rules) =
            row_changes(layout, assignments, &values, timestamps.as_ref(), r, now)
                .map_err(to_df)?;
        if !mutations.is_empty() {
            bulk.push(RowMutation::new(key.clone(), mutations));
        }
        if !rules.is_empty() {
            rmw.push((key, rules));
        }
    }
    Ok((bulk, rmw))
}
