//! `google.bigtable.v2.Bigtable`: reads, writes, check-and-mutate and
//! read-modify-write over the store, each row atomic as the store makes
//! it (the same row locks SQL's writes take).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::Stream;
use googleapis_tonic_google_bigtable_v2::google::bigtable::v2 as data;
use googleapis_tonic_google_bigtable_v2::google::rpc;
use tonic::{Request, Response, Status};

use super::Face;
use super::chunks::Chunks;
use super::convert::{self, data_table, invalid, status};
use super::filter::{RowFilter, Sampler};
use super::stubs::bigtable_server::Bigtable;
use crate::error::Error;
use crate::sql::Role;
use crate::store::{ReadFilter, ReadRequest, RowMutation, RowSet, Store};

/// A server-streamed answer.
pub type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Responses a read may have sent ahead of the client.
const READ_AHEAD: usize = 4;

/// The answers a blocking task sends into a channel, as a stream; if the
/// task gave up on a client that read nothing for `stall` (it sets
/// `stalled` and stops), the stream ends with DEADLINE_EXCEEDED, never as
/// if the answer were whole.
fn channel_stream<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<Result<T, Status>>,
    stalled: Arc<AtomicBool>,
    stall: Duration,
) -> Answers<T> {
    Box::pin(futures::stream::unfold(Some(rx), move |rx| {
        let stalled = Arc::clone(&stalled);
        async move {
            let mut rx = rx?;
            match rx.recv().await {
                Some(item) => Some((item, Some(rx))),
                None if stalled.load(Ordering::Acquire) => Some((
                    Err(Status::deadline_exceeded(format!(
                        "the client read nothing for {} s, so the read was stopped; \
                         read again from the last row received",
                        stall.as_secs_f64()
                    ))),
                    None,
                )),
                None => None,
            }
        }
    }))
}

/// Sends into `tx` from a blocking thread, waiting at most `stall` for
/// room; false if the client went or stalled (then `stalled` is set).
fn send_within<T>(
    tx: &tokio::sync::mpsc::Sender<T>,
    item: T,
    stall: Duration,
    stalled: &AtomicBool,
) -> bool {
    let item = match tx.try_send(item) {
        Ok(()) => return true,
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return false,
        Err(tokio::sync::mpsc::error::TrySendError::Full(item)) => item,
    };
    let runtime = tokio::runtime::Handle::current();
    match runtime.block_on(tokio::time::timeout(stall, tx.send(item))) {
        Ok(sent) => sent.is_ok(),
        Err(_) => {
            stalled.store(true, Ordering::Release);
            false
        }
    }
}

/// Where a read sends its responses, and how long it waits for room.
struct Sink {
    tx: tokio::sync::mpsc::Sender<Result<data::ReadRowsResponse, Status>>,
    stall: Duration,
    stalled: Arc<AtomicBool>,
}

/// The rows of a `ReadRows`, filtered and chunked, into the sink; stops
/// when the client goes away or reads nothing for the sink's stall.
fn read(
    store: Store,
    table: String,
    rows: RowSet,
    filter: RowFilter,
    limit: Option<usize>,
    reverse: bool,
    sink: Sink,
) {
    let send = |item| send_within(&sink.tx, item, sink.stall, &sink.stalled);
    let def = match store.table(&table) {
        Ok(def) => def,
        Err(e) => {
            send(Err(status(&e)));
            return;
        }
    };
    let pushed = filter.pushdown();
    if let Some(families) = &pushed.families
        && families.iter().any(|f| def.family(f).is_err())
    {
        // A leading filter keeps only a family the table lacks: no cells.
        return;
    }
    // Rows the filter empties are not counted: with a filter, the limit is
    // ours, not the store's.
    let request = ReadRequest {
        rows,
        filter: pushed,
        reverse,
        limit: if filter.passes_all() { limit } else { None },
        unmetered: false,
    };
    let stream = match store.read_rows(&table, request) {
        Ok(stream) => stream,
        Err(e) => {
            send(Err(status(&e)));
            return;
        }
    };
    let mut sampler = Sampler::new();
    let mut chunks = Chunks::default();
    let mut flush = |response| send(Ok(response));
    let mut sent = 0usize;
    for row in stream {
        let row = match row {
            Ok(row) => row,
            Err(e) => {
                if !chunks.is_empty() {
                    flush(chunks.take());
                }
                send(Err(status(&e)));
                return;
            }
        };
        let cells = filter.apply(&row, &mut sampler);
        if cells.is_empty() {
            continue;
        }
        if !chunks.push_row(&row.key, &cells, &mut flush) {
            return;
        }
        sent += 1;
        if limit.is_some_and(|l| sent >= l) {
            break;
        }
        if chunks.full() && !flush(chunks.take()) {
            return;
        }
    }
    if !chunks.is_empty() {
        flush(chunks.take());
    }
}

/// Runs store work on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("a store task failed: {e}")))?
}

fn rpc_status(result: &Result<(), Error>) -> rpc::Status {
    match result {
        Ok(()) => rpc::Status::default(),
        Err(e) => rpc::Status {
            code: e.grpc_code() as i32,
            message: e.to_string(),
            details: Vec::new(),
        },
    }
}

