//! A partitioned full scan through Ballista against the Bigtable
//! emulator: two executors against one, in one run, each answer checked
//! against the local path's. Also how much of the time the emulator
//! itself spends (its CPU time over the wall time), since it shares the
//! machine, and its Go collector setting (`GOGC`, the fixture's unless
//! set in the environment). `cargo bench --features ballista,bigtable --bench ballista`;
//! `CELLAR_BENCH_ROWS` sets the table's size (default 600 000 rows; 2 000
//! without `--bench`, as under `cargo test --all-targets`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark should fail loudly at the failing call"
)]

#[path = "../tests/common/emulator.rs"]
mod emulator;
#[path = "../tests/common/skip.rs"]
mod skip;

use std::time::{Duration, Instant};

use cellar::{SqlSession, Store};
use datafusion::arrow::util::pretty::pretty_format_batches;

const QUERY: &str =
    "SELECT sensor, count(*), sum(value), max(note) FROM readings GROUP BY sensor ORDER BY sensor";
const RUNS: usize = 5;

/// CPU time (user + system) a process has used.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime, fields 14 and 15 of stat (11 and 12 after the name).
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

async fn answer(session: &SqlSession) -> String {
    let batches = session.query(QUERY).await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // Without `--bench` (as under `cargo test --all-targets`) a tiny table:
    // the same code runs, answers checked, in seconds.
    let benching = std::env::args().any(|a| a == "--bench");
    let rows: u64 = std::env::var("CELLAR_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if benching { 600_000 } else { 2_000 });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        match emulator::Emulator::start() {
            Some(emulator) => {
                let gogc = std::env::var("GOGC").unwrap_or_else(|_| emulator::GOGC.into());
                eprintln!("the emulator's Go collector: GOGC={gogc}");
                let store = Store::new(std::sync::Arc::new(
                    cellar::BigtableStore::connect("projects/p/instances/i", &emulator.endpoint())
                        .unwrap(),
                ));
                compare("the Bigtable emulator", store, rows, Some(emulator.pid())).await;
            }
            None => eprintln!("skipped the emulator: it is not installed"),
        }
        // The same on the embedded store, whose reads are cellar's own
        // work: how the distributed path scales when storage is not the
        // bottleneck.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        compare("the embedded store", store, rows * 5, None).await;
    });
}

/// Loads `rows` rows into `store` and times the scan with one executor
/// and with two, alternating.
async fn compare(what: &str, store: Store, rows: u64, emulator: Option<u32>) {
    let local = SqlSession::new(store);
    let started = Instant::now();
    for sql in [
        "CREATE TABLE readings (ROW KEY (sensor TEXT, seq INT(8)), FAMILY m, \
         value BIGINT IN m, note TEXT IN m)"
            .to_string(),
        format!(
            "INSERT INTO readings (sensor, seq, value, note) \
             SELECT 's' || CAST(i % 7 AS VARCHAR), i, i * 3, 'n' || CAST(i % 11 AS VARCHAR) \
             FROM generate_series(1, {rows}) AS t(i)"
        ),
        // Two key ranges, one task each.
        "SET datafusion.execution.target_partitions = 2".to_string(),
    ] {
        local.query(&sql).await.unwrap();
    }
    eprintln!("{what}: loaded {rows} rows in {:.1?}", started.elapsed());
    let expected = answer(&local).await;
    let one = local
        .distributed(&cellar::start_cluster(&local, 1, 1).await.unwrap())
        .unwrap();
    let two = local
        .distributed(&cellar::start_cluster(&local, 2, 1).await.unwrap())
        .unwrap();
    // Warm both.
    assert_eq!(answer(&one).await, expected);
    assert_eq!(answer(&two).await, expected);
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    let (mut wall, mut storage_cpu, mut own_cpu) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..RUNS {
        for (session, times) in [(&one, &mut t1), (&two, &mut t2)] {
            let storage = emulator.map(cpu_time);
            let own = cpu_time(std::process::id());
            let start = Instant::now();
            let got = answer(session).await;
            let took = start.elapsed();
            if let (Some(pid), Some(before)) = (emulator, storage) {
                storage_cpu += cpu_time(pid).saturating_sub(before);
            }
            own_cpu += cpu_time(std::process::id()).saturating_sub(own);
            wall += took;
            assert_eq!(
                got, expected,
                "a distributed answer differs from the local one"
            );
            times.push(took);
        }
    }
    let (m1, m2) = (median(t1), median(t2));
    let share = |cpu: Duration| 100.0 * cpu.as_secs_f64() / wall.as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!("Ballista full scan of {rows} rows on {what}, median of {RUNS}:");
    println!("  1 executor (1 task slot):    {m1:>10.1?}");
    println!("  2 executors (1 slot each):   {m2:>10.1?}");
    println!(
        "  speed-up 2 vs 1: {:.2}x; CPU time as a share of wall time (of {}%): cellar {:.0}%{}",
        m1.as_secs_f64() / m2.as_secs_f64(),
        cores * 100,
        share(own_cpu),
        match emulator {
            Some(_) => format!(", the emulator {:.0}%", share(storage_cpu)),
            None => String::new(),
        }
    );
}
