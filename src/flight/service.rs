//! The Flight SQL service: one store's statements, prepared statements,
//! ingest and metadata, per client session.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, Any, CommandGetCatalogs, CommandGetDbSchemas,
    CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes, CommandGetTables,
    CommandGetXdbcTypeInfo, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightData,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::auth::{self, Authenticator, Caller, Credentials};
use super::handles::{Handles, Pending, Prepared};
use super::metadata::{CATALOG, SCHEMA};
use super::request::{
    FlightStream, Running, admitted, affected, authenticated, check_parameters, collect_parameters,
    deadline, handle_text, put_batches, schema_bytes, with_deadline,
};
use super::sessions::ClientSessions;
use super::status::{flight_status, status};
use super::{ingest, metadata, params, sessions};
use crate::sql::SqlSession;

/// The Flight SQL service of one store.
#[derive(Clone)]
pub struct CellarFlightSql {
    sessions: ClientSessions,
    auth: Authenticator,
    handles: Handles,
    running: Arc<AtomicUsize>,
}

/// Who sent a request, and the session it runs in.
struct Client {
    caller: Caller,
    session: SqlSession,
}

impl CellarFlightSql {
    /// An anonymous service answering with `session`.
    pub fn new(session: SqlSession) -> Self {
        Self::with_credentials(session, Credentials::default())
    }

    /// A service that requires `credentials` (when any are set).
    pub fn with_credentials(session: SqlSession, credentials: Credentials) -> Self {
        CellarFlightSql {
            sessions: ClientSessions::new(session, auth::TOKEN_IDLE),
            auth: Authenticator::new(credentials),
            handles: Handles::default(),
            running: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Results being streamed right now.
    pub fn running_queries(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Prepared statements not yet closed.
    pub fn open_prepared_statements(&self) -> usize {
        self.handles.prepared_count()
    }

    /// Client sessions alive (after dropping those that ended).
    pub fn open_sessions(&self) -> usize {
        self.sessions.sweep(|token| self.auth.is_live(token));
        self.sessions.count()
    }

    /// The same service with client sessions dropped after `idle`
    /// without a call (default: as long as a token lives, 24 hours).
    pub fn with_session_idle(mut self, idle: Duration) -> Self {
        self.sessions = self.sessions.with_idle(idle);
        self
    }

    /// The CloseSession action: the caller's session, its tickets and
    /// prepared statements are dropped, and a token handed out for it
    /// ends.
    fn close_session(
        &self,
        request: &Request<Action>,
    ) -> Result<Response<FlightStream<arrow_flight::Result>>, Status> {
        admitted(request.extensions())?;
        let (caller, _) = self.auth.caller(request.metadata())?;
        self.sessions.close(&caller);
        self.handles.forget_owner(&caller)?;
        if let Caller::Session(token) = &caller {
            self.auth.forget(token);
        }
        let body = sessions::CloseSessionResult {
            status: sessions::SESSION_CLOSED,
        };
        let result = arrow_flight::Result {
            body: body.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(
            result,
        )]))))
    }

    /// Who sent a request and the session it runs in.
    fn caller<T>(&self, request: &Request<T>) -> Result<Client, Status> {
        admitted(request.extensions())?;
        let (caller, principal) = self.auth.caller(request.metadata())?;
        authenticated(request.extensions());
        let session = self.sessions.get(&caller, &principal)?;
        Ok(Client { caller, session })
    }

    /// Plans `sql` once per parameter row and keeps the frames under a
    /// ticket; the FlightInfo announcing their schema.
    async fn plan(
        &self,
        client: &Client,
        sql: &str,
        parameters: Option<&RecordBatch>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let pending = frames(&client.session, sql, parameters).await?;
        let schema = pending.schema.clone();
        let handle = self.handles.put_pending(&client.caller, pending)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        let endpoint = FlightEndpoint::new().with_ticket(Ticket {
            ticket: ticket.as_any().encode_to_vec().into(),
        });
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_descriptor(descriptor)
            .with_endpoint(endpoint)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Streams a planned result, counted as running until the stream
    /// ends or is dropped (client gone), cut off at the deadline.
    fn stream(
        &self,
        session: &SqlSession,
        pending: Pending,
        metadata: &MetadataMap,
    ) -> FlightStream<FlightData> {
        let Pending {
            frames,
            schema,
            sql,
            seen,
            kept,
        } = pending;
        let session = session.clone();
        let kept_run = {
            let (session, sql) = (session.clone(), sql.clone());
            futures::stream::iter(kept).then(move |kept| {
                let (session, sql) = (session.clone(), sql.clone());
                async move { session.run_kept(&sql, kept).await }
            })
        };
        let batches = futures::stream::iter(frames)
            .then(move |df| {
                let session = session.clone();
                let sql = sql.clone();
                async move { session.execute_stream_keeping(&sql, df, seen).await }
            })
            .chain(kept_run)
            .map_ok(|s| s.map_err(|e| FlightError::Tonic(Box::new(status(&e)))))
            .map_err(|e| FlightError::Tonic(Box::new(status(&e))))
            .try_flatten();
        let encoded = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches)
            .map_err(flight_status);
        let guard = Running::start(&self.running);
        let counted = encoded.map(move |item| {
            let _ = &guard;
            item
        });
        match deadline(metadata) {
            Some(limit) => Box::pin(with_deadline(counted, limit)),
            None => Box::pin(counted),
        }
    }
}

