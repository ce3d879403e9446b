//! The values an INSERT gives a cellar table's columns, converted
//! exactly or refused naming the column.
//!
//! DataFusion converts an INSERT's values to its columns' types with a
//! cast that truncates: `1.5` and `true` were written into a BIGINT as 1,
//! and a value that does not convert failed with an error naming no
//! column. Each such cast is replaced here: a boolean into an integer
//! column is refused when planned; a number with a fraction, or out of the
//! column's range, fails naming the column and the value; any other
//! failed conversion names the column too. PostgreSQL rounds `1.5`; cellar
//! refuses it, as a value silently changed is a wrong answer.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::common::DFSchema;
use datafusion::datasource::source_as_provider;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::expr::{Alias, Cast, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, DmlStatement, Expr, LogicalPlan, Projection, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility, WriteOp,
};

use crate::query::CellarTable;

/// The client's error, as cellar's other refusals of values are.
fn invalid(message: String) -> DataFusionError {
    crate::error::Error::InvalidArgument(message).into()
}

/// `plan` with the casts of an INSERT into a cellar table made exact.
pub(crate) fn exact(plan: LogicalPlan) -> DfResult<LogicalPlan> {
    let LogicalPlan::Dml(dml) = &plan else {
        return Ok(plan);
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return Ok(plan);
    }
    let cellar = source_as_provider(&dml.target)
        .ok()
        .is_some_and(|p| p.downcast_ref::<CellarTable>().is_some());
    let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
        return Ok(plan);
    };
    if !cellar {
        return Ok(plan);
    }
    let table = dml.table_name.table().to_string();
    let input = match projection.input.as_ref() {
        LogicalPlan::Values(values) => Arc::new(LogicalPlan::Values(exact_values(
            &table,
            values,
            &projection.expr,
        )?)),
        _ => Arc::clone(&projection.input),
    };
    let input_schema: &DFSchema = projection.input.schema();
    let mut changed = false;
    let mut exprs = Vec::with_capacity(projection.expr.len());
    for expr in &projection.expr {
        let Expr::Alias(Alias {
            expr: inner,
            relation,
            name,
            metadata,
        }) = expr
        else {
            exprs.push(expr.clone());
            continue;
        };
        let Expr::Cast(Cast { expr: value, field }) = inner.as_ref() else {
            exprs.push(expr.clone());
            continue;
        };
        if matches!(value.as_ref(), Expr::Literal(v, _) if v.is_null()) {
            // A column the INSERT does not name.
            exprs.push(expr.clone());
            continue;
        }
        let target = field.data_type().clone();
        let source = value.get_type(input_schema)?;
        if source == DataType::Boolean && target.is_integer() {
            return Err(invalid(format!(
                "INSERT INTO {table}: column {name} ({target}) cannot take a boolean ({value}); \
                 write a number, e.g. CASE WHEN ... THEN 1 ELSE 0 END"
            )));
        }
        let udf = ScalarUDF::from(InsertValue {
            table: table.clone(),
            column: name.clone(),
            target,
            signature: Signature::any(1, Volatility::Immutable),
        });
        let call = Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(udf),
            vec![value.as_ref().clone()],
        ));
        exprs.push(Expr::Alias(Alias {
            expr: Box::new(call),
            relation: relation.clone(),
            name: name.clone(),
            metadata: metadata.clone(),
        }));
        changed = true;
    }
    if !changed && Arc::ptr_eq(&input, &projection.input) {
        return Ok(plan);
    }
    let projection = Projection::try_new_with_schema(exprs, input, Arc::clone(&projection.schema))?;
    Ok(LogicalPlan::Dml(DmlStatement::new(
        dml.table_name.clone(),
        Arc::clone(&dml.target),
        dml.op.clone(),
        Arc::new(LogicalPlan::Projection(projection)),
    )))
}

