//! `UpdateExec`: UPDATE writes new cells for the assigned columns of the
//! rows a scan selected.
//!
//! Every row is updated atomically: under the row's lock the store reads
//! the columns the statement uses afresh, the WHERE clause is checked
//! again on them, the assignments are computed from them, and all of the
//! row's new cells commit together (`Store::update_rows`). So `SET n = n *
//! 2` from many clients at once loses no update, whatever the column's
//! encoding. `SET n = n + k` on a BIGINT column and `SET s = s || 'x'` on a
//! text or bytes column count an absent value as 0 or empty, as Bigtable's
//! increments and appends do, and an increment that overflows is an error
//! naming the column and the row. Assigning NULL deletes the column's cells.
//! A column of an aggregate family is assigned, not merged: `SET total =
//! total + 5` replaces the accumulator it read with the sum (INSERT is what
//! adds input to an accumulator).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int64Array, MapArray, RecordBatch,
    TimestampMicrosecondArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Int64Type, TimestampMicrosecondType};
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result as DfResult, ScalarValue};
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};
use datafusion::physical_expr::PhysicalExpr;

use super::encode::check_map_entry;
use super::values::Values;
use crate::error::Error;
use crate::query::batch::ViewBatchBuilder;
use crate::query::checked::arithmetic;
use crate::query::view::{ColumnSource, Layout};
use crate::schema::{Value, ValueType};
use crate::store::{Mutation, ReadFilter, Row, Store, TimeRange, align_up, now_micros};

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
    /// `n = n + delta` (an absent value counts as 0; overflow is an
    /// error); `column` is the declared column's place in the view.
    Increment {
        declared: usize,
        column: usize,
        delta: i128,
    },
    /// Atomic `s = s || suffix`.
    Append {
        declared: usize,
        column: usize,
        suffix: Vec<u8>,
    },
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
fn increment_of(e: &Expr, name: &str) -> Option<i128> {
    let (left, op, right) = arithmetic(strip_casts(e))?;
    let int = |v: &ScalarValue| {
        v.cast_to(&DataType::Int64).ok().and_then(|v| match v {
            ScalarValue::Int64(Some(n)) => Some(n),
            _ => None,
        })
    };
    match op {
        Operator::Plus if is_column_named(left, name) => {
            literal(right).and_then(int).map(i128::from)
        }
        Operator::Plus if is_column_named(right, name) => {
            literal(left).and_then(int).map(i128::from)
        }
        // i64::MIN negated fits an i128.
        Operator::Minus if is_column_named(left, name) => {
            literal(right).and_then(int).map(|k| -i128::from(k))
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
            return Err(Error::InvalidArgument(format!(
                "UPDATE {}: no column named {name}; columns are {}",
                layout.table,
                names.join(", ")
            ))
            .into());
        };
        let physical = || state.create_physical_expr(expr.clone(), &df_schema);
        out.push(match &layout.sources[column] {
            ColumnSource::Key | ColumnSource::Segment(_) => {
                return Err(Error::InvalidArgument(format!(
                    "UPDATE cannot change the row key ({name}); INSERT the row under its new key and DELETE the old one"
                )).into());
            }
            ColumnSource::Timestamp => Assignment::Timestamp(physical()?),
            ColumnSource::Declared(d) => {
                let def = &layout.columns[*d];
                let int = def.value_type == ValueType::Int64 && def.proto.is_none();
                let bytes_like = matches!(def.value_type, ValueType::Text | ValueType::Bytes)
                    && def.proto.is_none();
                let aggregate = layout.is_aggregate(&layout.sources[column]);
                match (increment_of(&expr, &name), append_of(&expr, &name)) {
                    (Some(delta), _) if int && !aggregate => Assignment::Increment { declared: *d, column, delta },
                    (_, Some(suffix)) if bytes_like && !aggregate => Assignment::Append { declared: *d, column, suffix },
                    _ => Assignment::Value { column, expr: physical()? },
                }
            }
            ColumnSource::FamilyMap(_) => Assignment::Value { column, expr: physical()? },
            ColumnSource::Family
            | ColumnSource::Qualifier
            | ColumnSource::Value
            | ColumnSource::ProtoField(..)
            | ColumnSource::Metric(_) => {
                return Err(Error::InvalidArgument(format!(
                    "UPDATE {}: {name} is not writable",
                    layout.table
                )).into());
            }
        });
    }
    Ok(out)
}

