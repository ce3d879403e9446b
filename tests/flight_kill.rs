//! A `cellar serve` killed with SIGKILL while clients write: every write
//! the server acknowledged is there after a restart, and no row is half
//! written (each row's two families commit together).

#![allow(clippy::unwrap_used, reason = "tests fail loudly on purpose")]

mod common;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_killed_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut acked: Vec<u64> = Vec::new();
    for round in 0..3u64 {
        let (mut server, addr) = start(&store);
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightSqlServiceClient::new(channel);
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
