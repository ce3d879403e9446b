//! SQL benchmarks on a 1M-row table: a 0.1 % key-range query, a point
//! lookup by full key, and an aggregate over the whole table (then the
//! first two again with other literals each run: typed ad hoc), each through
//! cellar and through a DataFusion MemTable holding the same rows, in the
//! same run. The MemTable has no key order to use, so the first two show
//! what pushdown buys; the aggregate shows what reading from the store
//! costs against reading from memory.

#![allow(clippy::expect_used, reason = "a benchmark fails loudly")]

use std::sync::Arc;
use std::time::Duration;

use cellar::{Mutation, RowMutation, SqlSession, Store};
use criterion::{Criterion, criterion_group, criterion_main};
use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

/// Hosts and rows per host: 100 × 10 000 when timed (`--bench`), 50 ×
/// 5 000 under `cargo test`, which runs each benchmark once to check it
/// (host h042 and the rows the cases ask for are in both).
fn size() -> (u64, u64) {
    if std::env::args().any(|a| a == "--bench") {
        (100, 10_000)
    } else {
        (50, 5_000)
    }
}

fn key(host: u64, n: u64) -> String {
    format!("h{host:03}#{n:08}")
}

fn load_store(session: &SqlSession, rt: &tokio::runtime::Runtime) {
    rt.block_on(
        session.query("CREATE TABLE t (ROW KEY (host TEXT, n INT(8)), FAMILY m, v BIGINT IN m)"),
    )
    .expect("create");
    let store = session.store();
    let (hosts, per_host) = size();
    let mut batch = Vec::with_capacity(10_000);
    for host in 0..hosts {
        for n in 0..per_host {
            let v = i64::try_from(n * 7 % 1000).unwrap_or(0);
            batch.push(RowMutation::new(
                key(host, n),
                vec![Mutation::set_at("m", "v", 1, v.to_be_bytes().to_vec())],
            ));
            if batch.len() == 10_000 || (host + 1 == hosts && n + 1 == per_host) {
                for r in store
                    .mutate_rows("t", std::mem::take(&mut batch))
                    .expect("write")
                {
                    r.expect("row");
                }
            }
        }
    }
    store.flush().expect("flush");
    // The table has the default format: its rows are timed once the
    // background compaction has folded them, as a user's would be a
    // moment after loading.
    let local = store.local().expect("embedded store");
    while !local.folded("t").expect("folded") {
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn mem_table() -> MemTable {
    let schema = Arc::new(Schema::new(vec![
        Field::new("_key", DataType::Utf8, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("n", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
    ]));
    let (hosts, per_host) = size();
    let mut batches = Vec::new();
    for host in 0..hosts {
        let keys: Vec<String> = (0..per_host).map(|n| key(host, n)).collect();
        let hosts: Vec<String> = (0..per_host).map(|_| format!("h{host:03}")).collect();
        let ns: Vec<i64> = (0..per_host)
            .map(|n| i64::try_from(n).unwrap_or(0))
            .collect();
        let vs: Vec<i64> = (0..per_host)
            .map(|n| i64::try_from(n * 7 % 1000).unwrap_or(0))
            .collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(keys)),
            Arc::new(StringArray::from(hosts)),
            Arc::new(Int64Array::from(ns)),
            Arc::new(Int64Array::from(vs)),
        ];
        batches.push(RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch"));
    }
    // Two partitions, like the machine's cores.
    let half = batches.len() / 2;
    let second = batches.split_off(half);
    MemTable::try_new(schema, vec![batches, second]).expect("memtable")
}

fn queries(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = SqlSession::new(Store::open(dir.path()).expect("open"));
    load_store(&session, &rt);
    let mem = SessionContext::new();
    mem.register_table("t", Arc::new(mem_table()))
        .expect("register");

    let cases = [
        (
            "range_0.1pct",
            "SELECT sum(v) FROM t WHERE host = 'h042' AND n >= 2000 AND n < 3000",
        ),
        (
            "point_lookup",
            "SELECT v FROM t WHERE _key = 'h042#00004242'",
        ),
        (
            "aggregate_all",
            "SELECT host, count(*), sum(v) FROM t GROUP BY host",
        ),
    ];
    for (name, sql) in cases {
        let mut group = c.benchmark_group(name);
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(10));
        group.bench_function("cellar", |b| {
            b.iter(|| rt.block_on(session.query(sql)).expect("cellar query"));
        });
        group.bench_function("memtable", |b| {
            b.iter(|| {
                rt.block_on(async { mem.sql(sql).await?.collect().await })
                    .expect("memtable query")
            });
        });
        group.finish();
    }

    // The same statements typed ad hoc: each run another key or range,
    // so no plan kept for a text serves it (cellar plans it from its
    // shape's template; DataFusion plans each statement anyway).
    type Vary = fn(u64) -> String;
    let afresh: [(&str, Vary); 2] = [
        ("range_0.1pct_afresh", |i| {
            let from = 1000 + i % 3000;
            format!(
                "SELECT sum(v) FROM t WHERE host = 'h042' AND n >= {from} AND n < {}",
                from + 1000
            )
        }),
        ("point_lookup_afresh", |i| {
            format!("SELECT v FROM t WHERE _key = '{}'", key(42, i % 5000))
        }),
    ];
    for (name, vary) in afresh {
        let mut group = c.benchmark_group(name);
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(10));
        let mut i = 0;
        group.bench_function("cellar", |b| {
            b.iter(|| {
                i += 1;
                rt.block_on(session.query(&vary(i))).expect("cellar query")
            });
        });
        group.bench_function("memtable", |b| {
            b.iter(|| {
                i += 1;
                rt.block_on(async { mem.sql(&vary(i)).await?.collect().await })
                    .expect("memtable query")
            });
        });
        group.finish();
    }
}

criterion_group!(benches, queries);
criterion_main!(benches);