/// The VALUES of an INSERT with the casts DataFusion put in its cells
/// checked: a literal that would lose its fraction or its meaning is
/// refused naming the column and the row; other cells convert exactly or
/// fail naming the column.
fn exact_values(
    table: &str,
    values: &datafusion::logical_expr::Values,
    projected: &[Expr],
) -> DfResult<datafusion::logical_expr::Values> {
    use datafusion::common::ScalarValue;
    // The column each VALUES position goes to (`columnN AS name`).
    let column_of = |index: usize| -> String {
        let wanted = format!("column{}", index + 1);
        projected
            .iter()
            .find_map(|e| match e {
                Expr::Alias(a) => match a.expr.as_ref() {
                    Expr::Column(c) if c.name == wanted => Some(a.name.clone()),
                    _ => None,
                },
                _ => None,
            })
            .unwrap_or(wanted)
    };
    let mut rows = Vec::with_capacity(values.values.len());
    for (r, row) in values.values.iter().enumerate() {
        let mut cells = Vec::with_capacity(row.len());
        for (c, cell) in row.iter().enumerate() {
            let Expr::Cast(Cast { expr: value, field }) = cell else {
                cells.push(cell.clone());
                continue;
            };
            let target = field.data_type().clone();
            let check = InsertValue {
                table: table.to_string(),
                column: column_of(c),
                target: target.clone(),
                signature: Signature::any(1, Volatility::Immutable),
            };
            let at = |e: DataFusionError| match e {
                DataFusionError::External(inner) => {
                    invalid(format!("{inner} (row {} of VALUES)", r + 1))
                }
                other => other,
            };
            match value.as_ref() {
                Expr::Literal(ScalarValue::Boolean(Some(b)), _) if target.is_integer() => {
                    return Err(invalid(format!(
                        "INSERT INTO {table}: column {} ({target}) cannot take a boolean ({b}) (row {} of VALUES); write a number",
                        check.column,
                        r + 1
                    )));
                }
                Expr::Literal(ScalarValue::Float64(v), _) if target.is_integer() => {
                    check.check_whole(std::iter::once(*v)).map_err(at)?;
                    cells.push(cell.clone());
                }
                Expr::Literal(ScalarValue::Float32(v), _) if target.is_integer() => {
                    check
                        .check_whole(std::iter::once(v.map(f64::from)))
                        .map_err(at)?;
                    cells.push(cell.clone());
                }
                Expr::Literal(v, _) => {
                    if let Err(e) = v.cast_to(&target) {
                        let shown = match v {
                            ScalarValue::Utf8(Some(t)) | ScalarValue::LargeUtf8(Some(t)) => {
                                format!("'{t}'")
                            }
                            ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) => {
                                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                                format!("X'{hex}'")
                            }
                            other => other.to_string(),
                        };
                        // Text that does not read as the type says enough
                        // by itself.
                        let why = match (v, &target) {
                            (
                                ScalarValue::Binary(_) | ScalarValue::LargeBinary(_),
                                DataType::Utf8,
                            ) => ": it is not UTF-8 text".to_string(),
                            (ScalarValue::Utf8(_) | ScalarValue::LargeUtf8(_), _)
                                if matches!(
                                    e.find_root(),
                                    DataFusionError::ArrowError(a, _)
                                        if matches!(a.as_ref(), ArrowError::CastError(m) if m.starts_with("Cannot cast"))
                                ) =>
                            {
                                String::new()
                            }
                            _ => {
                                let text = e.to_string();
                                let text = text
                                    .trim_start_matches("Arrow error: ")
                                    .trim_start_matches("Cast error: ")
                                    .trim_start_matches("Invalid argument error: ");
                                format!(": {text}")
                            }
                        };
                        return Err(invalid(format!(
                            "INSERT INTO {table}: column {} ({target}) cannot take {shown}{why} (row {} of VALUES)",
                            check.column,
                            r + 1
                        )));
                    }
                    cells.push(cell.clone());
                }
                _ => cells.push(Expr::ScalarFunction(ScalarFunction::new_udf(
                    Arc::new(ScalarUDF::from(check)),
                    vec![value.as_ref().clone()],
                ))),
            }
        }
        rows.push(cells);
    }
    Ok(datafusion::logical_expr::Values {
        schema: Arc::clone(&values.schema),
        values: rows,
    })
}

/// An INSERT's value converted to its column's type exactly, or an error
/// naming the column and the value.
#[derive(Debug, PartialEq, Eq, Hash)]
struct InsertValue {
    table: String,
    column: String,
    target: DataType,
    signature: Signature,
}

impl InsertValue {
    fn refuse(&self, value: impl std::fmt::Display, why: &str) -> DataFusionError {
        invalid(format!(
            "INSERT INTO {}: column {} ({}) cannot take {value}: {why}",
            self.table, self.column, self.target
        ))
    }

    /// Refuses a float with a fraction or past the range of an integer
    /// column (a cast would truncate or fail without saying where).
    fn check_whole(&self, values: impl Iterator<Item = Option<f64>>) -> DfResult<()> {
        let (low, high) = match self.target {
            DataType::Int8 => (f64::from(i8::MIN), f64::from(i8::MAX)),
            DataType::Int16 => (f64::from(i16::MIN), f64::from(i16::MAX)),
            DataType::Int32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
            DataType::UInt8 => (0.0, f64::from(u8::MAX)),
            DataType::UInt16 => (0.0, f64::from(u16::MAX)),
            DataType::UInt32 => (0.0, f64::from(u32::MAX)),
            // 2^63 and 2^64: the first values past the range.
            DataType::UInt64 => (0.0, 18_446_744_073_709_551_615.0),
            _ => (-9_223_372_036_854_775_808.0, 9_223_372_036_854_775_807.0),
        };
        for v in values.flatten() {
            if !v.is_finite() || v < low || v >= high + 1.0 {
                return Err(self.refuse(v, "it is out of the column's range"));
            }
            if v.fract() != 0.0 {
                return Err(self.refuse(v, "it is not a whole number (round it: round(x))"));
            }
        }
        Ok(())
    }
}

