//! Integer arithmetic that fails on overflow instead of wrapping.
//!
//! DataFusion evaluates `+`, `-`, `*` and unary `-` on integers with
//! wrapping kernels: `SELECT n * 10` with a large `n` returns a negative
//! number, and `UPDATE t SET n = n * 10` stores one. A wrong answer is the
//! worst bug there is, so an analyzer rule, run after type coercion,
//! replaces each integer operation with a function that uses Arrow's
//! checked kernels and reports the overflow, naming the expression. The
//! functions name their result as the operator would (`a + b`, `(- a)`), so
//! column names, `GROUP BY` matching and EXPLAIN read as the user wrote.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ExprSchema, Result as DfResult, exec_datafusion_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    AggregateUDF, BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, WindowFunctionDefinition,
};
use datafusion::optimizer::AnalyzerRule;

use super::checked_sum::{checked_sum, is_checked_sum, is_checked_sum_input};

/// The checked operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
    Neg,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Add => "cellar_checked_add",
            Op::Sub => "cellar_checked_sub",
            Op::Mul => "cellar_checked_mul",
            Op::Neg => "cellar_checked_neg",
        }
    }

    fn binary(op: Operator) -> Option<Op> {
        match op {
            Operator::Plus => Some(Op::Add),
            Operator::Minus => Some(Op::Sub),
            Operator::Multiply => Some(Op::Mul),
            _ => None,
        }
    }

    fn operator(self) -> Option<Operator> {
        match self {
            Op::Add => Some(Operator::Plus),
            Op::Sub => Some(Operator::Minus),
            Op::Mul => Some(Operator::Multiply),
            Op::Neg => None,
        }
    }
}

/// One checked integer operation as a scalar function.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Checked {
    op: Op,
    signature: Signature,
}

fn udf(op: Op) -> Arc<ScalarUDF> {
    // In the order of `Op`'s variants, so `op as usize` finds one.
    static ALL: LazyLock<[Arc<ScalarUDF>; 4]> = LazyLock::new(|| {
        [Op::Add, Op::Sub, Op::Mul, Op::Neg].map(|op| {
            let arity = if op == Op::Neg { 1 } else { 2 };
            Arc::new(ScalarUDF::new_from_impl(Checked {
                op,
                signature: Signature::any(arity, Volatility::Immutable),
            }))
        })
    });
    Arc::clone(&ALL[op as usize])
}

/// The checked function named `name` (`cellar_checked_add`, ...), for a
/// plan decoded in another process: they are not registered by name.
#[cfg(feature = "ballista")]
pub(crate) fn checked_udf(name: &str) -> Option<Arc<ScalarUDF>> {
    [Op::Add, Op::Sub, Op::Mul, Op::Neg]
        .into_iter()
        .find(|op| op.name() == name)
        .map(udf)
}

/// What stands on the wire for the checked `sum`, which shares its name
/// with DataFusion's wrapping one.
#[cfg(feature = "ballista")]
pub(crate) const CHECKED_SUM_WIRE: &[u8] = b"cellar_checked_sum";

/// The aggregate a wire mark names, if it is the checked `sum`.
#[cfg(feature = "ballista")]
pub(crate) fn checked_sum_from_wire(
    mark: &[u8],
) -> Option<Arc<datafusion::logical_expr::AggregateUDF>> {
    (mark == CHECKED_SUM_WIRE).then(checked_sum)
}

/// The wire mark of an aggregate: the checked `sum`'s, or none.
#[cfg(feature = "ballista")]
pub(crate) fn checked_sum_wire(
    func: &datafusion::logical_expr::AggregateUDF,
) -> Option<&'static [u8]> {
    is_checked_sum(func).then_some(CHECKED_SUM_WIRE)
}