fn unimplemented<T>(call: &str) -> Result<T, Status> {
    Err(Status::unimplemented(format!(
        "{call} is not supported by cellar's Bigtable server"
    )))
}

#[tonic::async_trait]
impl Bigtable for Face {
    type ReadRowsStream = Answers<data::ReadRowsResponse>;
    type SampleRowKeysStream = Answers<data::SampleRowKeysResponse>;
    type MutateRowsStream = Answers<data::MutateRowsResponse>;
    type GenerateInitialChangeStreamPartitionsStream =
        Answers<data::GenerateInitialChangeStreamPartitionsResponse>;
    type ReadChangeStreamStream = Answers<data::ReadChangeStreamResponse>;
    type ExecuteQueryStream = Answers<data::ExecuteQueryResponse>;

    async fn read_rows(
        &self,
        request: Request<data::ReadRowsRequest>,
    ) -> Result<Response<Self::ReadRowsStream>, Status> {
        self.allow(&request, Role::Reader, "ReadRows")?;
        let req = request.into_inner();
        let table = data_table(&req.table_name, &req.authorized_view_name, "ReadRows")?;
        if !req.materialized_view_name.is_empty() {
            return unimplemented("ReadRows of a materialized view");
        }
        let rows = convert::row_set(req.rows.as_ref())?;
        let filter = RowFilter::new(req.filter.as_ref()).map_err(|e| status(&e))?;
        let limit = match req.rows_limit {
            0 => None,
            n if n < 0 => return Err(invalid(format!("rows_limit {n} is negative"))),
            n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
        let store = self.store.clone();
        let reverse = req.reversed;
        let sink = Sink {
            tx,
            stall: self.stalled_stream,
            stalled: Arc::new(AtomicBool::new(false)),
        };
        let answers = channel_stream(rx, Arc::clone(&sink.stalled), sink.stall);
        tokio::task::spawn_blocking(move || read(store, table, rows, filter, limit, reverse, sink));
        Ok(Response::new(answers))
    }

    async fn sample_row_keys(
        &self,
        request: Request<data::SampleRowKeysRequest>,
    ) -> Result<Response<Self::SampleRowKeysStream>, Status> {
        self.allow(&request, Role::Reader, "SampleRowKeys")?;
        let req = request.into_inner();
        let table = data_table(&req.table_name, &req.authorized_view_name, "SampleRowKeys")?;
        let store = self.store.clone();
        let samples =
            blocking(move || store.sample_row_keys(&table).map_err(|e| status(&e))).await?;
        let answers: Vec<Result<data::SampleRowKeysResponse, Status>> = samples
            .into_iter()
            .map(|(row_key, offset)| {
                Ok(data::SampleRowKeysResponse {
                    row_key,
                    offset_bytes: i64::try_from(offset).unwrap_or(i64::MAX),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(answers))))
    }

    async fn mutate_row(
        &self,
        request: Request<data::MutateRowRequest>,
    ) -> Result<Response<data::MutateRowResponse>, Status> {
        self.allow(&request, Role::User, "MutateRow")?;
        let req = request.into_inner();
        let table = data_table(&req.table_name, &req.authorized_view_name, "MutateRow")?;
        if req.mutations.is_empty() {
            return Err(invalid("MutateRow needs at least one mutation"));
        }
        let row = RowMutation::new(req.row_key, convert::mutations(&req.mutations)?);
        let store = self.store.clone();
        blocking(move || store.mutate_row(&table, row).map_err(|e| status(&e))).await?;
        Ok(Response::new(data::MutateRowResponse {}))
    }

    async fn mutate_rows(
        &self,
        request: Request<data::MutateRowsRequest>,
    ) -> Result<Response<Self::MutateRowsStream>, Status> {
        self.allow(&request, Role::User, "MutateRows")?;
        let req = request.into_inner();
        let table = data_table(&req.table_name, &req.authorized_view_name, "MutateRows")?;
        if req.entries.is_empty() {
            return Err(invalid("MutateRows needs at least one entry"));
        }
        let total: usize = req.entries.iter().map(|e| e.mutations.len()).sum();
        if total > convert::MAX_MUTATIONS {
            return Err(invalid(format!(
                "{total} mutations in one MutateRows call, more than {}",
                convert::MAX_MUTATIONS
            )));
        }
        // Entries that do not convert fail alone; the others are written.
        let mut outcomes: Vec<Option<Result<(), Error>>> = Vec::with_capacity(req.entries.len());
        let mut rows = Vec::new();
        for entry in req.entries {
            let converted = if entry.mutations.is_empty() {
                Err(invalid("an entry has no mutations"))
            } else {
                convert::mutations(&entry.mutations)
            };
            match converted {
                Ok(mutations) => {
                    outcomes.push(None);
                    rows.push(RowMutation::new(entry.row_key, mutations));
                }
                Err(s) => outcomes.push(Some(Err(Error::InvalidArgument(s.message().into())))),
            }
        }
        let store = self.store.clone();
        let written =
            blocking(move || store.mutate_rows(&table, rows).map_err(|e| status(&e))).await?;
        let mut written = written.into_iter();
        let entries = outcomes
            .into_iter()
            .enumerate()
            .map(|(index, outcome)| {
                let result = outcome.unwrap_or_else(|| {
                    written
                        .next()
                        .unwrap_or_else(|| Err(Error::Internal("an entry had no outcome".into())))
                });
                data::mutate_rows_response::Entry {
                    index: i64::try_from(index).unwrap_or(i64::MAX),
                    status: Some(rpc_status(&result)),
                }
            })
            .collect();
        let response = data::MutateRowsResponse {
            entries,
            rate_limit_info: None,
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(
            response,
        )]))))
    }

    async fn check_and_mutate_row(
        &self,
        request: Request<data::CheckAndMutateRowRequest>,
    ) -> Result<Response<data::CheckAndMutateRowResponse>, Status> {
        self.allow(&request, Role::User, "CheckAndMutateRow")?;
        let req = request.into_inner();
        let table = data_table(
            &req.table_name,
            &req.authorized_view_name,
            "CheckAndMutateRow",
        )?;
        let predicate = RowFilter::new(req.predicate_filter.as_ref()).map_err(|e| status(&e))?;
        let on_match = convert::mutations(&req.true_mutations)?;
        let on_no_match = convert::mutations(&req.false_mutations)?;
        if on_match.is_empty() && on_no_match.is_empty() {
            return Err(invalid(
                "CheckAndMutateRow needs true_mutations or false_mutations",
            ));
        }
        let store = self.store.clone();
        let key = req.row_key;
        let matched = blocking(move || {
            let mut matched = false;
            let mut sampler = Sampler::new();
            let mut change = |_: &[Vec<u8>], rows: &[Option<crate::store::Row>]| {
                matched = rows
                    .first()
                    .and_then(Option::as_ref)
                    .is_some_and(|row| !predicate.apply(row, &mut sampler).is_empty());
                Ok(vec![if matched {
                    on_match.clone()
                } else {
                    on_no_match.clone()
                }])
            };
            let results = store
                .update_rows(&table, &[key], &ReadFilter::all(), &mut change)
                .map_err(|e| status(&e))?;
            for r in results {
                r.map_err(|e| status(&e))?;
            }
            Ok(matched)
        })
        .await?;
        Ok(Response::new(data::CheckAndMutateRowResponse {
            predicate_matched: matched,
        }))
    }

    async fn ping_and_warm(
        &self,
        request: Request<data::PingAndWarmRequest>,
    ) -> Result<Response<data::PingAndWarmResponse>, Status> {
        self.allow(&request, Role::Reader, "PingAndWarm")?;
        convert::instance_of(&request.get_ref().name)?;
        Ok(Response::new(data::PingAndWarmResponse {}))
    }

    async fn read_modify_write_row(
        &self,
        request: Request<data::ReadModifyWriteRowRequest>,
    ) -> Result<Response<data::ReadModifyWriteRowResponse>, Status> {
        self.allow(&request, Role::User, "ReadModifyWriteRow")?;
        let req = request.into_inner();
        let table = data_table(
            &req.table_name,
            &req.authorized_view_name,
            "ReadModifyWriteRow",
        )?;
        if req.rules.is_empty() {
            return Err(invalid("ReadModifyWriteRow needs at least one rule"));
        }
        if req.rules.len() > convert::MAX_MUTATIONS {
            return Err(invalid(format!(
                "{} rules, more than {}",
                req.rules.len(),
                convert::MAX_MUTATIONS
            )));
        }
        let rules = req
            .rules
            .iter()
            .map(convert::rule)
            .collect::<Result<Vec<_>, _>>()?;
        let store = self.store.clone();
        let key = req.row_key;
        let row = blocking(move || {
            store
                .read_modify_write(&table, &key, rules)
                .map_err(|e| status(&e))
        })
        .await?;
        Ok(Response::new(data::ReadModifyWriteRowResponse {
            row: Some(convert::row(row)),
        }))
    }

    async fn generate_initial_change_stream_partitions(
        &self,
        _request: Request<data::GenerateInitialChangeStreamPartitionsRequest>,
    ) -> Result<Response<Self::GenerateInitialChangeStreamPartitionsStream>, Status> {
        unimplemented("GenerateInitialChangeStreamPartitions (change streams)")
    }

    async fn read_change_stream(
        &self,
        _request: Request<data::ReadChangeStreamRequest>,
    ) -> Result<Response<Self::ReadChangeStreamStream>, Status> {
        unimplemented("ReadChangeStream (change streams)")
    }

    async fn prepare_query(
        &self,
        _request: Request<data::PrepareQueryRequest>,
    ) -> Result<Response<data::PrepareQueryResponse>, Status> {
        unimplemented("PrepareQuery (GoogleSQL; cellar's SQL is served over Flight SQL)")
    }

    async fn execute_query(
        &self,
        _request: Request<data::ExecuteQueryRequest>,
    ) -> Result<Response<Self::ExecuteQueryStream>, Status> {
        unimplemented("ExecuteQuery (GoogleSQL; cellar's SQL is served over Flight SQL)")
    }
}