/// What an assignment brings to each row of a batch, typed once per batch.
enum Evaluated {
    /// Nothing per row (`_timestamp` is carried separately).
    Nothing,
    /// The new values of a column.
    Values(ArrayRef),
    /// The current values of an incremented column.
    Ints(Int64Array),
    /// The current values of an appended column, as bytes.
    Bytes(BinaryArray),
}

/// The mutations of one row, from its values as read under its lock.
fn row_changes(
    layout: &Layout,
    assignments: &[Assignment],
    (values, timestamps): &(Vec<Evaluated>, Option<TimestampMicrosecondArray>),
    key: &[u8],
    row: usize,
    read: Option<&Row>,
    now: i64,
) -> crate::error::Result<Vec<Mutation>> {
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
    for (a, value) in assignments.iter().zip(values) {
        match (a, value) {
            (Assignment::Value { column, .. }, Evaluated::Values(array)) => {
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
                    mutations.extend(cells_of(layout, source, array, row, timestamp, read)?);
                }
            }
            (
                Assignment::Increment {
                    declared, delta, ..
                },
                Evaluated::Ints(old),
            ) => {
                let def = &layout.columns[*declared];
                let old = if old.is_null(row) { 0 } else { old.value(row) };
                let new = i64::try_from(i128::from(old) + delta).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "UPDATE {}: {} = {old} {} {} overflows BIGINT in row {}; nothing was written to the row",
                        layout.table,
                        def.name,
                        if *delta < 0 { "-" } else { "+" },
                        delta.unsigned_abs(),
                        crate::codec::show_bytes(key)
                    ))
                })?;
                mutations.push(set_cell(def, def.encode(&Value::Int64(new))?, timestamp));
            }
            (
                Assignment::Append {
                    declared, suffix, ..
                },
                Evaluated::Bytes(old),
            ) => {
                let def = &layout.columns[*declared];
                let mut bytes = if old.is_null(row) {
                    Vec::new()
                } else {
                    old.value(row).to_vec()
                };
                bytes.extend_from_slice(suffix);
                if def.value_type == ValueType::Text && std::str::from_utf8(&bytes).is_err() {
                    return Err(Error::InvalidArgument(format!(
                        "UPDATE {}: appending to text column {} must leave UTF-8 text",
                        layout.table, def.name
                    )));
                }
                mutations.push(set_cell(def, bytes, timestamp));
            }
            _ => {}
        }
    }
    Ok(mutations)
}

/// A new cell of a declared column (of a normal family: increments and
/// appends are not planned on aggregates).
fn set_cell(def: &crate::schema::ColumnDef, value: Vec<u8>, time: CellTime) -> Mutation {
    Mutation::SetCell {
        family: def.family.clone(),
        qualifier: def.qualifier.clone().into_bytes(),
        timestamp: Some(time.at),
        value,
    }
}

/// What one UPDATE does to each row, run under the rows' locks.
#[derive(Debug)]
pub(crate) struct RowUpdate {
    store: Store,
    layout: Arc<Layout>,
    assignments: Vec<Assignment>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// What is read of each row under its lock: the families of `needed`.
    read: ReadFilter,
    needed: Vec<bool>,
    /// When the statement started.
    started: i64,
}

/// The read of the columns an UPDATE uses (none but the key: no read).
fn read_filter(layout: &Layout, needed: &[bool]) -> ReadFilter {
    let value_columns: Vec<usize> = (0..needed.len())
        .filter(|&c| {
            needed[c]
                && matches!(
                    layout.sources[c],
                    ColumnSource::Declared(_)
                        | ColumnSource::FamilyMap(_)
                        | ColumnSource::Timestamp
                )
        })
        .collect();
    let families = if value_columns.is_empty() {
        Vec::new()
    } else if value_columns
        .iter()
        .any(|&c| matches!(layout.sources[c], ColumnSource::Timestamp))
    {
        // `_timestamp` is the newest cell of the whole row.
        layout.def.families.iter().map(|f| f.name.clone()).collect()
    } else {
        layout.families_for(&value_columns)
    };
    ReadFilter::latest().families(families)
}

impl RowUpdate {
    /// The update of `layout`'s rows by `assignments`, for rows the
    /// `filter` still selects when read under their locks; `needed`: the
    /// columns the assignments and the filter read.
    pub fn new(
        store: Store,
        layout: Arc<Layout>,
        assignments: Vec<Assignment>,
        filter: Option<Arc<dyn PhysicalExpr>>,
        needed: Vec<bool>,
    ) -> Self {
        RowUpdate {
            read: read_filter(&layout, &needed),
            store,
            layout,
            assignments,
            filter,
            needed,
            started: now_micros(),
        }
    }

