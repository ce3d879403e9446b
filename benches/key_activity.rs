//! What counting key activity costs: the same loads and queries on one
//! store with the counters on and off, alternating, in the same run
//! (`FjallStore::count_key_activity`), every answer checked equal.
//!
//! - a load: `INSERT ... SELECT` of 10 000-row chunks into a table of the
//!   default format, the counters on, off and off again in a rotating
//!   order (so that the store's flushes and compactions fall on each
//!   alike);
//! - a whole-table `count(*), avg(v)` (every row through the read path);
//! - an aggregate over 1 % of the keys, planned afresh each time;
//! - 400 point lookups, each planned afresh (different keys);
//! - a whole-table hourly average over time buckets (a row per balloon
//!   and hour, a cell per minute in each of four measures, 2 M readings
//!   in 33 600 rows): the read tally's cost per row where a row is wide;
//! - 20 000 point reads through the store itself (no SQL): the read
//!   tally's cost per read.
//!
//! Each query runs on, off and off again, in rotating order, 45 times;
//! the figures are each side's median and the ratio on/off, beside the
//! ratio of the two runs off (the bench's own noise, in the same run); a
//! query's time leaves out comparing its answers. `cargo bench --bench
//! key_activity` (2 M rows); without `--bench` (as under `cargo test
//! --all-targets`) it runs once on 30 000 rows and only checks answers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]

use std::time::Instant;

