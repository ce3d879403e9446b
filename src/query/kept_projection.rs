//! A projection for a plan that runs again: DataFusion's `ProjectionExec`
//! without the per-run metric registration.
//!
//! `ProjectionExec::execute` registers a timer per expression each time it
//! runs, labelled with the expression's SQL text, which it formats afresh:
//! about 3 µs for `CAST(ts AS BIGINT), pressure`, a quarter of a kept
//! plan's whole run when it reads one row. A kept plan (`sql/plans.rs`)
//! never shows its metrics (EXPLAIN ANALYZE is planned each time), so
//! [`KeptProjectionExec`] stands in for each of its projections: the same
//! expressions, schema and properties, evaluated batch by batch.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::common::Result as DfResult;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

/// A `ProjectionExec`'s work, done without registering metrics.
#[derive(Debug)]
pub struct KeptProjectionExec {
    /// The projection stood in for: its expressions, schema, properties
    /// and input.
    inner: Arc<ProjectionExec>,
}

/// `plan` with each `ProjectionExec` in it replaced by a
/// [`KeptProjectionExec`].
pub fn keep_projections(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        Ok(match kept(&node) {
            Some(kept) => Transformed::yes(kept),
            None => Transformed::no(node),
        })
    })
    .map(|t| t.data)
}

/// `node` made a [`KeptProjectionExec`], if it is a `ProjectionExec`.
fn kept(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let inner = Arc::new(node.downcast_ref::<ProjectionExec>()?.clone());
    Some(Arc::new(KeptProjectionExec { inner }))
}

impl DisplayAs for KeptProjectionExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.fmt_as(t, f)
    }
}

impl ExecutionPlan for KeptProjectionExec {
    fn name(&self) -> &str {
        "KeptProjectionExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.inner.properties()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        self.inner.maintains_input_order()
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        self.inner.benefits_from_input_partitioning()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.inner.input()]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let inner = Arc::clone(&self.inner).replace_children(children, options)?;
        Ok(kept(&inner).unwrap_or(inner))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.inner.input().execute(partition, context)?;
        let schema = self.inner.schema();
        let exprs: Vec<Arc<dyn PhysicalExpr>> = self
            .inner
            .expr()
            .iter()
            .map(|p| Arc::clone(&p.expr))
            .collect();
        let out = Arc::clone(&schema);
        let batches = input.map(move |batch| {
            let batch = batch?;
            let rows = batch.num_rows();
            let arrays = exprs
                .iter()
                .map(|e| e.evaluate(&batch)?.into_array(rows))
                .collect::<DfResult<Vec<_>>>()?;
            let options = RecordBatchOptions::new().with_row_count(Some(rows));
            Ok(RecordBatch::try_new_with_options(
                Arc::clone(&out),
                arrays,
                &options,
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    fn count(plan: &Arc<dyn ExecutionPlan>, is: fn(&dyn ExecutionPlan) -> bool) -> usize {
        usize::from(is(plan.as_ref()))
            + plan
                .children()
                .into_iter()
                .map(|c| count(c, is))
                .sum::<usize>()
    }

    async fn both(ctx: &SessionContext, sql: &str) -> (DfResult<String>, DfResult<String>) {
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        // Fresh operator state, as a kept plan gets (a repartition's).
        let kept = keep_projections(Arc::clone(&plan)).unwrap();
        let kept = datafusion::physical_plan::execution_plan::reset_plan_states(kept).unwrap();
        assert_eq!(count(&kept, |p| p.is::<ProjectionExec>()), 0, "{sql}");
        assert_eq!(
            count(&kept, |p| p.is::<KeptProjectionExec>()),
            count(&plan, |p| p.is::<ProjectionExec>()),
            "{sql}"
        );
        assert_eq!(kept.schema(), plan.schema());
        let run = |plan: Arc<dyn ExecutionPlan>| async {
            let batches = collect(plan, ctx.task_ctx()).await?;
            Ok(pretty_format_batches(&batches)?.to_string())
        };
        (run(plan).await, run(kept).await)
    }

    #[tokio::test]
    async fn a_kept_projection_answers_as_the_projection_does() {
        let ctx = SessionContext::new();
        for sql in [
            "SELECT CAST(a AS DOUBLE) / 2 AS h, a, 'x' || CAST(a AS VARCHAR) AS s \
             FROM generate_series(1, 5000) AS t(a) WHERE a % 7 = 1 ORDER BY a DESC",
            "SELECT 1 AS one FROM generate_series(1, 3) AS t(a)",
            "SELECT a + 1 AS b FROM (SELECT a * 2 AS a FROM generate_series(1, 10) AS t(a)) \
             WHERE a > 4",
        ] {
            let (planned, kept) = both(&ctx, sql).await;
            assert_eq!(kept.unwrap(), planned.unwrap(), "{sql}");
        }
    }

    #[tokio::test]
    async fn a_kept_projection_fails_as_the_projection_does() {
        let ctx = SessionContext::new();
        let sql = "SELECT CAST(CAST(a AS VARCHAR) || 'x' AS BIGINT) AS n \
                   FROM generate_series(1, 3) AS t(a)";
        let (planned, kept) = both(&ctx, sql).await;
        let (planned, kept) = (planned.unwrap_err(), kept.unwrap_err());
        assert_eq!(kept.to_string(), planned.to_string());
        assert!(kept.to_string().contains("1x"), "{kept}");
    }
}
