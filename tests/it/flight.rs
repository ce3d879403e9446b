//! Flight SQL through arrow-flight's own client against a server on
//! 127.0.0.1:0: statements, prepared statements with parameters, ingest,
//! metadata, authentication, TLS, session isolation, cancellation and
//! deadlines, and the status code of every error.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::error::FlightError;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{
    CommandGetPrimaryKeys, CommandGetTables, CommandPreparedStatementQuery, CommandStatementIngest,
    ProstMessageExt, SqlInfo, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
};
use arrow_flight::{FlightDescriptor, FlightInfo};
use cellar::flight::{CellarFlightSql, ConnLimits, Credentials, ServeOptions};
use cellar::{SqlSession, Store};
use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{Int32Type, Int64Type, UInt64Type};
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::Code;
use tonic::transport::Channel;

struct Server {
    addr: SocketAddr,
    service: CellarFlightSql,
    _dir: tempfile::TempDir,
}

async fn serve(options: ServeOptions) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    let service = CellarFlightSql::with_credentials(session, options.credentials.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = service.clone();
    tokio::spawn(async move { cellar::flight::serve_service(served, listener, &options).await });
    Server {
        addr,
        service,
        _dir: dir,
    }
}

async fn connect(addr: SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

async fn start() -> (FlightSqlServiceClient<Channel>, Server) {
    let server = serve(ServeOptions::default()).await;
    (connect(server.addr).await, server)
}

fn code(e: FlightError) -> Code {
    match e {
        FlightError::Tonic(s) => s.code(),
        other => panic!("not a gRPC status: {other}"),
    }
}

async fn fetch(client: &mut FlightSqlServiceClient<Channel>, info: FlightInfo) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        assert!(endpoint.location.is_empty(), "no hard-coded location");
        let stream = client.do_get(endpoint.ticket.unwrap()).await.unwrap();
        out.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    out
}