impl ScalarUDFImpl for Checked {
    fn name(&self) -> &str {
        self.op.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        arg_types
            .first()
            .cloned()
            .ok_or_else(|| exec_datafusion_err!("{} needs an argument", self.op.name()))
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        Ok(match (self.op.operator(), args) {
            (Some(op), [l, r]) => format!("{} {op} {}", l.schema_name(), r.schema_name()),
            (None, [e]) => format!("(- {})", e.schema_name()),
            _ => self.op.name().to_string(),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let result = match (self.op, arrays.as_slice()) {
            (Op::Add, [l, r]) => numeric::add(l, r),
            (Op::Sub, [l, r]) => numeric::sub(l, r),
            (Op::Mul, [l, r]) => numeric::mul(l, r),
            (Op::Neg, [e]) => numeric::neg(e.as_ref()),
            _ => {
                return Err(exec_datafusion_err!(
                    "{} called with {} arguments",
                    self.op.name(),
                    arrays.len()
                ));
            }
        };
        let array = result.map_err(|e| {
            exec_datafusion_err!(
                "integer overflow: the result does not fit {} ({e}); cast to DOUBLE or DECIMAL \
                 for a wider range",
                args.return_field.data_type()
            )
        })?;
        if all_scalar {
            Ok(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::try_from_array(&array, 0)?,
            ))
        } else {
            Ok(ColumnarValue::Array(array))
        }
    }
}

/// The analyzer rule: integer `+ - *` and unary `-` become checked.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn name(&self) -> &str {
        "cellar_checked_arithmetic"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            // The schema the plan's expressions are evaluated against.
            let schema = match plan.inputs().as_slice() {
                [input] => Arc::clone(input.schema()),
                _ => {
                    // Joins and unions: the merged input schemas.
                    let mut merged = DFSchema::empty();
                    for input in plan.inputs() {
                        merged.merge(input.schema());
                    }
                    Arc::new(merged)
                }
            };
            let preserver = NamePreserver::new(&plan);
            plan.map_expressions(|expr| {
                let saved = preserver.save(&expr);
                let rewritten = expr.transform_up(|e| rewrite(e, schema.as_ref()))?;
                Ok(rewritten.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }
}

fn is_integer(e: &Expr, schema: &dyn ExprSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| t.is_integer())
}

fn rewrite(e: Expr, schema: &dyn ExprSchema) -> DfResult<Transformed<Expr>> {
    let checked = match e {
        Expr::BinaryExpr(b) => match Op::binary(b.op) {
            Some(op)
                if is_integer(&b.left, schema)
                    && b.left.get_type(schema).ok() == b.right.get_type(schema).ok() =>
            {
                ScalarFunction::new_udf(udf(op), vec![*b.left, *b.right])
            }
            _ => return Ok(Transformed::no(Expr::BinaryExpr(b))),
        },
        Expr::Negative(inner) if is_integer(&inner, schema) => {
            ScalarFunction::new_udf(udf(Op::Neg), vec![*inner])
        }
        Expr::AggregateFunction(mut f) if wrapping_sum(&f.func, &f.params.args, schema) => {
            f.func = checked_sum();
            return Ok(Transformed::yes(Expr::AggregateFunction(f)));
        }
        Expr::WindowFunction(mut w) => {
            let WindowFunctionDefinition::AggregateUDF(func) = &w.fun else {
                return Ok(Transformed::no(Expr::WindowFunction(w)));
            };
            if !wrapping_sum(func, &w.params.args, schema) {
                return Ok(Transformed::no(Expr::WindowFunction(w)));
            }
            w.fun = WindowFunctionDefinition::AggregateUDF(checked_sum());
            return Ok(Transformed::yes(Expr::WindowFunction(w)));
        }
        other => return Ok(Transformed::no(other)),
    };
    Ok(Transformed::yes(Expr::ScalarFunction(checked)))
}

/// DataFusion's own `sum` of one BIGINT or unsigned BIGINT, DISTINCT or
/// not.
fn wrapping_sum(func: &AggregateUDF, args: &[Expr], schema: &dyn ExprSchema) -> bool {
    func.name() == "sum"
        && !is_checked_sum(func)
        && matches!(args, [arg] if arg.get_type(schema).is_ok_and(|t| is_checked_sum_input(&t)))
}

/// `(left, op, right)` of an integer `+ - *`, whether or not the rule has
/// made it checked: the plans that recognise `n + 1` see both forms.
pub(crate) fn arithmetic(e: &Expr) -> Option<(&Expr, Operator, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => Some((left, *op, right)),
        Expr::ScalarFunction(f) => {
            let checked = f.func.inner().downcast_ref::<Checked>()?;
            match (checked.op.operator(), f.args.as_slice()) {
                (Some(op), [l, r]) => Some((l, op, r)),
                _ => None,
            }
        }
        _ => None,
    }
}
