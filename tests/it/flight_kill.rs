//! A `cellar serve` killed with SIGKILL while clients write: every write
//! the server acknowledged is there after a restart, and no row is half
//! written (each row's two families commit together).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use crate::common;

use std::process::{Child, Command};
use std::time::Duration;

use arrow_flight::sql::client::FlightSqlServiceClient;
use cellar::{ReadFilter, ReadRequest, Store};
use tonic::transport::Channel;

fn start(store: &std::path::Path) -> (Child, String) {
    let served = common::start(
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(["serve", "--addr", "127.0.0.1:0", "--store"])
            .arg(store)
            .env_remove("CELLAR_PASSWORD")
            .env_remove("CELLAR_TOKEN"),
    );
    (served.child, served.addr)
}

async fn connect(addr: &str) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_killed_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut acked: Vec<u64> = Vec::new();
    for round in 0..3u64 {
        let (mut server, addr) = start(&store);
        let mut client = connect(&addr).await;
        if round == 0 {
            client
                .execute_update(
                    "CREATE TABLE t (FAMILY a, FAMILY b, x BIGINT IN a, y BIGINT IN b)".into(),
                    None,
                )
                .await
                .unwrap();
        }
        let killer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150 + 100 * round)).await;
            server.kill().unwrap();
            server.wait().unwrap();
        });
        for i in round * 1_000_000.. {
            let sql = format!("INSERT INTO t (_key, x, y) VALUES ('k{i:010}', {i}, {i})");
            match client.execute_update(sql, None).await {
                Ok(1) => acked.push(i),
                Ok(n) => panic!("insert answered {n}"),
                Err(_) => break,
            }
        }
        killer.await.unwrap();
        // Everything acknowledged is there; every row is whole.
        let store = Store::open(&store).unwrap();
        let mut seen = 0usize;
        for row in store
            .read_rows("t", ReadRequest::all().filter(ReadFilter::latest()))
            .unwrap()
        {
            let row = row.unwrap();
            assert_eq!(
                row.cells.len(),
                2,
                "row {} is half written",
                String::from_utf8_lossy(&row.key)
            );
            seen += 1;
        }
        for i in &acked {
            let key = format!("k{i:010}");
            assert!(
                store
                    .read_row("t", key.as_bytes(), ReadFilter::latest())
                    .unwrap()
                    .is_some(),
                "acknowledged row {key} is missing"
            );
        }
        assert!(seen >= acked.len());
    }
    assert!(
        acked.len() > 3,
        "the server acknowledged only {} writes",
        acked.len()
    );
}

/// Sends SIGTERM, as an operator stopping the server does, and waits.
fn stop(mut server: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(server.wait().unwrap().success());
}

async fn count(session: &cellar::SqlSession, table: &str) -> i64 {
    let batches = session
        .query(&format!("SELECT count(*) FROM {table}"))
        .await
        .unwrap();
    batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap()
        .value(0)
}

/// Writes through every path (INSERT, UPDATE, COPY FROM, Flight ingest)
/// into a tall table, a bucket layout and a series, then a clean stop
/// (SIGTERM): the next open replays no journal. A writer killed after
/// that: the open after it replays, and keeps everything acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_no_journal_to_replay() {
    use arrow_flight::sql::{
        CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
    };
    use datafusion::arrow::array::{ArrayRef, Float64Array, StringArray};
    use datafusion::arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let files = dir.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let csv: String = (0..3000)
        .map(|i| format!("r{}#2024-01-01-{:02},{i}.5\n", i % 9, i % 24))
        .collect();
    std::fs::write(files.join("b.csv"), format!("_key,v\n{csv}")).unwrap();
    let served = common::start(
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(["serve", "--addr", "127.0.0.1:0", "--files-dir"])
            .arg(&files)
            .arg("--store")
            .arg(&store)
            .env_remove("CELLAR_PASSWORD")
            .env_remove("CELLAR_TOKEN"),
    );
    let mut client = connect(&served.addr).await;
    for sql in [
        "CREATE TABLE tall (FAMILY f, v DOUBLE IN f)",
        "CREATE TABLE hourly (ROW KEY (region TEXT, hour TIMESTAMP '%Y-%m-%d-%H'), \
         FAMILY m FORMAT PACKED, v DOUBLE IN m)",
        "CREATE SERIES weather (KEY (location TEXT), TIME ts, pressure BIGINT) \
         LAYOUT BUCKET '1 hour' CELL PER EVENT",
        "INSERT INTO tall (_key, v) SELECT 'k' || CAST(x AS VARCHAR), x FROM generate_series(1, 3000) AS t(x)",
        "INSERT INTO hourly (_key, _timestamp, v) SELECT 'r' || CAST(x % 9 AS VARCHAR) || '#2024-01-01-' \
         || lpad(CAST(x % 24 AS VARCHAR), 2, '0'), to_timestamp_micros(x), x FROM generate_series(1, 3000) AS t(x)",
        "INSERT INTO weather SELECT 'loc' || CAST(x % 5 AS VARCHAR), to_timestamp_micros(x * 1000000), x \
         FROM generate_series(1, 3000) AS t(x)",
        "COPY hourly FROM 'b.csv'",
        "UPDATE tall SET v = v + 1 WHERE v < 500",
        "UPDATE hourly SET v = v * 2 WHERE _key < 'r3'",
    ] {
        client.execute_update(sql.into(), None).await.unwrap();
    }
    let keys: Vec<String> = (0..3000).map(|i| format!("i{i:05}")).collect();
    let batch = RecordBatch::try_from_iter(vec![
        ("_key", Arc::new(StringArray::from(keys)) as ArrayRef),
        (
            "v",
            Arc::new(Float64Array::from_iter_values((0..3000).map(f64::from))) as ArrayRef,
        ),
    ])
    .unwrap();
    let ingest = CommandStatementIngest {
        table_definition_options: Some(TableDefinitionOptions {
            if_not_exist: TableNotExistOption::Fail as i32,
            if_exists: TableExistsOption::Append as i32,
        }),
        table: "tall".into(),
        schema: None,
        catalog: None,
        temporary: false,
        transaction_id: None,
        options: Default::default(),
    };
    let n = client
        .execute_ingest(ingest, futures::stream::iter(vec![Ok(batch)]))
        .await
        .unwrap();
    assert_eq!(n, 3000);
    stop(served.child);
    {
        let opened = cellar::Store::open(&store).unwrap();
        assert_eq!(opened.local().unwrap().journal_bytes_replayed(), 0);
        let session = cellar::SqlSession::new(opened.clone());
        assert_eq!(count(&session, "tall").await, 6000);
        assert_eq!(count(&session, "weather").await, 3000);
        assert!(count(&session, "hourly").await > 0);
        // The shell's clean close, as after `cellar -c`.
        cellar::shell::close(&opened);
    }
    // A writer killed: the next open replays what it must and keeps it.
    let (mut server, addr) = start(&store);
    let mut client = connect(&addr).await;
    assert_eq!(
        client
            .execute_update(
                "INSERT INTO weather VALUES ('late', TIMESTAMP '2024-01-01 00:00:00', 1)".into(),
                None
            )
            .await
            .unwrap(),
        1
    );
    server.kill().unwrap();
    server.wait().unwrap();
    let opened = cellar::Store::open(&store).unwrap();
    assert!(opened.local().unwrap().journal_bytes_replayed() > 0);
    let session = cellar::SqlSession::new(opened.clone());
    assert_eq!(count(&session, "weather").await, 3001);
}
