//! Large results over Arrow Flight SQL against the same queries in-process,
//! in the same run (a full store scan, and generated rows where Flight's
//! own cost shows): rows/s and MB/s (bytes of the Arrow values, counted
//! the same way on both sides), best of three. The client drops
//! each batch as it arrives, so the peak RSS after the Flight runs shows
//! whether the server streams with bounded memory.
//!
//! Then a mixed load: clients sending point lookups, first alone and then
//! while other clients run whole-table aggregates, with the lookups'
//! latency percentiles side by side (every answer checked).
//!
//! `cargo bench --bench flight` (1M rows); without `--bench` (as under
//! `cargo test --all-targets`) it runs once on 20k rows as a smoke test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]

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

/// The lookup clients and the aggregate clients of the mixed load.
const LOOKUP_CLIENTS: usize = 8;
const AGGREGATE_CLIENTS: usize = 8;
/// A whole-table aggregate: heavy, queued behind the heavy-query bound.
const AGGREGATE: &str =
    "SELECT host, count(*) AS c, sum(v) AS s FROM t GROUP BY host ORDER BY host";

async fn connect(addr: std::net::SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    query: &str,
) -> Vec<datafusion::arrow::array::RecordBatch> {
    let info = client.execute(query.into(), None).await.unwrap();
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let mut stream = client.do_get(endpoint.ticket.unwrap()).await.unwrap();
        while let Some(batch) = stream.next().await {
            batches.push(batch.unwrap());
        }
    }
    batches
}

/// Point lookups of random rows until `until`: each one's latency; every
/// answer is checked (v = 7 n).
async fn lookups(addr: std::net::SocketAddr, n: u64, seed: u64, until: Instant) -> Vec<Duration> {
    let mut client = connect(addr).await;
    let mut state = seed;
    let mut latencies = Vec::new();
    while Instant::now() < until {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let i = 1 + (state ^ (state >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9) % n;
        let query = format!("SELECT v FROM t WHERE host = 'h{}' AND n = {i}", i % 100);
        let started = Instant::now();
        let batches = fetch(&mut client, &query).await;
        latencies.push(started.elapsed());
        let v = datafusion::arrow::array::cast::as_primitive_array::<
            datafusion::arrow::datatypes::Int64Type,
        >(batches[0].column(0))
        .value(0);
        assert_eq!(v, i64::try_from(i * 7).unwrap(), "{query}");
    }
    latencies
}

/// Whole-table aggregates until `until`: each one's latency; every answer
/// is compared with the in-process one.
async fn aggregates(addr: std::net::SocketAddr, expected: String, until: Instant) -> Vec<Duration> {
    let mut client = connect(addr).await;
    let mut latencies = Vec::new();
    while Instant::now() < until {
        let started = Instant::now();
        let batches = fetch(&mut client, AGGREGATE).await;
        latencies.push(started.elapsed());
        let got = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert_eq!(got, expected, "the aggregate's answer over Flight");
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[at].as_secs_f64() * 1e3
}

fn latency_line(what: &str, mut latencies: Vec<Duration>, seconds: f64) -> (f64, f64) {
    latencies.sort();
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    println!(
        "{what:<34} {:>8.1} q/s  p50 {p50:>8.2} ms  p99 {p99:>8.2} ms  max {:>8.2} ms",
        latencies.len() as f64 / seconds,
        percentile(&latencies, 1.0)
    );
    (p50, p99)
}

/// Point lookups alone, then with aggregates running beside them.
async fn mixed_load(session: &SqlSession, addr: std::net::SocketAddr, n: u64, seconds: f64) {
    let expected = datafusion::arrow::util::pretty::pretty_format_batches(
        &session
            .sql(AGGREGATE)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    let phase = Duration::from_secs_f64(seconds);
    println!(
        "mixed load over Flight ({n} rows; {LOOKUP_CLIENTS} lookup clients, then also {AGGREGATE_CLIENTS} clients running `{AGGREGATE}`; {seconds} s each)"
    );
    let until = Instant::now() + phase;
    let alone: Vec<_> = (0..LOOKUP_CLIENTS)
        .map(|c| tokio::spawn(lookups(addr, n, c as u64, until)))
        .collect();
    let mut alone_latencies = Vec::new();
    for task in alone {
        alone_latencies.extend(task.await.unwrap());
    }
    let (_, alone_p99) = latency_line("point lookups alone", alone_latencies, seconds);
    let until = Instant::now() + phase;
    let heavy: Vec<_> = (0..AGGREGATE_CLIENTS)
        .map(|_| tokio::spawn(aggregates(addr, expected.clone(), until)))
        .collect();
    let light: Vec<_> = (0..LOOKUP_CLIENTS)
        .map(|c| tokio::spawn(lookups(addr, n, 100 + c as u64, until)))
        .collect();
    let (mut light_latencies, mut heavy_latencies) = (Vec::new(), Vec::new());
    for task in light {
        light_latencies.extend(task.await.unwrap());
    }
    for task in heavy {
        heavy_latencies.extend(task.await.unwrap());
    }
    // The aggregates still running at the end finish after `until`.
    let (_, mixed_p99) = latency_line("point lookups beside aggregates", light_latencies, seconds);
    latency_line("aggregates beside point lookups", heavy_latencies, seconds);
    println!(
        "lookup p99 beside aggregates / alone: {:.2}x\n",
        mixed_p99 / alone_p99
    );
}

fn best(runs: Vec<Run>) -> Run {
    runs.into_iter().min_by_key(|r| r.time).unwrap()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n: u64 = if full { 1_000_000 } else { 20_000 };
    let repeats = if full { 3 } else { 1 };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = tokio::runtime::Runtime::new().unwrap();
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
        // The server has its own runtime (threads), as it would in its own
        // process: clients waiting for a worker do not count as server time.
        let _entered = server.enter();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        server.spawn(cellar::flight::serve(session.clone(), listener, Default::default()));
        drop(_entered);
        let mut client = connect(addr).await;
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
        mixed_load(&session, addr, n, if full { 10.0 } else { 0.5 }).await;
    });
}
