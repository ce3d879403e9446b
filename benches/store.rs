//! Store benchmarks against a raw-fjall baseline of the same bytes.
//!
//! Each group measures cellar and then fjall alone doing the same physical
//! work (same cell keys, same values, same batch sizes), so the overhead of
//! our layer reads as a ratio within one run.

#![allow(clippy::expect_used, reason = "a benchmark fails loudly")]

use std::hint::black_box;
use std::time::Duration;

use cellar::{
    CellKey, FamilySpec, Mutation, ReadFilter, ReadRequest, RowMutation, RowSet, Store, TableSpec,
};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

/// Rows of the read benchmarks' table: a million when timed (`--bench`),
/// a tenth of it under `cargo test`, which runs each benchmark once to
/// check it.
fn rows() -> u64 {
    if std::env::args().any(|a| a == "--bench") {
        1_000_000
    } else {
        100_000
    }
}
const BATCH: u64 = 1024;
const INGEST_ROWS: u64 = 100_000;

fn row_key(i: u64) -> String {
    format!("user{i:08}")
}

fn value(i: u64) -> Vec<u8> {
    format!("{:032}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).into_bytes()
}

fn cellar_rows(range: std::ops::Range<u64>) -> Vec<RowMutation> {
    range
        .map(|i| RowMutation::new(row_key(i), vec![Mutation::set_at("f", "v", 1, value(i))]))
        .collect()
}

fn raw_pairs(range: std::ops::Range<u64>) -> Vec<(Vec<u8>, Vec<u8>)> {
    range
        .map(|i| {
            (
                CellKey {
                    row: row_key(i).into_bytes(),
                    qualifier: b"v".to_vec(),
                    timestamp: 1,
                }
                .encode(),
                value(i),
            )
        })
        .collect()
}

fn new_store(dir: &std::path::Path) -> Store {
    let store = Store::open(dir).expect("open store");
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .expect("create table");
    store
}

fn new_raw(dir: &std::path::Path) -> (Database, Keyspace) {
    let db = Database::builder(dir).open().expect("open fjall");
    let ks = db
        .keyspace("raw", KeyspaceCreateOptions::default)
        .expect("keyspace");
    (db, ks)
}

fn cellar_ingest(store: &Store, range: std::ops::Range<u64>) {
    let mut start = range.start;
    while start < range.end {
        let end = (start + BATCH).min(range.end);
        for result in store
            .mutate_rows("t", cellar_rows(start..end))
            .expect("bulk")
        {
            result.expect("row");
        }
        start = end;
    }
}

fn raw_ingest(db: &Database, ks: &Keyspace, range: std::ops::Range<u64>) {
    let mut start = range.start;
    while start < range.end {
        let end = (start + BATCH).min(range.end);
        let mut batch = db.batch().durability(Some(PersistMode::Buffer));
        for (k, v) in raw_pairs(start..end) {
            batch.insert(ks, k, v);
        }
        batch.commit().expect("commit");
        start = end;
    }
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(INGEST_ROWS));
    group.bench_function("cellar", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |dir| {
                let store = new_store(dir.path());
                cellar_ingest(&store, 0..INGEST_ROWS);
                dir
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("fjall", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("tempdir"),
            |dir| {
                let (db, ks) = new_raw(dir.path());
                raw_ingest(&db, &ks, 0..INGEST_ROWS);
                dir
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// Single-row writes from 8 threads, as many clients of a server make
/// them: buffered, and synced (each write waits for an fsync covering it;
/// concurrent writers share fsyncs). The ratio is the price of surviving a
/// power loss; `fsyncs per row` shows how much group commit shares.
fn durability(c: &mut Criterion) {
    const WRITERS: u64 = 8;
    const PER_WRITER: u64 = 250;
    let mut group = c.benchmark_group("durability");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(WRITERS * PER_WRITER));
    for mode in [cellar::Durability::Buffered, cellar::Durability::Synced] {
        group.bench_function(mode.to_string(), |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let store = cellar::FjallStore::open_with(
                        dir.path(),
                        cellar::StoreOptions {
                            durability: mode,
                            ..Default::default()
                        },
                    )
                    .expect("open store");
                    store
                        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
                        .expect("create table");
                    (dir, store)
                },
                |(dir, store)| {
                    let before = store.fsync_count();
                    std::thread::scope(|s| {
                        for w in 0..WRITERS {
                            let store = &store;
                            s.spawn(move || {
                                for i in 0..PER_WRITER {
                                    let n = w * PER_WRITER + i;
                                    store
                                        .mutate_row("t", cellar_rows(n..n + 1).remove(0))
                                        .expect("write");
                                }
                            });
                        }
                    });
                    let fsyncs = store.fsync_count() - before;
                    if mode == cellar::Durability::Synced && fsyncs > 0 {
                        eprintln!(
                            "synced: {fsyncs} fsyncs for {} rows ({:.2} per row)",
                            WRITERS * PER_WRITER,
                            fsyncs as f64 / (WRITERS * PER_WRITER) as f64
                        );
                    }
                    dir
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// A 1M-row table in both forms, compacted so both read the same layout.
struct Loaded {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    store: Store,
    db: Database,
    ks: Keyspace,
}

fn load() -> Loaded {
    let (a, b) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let store = new_store(a.path());
    cellar_ingest(&store, 0..rows());
    store.compact("t").expect("compact");
    let (db, ks) = new_raw(b.path());
    raw_ingest(&db, &ks, 0..rows());
    ks.rotate_memtable_and_wait().expect("flush");
    ks.major_compact().expect("compact");
    Loaded {
        _dirs: (a, b),
        store,
        db,
        ks,
    }
}

fn reads(c: &mut Criterion) {
    let rows = rows();
    let data = load();
    let mut group = c.benchmark_group("point_get");
    let mut i = 0u64;
    group.bench_function("cellar", |b| {
        b.iter(|| {
            i = (i + 7919) % rows;
            let row = data
                .store
                .read_row("t", row_key(i).as_bytes(), ReadFilter::latest())
                .expect("read");
            black_box(row.expect("present"));
        })
    });
    group.bench_function("fjall", |b| {
        b.iter(|| {
            i = (i + 7919) % rows;
            let prefix = cellar::escape(row_key(i).as_bytes());
            let snapshot = data.db.snapshot();
            let mut n = 0;
            for guard in fjall::Readable::prefix(&snapshot, &data.ks, &prefix) {
                black_box(guard.into_inner().expect("pair"));
                n += 1;
            }
            assert_eq!(n, 1);
        })
    });
    group.finish();

    // 1 % of the table: user0012xxxx of a million rows (user00012xxx of
    // a hundred thousand).
    let digits = (rows / 100).ilog10() as usize;
    let mut prefix = row_key(12 * rows / 100).into_bytes();
    prefix.truncate(prefix.len() - digits);
    let mut group = c.benchmark_group("prefix_scan_1pct");
    group.throughput(Throughput::Elements(rows / 100));
    group.bench_function("cellar", |b| {
        b.iter(|| {
            let stream = data
                .store
                .read_rows("t", ReadRequest::rows(RowSet::prefix(prefix.clone())))
                .expect("scan");
            let mut n = 0;
            for row in stream {
                black_box(row.expect("row"));
                n += 1;
            }
            assert_eq!(n, rows / 100);
        })
    });
    group.bench_function("fjall", |b| {
        b.iter(|| {
            let range = cellar::row_prefix_range(&prefix);
            let snapshot = data.db.snapshot();
            let end = range.end.expect("bounded");
            let mut n = 0;
            for guard in fjall::Readable::range(&snapshot, &data.ks, range.start..end) {
                black_box(guard.into_inner().expect("pair"));
                n += 1;
            }
            assert_eq!(n, rows / 100);
        })
    });
    group.finish();

    let mut group = c.benchmark_group("full_scan");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(rows));
    group.bench_function("cellar", |b| {
        b.iter(|| {
            let mut n = 0;
            for row in data.store.read_rows("t", ReadRequest::all()).expect("scan") {
                n += row.expect("row").cells.len() as u64;
            }
            assert_eq!(n, rows);
        })
    });
    // Rows lent from reused buffers, as the SQL scan reads them.
    group.bench_function("cellar_view", |b| {
        b.iter(|| {
            let mut n = 0;
            let mut stream = data.store.read_rows("t", ReadRequest::all()).expect("scan");
            while let Some(row) = stream.next_view().expect("row") {
                for cell in row.cells() {
                    black_box(cell.value);
                    n += 1;
                }
            }
            assert_eq!(n, rows);
        })
    });
    group.bench_function("fjall", |b| {
        b.iter(|| {
            let snapshot = data.db.snapshot();
            let mut n = 0;
            for guard in fjall::Readable::iter(&snapshot, &data.ks) {
                black_box(guard.into_inner().expect("pair"));
                n += 1;
            }
            assert_eq!(n, rows);
        })
    });
    group.finish();
}

criterion_group!(benches, ingest, durability, reads);
criterion_main!(benches);