/// Plans `sql` once per parameter row. DDL and DML run here, exactly
/// once, whether or not the client fetches the result (ADBC's
/// `cursor.execute` does not); queries run when streamed.
async fn frames(
    session: &SqlSession,
    sql: &str,
    parameters: Option<&RecordBatch>,
) -> Result<Pending, Status> {
    let plain = parameters.is_none_or(|b| b.num_columns() == 0);
    // A read run before (its plan kept for the text), or of a shape
    // planned before (made from its template): no frames to plan.
    let ready = match plain {
        true => match session.kept_plan(sql).map_err(|e| status(&e))? {
            Some(kept) => Some(kept),
            None => session.shaped_plan(sql).await,
        },
        false => None,
    };
    if let Some(ready) = ready {
        return Ok(Pending {
            frames: Vec::new(),
            schema: ready.0.schema(),
            sql: sql.to_string(),
            seen: None,
            kept: Some(ready),
        });
    }
    let seen = plain.then(|| session.plans_seen()).flatten();
    let mut frames = Vec::new();
    for row in params::parameter_rows(parameters)? {
        // Writes run here, once, whether or not the client fetches.
        frames.push(session.execute(sql, row).await.map_err(|e| status(&e))?);
    }
    let schema: SchemaRef = match frames.first() {
        Some(df) => Arc::new(df.schema().as_arrow().clone()),
        None => match session.statement_shape(sql).await.map_err(|e| status(&e))? {
            Some(shape) => shape.schema,
            None => Arc::new(Schema::empty()),
        },
    };
    Ok(Pending {
        frames,
        schema,
        sql: sql.to_string(),
        seen,
        kept: None,
    })
}

/// Runs a statement that writes (or anything, its result discarded) once
/// per parameter row; the rows it affected.
async fn run_update(
    session: &SqlSession,
    sql: &str,
    parameters: Option<&RecordBatch>,
) -> Result<i64, Status> {
    // A batch of parameter rows: an INSERT is planned once and written
    // in batches (any other statement still runs once per row).
    if let Some(batch) = parameters.filter(|b| b.num_columns() > 0 && b.num_rows() > 0) {
        let count = session
            .execute_batch(sql, batch)
            .await
            .map_err(|e| status(&e))?;
        return Ok(i64::try_from(count).unwrap_or(i64::MAX));
    }
    let mut count = 0i64;
    for row in params::parameter_rows(parameters)? {
        let batches = session
            .execute(sql, row)
            .await
            .map_err(|e| status(&e))?
            .collect()
            .await
            .map_err(|e| status(&e))?;
        count += affected(&batches);
    }
    Ok(count)
}

