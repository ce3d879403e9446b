//! Stopping a query inside an operator that does not yield.
//!
//! A stopped query (cancelled, timed out, its client gone) has its stream
//! dropped and its tasks aborted, which takes effect where a task next
//! yields. Most operators yield between batches, but a nested-loop join
//! joins one batch of its probe side with every row of its build side in
//! one poll: with a condition that never holds it emits nothing and kept
//! both heavy-query threads busy for half a minute after its query was
//! stopped. So each query's nested-loop join filters are wrapped in
//! [`Interruptible`], which fails the evaluation once the query's
//! [`StopOnDrop`] has been dropped; the join ends within one evaluation.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::joins::NestedLoopJoinExec;
use datafusion::physical_plan::joins::utils::JoinFilter;

/// Sets its flag when dropped: held by a running query's stream.
#[derive(Debug)]
pub(crate) struct StopOnDrop(pub Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// An expression that fails once its query has stopped.
#[derive(Debug)]
pub(crate) struct Interruptible {
    inner: Arc<dyn PhysicalExpr>,
    stop: Arc<AtomicBool>,
}

impl PartialEq for Interruptible {
    fn eq(&self, other: &Self) -> bool {
        self.inner.as_ref() == other.inner.as_ref()
    }
}

impl Eq for Interruptible {}

impl Hash for Interruptible {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.as_ref().hash(state);
    }
}

impl fmt::Display for Interruptible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // EXPLAIN shows the condition as written.
        fmt::Display::fmt(&self.inner, f)
    }
}

impl PhysicalExpr for Interruptible {
    fn return_field(&self, input_schema: &Schema) -> DfResult<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> DfResult<ColumnarValue> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(DataFusionError::Execution(
                "the query was stopped".to_string(),
            ));
        }
        self.inner.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let [inner] = <[_; 1]>::try_from(children).map_err(|c: Vec<_>| {
            DataFusionError::Internal(format!(
                "an interruptible expression has one child, not {}",
                c.len()
            ))
        })?;
        Ok(Arc::new(Interruptible {
            inner,
            stop: Arc::clone(&self.stop),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

/// `plan` with the filter of each nested-loop join made to fail once
/// `stop` is set.
pub(crate) fn interruptible(
    plan: Arc<dyn ExecutionPlan>,
    stop: &Arc<AtomicBool>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        let Some(join) = (node.as_ref() as &dyn Any).downcast_ref::<NestedLoopJoinExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(filter) = join.filter() else {
            return Ok(Transformed::no(node));
        };
        let wrapped = JoinFilter::new(
            Arc::new(Interruptible {
                inner: Arc::clone(filter.expression()),
                stop: Arc::clone(stop),
            }),
            filter.column_indices().to_vec(),
            Arc::clone(filter.schema()),
        );
        let projection = join.projection().as_ref().map(|p| p.to_vec());
        let rebuilt = NestedLoopJoinExec::try_new(
            Arc::clone(join.left()),
            Arc::clone(join.right()),
            Some(wrapped),
            join.join_type(),
            projection,
        )?;
        Ok(Transformed::yes(Arc::new(rebuilt) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}
