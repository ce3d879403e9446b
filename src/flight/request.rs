//! What a Flight request carries and what answering one takes, apart
//! from the service that answers: its connection and admission, its
//! deadline (`grpc-timeout`), parameters, handles and schemas as bytes.

use super::conn;
use super::handles::Prepared;
use super::status::flight_status;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::{FlightData, IpcMessage, SchemaAsIpc};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, StreamExt, TryStreamExt};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// What `conn` knows of the connection a request came on (its
/// `extensions`), plain or TLS.
pub(crate) fn connection(extensions: &tonic::Extensions) -> Option<&conn::ConnInfo> {
    extensions.get::<conn::ConnInfo>().or_else(|| {
        extensions
            .get::<tonic::transport::server::TlsConnectInfo<conn::ConnInfo>>()
            .map(tonic::transport::server::TlsConnectInfo::get_ref)
    })
}

/// UNAVAILABLE on a connection accepted over the limit only to say so.
pub(crate) fn admitted(extensions: &tonic::Extensions) -> Result<(), Status> {
    match connection(extensions).and_then(conn::ConnInfo::refusal) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// Marks the connection a request came on as authenticated, which lifts
/// its deadline (see `conn`).
pub(crate) fn authenticated(extensions: &tonic::Extensions) {
    if let Some(info) = connection(extensions) {
        info.authenticated();
    }
}

/// A prepared statement with placeholders must have values bound.
pub(super) fn check_parameters(prepared: &Prepared) -> Result<(), Status> {
    if prepared.parameters.is_none() && prepared.parameter_count > 0 {
        return Err(Status::invalid_argument(format!(
            "the statement takes {} parameter(s); bind values before executing it",
            prepared.parameter_count
        )));
    }
    Ok(())
}

/// Counts a result stream as running while it lives.
pub(super) struct Running(Arc<AtomicUsize>);

impl Running {
    pub(super) fn start(counter: &Arc<AtomicUsize>) -> Running {
        counter.fetch_add(1, Ordering::SeqCst);
        Running(counter.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The `grpc-timeout` of a request (`<digits><H|M|S|m|u|n>`).
pub(super) fn deadline(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Ends `stream` with DEADLINE_EXCEEDED once `limit` has passed; the
/// stream (and the query behind it) is dropped then.
pub(super) fn with_deadline(
    stream: impl Stream<Item = Result<FlightData, Status>> + Send + 'static,
    limit: Duration,
) -> impl Stream<Item = Result<FlightData, Status>> + Send + 'static {
    let timer = Box::pin(tokio::time::sleep(limit));
    let stream = Box::pin(stream);
    futures::stream::unfold(Some((stream, timer)), move |state| async move {
        let (mut stream, mut timer) = state?;
        tokio::select! {
            item = stream.next() => item.map(|i| (i, Some((stream, timer)))),
            () = &mut timer => Some((
                Err(Status::deadline_exceeded(format!(
                    "the query ran past its deadline of {limit:?} and was stopped"
                ))),
                None,
            )),
        }
    })
}

/// Rows affected by DML (its `count` column); DDL affects none.
pub(super) fn affected(batches: &[RecordBatch]) -> i64 {
    i64::try_from(crate::sql::affected_rows(batches)).unwrap_or(i64::MAX)
}

pub(super) fn handle_text(bytes: &[u8]) -> Result<String, Status> {
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        let shown: String = bytes.iter().take(20).map(|b| format!("{b:02x}")).collect();
        Status::not_found(format!(
            "no statement or ticket with handle 0x{shown} ({} bytes): not one cellar made",
            bytes.len()
        ))
    })
}

pub(super) fn schema_bytes(schema: &Schema) -> Result<prost::bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: datafusion::arrow::error::ArrowError| Status::internal(e.to_string()))?;
    Ok(bytes)
}

/// Record batches sent with a DoPut (parameters or ingested rows).
pub(super) fn put_batches(
    request: Request<PeekableFlightDataStream>,
) -> impl Stream<Item = Result<RecordBatch, Status>> + Send + Unpin {
    // A DoPut may open with a message carrying only the command.
    let data = request
        .into_inner()
        .into_peekable()
        .try_filter(|d| futures::future::ready(!d.data_header.is_empty()))
        .map_err(FlightError::from);
    FlightRecordBatchStream::new_from_flight_data(data).map_err(flight_status)
}

pub(super) async fn collect_parameters(
    request: Request<PeekableFlightDataStream>,
) -> Result<Option<RecordBatch>, Status> {
    let batches: Vec<RecordBatch> = put_batches(request).try_collect().await?;
    let Some(first) = batches.first() else {
        return Ok(None);
    };
    let batch = datafusion::arrow::compute::concat_batches(&first.schema(), &batches)
        .map_err(|e| Status::invalid_argument(format!("parameter batches: {e}")))?;
    Ok(Some(batch))
}

pub(super) type FlightStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_timeout_header_is_a_deadline() {
        assert_eq!(
            deadline(&{
                let mut m = MetadataMap::new();
                m.insert(
                    "grpc-timeout",
                    "250m".parse().unwrap_or_else(|_| unreachable!()),
                );
                m
            }),
            Some(Duration::from_millis(250))
        );
        let mut odd = MetadataMap::new();
        odd.insert(
            "grpc-timeout",
            "12x".parse().unwrap_or_else(|_| unreachable!()),
        );
        assert_eq!(deadline(&odd), None);
    }
}
