//! Large results over Arrow Flight SQL against the same queries in-process,
//! in the same run (a full store scan, and generated rows where Flight's
//! own cost shows): rows/s and MB/s (bytes of the Arrow values, counted
//! the same way on both sides), best of three. The client drops
//! each batch as it arrives, so the peak RSS after the Flight runs shows
//! whether the server streams with bounded memory.
//!
//! `cargo bench --bench flight` (1M rows); without `--bench` (as under
//! `cargo test --all-targets`) it runs once on 20k rows as a smoke test.

#![allow(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use cellar::{SqlSession, Store};
use futures::StreamExt;
use tonic::transport::Channel;

/// A full scan of the store: the store's scan speed bounds both paths.
const SCAN: &str = "SELECT host, n, v, x, s FROM t";

/// Rows computed without the store: Flight's own cost shows.
fn generated(n: u64) -> String {
    format!(
        "SELECT i AS a, i * 2.5 AS b, 'reading-' || CAST(i AS VARCHAR) AS c FROM generate_series(1, {n}) AS g(i)"
    )
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The bytes of a batch's values (its slices, not the buffers they share):
/// the same for a batch made here and one decoded from the wire.
fn arrow_bytes(batch: &datafusion::arrow::array::RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0))
        .sum()
}

struct Run {
    rows: usize,
    bytes: usize,
    time: Duration,
}

impl Run {
    fn line(&self, what: &str) -> String {
        let secs = self.time.as_secs_f64();
        format!(
            "{what:<12} {:>9} rows in {:>7.3} s  {:>10.0} rows/s  {:>7.1} MB/s",
            self.rows,
            secs,
            self.rows as f64 / secs,
            self.bytes as f64 / 1e6 / secs
        )
    }
}

async fn in_process(session: &SqlSession, query: &str) -> Run {
    let started = Instant::now();
    let mut stream = session
        .sql(query)
        .await
        .unwrap()
        .execute_stream()
        .await
        .unwrap();
    let (mut rows, mut bytes) = (0, 0);
    while let Some(batch) = stream.next().await {
        let batch = batch.unwrap();
        rows += batch.num_rows();
        bytes += arrow_bytes(&batch);
    }
    Run {
        rows,
        bytes,
        time: started.elapsed(),
    }
}

async fn over_flight(client: &mut FlightSqlServiceClient<Channel>, query: &str) -> Run {
    let started = Instant::now();
    let info = client.execute(query.into(), None).await.unwrap();
    let (mut rows, mut bytes) = (0, 0);
    for endpoint in info.endpoint {
        let mut stream = client.do_get(endpoint.ticket.unwrap()).await.unwrap();
        while let Some(batch) = stream.next().await {
            let batch = batch.unwrap();
            rows += batch.num_rows();
            bytes += arrow_bytes(&batch);
        }
    }
    Run {
        rows,
        bytes,
        time: started.elapsed(),
    }
}

fn best(runs: Vec<Run>) -> Run {
    runs.into_iter().min_by_key(|r| r.time).unwrap()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 1_000_000 } else { 20_000 };
    let repeats = if full { 3 } else { 1 };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    rt.block_on(async {
        session
            .query(
                "CREATE TABLE t (ROW KEY (host TEXT, n INT(8)), FAMILY m, v BIGINT IN m, x DOUBLE IN m, s TEXT IN m)",
            )
            .await
            .unwrap();
        session
            .query(&format!(
                "INSERT INTO t (host, n, v, x, s) SELECT 'h' || CAST(i % 100 AS VARCHAR), i, i * 7, i / 3.0, 'reading-' || CAST(i % 1000 AS VARCHAR) FROM generate_series(1, {n}) AS g(i)"
            ))
            .await
            .unwrap();
        let loaded = peak_rss_mb();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(cellar::flight::serve(session.clone(), listener, Default::default()));
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = FlightSqlServiceClient::new(channel);
        let generated = generated(n * 5);
        for (query, expected) in [(SCAN, n), (generated.as_str(), n * 5)] {
            let mut local = Vec::new();
            for _ in 0..repeats {
                local.push(in_process(&session, query).await);
            }
            let after_local = peak_rss_mb();
            let mut remote = Vec::new();
            for _ in 0..repeats {
                remote.push(over_flight(&mut client, query).await);
            }
            let after_flight = peak_rss_mb();
            let (local, remote) = (best(local), best(remote));
            assert_eq!(local.rows, remote.rows, "both paths return every row");
            assert_eq!(local.rows, usize::try_from(expected).unwrap());
            println!("{query}  ({expected} rows, best of {repeats})");
            println!("{}", local.line("in-process"));
            println!("{}", remote.line("flight"));
            println!(
                "flight / in-process: {:.2}x the time ({:.0}% of the throughput)",
                remote.time.as_secs_f64() / local.time.as_secs_f64(),
                100.0 * local.time.as_secs_f64() / remote.time.as_secs_f64()
            );
            println!(
                "peak RSS: {loaded:.0} MB after loading, {after_local:.0} MB after in-process, {after_flight:.0} MB after Flight\n"
            );
        }
    });
}
