//! Arrow Flight SQL over a store (issue #5, first part): statement
//! queries (GetFlightInfo + DoGet, results streamed batch by batch with the
//! schema announced up front), statement updates (DDL and DML with
//! affected-row counts), and the catalogs / schemas / tables metadata
//! calls (with table schemas). Authentication, prepared statements, the
//! other metadata calls and ingest are not built yet and answer
//! UNIMPLEMENTED.

use std::net::SocketAddr;
use std::pin::Pin;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightServiceServer;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    Any, CommandGetCatalogs, CommandGetDbSchemas, CommandGetTables, CommandStatementQuery,
    CommandStatementUpdate, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use datafusion::arrow::array::{Array, UInt64Array};
use datafusion::error::DataFusionError;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::SqlSession;
use crate::shell::error_line;

/// The Flight SQL service of one store.
#[derive(Clone)]
pub struct CellarFlightSql {
    session: SqlSession,
}

impl CellarFlightSql {
    /// A service answering with `session`.
    pub fn new(session: SqlSession) -> Self {
        CellarFlightSql { session }
    }

    /// The tonic service to mount on a server.
    pub fn into_server(self) -> FlightServiceServer<Self> {
        FlightServiceServer::new(self)
    }
}

/// A gRPC status for a failed statement: bad SQL and unknown names are the
/// client's to fix.
fn status(e: &DataFusionError) -> Status {
    let text = error_line(e);
    if text.contains("not found") || text.contains("does not exist") {
        return Status::not_found(text);
    }
    match e.find_root() {
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::External(_) => Status::invalid_argument(text),
        DataFusionError::NotImplemented(_) => Status::unimplemented(text),
        _ => Status::internal(text),
    }
}

type FlightStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl FlightSqlService for CellarFlightSql {
    type FlightService = CellarFlightSql;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<FlightStream<HandshakeResponse>>, Status> {
        // Anonymous: no credentials are configured yet.
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(
            response,
        )]))))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let df = self
            .session
            .sql(&query.query)
            .await
            .map_err(|e| status(&e))?;
        let schema = df.schema().as_arrow().clone();
        let ticket = TicketStatementQuery {
            statement_handle: query.query.clone().into_bytes().into(),
        };
        let endpoint = FlightEndpoint::new().with_ticket(Ticket {
            ticket: ticket.as_any().encode_to_vec().into(),
        });
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_descriptor(request.into_inner())
            .with_endpoint(endpoint)
            .with_ordered(false);
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
        let sql = String::from_utf8(ticket.statement_handle.to_vec())
            .map_err(|_| Status::invalid_argument("statement handle is not UTF-8"))?;
        let df = self.session.sql(&sql).await.map_err(|e| status(&e))?;
        let schema = df.schema().as_arrow().clone();
        let batches = df
            .execute_stream()
            .await
            .map_err(|e| status(&e))?
            .map_err(|e| FlightError::ExternalError(Box::new(e)));
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(std::sync::Arc::new(schema))
            .build(batches)
            .map_err(|e| Status::internal(e.to_string()));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let batches = self
            .session
            .query(&command.query)
            .await
            .map_err(|e| status(&e))?;
        // DML answers with a `count` column; DDL with a message (0 rows).
        let mut count = 0i64;
        for b in &batches {
            if let Some(c) = b
                .column_by_name("count")
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>().cloned())
            {
                for i in 0..c.len() {
                    count += i64::try_from(c.value(i)).unwrap_or(i64::MAX);
                }
            }
        }
        Ok(count)
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
        Err(Status::unimplemented(format!(
            "{} is not supported yet",
            message.type_url
        )))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
        let mut builder = query.into_builder();
        builder.append(CATALOG, SCHEMA);
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
        let store = self.session.store().clone();
        let mut builder = query.into_builder();
        for table in store.list_tables() {
            let provider = crate::CellarTable::new(store.clone(), &table)
                .map_err(|e| Status::internal(e.to_string()))?;
            let schema = datafusion::catalog::TableProvider::schema(&provider);
            builder
                .append(CATALOG, SCHEMA, &table, "TABLE", &schema)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

const CATALOG: &str = "cellar";
const SCHEMA: &str = "public";

/// The FlightInfo of a metadata command: its result schema, and a ticket
/// that is the command itself.
fn metadata_info(
    command: Any,
    schema: &datafusion::arrow::datatypes::Schema,
    request: Request<FlightDescriptor>,
) -> Result<Response<FlightInfo>, Status> {
    let endpoint = FlightEndpoint::new().with_ticket(Ticket {
        ticket: command.encode_to_vec().into(),
    });
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(e.to_string()))?
        .with_endpoint(endpoint)
        .with_descriptor(request.into_inner());
    Ok(Response::new(info))
}

/// One batch (or its error) as a Flight data stream.
fn stream_batch(
    schema: datafusion::arrow::datatypes::SchemaRef,
    batch: Result<datafusion::arrow::array::RecordBatch, FlightError>,
) -> Result<Response<FlightStream<arrow_flight::FlightData>>, Status> {
    let batch = batch.map_err(|e| Status::internal(e.to_string()))?;
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map_err(|e| Status::internal(e.to_string()));
    Ok(Response::new(Box::pin(stream)))
}

/// Serves `session` on `addr` until the process ends.
pub async fn serve(session: SqlSession, addr: SocketAddr) -> Result<(), String> {
    tonic::transport::Server::builder()
        .add_service(CellarFlightSql::new(session).into_server())
        .serve(addr)
        .await
        .map_err(|e| format!("serving on {addr}: {e}"))
}

/// Serves on an already bound listener (tests bind 127.0.0.1:0).
pub async fn serve_listener(
    session: SqlSession,
    listener: tokio::net::TcpListener,
) -> Result<(), String> {
    let incoming = tokio_stream_from(listener);
    tonic::transport::Server::builder()
        .add_service(CellarFlightSql::new(session).into_server())
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| e.to_string())
}

fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> {
    futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(s, _)| s);
        Some((next, listener))
    })
    .boxed()
}