use cellar::{ReadRequest, RowSet, SqlSession, Store};
use datafusion::arrow::util::pretty::pretty_format_batches;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn answer(session: &SqlSession, sql: &str) -> String {
    pretty_format_batches(&session.query(sql).await.unwrap())
        .unwrap()
        .to_string()
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (rows, chunk, rounds): (u64, u64, usize) = if full {
        (2_000_000, 10_000, 45)
    } else {
        (30_000, 5_000, 1)
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let local = store.local().unwrap().clone();
    let session = SqlSession::new(store.clone());
    rt.block_on(async {
        session
            .query("CREATE TABLE t (ROW KEY (host TEXT, n INT(8)), FAMILY m, v BIGINT IN m, x DOUBLE IN m)")
            .await
            .unwrap();
        // The load, chunk by chunk into `t`: on, off and off again in a
        // rotating order, so that the store's own work (flushes,
        // compactions) falls on each alike. Each chunk's hosts are new (a
        // host per 1 000 rows), so no chunk overlaps rows stored before.
        let mut load: [Vec<f64>; 3] = Default::default();
        let mut counted_rows = 0;
        for (i, first) in (0..rows).step_by(chunk as usize).enumerate() {
            let which = (i % 3 + i / 3) % 3;
            local.count_key_activity(which == 0);
            if which == 0 {
                counted_rows += chunk;
            }
            let started = Instant::now();
            session
                .query(&format!(
                    "INSERT INTO t (host, n, v, x) SELECT 'h' || lpad(CAST(i / 1000 AS VARCHAR), 5, '0'), i, i % 1000, i / 7.0 \
                     FROM generate_series({first}, {first} + {chunk} - 1) AS g(i)"
                ))
                .await
                .unwrap();
            load[which].push(started.elapsed().as_secs_f64());
        }
        let [on, off, again] = load.map(median);
        let mut report = Report(full);
        report.push(format!(
            "load ({chunk} rows a chunk): on {:.0} rows/s, off {:.0} rows/s, on/off time {:.3} (off/off again {:.3})",
            chunk as f64 / on,
            chunk as f64 / off,
            on / off,
            off / again
        ));
        local.count_key_activity(true);
        session.query("COMPACT TABLE t").await.unwrap();
        // Time buckets: a row per balloon and hour, each measure a cell
        // per minute (the comparison bench's "bucket cells"), loaded with
        // the counters on.
        let (balloons, hours): (u64, u64) = if full { (100, 336) } else { (5, 100) };
        session
            .query(
                "CREATE TABLE b (ROW KEY (region TEXT, balloon INT(4), hour TIMESTAMP '%Y-%m-%d-%H'), \
                 FAMILY m FORMAT PACKED, pressure DOUBLE IN m, temperature DOUBLE IN m, \
                 humidity DOUBLE IN m, altitude DOUBLE IN m)",
            )
            .await
            .unwrap();
        let minutes = hours * 60;
        for first in (0..balloons).step_by(10) {
            let last = (first + 10).min(balloons) * minutes - 1;
            session
                .query(&format!(
                    "INSERT INTO b (_key, _timestamp, pressure, temperature, humidity, altitude) \
                     SELECT 'r' || CAST(i / {minutes} % 4 AS VARCHAR) || '#' || lpad(CAST(i / {minutes} AS VARCHAR), 4, '0') \
                     || '#' || to_char(to_timestamp_seconds(1614556800 + i % {minutes} / 60 * 3600), '%Y-%m-%d-%H'), \
                     to_timestamp_seconds(1614556800 + i % {minutes} * 60), CAST(i % 1000 AS DOUBLE), i / 7.0, \
                     CAST(i % 97 AS DOUBLE), CAST(i % 13 AS DOUBLE) \
                     FROM generate_series({}, {last}) AS g(i)",
                    first * minutes
                ))
                .await
                .unwrap();
        }
        session.query("COMPACT TABLE b").await.unwrap();
        // The buckets hold what was loaded: a row per balloon and hour,
        // a version per minute in it.
        for (sql, n) in [
            ("SELECT count(*) AS n FROM b", balloons * hours),
            ("SELECT count(*) AS n FROM versions('b')", balloons * minutes),
        ] {
            let counted = answer(&session, sql).await;
            assert!(counted.contains(&format!("| {n} |")), "{sql}: {counted}");
        }
        type Query = Box<dyn Fn(usize) -> Vec<String>>;
        let queries: Vec<(&str, Query)> = vec![
            (
                "whole table count+avg",
                Box::new(|_| vec!["SELECT count(*), avg(v) FROM t".to_string()]),
            ),
            (
                "1% aggregate, planned afresh",
                Box::new(move |r| {
                    // 20 hosts of 1 000 rows: 1 % of 2 M.
                    let first = (r as u64 * 37) % (rows / 1000 - 20);
                    vec![format!(
                        "SELECT count(*), avg(v) FROM t WHERE host >= 'h{first:05}' AND host < 'h{:05}'",
                        first + 20
                    )]
                }),
            ),
            (
                "400 point lookups, planned afresh",
                Box::new(move |r| {
                    (0..400u64)
                        .map(|k| {
                            let n = (k * 7919 + r as u64 * 104_729) % rows;
                            format!("SELECT v, x FROM t WHERE host = 'h{:05}' AND n = {n}", n / 1000)
                        })
                        .collect()
                }),
            ),
            (
                "bucket cells whole-table hourly avg",
                Box::new(|_| {
                    vec!["SELECT _key AS hour, avg(pressure) FROM versions('b') GROUP BY _key".to_string()]
                }),
            ),
        ];
        for (name, statements) in &queries {
            // Runs on, off and off again, in a rotating order.
            let mut times: [Vec<f64>; 3] = Default::default();
            for round in 0..rounds {
                let mut answers = Vec::new();
                for k in 0..3 {
                    let which = (round + k) % 3;
                    local.count_key_activity(which == 0);
                    let started = Instant::now();
                    let mut results = Vec::new();
                    for sql in statements(round) {
                        results.push(session.query(&sql).await.unwrap());
                    }
                    times[which].push(started.elapsed().as_secs_f64());
                    // Compared outside the time, in an order of its own
                    // (groups come in any order).
                    let mut lines = Vec::new();
                    for batches in &results {
                        let text = pretty_format_batches(batches).unwrap().to_string();
                        lines.extend(text.lines().map(str::to_string));
                    }
                    lines.sort_unstable();
                    answers.push(lines);
                }
                assert!(answers.iter().all(|a| *a == answers[0]), "{name}: on and off answered differently");
            }
            let [on, off, again] = times.map(median);
            report.push(format!(
                "{name}: on {:.2} ms, off {:.2} ms, on/off {:.3} (off/off again {:.3})",
                on * 1e3,
                off * 1e3,
                on / off,
                off / again
            ));
        }
        // The store's own point reads, no SQL: what the read tally costs a
        // read, per read.
        let reads = if full { 20_000u64 } else { 100 };
        let mut times: [Vec<f64>; 3] = Default::default();
        for round in 0..rounds {
            for k in 0..3 {
                let which = (round + k) % 3;
                local.count_key_activity(which == 0);
                let started = Instant::now();
                let mut found = 0;
                for r in 0..reads {
                    let n = (r * 7919 + round as u64 * 104_729) % rows;
                    let key = format!("h{:05}#{n:08}", n / 1000);
                    let request = ReadRequest::rows(RowSet::keys([key]));
                    let mut rows = store.read_rows("t", request).unwrap();
                    while rows.next_view().unwrap().is_some() {
                        found += 1;
                    }
                }
                assert_eq!(found, reads, "every key is there");
                times[which].push(started.elapsed().as_secs_f64() / reads as f64);
            }
        }
        let [on, off, again] = times.map(median);
        report.push(format!(
            "store point reads: on {:.2} us, off {:.2} us a read, on/off {:.3} (off/off again {:.3})",
            on * 1e6,
            off * 1e6,
            on / off,
            off / again
        ));
        local.count_key_activity(true);
        // What was counted adds up to what was done.
        let counted = answer(&session, "SELECT sum(rows_written) AS w FROM key_activity('t')").await;
        // The chunks loaded with the counters on.
        assert!(counted.contains(&format!("{counted_rows}")), "{counted}");
    });
}

/// The bench's figures, printed as they come in a full run.
struct Report(bool);

impl Report {
    fn push(&mut self, line: String) {
        if self.0 {
            println!("{line}");
        }
    }
}