    /// The assignments as EXPLAIN shows them.
    pub fn shown(&self) -> String {
        let shown: Vec<String> = self
            .assignments
            .iter()
            .map(|a| match a {
                Assignment::Value { column, expr } => {
                    format!("{} = {expr}", self.layout.arrow.field(*column).name())
                }
                Assignment::Timestamp(expr) => format!("_timestamp = {expr}"),
                Assignment::Increment {
                    declared, delta, ..
                } => {
                    format!("{} += {delta}", self.layout.columns[*declared].name)
                }
                Assignment::Append {
                    declared, suffix, ..
                } => format!(
                    "{} ||= {}",
                    self.layout.columns[*declared].name,
                    crate::codec::show_bytes(suffix)
                ),
            })
            .collect();
        shown.join(", ")
    }

    /// Updates the rows at `keys`; the number updated.
    pub fn apply(&self, keys: &[Vec<u8>]) -> crate::error::Result<u64> {
        // Whether a row's last computation changes it: a backend without
        // row locks computes a row again when another client changed it
        // before the write, so a row is counted once, as last computed.
        let mut changes_row: std::collections::HashMap<Vec<u8>, bool> = Default::default();
        let results =
            self.store
                .update_rows(&self.layout.table, keys, &self.read, |keys, rows| {
                    let (changes, _) = self.changes(keys, rows)?;
                    for (key, mutations) in keys.iter().zip(&changes) {
                        changes_row.insert(key.clone(), !mutations.is_empty());
                    }
                    Ok(changes)
                })?;
        let mut updated = 0u64;
        for (key, r) in keys.iter().zip(results) {
            r?;
            if changes_row.get(key) == Some(&true) {
                updated += 1;
            }
        }
        Ok(updated)
    }

    /// Per row: its mutations (none when the WHERE clause no longer holds).
    fn changes(
        &self,
        keys: &[Vec<u8>],
        rows: &[Option<Row>],
    ) -> crate::error::Result<(Vec<Vec<Mutation>>, u64)> {
        let layout = &self.layout;
        let df = |e: datafusion::error::DataFusionError| Error::InvalidArgument(e.to_string());
        let mut builder = ViewBatchBuilder::new(
            Arc::clone(layout),
            self.needed.clone(),
            &Default::default(),
            &Default::default(),
            keys.len(),
        );
        for (key, row) in keys.iter().zip(rows) {
            let empty;
            let row = match row {
                Some(r) => r,
                None => {
                    empty = Row {
                        key: key.clone(),
                        cells: Vec::new(),
                    };
                    &empty
                }
            };
            builder.push(row)?;
        }
        let fresh = builder.finish().map_err(df)?;
        if let Some((_, e)) = builder.errors.drain(..).next() {
            return Err(e);
        }
        // Rows the WHERE clause still selects, as read under the lock;
        // only they are computed.
        let selected: Vec<usize> = match &self.filter {
            None => (0..fresh.num_rows()).collect(),
            Some(f) => {
                let mask = f
                    .evaluate(&fresh)
                    .and_then(|v| v.into_array(fresh.num_rows()))
                    .map_err(df)?;
                let mask = mask.as_boolean_opt().ok_or_else(|| {
                    Error::InvalidArgument(
                        "the WHERE clause of an UPDATE is not a condition".into(),
                    )
                })?;
                (0..mask.len())
                    .filter(|&i| mask.is_valid(i) && mask.value(i))
                    .collect()
            }
        };
        let mut out = vec![Vec::new(); keys.len()];
        if selected.is_empty() {
            return Ok((out, 0));
        }
        let indices = UInt32Array::from_iter_values(
            selected
                .iter()
                .map(|&i| u32::try_from(i).unwrap_or(u32::MAX)),
        );
        let chosen = take_record_batch(&fresh, &indices).map_err(|e| df(e.into()))?;
        let evaluated = evaluate(layout, &self.assignments, &chosen).map_err(df)?;
        // The time is taken under the lock, and a new cell is never older
        // than what it was computed from: an earlier time would slip under
        // a concurrent statement's cell and be lost.
        let now = now_micros().max(self.started);
        for (r, &i) in selected.iter().enumerate() {
            let newest = rows[i]
                .iter()
                .flat_map(|row| row.cells.iter().map(|c| c.timestamp))
                .max()
                .unwrap_or(0);
            out[i] = row_changes(
                layout,
                &self.assignments,
                &evaluated,
                &keys[i],
                r,
                rows[i].as_ref(),
                align_up(now.max(newest), self.store.timestamp_granularity()),
            )?;
        }
        Ok((out, selected.len() as u64))
    }
}

