//! A partition's stream that reads where it is polled.
//!
//! On the embedded store a read never waits on a network, so it runs on
//! the task that polls it, a step of rows a poll: a selective read (a
//! series' latest value, one hour of one series, a short range) costs no
//! hand-off between threads, which costs more than the read (waking a
//! blocking thread took about 0.1 ms here, the time of 300 rows), and a
//! large one yields between steps like DataFusion's own operators. Heavy
//! queries run on their own runtime (`sql::running`), so a long scan
//! there keeps no light query waiting. A remote backend's reads go to a
//! blocking thread: they wait on a network.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::{
    RecordBatchReceiverStreamBuilder, RecordBatchStreamAdapter,
};
use futures::{StreamExt, TryStreamExt};

/// A read that gives its rows a part at a time.
pub(crate) trait PartRead: Send + 'static {
    /// Reads up to `rows` more rows, sending each batch as it fills; true
    /// when the read is done (at its end, its LIMIT reached, or the
    /// consumer gone).
    fn read(&mut self, rows: usize, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool>;
}

/// Where a partition's read runs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reading {
    /// On the polling task, `step` rows a poll (the embedded store).
    Polled { step: usize },
    /// On a blocking thread (a remote backend).
    Blocking,
}

/// The stream of the read `open` opens (`None`: nothing to read), read
/// as `reading` says.
pub(crate) fn stream<R: PartRead>(
    schema: SchemaRef,
    reading: Reading,
    open: impl FnOnce() -> DfResult<Option<R>> + Send + 'static,
) -> SendableRecordBatchStream {
    let rest_schema = schema.clone();
    let read = futures::stream::once(async move {
        let Some(mut read) = open()? else {
            return Ok(futures::stream::empty().boxed());
        };
        match reading {
            Reading::Polled { step } => Ok(polled(read, step.max(1)).boxed()),
            Reading::Blocking => {
                let mut builder = RecordBatchReceiverStreamBuilder::new(rest_schema, 2);
                let tx = builder.tx();
                builder.spawn_blocking(move || {
                    read.read(usize::MAX, &mut |batch| tx.blocking_send(Ok(batch)).is_ok())
                        .map(|_| ())
                });
                Ok::<_, datafusion::error::DataFusionError>(builder.build().boxed())
            }
        }
    })
    .try_flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, read))
}

/// Rows of which a read selects nothing that one call of a store read
/// steps over before it gives up until the next step (a time range no row
/// has cells in passes over every row of the table): a step stays a few
/// milliseconds long at most, so the task lets go between steps (see
/// [`polled`]) and a cancelled query stops.
pub(crate) const PASSED_ROWS_PER_CALL: usize = 4096;

/// Steps that sent batches between two yields of a read's task.
const YIELD_EVERY: u32 = 8;

/// The batches of `read`, `step` rows read a poll. The task lets go
/// between steps now and then (every step that sends nothing, every
/// [`YIELD_EVERY`] that do): an aggregate or a repartition pulling batches
/// in a loop would otherwise hold its task for the whole read, and a
/// cancelled query's task is dropped only where it lets go. A yield costs
/// about a microsecond; [`YIELD_EVERY`] steps take milliseconds.
fn polled<R: PartRead>(
    read: R,
    step: usize,
) -> impl futures::Stream<Item = DfResult<RecordBatch>> + Send {
    let batches = futures::stream::unfold(Some((read, 0u32)), move |state| async move {
        let (mut read, mut sent) = state?;
        let mut out: Vec<RecordBatch> = Vec::new();
        loop {
            if sent >= YIELD_EVERY {
                sent = 0;
                tokio::task::yield_now().await;
            }
            match read.read(step, &mut |batch| {
                out.push(batch);
                true
            }) {
                Ok(true) => return Some((Ok(out), None)),
                Ok(false) if out.is_empty() => tokio::task::yield_now().await,
                Ok(false) => return Some((Ok(out), Some((read, sent + 1)))),
                Err(e) => return Some((Err(e), None)),
            }
        }
    });
    batches
        .map_ok(|out| futures::stream::iter(out.into_iter().map(Ok)))
        .try_flatten()
}