impl ScalarUDFImpl for InsertValue {
    fn name(&self) -> &str {
        "insert_value"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.target.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let Some(array) = arrays.first() else {
            return Err(DataFusionError::Internal(
                "insert_value takes one argument".into(),
            ));
        };
        if self.target.is_integer() {
            match array.data_type() {
                DataType::Float64 => {
                    self.check_whole(array.as_primitive::<Float64Type>().iter())?;
                }
                DataType::Float32 => {
                    self.check_whole(
                        array
                            .as_primitive::<Float32Type>()
                            .iter()
                            .map(|v| v.map(f64::from)),
                    )?;
                }
                DataType::Decimal128(_, scale) if *scale > 0 => {
                    let unit = 10i128.checked_pow(u32::try_from(*scale).unwrap_or(0));
                    let decimals =
                        array.as_primitive::<datafusion::arrow::datatypes::Decimal128Type>();
                    for (i, v) in decimals.iter().enumerate() {
                        if let (Some(v), Some(unit)) = (v, unit)
                            && v % unit != 0
                        {
                            let shown = decimals.value_as_string(i);
                            return Err(
                                self.refuse(shown, "it is not a whole number (round it: round(x))")
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        let options = CastOptions {
            safe: false,
            ..CastOptions::default()
        };
        let out = cast_with_options(array, &self.target, &options).map_err(|e| {
            let first_bad = (0..array.len())
                .filter(|&i| array.is_valid(i))
                .find(|&i| cast_with_options(&array.slice(i, 1), &self.target, &options).is_err())
                .map(|i| {
                    datafusion::arrow::util::display::array_value_to_string(array, i)
                        .unwrap_or_default()
                });
            match first_bad {
                Some(v) => self.refuse(format!("{v:?}"), &e.to_string()),
                None => self.refuse("a value", &e.to_string()),
            }
        })?;
        Ok(ColumnarValue::Array(out))
    }
}

/// DataFusion's refusal of a VALUES row whose value cannot become its
/// column's type names neither the column nor what differs, and prints
/// both types whole (a protobuf message's, hundreds of fields): said
/// instead with the column (found by its type in `table`'s schema) and,
/// for structs, the fields missing and unknown.
pub(crate) fn name_mismatch(
    table: &str,
    schema: &datafusion::arrow::datatypes::Schema,
    e: DataFusionError,
) -> DataFusionError {
    const PREFIX: &str = "Types don't match and no valid cast exists, received data of type ";
    let DataFusionError::Execution(message) = e.find_root() else {
        return e;
    };
    let Some((got, want)) = message
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split_once(" for field of type "))
    else {
        return e;
    };
    let columns: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| f.data_type().to_string() == want)
        .map(|f| f.name().as_str())
        .collect();
    let column = match columns.as_slice() {
        [one] => format!("column {one}"),
        [] => "a column".to_string(),
        many => format!("a column ({})", many.join(" or ")),
    };
    let (got_fields, want_fields) = (struct_fields(got), struct_fields(want));
    let detail = match (&got_fields, &want_fields) {
        (Some(g), Some(w)) => {
            let missing: Vec<&str> = w
                .iter()
                .filter(|f| !g.contains(f))
                .map(String::as_str)
                .collect();
            let unknown: Vec<&str> = g
                .iter()
                .filter(|f| !w.contains(f))
                .map(String::as_str)
                .collect();
            let mut parts = Vec::new();
            if !unknown.is_empty() {
                parts.push(format!("it has no field {}", unknown.join(", ")));
            }
            if !missing.is_empty() {
                parts.push(format!(
                    "give every field, NULL where unknown (missing: {})",
                    missing.join(", ")
                ));
            }
            if parts.is_empty() {
                "a field's type does not convert".to_string()
            } else {
                parts.join("; ")
            }
        }
        _ => format!("{} does not convert to {}", shorten(got), shorten(want)),
    };
    invalid(format!(
        "INSERT INTO {table}: {column} cannot take a value of type {}: {detail}",
        shorten(got)
    ))
}

/// The top-level field names of a struct type as Arrow prints it.
fn struct_fields(shown: &str) -> Option<Vec<String>> {
    let inner = shown.strip_prefix("Struct(")?.strip_suffix(')')?;
    let mut names = Vec::new();
    let (mut depth, mut at_field, mut chars) = (0usize, true, inner.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '(' | '[' | '<' => depth += 1,
            ')' | ']' | '>' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => at_field = true,
            '"' if depth == 0 && at_field => {
                let name: String = chars.by_ref().take_while(|&c| c != '"').collect();
                names.push(name);
                at_field = false;
            }
            _ => {}
        }
    }
    Some(names)
}

/// A type as Arrow prints it, cut short: a struct by its field names.
fn shorten(shown: &str) -> String {
    match struct_fields(shown) {
        Some(fields) if shown.len() > 80 => format!("Struct({}, ...)", fields.join(", ")),
        _ if shown.len() > 120 => format!("{}...", shown.chars().take(120).collect::<String>()),
        _ => shown.to_string(),
    }
}
