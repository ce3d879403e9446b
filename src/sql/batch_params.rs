//! A parameterised `INSERT ... VALUES ($1, $2, ...)` executed with a batch
//! of parameter rows, planned once: the one-row VALUES becomes a scan of
//! the parameter batch, so the rows reach the table's sink as batches
//! rather than as one planned, executed and committed statement per row.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::common::Result as DfResult;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::logical_expr::{
    Expr, LogicalPlan, LogicalPlanBuilder, Projection, Values, WriteOp, cast, col,
};

/// The name the parameter batch is scanned under.
const PARAMS: &str = "cellar_parameters";

/// `plan` (an INSERT whose source is one VALUES row holding placeholders)
/// reading its rows from `params` instead; `None` for any other plan,
/// which then runs once per parameter row.
pub(crate) fn insert_from_batch(
    plan: &LogicalPlan,
    params: &RecordBatch,
) -> DfResult<Option<LogicalPlan>> {
    let LogicalPlan::Dml(dml) = plan else {
        return Ok(None);
    };
    if !matches!(dml.op, WriteOp::Insert(_)) {
        return Ok(None);
    }
    let mut values_found = 0;
    dml.input.apply(|p| {
        if let LogicalPlan::Values(v) = p
            && v.values.len() == 1
        {
            values_found += 1;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })?;
    if values_found != 1 {
        return Ok(None);
    }
    // The batch, its columns named by position: `$1` is `p1`.
    let fields: Vec<Field> = params
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Field::new(format!("p{}", i + 1), f.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), params.columns().to_vec())?;
    let table = MemTable::try_new(schema, vec![vec![batch]])?;
    let scan =
        LogicalPlanBuilder::scan(PARAMS, provider_as_source(Arc::new(table)), None)?.build()?;
    let count = params.num_columns();
    let mut unknown = None;
    let input = Arc::unwrap_or_clone(Arc::clone(&dml.input)).transform_up(|p| {
        let LogicalPlan::Values(Values { schema, values }) = &p else {
            return Ok(Transformed::no(p));
        };
        let [row] = values.as_slice() else {
            return Ok(Transformed::no(p));
        };
        let mut exprs = Vec::with_capacity(row.len());
        for (expr, field) in row.iter().zip(schema.fields()) {
            let replaced = expr.clone().transform_up(|e| match &e {
                Expr::Placeholder(ph) => {
                    let n = ph
                        .id
                        .trim_start_matches('$')
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=count).contains(n));
                    match n {
                        Some(n) => Ok(Transformed::yes(col(format!("{PARAMS}.p{n}")))),
                        None => {
                            unknown = Some(ph.id.clone());
                            Ok(Transformed::no(e))
                        }
                    }
                }
                _ => Ok(Transformed::no(e)),
            })?;
            exprs.push(cast(replaced.data, field.data_type().clone()).alias(field.name()));
        }
        let projection = Projection::try_new(exprs, Arc::new(scan.clone()))?;
        Ok(Transformed::yes(LogicalPlan::Projection(projection)))
    })?;
    if let Some(id) = unknown {
        return Err(datafusion::error::DataFusionError::Plan(format!(
            "placeholder {id} has no value: the parameter batch has {count} columns"
        )));
    }
    let mut dml = dml.clone();
    dml.input = Arc::new(input.data);
    Ok(Some(LogicalPlan::Dml(dml)))
}