/// What each assignment brings to the rows of `batch` (new values, or the
/// current ones typed for an increment or an append), and `_timestamp`
/// if assigned.
fn evaluate(
    layout: &Layout,
    assignments: &[Assignment],
    batch: &RecordBatch,
) -> DfResult<(Vec<Evaluated>, Option<TimestampMicrosecondArray>)> {
    let rows = batch.num_rows();
    let mut values = Vec::with_capacity(assignments.len());
    let mut timestamps = None;
    for a in assignments {
        values.push(match a {
            Assignment::Value { column, expr } => {
                let array = expr.evaluate(batch)?.into_array(rows)?;
                Evaluated::Values(cast(&array, layout.arrow.field(*column).data_type())?)
            }
            Assignment::Timestamp(expr) => {
                let array = expr.evaluate(batch)?.into_array(rows)?;
                let target = layout
                    .arrow
                    .field(layout.arrow.index_of("_timestamp")?)
                    .data_type()
                    .clone();
                timestamps = Some(
                    cast(&array, &target)?
                        .as_primitive::<TimestampMicrosecondType>()
                        .clone(),
                );
                Evaluated::Nothing
            }
            Assignment::Increment { column, .. } => Evaluated::Ints(
                cast(batch.column(*column), &DataType::Int64)?
                    .as_primitive::<Int64Type>()
                    .clone(),
            ),
            Assignment::Append { column, .. } => Evaluated::Bytes(
                cast(batch.column(*column), &DataType::Binary)?
                    .as_binary::<i32>()
                    .clone(),
            ),
        });
    }
    Ok((values, timestamps))
}

/// The cells a non-NULL value of a declared column or a family map writes.
pub(crate) fn cells_of(
    layout: &Layout,
    source: &ColumnSource,
    array: &ArrayRef,
    row: usize,
    timestamp: CellTime,
    read: Option<&Row>,
) -> crate::error::Result<Vec<Mutation>> {
    let mut mutations = Vec::new();
    match source {
        ColumnSource::Declared(d) if array.is_valid(row) => {
            let column = &layout.columns[*d];
            let mut value = Vec::new();
            Values::of(array, column, layout.protos[*d].as_ref())?.write(row, &mut value)?;
            mutations.push(cell(
                layout,
                &column.family,
                column.qualifier.as_bytes().to_vec(),
                value,
                timestamp,
                read,
            ));
        }
        ColumnSource::FamilyMap(f) => {
            let family = &layout.def.families[*f].name;
            let Some(map) = array.as_any().downcast_ref::<MapArray>() else {
                return Ok(mutations);
            };
            if map.is_null(row) {
                return Ok(mutations);
            }
            let keys = cast(map.keys(), &DataType::Utf8)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?;
            let keys = keys.as_string::<i32>();
            let values = Values::of(map.values(), &layout.map_values[*f], None)?;
            let offsets = map.value_offsets();
            for j in offsets[row] as usize..offsets[row + 1] as usize {
                if map.values().is_null(j) || keys.is_null(j) {
                    continue;
                }
                let qualifier = keys.value(j);
                let mut value = Vec::new();
                values.write(j, &mut value)?;
                check_map_entry(layout, family, qualifier, &value)?;
                mutations.push(cell(
                    layout,
                    family,
                    qualifier.as_bytes().to_vec(),
                    value,
                    timestamp,
                    read,
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

/// A cell an UPDATE writes. In an aggregate family the new value replaces
/// the accumulator it was computed from: the column's newest cell in the
/// row `read` under its lock (the one at timestamp 0 when there is none),
/// or the one at `_timestamp` when assigned.
fn cell(
    layout: &Layout,
    family: &str,
    qualifier: Vec<u8>,
    value: Vec<u8>,
    time: CellTime,
    read: Option<&Row>,
) -> Mutation {
    if !layout.family_kind(family).is_aggregate() {
        return Mutation::SetCell {
            family: family.to_string(),
            qualifier,
            timestamp: Some(time.at),
            value,
        };
    }
    let at = if time.explicit {
        time.at
    } else {
        read.and_then(|r| r.column(family, &qualifier).next())
            .map_or(0, |c| c.timestamp)
    };
    Mutation::SetCell {
        family: family.to_string(),
        qualifier,
        timestamp: Some(at),
        value,
    }
}