async fn query(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Vec<RecordBatch> {
    let info = client.execute(sql.to_string(), None).await.unwrap();
    fetch(client, info).await
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(RecordBatch::num_rows).sum()
}

async fn make_m(client: &mut FlightSqlServiceClient<Channel>, n: u32) {
    client
        .execute_update(
            "CREATE TABLE m (ROW KEY (host TEXT, n INT(6)), FAMILY f, v BIGINT IN f)".into(),
            None,
        )
        .await
        .unwrap();
    let inserted = client
        .execute_update(
            format!("INSERT INTO m (host, n, v) SELECT 'h' || CAST(x % 3 AS VARCHAR), x, x * 2 FROM generate_series(1, {n}) AS t(x)"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(inserted, i64::from(n));
}

#[tokio::test]
async fn statements_run_and_results_stream() {
    let (mut client, _server) = start().await;
    make_m(&mut client, 30000).await;
    let batches = query(
        &mut client,
        "SELECT n, v FROM m WHERE host = 'h1' ORDER BY n",
    )
    .await;
    assert_eq!(rows(&batches), 10000);
    assert!(batches.len() > 1, "results stream in several batches");
    let first = batches[0].column(1).as_primitive::<Int64Type>().value(0);
    assert_eq!(first, 2);
    // The schema announced by GetFlightInfo is the one streamed, field for
    // field, nullability included: planned, and (the second time) from
    // the plan the server kept.
    for _ in 0..2 {
        for sql in [
            "SELECT _key, v FROM m LIMIT 1",
            "SELECT host, count(*) AS c FROM m GROUP BY host",
            "SELECT * FROM m WHERE n < 4",
        ] {
            let info = client.execute(sql.into(), None).await.unwrap();
            let announced = info.clone().try_decode_schema().unwrap();
            let got = fetch(&mut client, info).await;
            assert_eq!(got[0].schema().as_ref(), &announced, "{sql}");
        }
    }
}

/// A statement run again runs from the plan the server kept for its text,
/// and still sees every write; one with parameters is planned with them.
#[tokio::test]
async fn repeated_statements_reuse_their_plan_and_see_writes() {
    let (mut client, _server) = start().await;
    make_m(&mut client, 300).await;
    let count = "SELECT count(*) FROM m WHERE host = 'h1'";
    assert_eq!(count_of(&mut client, count).await, 100);
    assert_eq!(count_of(&mut client, count).await, 100);
    client
        .execute_update(
            "INSERT INTO m (host, n, v) VALUES ('h1', 1000, 0)".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(count_of(&mut client, count).await, 101);
    let stats = query(&mut client, "SHOW STATS").await;
    let names = stats[0].column(0).as_string::<i32>();
    let values = stats[0].column(1).as_primitive::<UInt64Type>();
    let reused = (0..stats[0].num_rows())
        .find(|&i| names.value(i) == "plans_reused")
        .map(|i| values.value(i))
        .unwrap();
    assert!(reused >= 2, "plans_reused = {reused}");
    // The same text with other parameter values answers for those values.
    let mut prepared = client
        .prepare("SELECT count(*) FROM m WHERE host = $1".into(), None)
        .await
        .unwrap();
    for (host, want) in [("h1", 101), ("h2", 100), ("h1", 101)] {
        prepared
            .set_parameters(params(vec![(
                "$1",
                Arc::new(StringArray::from(vec![host])) as ArrayRef,
            )]))
            .unwrap();
        let info = prepared.execute().await.unwrap();
        let got = fetch(&mut client, info).await;
        assert_eq!(
            got[0].column(0).as_primitive::<Int64Type>().value(0),
            want,
            "{host}"
        );
    }
}

#[tokio::test]
async fn ddl_through_a_query_runs_once_and_tickets_are_one_shot() {
    let (mut client, _server) = start().await;
    // GetFlightInfo + DoGet of a CREATE: the table is made once, and the
    // answer says so (not "table exists").
    let info = client
        .execute(
            "CREATE TABLE t (ROW KEY (k TEXT), FAMILY f, v BIGINT IN f)".into(),
            None,
        )
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let batches = fetch(&mut client, info).await;
    let text = batches[0].column(0).as_string::<i32>().value(0).to_string();
    assert!(text.contains("created table t"), "{text}");
    let again = client.do_get(ticket).await.unwrap_err();
    assert_eq!(code(again), Code::NotFound);
    // INSERT through a query counts once.
    let batches = query(
        &mut client,
        "INSERT INTO t (k, v) VALUES ('a', 1), ('b', 2)",
    )
    .await;
    assert_eq!(
        batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
            .value(0),
        2
    );
    let count = query(&mut client, "SELECT count(*) FROM t").await;
    assert_eq!(count[0].column(0).as_primitive::<Int64Type>().value(0), 2);
}

#[tokio::test]
async fn errors_carry_the_right_codes() {
    let (mut client, _server) = start().await;
    let e = client.execute("SELEC 1".into(), None).await.unwrap_err();
    assert!(e.to_string().contains("syntax error"), "{e}");
    let e = client.execute("SELEC 1".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    let e = client
        .execute("SELECT * FROM missing".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    assert!(
        e_text(&client, "SELECT * FROM missing")
            .await
            .contains("missing")
    );
    let e = client
        .execute_update("DROP TABLE missing".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    // cellar's own errors keep their kind.
    make_m(&mut client, 3).await;
    let e = client
        .execute_update("CREATE TABLE m (ROW KEY (k TEXT), FAMILY f)".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::AlreadyExists);
    let e = client
        .execute_update(
            "INSERT INTO m (host, n, v) VALUES ('a#b', 1, 1)".into(),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    let e = client
        .execute_update("ALTER TABLE m DROP FAMILY nope".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    let e = client.begin_transaction().await.unwrap_err();
    assert_eq!(code(e), Code::Unimplemented);
    let e = client
        .get_exported_keys(arrow_flight::sql::CommandGetExportedKeys {
            catalog: None,
            db_schema: None,
            table: "m".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::Unimplemented);
    // A handle that was never made.
    let cmd = CommandPreparedStatementQuery {
        prepared_statement_handle: "0123".into(),
    };
    let e = client
        .get_flight_info(FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // One that is not even text is named in hex.
    let cmd = CommandPreparedStatementQuery {
        prepared_statement_handle: vec![0xff, 0xfe].into(),
    };
    let e = client
        .get_flight_info(FlightDescriptor::new_cmd(cmd.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("0xfffe"), "{}", e.message());
}

async fn e_text(client: &FlightSqlServiceClient<Channel>, sql: &str) -> String {
    let mut client = client.clone();
    client
        .execute(sql.into(), None)
        .await
        .unwrap_err()
        .to_string()
}

trait GetFlightInfo {
    async fn get_flight_info(&mut self, d: FlightDescriptor) -> Result<FlightInfo, tonic::Status>;
}

impl GetFlightInfo for FlightSqlServiceClient<Channel> {
    async fn get_flight_info(&mut self, d: FlightDescriptor) -> Result<FlightInfo, tonic::Status> {
        let mut request = tonic::Request::new(d);
        if let Some(token) = self.token() {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        self.inner_mut()
            .get_flight_info(request)
            .await
            .map(tonic::Response::into_inner)
    }
}

fn params(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    RecordBatch::try_from_iter(columns).unwrap()
}

#[tokio::test]
async fn prepared_statements_bind_parameters() {
    let (mut client, server) = start().await;
    make_m(&mut client, 300).await;
    let mut stmt = client
        .prepare(
            "SELECT n, v FROM m WHERE host = ? AND n <= ? ORDER BY n".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(stmt.parameter_schema().unwrap().fields().len(), 2);
    assert_eq!(
        stmt.dataset_schema().unwrap().field(0).name(),
        "n",
        "the result schema is known before execution"
    );
    // Executing without values names the problem.
    let e = stmt.execute().await.unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    stmt.set_parameters(params(vec![
        ("host", Arc::new(StringArray::from(vec!["h1"])) as ArrayRef),
        ("n", Arc::new(Int64Array::from(vec![10])) as ArrayRef),
    ]))
    .unwrap();
    let info = stmt.execute().await.unwrap();
    let announced = info.clone().try_decode_schema().unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches[0].schema().as_ref(), &announced);
    let ns: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(ns, vec![1, 4, 7, 10]);
    // Rebinding reuses the statement.
    stmt.set_parameters(params(vec![
        ("host", Arc::new(StringArray::from(vec!["h2"])) as ArrayRef),
        ("n", Arc::new(Int64Array::from(vec![5])) as ArrayRef),
    ]))
    .unwrap();
    let info = stmt.execute().await.unwrap();
    assert_eq!(rows(&fetch(&mut client, info).await), 2);
    assert_eq!(server.service.open_prepared_statements(), 1);
    stmt.close().await.unwrap();
    assert_eq!(server.service.open_prepared_statements(), 0);

    // A prepared INSERT runs once per parameter row.
    let mut insert = client
        .prepare("INSERT INTO m (host, n, v) VALUES (?, ?, ?)".into(), None)
        .await
        .unwrap();
    insert
        .set_parameters(params(vec![
            (
                "host",
                Arc::new(StringArray::from(vec!["z", "z", "z"])) as ArrayRef,
            ),
            ("n", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "v",
                Arc::new(Int64Array::from(vec![10, 20, 30])) as ArrayRef,
            ),
        ]))
        .unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 3);
    let sum = query(&mut client, "SELECT sum(v) FROM m WHERE host = 'z'").await;
    assert_eq!(sum[0].column(0).as_primitive::<Int64Type>().value(0), 60);
    // A parameter of the wrong kind is the client's error.
    insert
        .set_parameters(params(vec![
            ("host", Arc::new(StringArray::from(vec!["z"])) as ArrayRef),
            (
                "n",
                Arc::new(StringArray::from(vec!["not a number"])) as ArrayRef,
            ),
            ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ]))
        .unwrap();
    let e = insert.execute_update().await.unwrap_err();
    assert_ne!(code(e), Code::Internal);
    insert.close().await.unwrap();

    // Bad SQL is refused when preparing.
    let e = client.prepare("SELEC ?".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
}

#[tokio::test]
async fn sessions_cannot_use_each_others_handles() {
    let server = serve(ServeOptions::default()).await;
    let mut a = connect(server.addr).await;
    let mut b = connect(server.addr).await;
    // On an anonymous server a handshake still opens a session.
    a.handshake("", "").await.unwrap();
    b.handshake("", "").await.unwrap();
    assert_ne!(a.token(), b.token());
    make_m(&mut a, 10).await;
    let info = a.execute("SELECT * FROM m".into(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    // b learns a's handle and ticket (say, from a log) but cannot use them.
    let handle = CommandPreparedStatementQuery {
        prepared_statement_handle: stmt_handle(&mut a, "SELECT 1").await,
    };
    let e = b
        .get_flight_info(FlightDescriptor::new_cmd(handle.as_any().encode_to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = b.do_get(ticket.clone()).await.unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    // The owner still can.
    let rows_a: usize = a
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .iter()
        .map(RecordBatch::num_rows)
        .sum();
    assert_eq!(rows_a, 10);
    let info = a
        .get_flight_info(FlightDescriptor::new_cmd(handle.as_any().encode_to_vec()))
        .await
        .unwrap();
    assert_eq!(rows(&fetch(&mut a, info).await), 1);
}

/// The raw handle of a new prepared statement (the client type hides it).
async fn stmt_handle(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> prost::bytes::Bytes {
    use arrow_flight::sql::{
        ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    };
    let action = arrow_flight::Action {
        r#type: "CreatePreparedStatement".into(),
        body: ActionCreatePreparedStatementRequest {
            query: sql.into(),
            transaction_id: None,
        }
        .as_any()
        .encode_to_vec()
        .into(),
    };
    let mut results = client.do_action(action).await.unwrap();
    let first = results.next().await.unwrap().unwrap();
    let any = Any::decode(first.body).unwrap();
    let result: ActionCreatePreparedStatementResult = any.unpack().unwrap().unwrap();
    result.prepared_statement_handle
}

fn ingest_command(table: &str, create: bool, exists: TableExistsOption) -> CommandStatementIngest {
    CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: if create {
                TableNotExistOption::Create
            } else {
                TableNotExistOption::Fail
            } as i32,
            if_exists: exists as i32,
        }),
        table: table.into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    }
}

fn readings(from: i64, n: i64) -> RecordBatch {
    let sensor: Vec<String> = (from..from + n)
        .map(|i| format!("s{:03}#{i:06}", i % 7))
        .collect();
    params(vec![
        ("sensor", Arc::new(StringArray::from(sensor)) as ArrayRef),
        (
            "reading",
            Arc::new(Int64Array::from((from..from + n).collect::<Vec<_>>())) as ArrayRef,
        ),
        (
            "unit",
            Arc::new(StringArray::from(vec!["kWh"; usize::try_from(n).unwrap()])) as ArrayRef,
        ),
    ])
}

#[tokio::test]
async fn ingest_of_a_key_column_named_key_writes_the_row_key() {
    // What SELECT * and COPY TO produce loads back unchanged.
    let (mut client, _server) = start().await;
    let batch = params(vec![
        (
            "_key",
            Arc::new(StringArray::from(vec!["b", "a"])) as ArrayRef,
        ),
        ("v", Arc::new(Int64Array::from(vec![2, 1])) as ArrayRef),
        ("s", Arc::new(StringArray::from(vec!["y", "x"])) as ArrayRef),
    ]);
    let n = client
        .execute_ingest(
            ingest_command("plain", true, TableExistsOption::Fail),
            futures::stream::iter(vec![Ok(batch.clone())]),
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    let n = client
        .execute_ingest(
            ingest_command("plain", false, TableExistsOption::Append),
            futures::stream::iter(vec![Ok(batch)]),
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    let batches = query(&mut client, "SELECT _key, v, s FROM plain ORDER BY _key").await;
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    assert!(
        text.contains("| a    | 1 | x |") && text.contains("| b    | 2 | y |"),
        "{text}"
    );
    // An integer `_key` is refused, saying what to do.
    let ints = params(vec![(
        "_key",
        Arc::new(Int64Array::from(vec![1])) as ArrayRef,
    )]);
    let e = client
        .execute_ingest(
            ingest_command("ints", true, TableExistsOption::Fail),
            futures::stream::iter(vec![Ok(ints)]),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("zero-padded INT segment"), "{e}");
}

#[tokio::test]
async fn ingest_creates_appends_and_refuses() {
    let (mut client, _server) = start().await;
    let mut command = ingest_command("meter", true, TableExistsOption::Fail);
    command
        .options
        .insert(cellar::flight::ROW_KEY_OPTION.into(), "sensor".into());
    let batches = vec![Ok(readings(0, 5000)), Ok(readings(5000, 5000))];
    let n = client
        .execute_ingest(command.clone(), futures::stream::iter(batches))
        .await
        .unwrap();
    assert_eq!(n, 10000);
    // The new table's row key is the named column: a prefix is a range.
    let got = query(
        &mut client,
        "SELECT count(*), min(reading) FROM meter WHERE sensor LIKE 's003#%'",
    )
    .await;
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 1429);
    assert_eq!(got[0].column(1).as_primitive::<Int64Type>().value(0), 3);
    let plan = query(
        &mut client,
        "EXPLAIN SELECT * FROM meter WHERE sensor LIKE 's003#%'",
    )
    .await;
    let text = format!("{:?}", plan[0].column(1).as_string::<i32>());
    assert!(
        text.contains("s003#"),
        "prefix pushed into the scan: {text}"
    );
    // The primary key is the row key.
    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "meter".into(),
        })
        .await
        .unwrap();
    let keys = fetch(&mut client, info).await;
    assert_eq!(
        keys[0]
            .column_by_name("column_name")
            .unwrap()
            .as_string::<i32>()
            .value(0),
        "sensor"
    );
    assert_eq!(
        keys[0]
            .column_by_name("key_sequence")
            .unwrap()
            .as_primitive::<Int32Type>()
            .value(0),
        1
    );

    // Again in create mode: the table exists.
    let e = client
        .execute_ingest(
            command.clone(),
            futures::stream::iter(vec![Ok(readings(0, 1))]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::AlreadyExists);
    // Append mode adds rows.
    let append = ingest_command("meter", false, TableExistsOption::Append);
    let n = client
        .execute_ingest(append, futures::stream::iter(vec![Ok(readings(10000, 10))]))
        .await
        .unwrap();
    assert_eq!(n, 10);
    // Appending to a table that does not exist.
    let missing = ingest_command("nope", false, TableExistsOption::Append);
    let e = client
        .execute_ingest(missing, futures::stream::iter(vec![Ok(readings(0, 1))]))
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    // A column type cellar cannot store is named.
    let flags = params(vec![
        ("k", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        ("flag", Arc::new(BooleanArray::from(vec![true])) as ArrayRef),
    ]);
    let e = client
        .execute_ingest(
            ingest_command("flags", true, TableExistsOption::Fail),
            futures::stream::iter(vec![Ok(flags)]),
        )
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("flag") && text.contains("Boolean"), "{text}");
    // An unknown column in append mode is named, and nothing is written.
    let odd = params(vec![
        ("sensor", Arc::new(StringArray::from(vec!["x"])) as ArrayRef),
        (
            "colour",
            Arc::new(StringArray::from(vec!["red"])) as ArrayRef,
        ),
    ]);
    let e = client
        .execute_ingest(
            ingest_command("meter", false, TableExistsOption::Append),
            futures::stream::iter(vec![Ok(odd)]),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("colour"), "{e}");
    let got = query(&mut client, "SELECT count(*) FROM meter").await;
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 10010);
    // Replace mode with a batch it cannot store refuses before dropping
    // anything: the stored rows stay.
    let flags = params(vec![
        ("sensor", Arc::new(StringArray::from(vec!["a"])) as ArrayRef),
        ("flag", Arc::new(BooleanArray::from(vec![true])) as ArrayRef),
    ]);
    let e = client
        .execute_ingest(
            ingest_command("meter", false, TableExistsOption::Replace),
            futures::stream::iter(vec![Ok(flags)]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    let got = query(&mut client, "SELECT count(*) FROM meter").await;
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 10010);
    // Replace mode starts over.
    let n = client
        .execute_ingest(
            ingest_command("meter", false, TableExistsOption::Replace),
            futures::stream::iter(vec![Ok(readings(0, 3))]),
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    let got = query(&mut client, "SELECT count(*) FROM meter").await;
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 3);
}

/// The server's HTTP/2 SETTINGS, read off a raw connection: (id, value).
async fn server_settings(addr: SocketAddr) -> Vec<(u16, u32)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The client preface, then an empty SETTINGS frame.
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    loop {
        let mut head = [0u8; 9];
        socket.read_exact(&mut head).await.unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        socket.read_exact(&mut payload).await.unwrap();
        let (kind, ack) = (head[3], head[4] & 1 == 1);
        if kind == 4 && !ack {
            return payload
                .chunks_exact(6)
                .map(|p| {
                    (
                        u16::from_be_bytes([p[0], p[1]]),
                        u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
                    )
                })
                .collect();
        }
    }
}

/// A bulk ingest's batches arrive in large HTTP/2 frames: the server
/// announces 1 MiB (SETTINGS_MAX_FRAME_SIZE, id 5) where the protocol's
/// default is 16 KiB. A batch of two such frames' worth (which the
/// client sends in pieces of the announced size) is ingested whole.
#[tokio::test]
async fn the_server_takes_large_frames() {
    let (mut client, server) = start().await;
    let settings = server_settings(server.addr).await;
    assert!(
        settings.contains(&(5, 1 << 20)),
        "max frame size not announced: {settings:?}"
    );
    // About 2 MiB of batch in one message.
    let n = client
        .execute_ingest(
            ingest_command("big", true, TableExistsOption::Fail),
            futures::stream::iter(vec![Ok(readings(0, 60_000))]),
        )
        .await
        .unwrap();
    assert_eq!(n, 60_000);
    let got = query(&mut client, "SELECT count(*) FROM big").await;
    assert_eq!(
        got[0].column(0).as_primitive::<Int64Type>().value(0),
        60_000
    );
}

#[tokio::test]
async fn metadata_calls_describe_the_store() {
    let (mut client, _server) = start().await;
    client
        .execute_update("CREATE TABLE quote (ROW KEY (exchange TEXT, symbol TEXT), FAMILY md, bid DOUBLE IN md)".into(), None)
        .await
        .unwrap();
    let info = client.get_catalogs().await.unwrap();
    let batches = fetch(&mut client, info).await;
    assert_eq!(batches[0].column(0).as_string::<i32>().value(0), "cellar");
    let info = client
        .get_tables(CommandGetTables {
            catalog: None,
            db_schema_filter_pattern: None,
            table_name_filter_pattern: Some("quo%".into()),
            table_types: vec![],
            include_schema: true,
        })
        .await
        .unwrap();
    let batches = fetch(&mut client, info).await;
    let batch = &batches[0];
    assert_eq!(batch.num_rows(), 1);
    let names = batch
        .column_by_name("table_name")
        .unwrap()
        .as_string::<i32>();
    assert_eq!(names.value(0), "quote");
    let schema_bytes = batch
        .column_by_name("table_schema")
        .unwrap()
        .as_binary::<i32>()
        .value(0);
    let schema = datafusion::arrow::ipc::convert::try_schema_from_ipc_buffer(schema_bytes).unwrap();
    assert!(schema.field_with_name("bid").is_ok() && schema.field_with_name("symbol").is_ok());

    let info = client.get_table_types().await.unwrap();
    let types = fetch(&mut client, info).await;
    assert_eq!(types[0].column(0).as_string::<i32>().value(0), "TABLE");

    let info = client
        .get_sql_info(vec![
            SqlInfo::FlightSqlServerName,
            SqlInfo::FlightSqlServerVersion,
        ])
        .await
        .unwrap();
    let infos = fetch(&mut client, info).await;
    assert_eq!(rows(&infos), 2);
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&infos)
        .unwrap()
        .to_string();
    assert!(
        text.contains("cellar") && text.contains(env!("CARGO_PKG_VERSION")),
        "{text}"
    );

    let info = client
        .get_xdbc_type_info(arrow_flight::sql::CommandGetXdbcTypeInfo { data_type: None })
        .await
        .unwrap();
    let types = fetch(&mut client, info).await;
    let names = types[0]
        .column_by_name("type_name")
        .unwrap()
        .as_string::<i32>();
    let names: Vec<&str> = names.iter().flatten().collect();
    assert!(
        names.contains(&"BIGINT") && names.contains(&"TEXT"),
        "{names:?}"
    );

    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "quote".into(),
        })
        .await
        .unwrap();
    let keys = fetch(&mut client, info).await;
    let cols: Vec<&str> = keys[0]
        .column_by_name("column_name")
        .unwrap()
        .as_string::<i32>()
        .iter()
        .flatten()
        .collect();
    assert_eq!(cols, vec!["exchange", "symbol"]);
    let info = client
        .get_primary_keys(CommandGetPrimaryKeys {
            catalog: None,
            db_schema: None,
            table: "nope".into(),
        })
        .await
        .unwrap();
    let e = client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .map(|_| ())
        .err();
    let e = match e {
        Some(e) => e,
        None => panic!("primary keys of a missing table"),
    };
    assert_eq!(code(e), Code::NotFound);
}

fn password_server() -> ServeOptions {
    ServeOptions {
        credentials: Credentials {
            user: Some(("analyst".into(), "correct horse".into())),
            token: Some("configured-token-1".into()),
            ..Credentials::default()
        },
        ..ServeOptions::default()
    }
}

#[tokio::test]
async fn credentials_are_required_and_tokens_work() {
    let server = serve(password_server()).await;
    let mut client = connect(server.addr).await;
    // Nothing works without credentials.
    let e = client.execute("SELECT 1".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::Unauthenticated);
    let e = client.get_catalogs().await.unwrap_err();
    assert_eq!(code(e), Code::Unauthenticated);
    // Wrong password: refused, and the message does not echo it.
    let e = client
        .handshake("analyst", "wrong horse")
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("valid authentication credentials"), "{text}");
    assert!(!text.contains("wrong horse"), "{text}");
    // Right password: a bearer token that later calls carry.
    client.handshake("analyst", "correct horse").await.unwrap();
    let token = client.token().cloned().unwrap();
    assert!(!token.is_empty() && token != "correct horse");
    assert_eq!(rows(&query(&mut client, "SELECT 1").await), 1);
    // A forged token is refused; the configured one works without a handshake.
    let mut other = connect(server.addr).await;
    other.set_token("not-a-token".into());
    let e = other.execute("SELECT 1".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::Unauthenticated);
    other.set_token("configured-token-1".into());
    assert_eq!(rows(&query(&mut other, "SELECT 1").await), 1);
}

#[tokio::test]
async fn tls_serves_encrypted_connections() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls");
    let server = serve(ServeOptions {
        credentials: Credentials::default(),
        tls: Some((data.join("server.pem"), data.join("server.key"))),
        ..ServeOptions::default()
    })
    .await;
    let ca = tonic::transport::Certificate::from_pem(std::fs::read(data.join("ca.pem")).unwrap());
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(ca)
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://{}", server.addr))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = FlightSqlServiceClient::new(channel);
    assert_eq!(rows(&query(&mut client, "SELECT 1 AS one").await), 1);
    // A plaintext client gets no answer.
    let mut plain = connect_lazy(server.addr);
    assert!(plain.execute("SELECT 1".into(), None).await.is_err());
}

fn connect_lazy(addr: SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    FlightSqlServiceClient::new(channel)
}

async fn wait_until_idle(service: &CellarFlightSql) -> Duration {
    let started = Instant::now();
    while service.running_queries() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the query was not stopped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

const SLOW: &str =
    "SELECT a.x, b.x FROM generate_series(1, 100000) a(x), generate_series(1, 100000) b(x)";

#[tokio::test]
async fn dropped_streams_and_deadlines_stop_queries() {
    let (mut client, server) = start().await;
    // A client that walks away after the first batch.
    let info = client.execute(SLOW.into(), None).await.unwrap();
    let mut stream = client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.num_rows() > 0);
    assert_eq!(server.service.running_queries(), 1);
    drop(stream);
    wait_until_idle(&server.service).await;

    // A deadline: the stream ends with DEADLINE_EXCEEDED and the query stops.
    let info = client.execute(SLOW.into(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut request = tonic::Request::new(ticket);
    request.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let mut stream = client
        .inner_mut()
        .do_get(request)
        .await
        .unwrap()
        .into_inner();
    let mut status = None;
    while let Some(item) = stream.next().await {
        if let Err(s) = item {
            status = Some(s);
            break;
        }
    }
    let status = status.expect("the stream ended without an error");
    // The server ends the stream itself (tonic's client only sends the
    // grpc-timeout header).
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert!(status.message().contains("deadline"), "{status}");
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(stream);
    wait_until_idle(&server.service).await;
}

async fn count_of(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> i64 {
    let batches = query(client, sql).await;
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

/// What a client executes runs exactly once, whether or not it fetches the
/// result: ADBC's `cursor.execute("INSERT ...")` plans the statement as a
/// query and never fetches it.
#[tokio::test]
async fn writes_run_once_whether_or_not_their_result_is_fetched() {
    let (mut client, server) = start().await;
    client
        .execute_update("CREATE TABLE w (FAMILY f, n BIGINT IN f)".into(), None)
        .await
        .unwrap();
    // Statement as a query, not fetched, then fetched.
    for i in 0..20 {
        client
            .execute(
                format!("INSERT INTO w (_key, n) VALUES ('a{i}', {i})"),
                None,
            )
            .await
            .unwrap();
    }
    assert_eq!(count_of(&mut client, "SELECT count(*) FROM w").await, 20);
    let fetched = query(&mut client, "INSERT INTO w (_key, n) VALUES ('b', 1)").await;
    assert_eq!(
        fetched[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
            .value(0),
        1
    );
    // Statement as an update.
    client
        .execute_update("INSERT INTO w (_key, n) VALUES ('c', 1)".into(), None)
        .await
        .unwrap();
    assert_eq!(count_of(&mut client, "SELECT count(*) FROM w").await, 22);
    // Prepared, executed as a query without fetching, then as an update.
    let mut insert = client
        .prepare("INSERT INTO w (_key, n) VALUES (?, ?)".into(), None)
        .await
        .unwrap();
    // 50 parameter rows: keys `{prefix}00`.. and values 0..
    let rows = |prefix: &str| {
        let keys: Vec<String> = (0..50).map(|i| format!("{prefix}{i:02}")).collect();
        params(vec![
            ("k", Arc::new(StringArray::from(keys)) as ArrayRef),
            (
                "n",
                Arc::new(Int64Array::from_iter_values(0..50)) as ArrayRef,
            ),
        ])
    };
    insert.set_parameters(rows("p")).unwrap();
    insert.execute().await.unwrap();
    assert_eq!(count_of(&mut client, "SELECT count(*) FROM w").await, 72);
    insert.set_parameters(rows("q")).unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 50);
    assert_eq!(count_of(&mut client, "SELECT count(*) FROM w").await, 122);

    // Concurrent clients increment one row through unfetched queries.
    client
        .execute_update("INSERT INTO w (_key, n) VALUES ('ctr', 0)".into(), None)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            for _ in 0..25 {
                c.execute("UPDATE w SET n = n + 1 WHERE _key = 'ctr'".into(), None)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        count_of(&mut client, "SELECT n FROM w WHERE _key = 'ctr'").await,
        100
    );
    // Nothing was left behind half-run.
    assert_eq!(server.service.running_queries(), 0);
}

/// Statements whose expressions nest thousands of levels deep used to
/// overflow a stack and abort the server for every client.
#[tokio::test]
async fn deep_statements_are_refused_and_the_server_stays_up() {
    let (mut client, _server) = start().await;
    make_m(&mut client, 10).await;
    let terms = |t: &str, op: &str| vec![t; 2000].join(op);
    let deep = [
        format!("SELECT {}", terms("1", "+")),
        format!("SELECT * FROM m WHERE {}", terms("v <> 1", " AND ")),
        format!("SELECT {}", terms("'a'", "||")),
        format!("SELECT {} FROM m", terms("v", "+")),
    ];
    for sql in &deep {
        let e = client.execute(sql.clone(), None).await.unwrap_err();
        let text = e.to_string();
        assert!(text.contains("levels deep"), "{text}");
        assert_eq!(code(e), Code::InvalidArgument);
        let e = client.prepare(sql.clone(), None).await.unwrap_err();
        assert_eq!(code(e), Code::InvalidArgument);
        assert_eq!(count_of(&mut client, "SELECT count(*) FROM m").await, 10);
    }
    // An OR chain as long is flat (balanced once parsed): it answers.
    let ors = format!("SELECT count(*) FROM m WHERE {}", terms("v = 4", " OR "));
    assert_eq!(count_of(&mut client, &ors).await, 1);
    // 2000 placeholders in a sum are refused; in a list they prepare.
    let sum = format!("SELECT {}", terms("?", "+"));
    let e = client.prepare(sum, None).await.unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    let list = format!("SELECT count(*) FROM m WHERE v IN ({})", terms("?", ", "));
    let mut stmt = client.prepare(list, None).await.unwrap();
    assert_eq!(stmt.parameter_schema().unwrap().fields().len(), 2000);
    let columns: Vec<(String, ArrayRef)> = (0..2000)
        .map(|i| {
            (
                format!("p{i}"),
                Arc::new(Int64Array::from(vec![i64::from(i) * 2])) as ArrayRef,
            )
        })
        .collect();
    stmt.set_parameters(RecordBatch::try_from_iter(columns).unwrap())
        .unwrap();
    let info = stmt.execute().await.unwrap();
    let got = fetch(&mut client, info).await;
    assert_eq!(got[0].column(0).as_primitive::<Int64Type>().value(0), 10);
}

/// Connections that never authenticate cannot keep clients out: 512
/// idle sockets from the clients' own address leave room for a client
/// (the oldest idle ones are closed to make it), unauthenticated ones are
/// closed at their deadline, and a server full of authenticated clients
/// answers one more with UNAVAILABLE saying so, not a bare reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_connections_cannot_lock_clients_out() {
    use tokio::io::AsyncReadExt;
    let server = serve(ServeOptions {
        limits: ConnLimits {
            max_connections: 6,
            authenticate_within: Duration::from_millis(800),
            ..ConnLimits::default()
        },
        ..password_server()
    })
    .await;
    // An authenticated client first, holding one connection.
    let mut client = connect(server.addr).await;
    client.handshake("analyst", "correct horse").await.unwrap();
    make_m(&mut client, 5).await;
    // 512 silent connections from the same address as the clients.
    let mut idle = Vec::new();
    for _ in 0..512 {
        idle.push(tokio::net::TcpStream::connect(server.addr).await.unwrap());
    }
    // A new client still connects and authenticates, at once.
    let started = Instant::now();
    let mut second = connect(server.addr).await;
    second.handshake("analyst", "correct horse").await.unwrap();
    assert_eq!(count_of(&mut second, "SELECT count(*) FROM m").await, 5);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(count_of(&mut client, "SELECT count(*) FROM m").await, 5);
    // Every idle socket is closed: to make room, or at its deadline.
    let mut buf = [0u8; 64];
    for mut c in idle {
        loop {
            let read = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf))
                .await
                .expect("an unauthenticated connection is closed at its deadline");
            if matches!(read, Ok(0) | Err(_)) {
                break;
            }
        }
    }
    // Fill the server with authenticated clients; one more is told why.
    let mut clients = vec![client, second];
    for _ in 0..4 {
        let mut c = connect(server.addr).await;
        c.handshake("analyst", "correct horse").await.unwrap();
        assert_eq!(count_of(&mut c, "SELECT count(*) FROM m").await, 5);
        clients.push(c);
    }
    let mut over = connect(server.addr).await;
    let e = over
        .handshake("analyst", "correct horse")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--max-connections"), "{e}");
    for c in &mut clients {
        assert_eq!(count_of(c, "SELECT count(*) FROM m").await, 5);
    }
}

/// A client opening a pool of connections at once (more than the bound
/// on unauthenticated connections per address) gets all of them: a
/// connection still handshaking is not cut for the ones after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_connections_opened_at_once_all_get_in() {
    let server = serve(password_server()).await;
    let mut setup = connect(server.addr).await;
    setup.handshake("analyst", "correct horse").await.unwrap();
    make_m(&mut setup, 5).await;
    let addr = server.addr;
    let pool: Vec<_> = (0..24)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = connect(addr).await;
                c.handshake("analyst", "correct horse").await.unwrap();
                count_of(&mut c, "SELECT count(*) FROM m").await
            })
        })
        .collect();
    for task in pool {
        assert_eq!(task.await.unwrap(), 5);
    }
}

/// Over Flight: a query past the memory limit is RESOURCE_EXHAUSTED, one
/// client sees and cancels another's query (CANCELLED), and the server
/// stays up for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_and_cancel_over_flight() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::with_options(
        Store::open(dir.path()).unwrap(),
        cellar::SessionOptions {
            memory_limit: Some(4 << 20),
            ..Default::default()
        },
    );
    let service = CellarFlightSql::new(session);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        cellar::flight::serve_service(service, listener, &ServeOptions::default()).await
    });
    let mut client = connect(addr).await;
    let info = client
        .execute(
            "SELECT count(*) FROM generate_series(1, 2000000) AS a(x) \
             JOIN generate_series(1, 2000000) AS b(y) ON a.x = b.y"
                .into(),
            None,
        )
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let e = client
        .do_get(ticket)
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(e.to_string().contains("memory limit"), "{e}");
    assert_eq!(code(e), Code::ResourceExhausted);

    let info = client
        .execute(
            "SELECT count(*) FROM generate_series(1, 9000000000000) AS t(x) WHERE x % 7 = 3".into(),
            None,
        )
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut slow = connect(addr).await;
    let stream = tokio::spawn(async move {
        slow.do_get(ticket)
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
    });
    let id = loop {
        let shown = query(&mut client, "SHOW QUERIES").await;
        let found = shown.iter().find_map(|b| {
            (0..b.num_rows())
                .find(|&r| {
                    b.column_by_name("sql")
                        .unwrap()
                        .as_string::<i32>()
                        .value(r)
                        .contains("9000000000000")
                })
                .map(|r| {
                    b.column(0)
                        .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
                        .value(r)
                })
        });
        if let Some(id) = found {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    query(&mut client, &format!("CANCEL QUERY {id}")).await;
    let e = stream.await.unwrap().unwrap_err();
    assert_eq!(code(e), Code::Cancelled);
    let one = query(&mut client, "SELECT 1 AS one").await;
    assert_eq!(rows(&one), 1);
}

/// Bytes that are not Flight SQL get an error naming them as such; a huge
/// authorization header is refused as the client's error.
#[tokio::test]
async fn forged_requests_are_named_not_internal() {
    let (_client, server) = start().await;
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = arrow_flight::flight_service_client::FlightServiceClient::new(channel);
    let e = raw
        .do_get(arrow_flight::Ticket {
            ticket: vec![0xde, 0xad, 0xbe, 0xef, 0x01].into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("5 bytes") && !e.message().contains("DecodeError"));
    let e = raw
        .get_flight_info(FlightDescriptor::new_cmd(vec![0xff; 16]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let mut request = tonic::Request::new(arrow_flight::Criteria::default());
    let huge = format!("Basic {}", "A".repeat(1 << 20));
    request
        .metadata_mut()
        .insert("authorization", huge.parse().unwrap());
    let e = raw.list_flights(request).await.unwrap_err();
    assert_ne!(e.code(), Code::Internal, "{e:?}");
    // Still serving.
    let mut client = connect(server.addr).await;
    assert_eq!(count_of(&mut client, "SELECT 1").await, 1);
}

/// A server over `session` (its file access, limits) with `options`.
async fn serve_session(
    session: SqlSession,
    options: ServeOptions,
    dir: tempfile::TempDir,
) -> Server {
    let service = CellarFlightSql::with_credentials(session, options.credentials.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = service.clone();
    tokio::spawn(async move { cellar::flight::serve_service(served, listener, &options).await });
    Server {
        addr,
        service,
        _dir: dir,
    }
}

/// The code and message of a statement that fails, run with
/// execute_update (DDL, writes) or as a query.
async fn refusal(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> (Code, String) {
    let e = match client.execute_update(sql.to_string(), None).await {
        Ok(n) => panic!("{sql} succeeded ({n} rows)"),
        Err(e) => e,
    };
    let text = e.to_string();
    (code(e), text)
}

/// Over Flight, files are off unless the operator names directories:
/// COPY TO, COPY FROM, a path as a table and CREATE EXTERNAL TABLE are
/// PERMISSION_DENIED, naming the path and the option, and nothing is
/// written. Inside `--files-dir` they work (a relative path lands in the
/// first directory); `..`, absolute paths outside, a read-only directory
/// and a symbolic link leading out are refused.
#[tokio::test]
async fn file_access_is_off_over_flight_unless_confined_to_directories() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.csv");
    std::fs::write(&secret, "a,b\n1,2\n").unwrap();
    let secret_text = secret.display().to_string();

    // Off: nothing reaches a file, whatever the statement.
    let (mut client, _server) = start().await;
    client
        .execute_update(
            "CREATE TABLE t (FAMILY f, a TEXT IN f, b TEXT IN f)".into(),
            None,
        )
        .await
        .unwrap();
    let written = outside.path().join("written.csv");
    for sql in [
        format!("COPY (SELECT 'x' AS x) TO '{}'", written.display()),
        format!(
            "COPY (SELECT 'x' AS x) TO '{}' STORED AS CSV",
            written.display()
        ),
        format!("CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{secret_text}'"),
        format!("COPY t FROM '{secret_text}'"),
        format!("CREATE PROTO 'p.proto' FROM FILE '{secret_text}'"),
    ] {
        let (c, text) = refusal(&mut client, &sql).await;
        assert_eq!(c, Code::PermissionDenied, "{sql}: {text}");
        assert!(text.contains("--files-dir"), "{sql}: {text}");
    }
    let e = client
        .execute(format!("SELECT * FROM '{secret_text}'"), None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains(&secret_text), "{e}");
    assert_eq!(code(e), Code::PermissionDenied);
    assert!(!written.exists(), "COPY TO wrote a file");
    // A plain unknown name is still a missing table, not a file.
    let e = client
        .execute("SELECT * FROM nosuch".into(), None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert_eq!(code(e), Code::NotFound, "{text}");

    // Confined: one read-write and one read-only directory.
    let root = tempfile::tempdir().unwrap();
    let rw = root.path().join("rw");
    let ro = root.path().join("ro");
    std::fs::create_dir(&rw).unwrap();
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("in.csv"), "_key,a,b\nk1,x,y\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), rw.join("link")).unwrap();
    std::fs::create_dir(rw.join("mixed")).unwrap();
    std::fs::write(rw.join("mixed/ok.csv"), "_key,a,b\nk2,1,2\n").unwrap();
    std::os::unix::fs::symlink(&secret, rw.join("mixed/sneaky.csv")).unwrap();
    let files = cellar::FileAccess::Confined(vec![
        cellar::FilesDir::new(&rw, true).unwrap(),
        cellar::FilesDir::new(&ro, false).unwrap(),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::with_options(
        Store::open(dir.path()).unwrap(),
        cellar::SessionOptions {
            files,
            ..Default::default()
        },
    );
    let server = serve_session(session, ServeOptions::default(), dir).await;
    let mut client = connect(server.addr).await;
    client
        .execute_update("COPY (SELECT 'x' AS a, 'y' AS b) TO 'out.csv'".into(), None)
        .await
        .unwrap();
    assert!(
        rw.join("out.csv").exists(),
        "a relative path lands in the first directory"
    );
    let back = query(&mut client, "SELECT a, b FROM 'out.csv'").await;
    assert_eq!(rows(&back), 1);
    let ro_file = ro.join("in.csv").display().to_string();
    client
        .execute_update(
            format!("CREATE EXTERNAL TABLE ins STORED AS CSV LOCATION '{ro_file}'"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(rows(&query(&mut client, "SELECT * FROM ins").await), 1);
    client
        .execute_update(
            "CREATE TABLE t (FAMILY f, a TEXT IN f, b TEXT IN f)".into(),
            None,
        )
        .await
        .unwrap();
    let n = client
        .execute_update(format!("COPY t FROM '{ro_file}'"), None)
        .await
        .unwrap();
    assert_eq!(n, 1);
    for (sql, expected) in [
        (
            format!("COPY (SELECT 1 AS x) TO '{}'", ro.join("x.csv").display()),
            "read-only",
        ),
        (
            "COPY (SELECT 1 AS x) TO '../escape.csv'".to_string(),
            "outside the directories",
        ),
        (
            format!("COPY t FROM '{secret_text}'"),
            "outside the directories",
        ),
        (
            format!("CREATE EXTERNAL TABLE leak STORED AS CSV LOCATION '{secret_text}'"),
            "outside the directories",
        ),
        ("COPY t FROM 'link/secret.csv'".to_string(), "which is"),
        (
            "COPY (SELECT 1 AS x) TO 's3://bucket/x.csv'".to_string(),
            "s3 URL",
        ),
    ] {
        let (c, text) = refusal(&mut client, &sql).await;
        assert_eq!(c, Code::PermissionDenied, "{sql}: {text}");
        assert!(text.contains(expected), "{sql}: {text}");
    }
    assert!(!root.path().join("escape.csv").exists());
    // COPY FROM a directory takes its files, not the links among them.
    let n = client
        .execute_update("COPY t FROM 'mixed'".into(), None)
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(!ro.join("x.csv").exists());
    let e = client
        .execute("SELECT * FROM 'link/secret.csv'".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::PermissionDenied);
    // A directory table whose listing holds a link out of it: refused as
    // the file is listed, never read.
    client
        .execute_update(
            format!(
                "CREATE EXTERNAL TABLE mixed STORED AS CSV LOCATION '{}/'",
                rw.join("mixed").display()
            ),
            None,
        )
        .await
        .map(|_| ())
        .unwrap_or_else(|e| assert_eq!(code(e), Code::PermissionDenied));
    let info = client.execute("SELECT * FROM mixed".into(), None).await;
    let refused = match info {
        Err(e) => Some(e),
        Ok(info) => {
            let ticket = info.endpoint[0].ticket.clone().unwrap();
            match client.do_get(ticket).await {
                Err(e) => Some(e),
                Ok(s) => s.try_collect::<Vec<_>>().await.err(),
            }
        }
    };
    let e = refused.expect("the link out of the directory was read");
    assert!(
        e.to_string().contains("secret.csv") || e.to_string().contains("mixed"),
        "{e}"
    );
}

/// Each client (each token) has a session of its own: settings and views
/// one makes are not the other's; a closed session is gone, and so is an
/// idle one.
#[tokio::test]
async fn each_client_has_a_session_of_its_own() {
    let server = serve(ServeOptions {
        credentials: Credentials {
            user: Some(("ana".into(), "pw".into())),
            ..Credentials::default()
        },
        ..ServeOptions::default()
    })
    .await;
    let mut a = connect(server.addr).await;
    let mut b = connect(server.addr).await;
    a.handshake("ana", "pw").await.unwrap();
    b.handshake("ana", "pw").await.unwrap();
    a.execute_update("SET datafusion.execution.batch_size = 123".into(), None)
        .await
        .unwrap();
    a.execute_update("CREATE VIEW mine AS SELECT 1 AS one".into(), None)
        .await
        .unwrap();
    assert_eq!(rows(&query(&mut a, "SELECT * FROM mine").await), 1);
    let e = b
        .execute("SELECT * FROM mine".into(), None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert_eq!(code(e), Code::NotFound, "{text}");
    let setting = |batches: Vec<RecordBatch>| {
        batches[0]
            .column_by_name("value")
            .unwrap()
            .as_string::<i32>()
            .value(0)
            .to_string()
    };
    let sql = "SELECT value FROM information_schema.df_settings WHERE name = 'datafusion.execution.batch_size'";
    assert_eq!(setting(query(&mut a, sql).await), "123");
    assert_ne!(setting(query(&mut b, sql).await), "123");
    // b cannot drop a's view either.
    refusal(&mut b, "DROP VIEW mine").await;
    assert_eq!(rows(&query(&mut a, "SELECT * FROM mine").await), 1);
    assert_eq!(server.service.open_sessions(), 2);

    // CloseSession ends a's session and its token.
    let closed: Vec<_> = a
        .do_action(arrow_flight::Action {
            r#type: "CloseSession".into(),
            body: Default::default(),
        })
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(server.service.open_sessions(), 1);
    let e = a.execute("SELECT 1".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::Unauthenticated);
    a.clear_token();
    a.handshake("ana", "pw").await.unwrap();
    let e = a
        .execute("SELECT * FROM mine".into(), None)
        .await
        .unwrap_err();
    let text = e.to_string();
    assert_eq!(
        code(e),
        Code::NotFound,
        "a new session starts empty: {text}"
    );

    // Idle sessions are dropped.
    let idle = server
        .service
        .clone()
        .with_session_idle(Duration::from_millis(50));
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(idle.open_sessions(), 0);
}

/// The three roles: a reader queries, a user also writes rows, an admin
/// also changes tables. What a role may not do is PERMISSION_DENIED
/// naming the role needed, on every path (statements, prepared
/// statements, ingest); metadata answers every role. A client sees and
/// cancels only its own queries; an admin sees and cancels all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_decide_what_each_user_may_do() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        "user rita reader r-pw\nuser ulf user u-pw\nuser ada admin a-pw\ntoken bot reader bot-token\n",
    )
    .unwrap();
    let mut credentials = Credentials::default();
    credentials.read_users_file(&users).unwrap();
    let server = serve(ServeOptions {
        credentials,
        ..ServeOptions::default()
    })
    .await;
    let login = |user: &'static str, pw: &'static str| {
        let addr = server.addr;
        async move {
            let mut c = connect(addr).await;
            c.handshake(user, pw).await.unwrap();
            c
        }
    };
    let mut admin = login("ada", "a-pw").await;
    let mut user = login("ulf", "u-pw").await;
    let mut reader = login("rita", "r-pw").await;
    let mut bot = connect(server.addr).await;
    bot.set_token("bot-token".into());

    make_m(&mut admin, 30).await;
    let denied = |needed: &'static str| {
        move |(c, text): (Code, String)| {
            assert_eq!(c, Code::PermissionDenied, "{text}");
            assert!(text.contains(&format!("needs the {needed} role")), "{text}");
        }
    };
    // Reader: queries and metadata, nothing else.
    assert_eq!(rows(&query(&mut reader, "SELECT * FROM m").await), 30);
    assert_eq!(rows(&query(&mut bot, "SELECT * FROM m").await), 30);
    let tables = reader
        .get_tables(CommandGetTables::default())
        .await
        .unwrap();
    assert_eq!(rows(&fetch(&mut reader, tables).await), 1);
    reader
        .execute_update("SET datafusion.execution.batch_size = 100".into(), None)
        .await
        .unwrap();
    for sql in [
        "INSERT INTO m (host, n, v) VALUES ('h9', 1, 1)",
        "UPDATE m SET v = 0",
        "DELETE FROM m",
    ] {
        denied("user")(refusal(&mut reader, sql).await);
        denied("user")(refusal(&mut bot, sql).await);
    }
    for sql in [
        "CREATE TABLE x (FAMILY f)",
        "DROP TABLE m",
        "COMPACT TABLE m",
        "ALTER TABLE m ADD FAMILY g",
    ] {
        denied("admin")(refusal(&mut reader, sql).await);
        denied("admin")(refusal(&mut user, sql).await);
    }
    // Prepared statements: refused when prepared (or executed).
    let refused = match reader
        .prepare(
            "INSERT INTO m (host, n, v) VALUES ('h9', ?, 1)".into(),
            None,
        )
        .await
    {
        Err(e) => e,
        Ok(mut p) => {
            p.set_parameters(params(vec![(
                "$1",
                Arc::new(Int64Array::from(vec![5])) as ArrayRef,
            )]))
            .unwrap();
            p.execute_update().await.unwrap_err()
        }
    };
    assert_eq!(code(refused), Code::PermissionDenied);
    // Ingest: rows need the user role, a new table the admin role.
    let h7 = || {
        params(vec![
            ("host", Arc::new(StringArray::from(vec!["h7"])) as ArrayRef),
            ("n", Arc::new(Int64Array::from(vec![77])) as ArrayRef),
            ("v", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ])
    };
    let e = reader
        .execute_ingest(
            ingest_command("m", false, TableExistsOption::Append),
            futures::stream::iter(vec![Ok(h7())]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::PermissionDenied);
    let n = user
        .execute_ingest(
            ingest_command("m", false, TableExistsOption::Append),
            futures::stream::iter(vec![Ok(h7())]),
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let e = user
        .execute_ingest(
            ingest_command("fresh", true, TableExistsOption::Fail),
            futures::stream::iter(vec![Ok(readings(0, 3))]),
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::PermissionDenied);
    // User: rows.
    assert_eq!(
        user.execute_update(
            "INSERT INTO m (host, n, v) VALUES ('h9', 1, 1)".into(),
            None
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(
        user.execute_update("UPDATE m SET v = 0 WHERE host = 'h9'".into(), None)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        user.execute_update("DELETE FROM m WHERE host = 'h9'".into(), None)
            .await
            .unwrap(),
        1
    );
    // Admin: tables.
    admin
        .execute_update("COMPACT TABLE m".into(), None)
        .await
        .unwrap();

    // Queries: each sees its own; the admin sees and cancels all.
    let info = reader
        .execute(
            "SELECT count(*) FROM generate_series(1, 9000000000000) AS t(x) WHERE x % 7 = 3".into(),
            None,
        )
        .await
        .unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    let mut running = reader.clone();
    let stream = tokio::spawn(async move {
        running
            .do_get(ticket)
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
    });
    let listed = |batches: Vec<RecordBatch>| -> Vec<(u64, String)> {
        let mut out = Vec::new();
        for b in &batches {
            for r in 0..b.num_rows() {
                out.push((
                    b.column_by_name("id")
                        .unwrap()
                        .as_primitive::<UInt64Type>()
                        .value(r),
                    b.column_by_name("user")
                        .unwrap()
                        .as_string::<i32>()
                        .value(r)
                        .to_string(),
                ));
            }
        }
        out
    };
    let id = loop {
        let all = listed(query(&mut admin, "SHOW QUERIES").await);
        if let Some((id, _)) = all.iter().find(|(_, u)| u == "rita") {
            break *id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mine = listed(query(&mut user, "SHOW QUERIES").await);
    assert!(mine.iter().all(|(_, u)| u == "ulf"), "{mine:?}");
    let e = client_error(&mut user, &format!("CANCEL QUERY {id}")).await;
    assert!(e.contains(&format!("no query {id}")), "{e}");
    query(&mut admin, &format!("CANCEL QUERY {id}")).await;
    let e = stream.await.unwrap().unwrap_err();
    assert_eq!(code(e), Code::Cancelled);
}

async fn client_error(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> String {
    match client.execute(sql.to_string(), None).await {
        Err(e) => e.to_string(),
        Ok(info) => {
            let ticket = info.endpoint[0].ticket.clone().unwrap();
            match client.do_get(ticket).await {
                Err(e) => e.to_string(),
                Ok(s) => s.try_collect::<Vec<_>>().await.unwrap_err().to_string(),
            }
        }
    }
}

/// Bulk ingest into a series writes its layout, as INSERT does: the
/// batches' columns by name (series key, time, measures), read back as
/// the series' events in every layout tried.
#[tokio::test]
async fn ingest_into_a_series_writes_its_layout() {
    use datafusion::arrow::array::{Float64Array, TimestampMicrosecondArray};
    let (mut client, _server) = start().await;
    for (n, layout) in [
        "ROW PER EVENT",
        "BUCKET '1 hour' CELL PER EVENT SALT 2",
        "SERIALIZED BUCKET '1 day'",
        "BUCKET '1 hour' COLUMN PER EVENT REVERSED",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("w{n}");
        client
            .execute_update(
                format!(
                    "CREATE SERIES {name} (KEY (location TEXT, balloon INT(5)), TIME ts, \
                     pressure BIGINT, temperature DOUBLE) LAYOUT {layout}"
                ),
                None,
            )
            .await
            .unwrap();
        let base = 1_614_945_600_000_000i64; // 2021-03-05 12:00:00
        let batch = params(vec![
            // Columns in another order than declared: matched by name.
            (
                "temperature",
                Arc::new(Float64Array::from(vec![9.5, 9.6, 1.5])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(vec![
                    base,
                    base + 3_600_000_000,
                    base,
                ])) as ArrayRef,
            ),
            (
                "location",
                Arc::new(StringArray::from(vec!["us-west2", "us-west2", "asia"])) as ArrayRef,
            ),
            (
                "balloon",
                Arc::new(Int64Array::from(vec![3698, 3698, 1])) as ArrayRef,
            ),
            (
                "pressure",
                Arc::new(Int64Array::from(vec![94558, 94122, 90000])) as ArrayRef,
            ),
        ]);
        let written = client
            .execute_ingest(
                ingest_command(&name, false, TableExistsOption::Append),
                futures::stream::iter(vec![Ok(batch)]),
            )
            .await
            .unwrap();
        assert_eq!(written, 3, "{layout}");
        let got = query(
            &mut client,
            &format!(
                "SELECT location, balloon, CAST(ts AS VARCHAR) AS t, pressure, temperature \
                 FROM {name} ORDER BY location DESC, ts"
            ),
        )
        .await;
        let shown = datafusion::arrow::util::pretty::pretty_format_batches(&got)
            .unwrap()
            .to_string();
        for line in [
            "| us-west2 | 3698    | 2021-03-05T12:00:00 | 94558    | 9.5         |",
            "| us-west2 | 3698    | 2021-03-05T13:00:00 | 94122    | 9.6         |",
            "| asia     | 1       | 2021-03-05T12:00:00 | 90000    | 1.5         |",
        ] {
            assert!(shown.contains(line), "{layout}:\n{shown}");
        }
    }
}
