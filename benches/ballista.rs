//! A partitioned full scan through Ballista against the Bigtable
//! emulator: two executors against one, in one run, each answer checked
//! against the local path's. Also how much of the time the emulator
//! itself spends (its CPU time over the wall time), since it shares the
//! machine. `cargo bench --features ballista,bigtable --bench ballista`;
//! `CELLAR_BENCH_ROWS` sets the table's size (default 600 000 rows).

#![allow(
    clippy::unwrap_used,
    reason = "a benchmark should fail loudly at the failing call"
)]

#[path = "../tests/common/emulator.rs"]
mod emulator;

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
    let Some(emulator) = emulator::Emulator::start() else {
        return;
    };
    let rows: u64 = std::env::var("CELLAR_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = Store::new(std::sync::Arc::new(
            cellar::BigtableStore::connect("projects/p/instances/i", &emulator.endpoint()).unwrap(),
        ));
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
        eprintln!("loaded {rows} rows in {:.1?}", started.elapsed());
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
        let (mut wall, mut emulator_cpu) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..RUNS {
            for (session, times) in [(&one, &mut t1), (&two, &mut t2)] {
                let cpu = cpu_time(emulator.pid());
                let start = Instant::now();
                let got = answer(session).await;
                let took = start.elapsed();
                emulator_cpu += cpu_time(emulator.pid()).saturating_sub(cpu);
                wall += took;
                assert_eq!(
                    got, expected,
                    "a distributed answer differs from the local one"
                );
                times.push(took);
            }
        }
        let (m1, m2) = (median(t1), median(t2));
        println!("ballista full scan of {rows} rows on the Bigtable emulator, median of {RUNS}:");
        println!("  1 executor (1 task slot):    {m1:>10.1?}");
        println!("  2 executors (1 slot each):   {m2:>10.1?}");
        println!(
            "  speed-up 2 vs 1: {:.2}x; the emulator's CPU time was {:.0}% of the wall time",
            m1.as_secs_f64() / m2.as_secs_f64(),
            100.0 * emulator_cpu.as_secs_f64() / wall.as_secs_f64()
        );
    });
}