#[tonic::async_trait]
impl FlightSqlService for CellarFlightSql {
    type FlightService = CellarFlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<FlightStream<HandshakeResponse>>, Status> {
        admitted(request.extensions())?;
        let metadata = request.metadata().clone();
        let extensions = request.extensions().clone();
        let mut stream = request.into_inner();
        let payload = match stream.message().await {
            Ok(Some(first)) => first.payload.to_vec(),
            _ => Vec::new(),
        };
        let token = self.auth.handshake(&metadata, &payload)?;
        authenticated(&extensions);
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into_bytes().into(),
        };
        let mut response =
            Response::new(Box::pin(futures::stream::iter(vec![Ok(response)])) as FlightStream<_>);
        let header = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("token is not a header value"))?;
        response.metadata_mut().insert("authorization", header);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let client = self.caller(&request)?;
        if query.transaction_id.is_some() {
            return Err(Status::unimplemented("transactions are not supported"));
        }
        self.plan(&client, &query.query, None, request.into_inner())
            .await
    }

    async fn get_flight_info_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let client = self.caller(&request)?;
        let handle = handle_text(&command.prepared_statement_handle)?;
        let prepared = self.handles.prepared(&client.caller, &handle)?;
        check_parameters(&prepared)?;
        self.plan(
            &client,
            &prepared.sql,
            prepared.parameters.as_ref(),
            request.into_inner(),
        )
        .await
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let client = self.caller(&request)?;
        let handle = handle_text(&ticket.statement_handle)?;
        let pending = self.handles.take_pending(&client.caller, &handle)?;
        Ok(Response::new(self.stream(
            &client.session,
            pending,
            request.metadata(),
        )))
    }

    async fn do_get_prepared_statement(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        // Some clients DoGet the command itself: plan and stream at once.
        let client = self.caller(&request)?;
        let handle = handle_text(&command.prepared_statement_handle)?;
        let prepared = self.handles.prepared(&client.caller, &handle)?;
        check_parameters(&prepared)?;
        let pending = frames(&client.session, &prepared.sql, prepared.parameters.as_ref()).await?;
        Ok(Response::new(self.stream(
            &client.session,
            pending,
            request.metadata(),
        )))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.caller(&request)?;
        if command.transaction_id.is_some() {
            return Err(Status::unimplemented("transactions are not supported"));
        }
        run_update(&client.session, &command.query, None).await
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.caller(&request)?;
        ingest::ingest(&client.session, command, put_batches(request)).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        command: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let client = self.caller(&request)?;
        let handle = handle_text(&command.prepared_statement_handle)?;
        // Fails before reading the stream if the handle is not ours.
        self.handles.prepared(&client.caller, &handle)?;
        if let Some(batch) = collect_parameters(request).await? {
            self.handles.bind(&client.caller, &handle, batch)?;
        }
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle.into_bytes().into()),
        })
    }

    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let client = self.caller(&request)?;
        let handle = handle_text(&command.prepared_statement_handle)?;
        let mut prepared = self.handles.prepared(&client.caller, &handle)?;
        if let Some(batch) = collect_parameters(request).await? {
            prepared.parameters = Some(batch);
        }
        check_parameters(&prepared)?;
        run_update(&client.session, &prepared.sql, prepared.parameters.as_ref()).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let client = self.caller(&request)?;
        if query.transaction_id.is_some() {
            return Err(Status::unimplemented("transactions are not supported"));
        }
        let sql = params::number_placeholders(&query.query);
        let shape = client
            .session
            .statement_shape(&sql)
            .await
            .map_err(|e| status(&e))?;
        let parameter_count = shape.as_ref().map_or(0, |s| s.parameters.len());
        let (dataset_schema, parameter_schema) = match shape {
            Some(shape) => {
                // Parameters whose type the statement leaves open are
                // announced as text; any bound type is accepted and coerced.
                let fields: Vec<Field> = shape
                    .parameters
                    .iter()
                    .map(|(id, t)| Field::new(id, t.clone().unwrap_or(DataType::Utf8), true))
                    .collect();
                (
                    schema_bytes(&shape.schema)?,
                    schema_bytes(&Schema::new(fields))?,
                )
            }
            None => (Default::default(), schema_bytes(&Schema::empty())?),
        };
        let handle = self.handles.prepare(
            &client.caller,
            Prepared {
                sql,
                parameters: None,
                parameter_count,
            },
        )?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let client = self.caller(&request)?;
        let handle = handle_text(&query.prepared_statement_handle)?;
        self.handles.close(&client.caller, &handle)
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<FlightStream<arrow_flight::Result>>, Status> {
        if request.get_ref().r#type == "CloseSession" {
            return self.close_session(&request);
        }
        let client = self.caller(&request)?;
        let action = request.into_inner();
        if action.r#type != "CancelFlightInfo" {
            return Err(Status::unimplemented(format!(
                "action {:?} is not supported",
                action.r#type
            )));
        }
        let cancel = CancelFlightInfoRequest::decode(action.body)
            .map_err(|e| Status::invalid_argument(format!("CancelFlightInfo request: {e}")))?;
        let mut cancelled = false;
        for endpoint in cancel.info.map(|i| i.endpoint).unwrap_or_default() {
            let ticket = endpoint
                .ticket
                .and_then(|t| Any::decode(t.ticket).ok())
                .and_then(|a| a.unpack::<TicketStatementQuery>().ok().flatten());
            if let Some(t) = ticket {
                cancelled |= self
                    .handles
                    .cancel_pending(&client.caller, &handle_text(&t.statement_handle)?)?;
            }
        }
        // A result already being streamed stops when its client drops it.
        let result = CancelFlightInfoResult {
            status: if cancelled {
                CancelStatus::Cancelled
            } else {
                CancelStatus::NotCancellable
            } as i32,
        };
        let body = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter(vec![Ok(
            body,
        )]))))
    }

    async fn do_get_fallback(
        &self,
        request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        Err(Status::unimplemented(format!(
            "{} is not supported",
            message.type_url
        )))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
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
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
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
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let client = self.caller(&request)?;
        let mut builder = query.into_builder();
        for table in client.session.store().list_tables() {
            let schema = client
                .session
                .stored_table_schema(&table)
                .map_err(|e| Status::internal(e.to_string()))?;
            builder
                .append(CATALOG, SCHEMA, &table, "TABLE", &schema)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        let mut builder = query.into_builder();
        builder.append("TABLE");
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let info = sql_info()?;
        let schema = query.clone().into_builder(info).schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        let builder = query.into_builder(sql_info()?);
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder(xdbc_types()?).schema();
        metadata_info(query.as_any(), &schema, request)
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        let builder = query.into_builder(xdbc_types()?);
        let schema = builder.schema();
        stream_batch(schema, builder.build())
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        metadata_info(query.as_any(), &metadata::primary_keys_schema(), request)
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let client = self.caller(&request)?;
        let other_place = query.catalog.as_deref().is_some_and(|c| c != CATALOG)
            || query.db_schema.as_deref().is_some_and(|s| s != SCHEMA);
        let batch = if other_place {
            Ok(RecordBatch::new_empty(metadata::primary_keys_schema()))
        } else {
            metadata::primary_keys(client.session.store(), CATALOG, SCHEMA, &query.table)
        };
        let batch = batch.map_err(|e| match e {
            crate::error::Error::TableNotFound { .. } => Status::not_found(e.to_string()),
            other => Status::internal(other.to_string()),
        })?;
        stream_batch(metadata::primary_keys_schema(), Ok(batch))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

fn sql_info() -> Result<&'static arrow_flight::sql::metadata::SqlInfoData, Status> {
    metadata::SQL_INFO
        .as_ref()
        .map_err(|e| Status::internal(e.to_string()))
}

fn xdbc_types() -> Result<&'static arrow_flight::sql::metadata::XdbcTypeInfoData, Status> {
    metadata::XDBC_TYPES
        .as_ref()
        .map_err(|e| Status::internal(e.to_string()))
}

/// The FlightInfo of a metadata command: its result schema, and a ticket
/// that is the command itself.
fn metadata_info(
    command: Any,
    schema: &Schema,
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
    schema: SchemaRef,
    batch: Result<RecordBatch, FlightError>,
) -> Result<Response<FlightStream<FlightData>>, Status> {
    let batch = batch.map_err(flight_status)?;
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::once(async { Ok(batch) }))
        .map_err(flight_status);
    Ok(Response::new(Box::pin(stream)))
}
