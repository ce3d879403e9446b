//! A partition's stream that reads its first rows on the task that polls
//! it and only then, if more remain, moves to a blocking thread.
//!
//! On the embedded store a selective read (a series' latest value, one
//! hour of one series, a short range) then costs no hand-off between
//! threads, which costs more than the read; a large one still keeps the
//! async threads free. A remote backend's reads all go to the blocking
//! thread (they wait on a network).

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

/// The stream of the read `open` opens (`None`: nothing to read): its
/// first `inline` rows read where it is polled, the rest on a blocking
/// thread.
pub(crate) fn stream<R: PartRead>(
    schema: SchemaRef,
    inline: usize,
    open: impl FnOnce() -> DfResult<Option<R>> + Send + 'static,
) -> SendableRecordBatchStream {
    let rest_schema = schema.clone();
    let read = futures::stream::once(async move {
        let Some(mut read) = open()? else {
            return Ok(futures::stream::empty().boxed());
        };
        let mut first: Vec<RecordBatch> = Vec::new();
        let done = read.read(inline, &mut |batch| {
            first.push(batch);
            true
        })?;
        let first = futures::stream::iter(first.into_iter().map(Ok));
        if done {
            return Ok(first.boxed());
        }
        let mut builder = RecordBatchReceiverStreamBuilder::new(rest_schema, 2);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            read.read(usize::MAX, &mut |batch| tx.blocking_send(Ok(batch)).is_ok())
                .map(|_| ())
        });
        Ok::<_, datafusion::error::DataFusionError>(first.chain(builder.build()).boxed())
    })
    .try_flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, read))
}
