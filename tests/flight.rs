//! Flight SQL: statement queries and updates through arrow-flight's own
//! client against a server on 127.0.0.1:0, and the status codes of errors.

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

use arrow_flight::sql::client::FlightSqlServiceClient;
use cellar::{SqlSession, Store};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use futures::TryStreamExt;
use tonic::Code;
use tonic::transport::Channel;

async fn start() -> (FlightSqlServiceClient<Channel>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(cellar::flight::serve_listener(session, listener));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (FlightSqlServiceClient::new(channel), dir)
}

async fn query(client: &mut FlightSqlServiceClient<Channel>, sql: &str) -> Vec<RecordBatch> {
    let info = client.execute(sql.to_string(), None).await.unwrap();
    let mut out = Vec::new();
    for endpoint in info.endpoint {
        let stream = client.do_get(endpoint.ticket.unwrap()).await.unwrap();
        out.extend(stream.try_collect::<Vec<_>>().await.unwrap());
    }
    out
}

#[tokio::test]
async fn statements_run_and_results_stream() {
    let (mut client, _dir) = start().await;
    let created = client
        .execute_update(
            "CREATE TABLE m (ROW KEY (host TEXT, n INT(6)), FAMILY f, v BIGINT IN f)".into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(created, 0);
    let inserted = client
        .execute_update(
            "INSERT INTO m (host, n, v) SELECT 'h' || CAST(x % 3 AS VARCHAR), x, x * 2 FROM generate_series(1, 30000) AS t(x)"
                .into(),
            None,
        )
        .await
        .unwrap();
    assert_eq!(inserted, 30000);
    let batches = query(
        &mut client,
        "SELECT n, v FROM m WHERE host = 'h1' ORDER BY n",
    )
    .await;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 10000);
    assert!(batches.len() > 1, "results stream in several batches");
    let first = batches[0].column(1).as_primitive::<Int64Type>().value(0);
    assert_eq!(first, 2);
    // The schema announced by GetFlightInfo is the one streamed.
    let info = client
        .execute("SELECT _key, v FROM m LIMIT 1".into(), None)
        .await
        .unwrap();
    let announced = info.clone().try_decode_schema().unwrap();
    let got = query(&mut client, "SELECT _key, v FROM m LIMIT 1").await;
    assert_eq!(got[0].schema().as_ref(), &announced);
}

#[tokio::test]
async fn errors_carry_the_right_codes() {
    let (mut client, _dir) = start().await;
    let e = client.execute("SELEC 1".into(), None).await.unwrap_err();
    assert!(e.to_string().contains("syntax error"), "{e}");
    let code = |e: arrow_flight::error::FlightError| match e {
        arrow_flight::error::FlightError::Tonic(s) => s.code(),
        other => panic!("{other}"),
    };
    let e = client.execute("SELEC 1".into(), None).await.unwrap_err();
    assert_eq!(code(e), Code::InvalidArgument);
    let e = client
        .execute("SELECT * FROM missing".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
    let e = client
        .execute_update("DROP TABLE missing".into(), None)
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::NotFound);
}

#[tokio::test]
async fn metadata_lists_the_store_tables_with_schemas() {
    use arrow_flight::sql::CommandGetTables;
    let (mut client, _dir) = start().await;
    client
        .execute_update("CREATE TABLE quote (ROW KEY (exchange TEXT, symbol TEXT), FAMILY md, bid DOUBLE IN md)".into(), None)
        .await
        .unwrap();
    let info = client.get_catalogs().await.unwrap();
    let stream = client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap();
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
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
    let stream = client
        .do_get(info.endpoint[0].ticket.clone().unwrap())
        .await
        .unwrap();
    let batches: Vec<RecordBatch> = stream.try_collect().await.unwrap();
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
}
