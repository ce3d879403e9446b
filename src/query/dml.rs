//! What INSERT, UPDATE and DELETE operators share: one output partition
//! holding a single `count` row, a loop over every partition of the input,
//! and store writes moved off the async threads.

use std::future::Future;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;

use super::to_df;
use crate::Error;

/// The schema of a DML result: one `count` column.
pub(crate) fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

/// Plan properties of a DML operator: one partition, emitted at the end.
pub(crate) fn count_properties() -> Arc<PlanProperties> {
    Arc::new(PlanProperties::new(
        EquivalenceProperties::new(count_schema()),
        Partitioning::UnknownPartitioning(1),
        EmissionType::Final,
        Boundedness::Bounded,
    ))
}

/// Feeds every batch of every partition of `input` to `per_batch`, adds up
/// the counts it returns, and yields them as one `count` row.
pub(crate) fn count_batches<F, Fut>(
    input: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    mut per_batch: F,
) -> SendableRecordBatchStream
where
    F: FnMut(RecordBatch) -> Fut + Send + 'static,
    Fut: Future<Output = DfResult<u64>> + Send,
{
    let future = async move {
        let mut count = 0u64;
        for p in 0..input.output_partitioning().partition_count() {
            let mut stream = input.execute(p, Arc::clone(&context))?;
            while let Some(batch) = stream.next().await {
                count += per_batch(batch?).await?;
            }
        }
        let array: ArrayRef = Arc::new(UInt64Array::from(vec![count]));
        Ok(RecordBatch::try_new(count_schema(), vec![array])?)
    };
    Box::pin(RecordBatchStreamAdapter::new(
        count_schema(),
        futures::stream::once(future),
    ))
}

/// Runs store work on the blocking pool; `what` names it if the task dies.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> DfResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| to_df(Error::Internal(format!("{what} task failed: {e}"))))?
        .map_err(to_df)
}
