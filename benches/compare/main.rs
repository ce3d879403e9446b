//! The comparison bench: the same generated readings loaded into SQLite,
//! DuckDB, DataFusion over Parquet and cellar in five layouts, the same
//! questions asked of each, every answer checked equal, and cellar's time
//! printed as a ratio to the best peer. Run it with `scripts/bench-compare
//! [--small]` (which sets up the Python peers); `cargo bench --bench
//! compare` alone needs `--python PATH` for them. `--counters` adds what
//! counting key activity costs: every layout's ingest and every query with
//! the counters on and off on one store (`counters.rs`).
//!
//! Without `--bench` (as under `cargo test --all-targets`) it runs a tiny
//! data set through cellar's layouts and DataFusion only, checking that
//! every layout answers every question alike (and with the counters on
//! and off alike).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark fails loudly"
)]
#![allow(missing_docs, reason = "a benchmark, not an API")]

mod answers;
mod counters;
mod data;
mod layouts;
mod report;
mod series;
mod skew;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::sql::client::FlightSqlServiceClient;
use cellar::{SqlSession, Store};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::catalog::MemorySchemaProvider;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::datasource::MemTable;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use tonic::transport::Channel;

use data::Size;
use layouts::{LAYOUTS, Layout, Query};
use report::{Measured, Report};

/// Runs SQL on one engine.
enum Runner<'a> {
    Cellar(&'a SqlSession),
    DataFusion(&'a SessionContext),
    Flight(Box<FlightSqlServiceClient<Channel>>),
}

impl Runner<'_> {
    async fn run(&mut self, sql: &str) -> Result<Vec<RecordBatch>, String> {
        match self {
            Runner::Cellar(session) => session.query(sql).await.map_err(|e| e.to_string()),
            Runner::DataFusion(ctx) => {
                let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
                df.collect().await.map_err(|e| e.to_string())
            }
            Runner::Flight(client) => {
                let info = client
                    .execute(sql.to_string(), None)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut batches = Vec::new();
                for endpoint in info.endpoint {
                    let ticket = endpoint.ticket.ok_or("an endpoint without a ticket")?;
                    let mut stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
                    while let Some(batch) = stream.next().await {
                        batches.push(batch.map_err(|e| e.to_string())?);
                    }
                }
                Ok(batches)
            }
        }
    }
}

/// How long to keep repeating a query: at least `MIN_RUNS` timed runs
/// after one warm-up, then until `BUDGET` is spent or `MAX_RUNS` ran.
/// A query of microseconds runs up to a thousand times: thirty runs of it
/// take under a millisecond in all, too few for caches to settle (a row
/// per event's latest value measured 41 µs over thirty runs and 25 µs
/// over a thousand; SQLite's 8 and 9 µs).
const MIN_RUNS: usize = 3;
const MAX_RUNS: usize = 1000;
const BUDGET: Duration = Duration::from_millis(1500);

/// Whether queries are timed (`--bench`): under `cargo test` each one runs
/// once more after its answer was taken (and, where asked, planned
/// afresh), which checks the same answers in seconds instead of minutes.
static TIMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn timed() -> bool {
    TIMED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Timed runs at least, and the time to keep running after them.
fn runs() -> (usize, Duration) {
    if timed() {
        (MIN_RUNS, BUDGET)
    } else {
        (1, Duration::ZERO)
    }
}

/// The median time of a query and its answer (from the warm-up run).
/// cellar runs a repeated statement from the plan it kept for its text,
/// as SQLite's Python module does from its statement cache.
async fn measure(runner: &mut Runner<'_>, sql: &str) -> Result<Measured, String> {
    measure_runs(runner, sql, false).await
}

/// [`measure`] with the statement planned afresh each run: each run's
/// text differs (a comment), so no kept plan serves it.
async fn measure_planned(runner: &mut Runner<'_>, sql: &str) -> Result<Measured, String> {
    measure_runs(runner, sql, true).await
}

async fn measure_runs(runner: &mut Runner<'_>, sql: &str, fresh: bool) -> Result<Measured, String> {
    let batches = runner.run(sql).await.map_err(|e| format!("{sql}: {e}"))?;
    let answer = answers::from_batches(&batches)?;
    let mut times = Vec::new();
    let started = Instant::now();
    let (min_runs, budget) = runs();
    while times.len() < min_runs || (times.len() < MAX_RUNS && started.elapsed() < budget) {
        let text = if fresh {
            format!("{sql} -- run {}", times.len())
        } else {
            sql.to_string()
        };
        let t = Instant::now();
        runner.run(&text).await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(Measured {
        seconds: times[times.len() / 2].as_secs_f64(),
        answer: Some(answer),
    })
}

/// Every query on each chosen cellar layout, then `SELECT 1` (the floor,
/// as engine "cellar"): (engine, query, measurement).
async fn measure_cellar(
    runner: &mut Runner<'_>,
    queries: &[Query],
    chosen: &impl Fn(&&Layout) -> bool,
) -> Vec<(&'static str, String, Measured)> {
    let mut out = Vec::new();
    for q in queries {
        for (layout, sql) in LAYOUTS.iter().zip(&q.cellar).filter(|(l, _)| chosen(l)) {
            out.push((
                layout.name,
                q.name.clone(),
                measure(runner, sql).await.unwrap(),
            ));
        }
    }
    let floor = measure(runner, "SELECT 1").await.unwrap();
    out.push(("cellar", "SELECT 1".to_string(), floor));
    out
}

/// Every query on each chosen cellar layout planned afresh, as typed ad
/// hoc: each run another of `variants` (the same query with other
/// literals, [`layouts::queries_at`]), its text also told apart by a
/// comment, so no plan kept for a text serves it. (layout, query,
/// seconds).
async fn measure_cellar_afresh(
    runner: &mut Runner<'_>,
    variants: &[Vec<Query>],
    chosen: &impl Fn(&&Layout) -> bool,
) -> Vec<(&'static str, String, f64)> {
    let mut out = Vec::new();
    let Some(first) = variants.first() else {
        return out;
    };
    for (i, q) in first.iter().enumerate() {
        for (j, layout) in LAYOUTS.iter().enumerate().filter(|(_, l)| chosen(l)) {
            let texts: Vec<&str> = variants.iter().map(|v| v[i].cellar[j].as_str()).collect();
            let before = plan_stats(runner).await;
            let seconds = measure_variants(runner, &texts).await.unwrap();
            let after = plan_stats(runner).await;
            let used = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
            // How each statement was planned: a shape's kept physical plan
            // rebound is the cheap way; the figure says when it was not.
            eprintln!(
                "  {} / {}: {} planned in full, {} by shape ({} rebound, {} by tokens)",
                layout.name,
                q.name,
                used("statements_planned"),
                used("plans_by_shape"),
                used("plans_rebound"),
                used("plans_by_tokens"),
            );
            out.push((layout.name, q.name.clone(), seconds));
        }
    }
    out
}

/// SHOW STATS as name → value (empty for other runners than cellar's).
async fn plan_stats(runner: &mut Runner<'_>) -> std::collections::HashMap<String, u64> {
    let mut out = std::collections::HashMap::new();
    if !matches!(runner, Runner::Cellar(_)) {
        return out;
    }
    for batch in runner.run("SHOW STATS").await.unwrap_or_default() {
        let names = batch.column(0).as_string::<i32>();
        let values = batch.column(1).as_primitive::<UInt64Type>();
        for row in 0..batch.num_rows() {
            out.insert(names.value(row).to_string(), values.value(row));
        }
    }
    out
}

/// The median time of `texts` run in turn, each planned afresh.
async fn measure_variants(runner: &mut Runner<'_>, texts: &[&str]) -> Result<f64, String> {
    for text in texts {
        runner.run(text).await.map_err(|e| format!("{text}: {e}"))?;
    }
    let mut times = Vec::new();
    let started = Instant::now();
    let (min_runs, budget) = runs();
    while times.len() < min_runs || (times.len() < MAX_RUNS && started.elapsed() < budget) {
        let text = format!(
            "{} -- run {}",
            texts[times.len() % texts.len()],
            times.len()
        );
        let t = Instant::now();
        runner.run(&text).await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2].as_secs_f64())
}

struct Args {
    full: bool,
    size: Size,
    python: Option<PathBuf>,
    flight: bool,
    /// Only the cellar layouts whose name contains this.
    only: Option<String>,
    /// Keep the data directory (the store, the Parquet file) for profiling.
    keep: bool,
    /// Only the series section: the events in every series layout.
    layouts: bool,
    /// Where the series section draws its chart.
    chart: Option<PathBuf>,
    /// The key activity counters on and off, every layout's ingest and
    /// every query (always, on the tiny data set, under `cargo test`).
    counters: bool,
}

fn args() -> Args {
    let argv: Vec<String> = std::env::args().collect();
    let bench = argv.iter().any(|a| a == "--bench");
    TIMED.store(bench, std::sync::atomic::Ordering::Relaxed);
    let small = argv.iter().any(|a| a == "--small");
    let python = argv
        .iter()
        .position(|a| a == "--python")
        .and_then(|i| argv.get(i + 1))
        .map(PathBuf::from);
    let size = match (bench, small) {
        (false, _) => Size {
            balloons: 5,
            minutes: 150,
        },
        (true, true) => Size {
            balloons: 250,
            minutes: 400,
        },
        (true, false) => Size {
            balloons: 250,
            minutes: 4000,
        },
    };
    Args {
        full: bench,
        size,
        python: if bench { python } else { None },
        flight: !argv.iter().any(|a| a == "--no-flight"),
        only: argv
            .iter()
            .position(|a| a == "--only")
            .and_then(|i| argv.get(i + 1))
            .cloned(),
        keep: argv.iter().any(|a| a == "--keep"),
        layouts: argv.iter().any(|a| a == "--layouts"),
        chart: argv
            .iter()
            .position(|a| a == "--chart")
            .and_then(|i| argv.get(i + 1))
            .map(PathBuf::from),
        counters: !bench || argv.iter().any(|a| a == "--counters"),
    }
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Writes the readings as one Parquet file (sorted by key), timed: this is
/// DataFusion-over-Parquet's ingest.
async fn write_parquet(size: Size, path: &Path) -> Measured {
    let batches = data::batches(size);
    let ctx = SessionContext::new();
    let table = MemTable::try_new(data::schema(), vec![batches]).unwrap();
    let started = Instant::now();
    ctx.read_table(Arc::new(table))
        .unwrap()
        .write_parquet(
            path.to_str().unwrap(),
            DataFrameWriteOptions::new().with_single_file_output(true),
            None,
        )
        .await
        .unwrap();
    Measured::time(started.elapsed().as_secs_f64())
}

/// Runs the Python peers (SQLite, DuckDB) on the Parquet file.
fn run_peers(python: &Path, dir: &Path, parquet: &Path, queries: &[Query]) -> serde_json::Value {
    let job = serde_json::json!({
        "parquet": parquet,
        "dir": dir,
        "queries": queries.iter().map(|q| serde_json::json!({"name": q.name, "sql": q.plain})).collect::<Vec<_>>(),
        "min_runs": MIN_RUNS,
        "max_runs": MAX_RUNS,
        "budget": BUDGET.as_secs_f64(),
    });
    run_job(python, dir, &job)
}

/// Runs `peers.py` on a job; its results.
fn run_job(python: &Path, dir: &Path, job: &serde_json::Value) -> serde_json::Value {
    let job_path = dir.join("job.json");
    let out_path = dir.join("peers.json");
    std::fs::write(&job_path, job.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/compare/peers.py");
    let status = std::process::Command::new(python)
        .arg(script)
        .arg(&job_path)
        .arg(&out_path)
        .status()
        .unwrap();
    assert!(status.success(), "the Python peers failed: {status}");
    serde_json::from_str(&std::fs::read_to_string(out_path).unwrap()).unwrap()
}

/// How fjall writes in a floor of the load paths.
#[derive(Clone, Copy)]
enum Floor {
    /// Batches of 8192 through the journal (buffered), then flushed: the
    /// floor of a load that takes the journal.
    Journal,
    /// Ingestion in key order (sorted tables straight into the LSM) of
    /// one pair per 64 readings, a block's worth of bytes each (what a
    /// tall PACKED table's column-wise blocks take): the floor of a load
    /// in key order, which writes blocks.
    Ingestion,
}

/// fjall alone writing the readings (as `floor` says: a pair each, a key
/// like the readings' and a value the size of a packed row of four
/// doubles; or a block of them a pair). Seconds and readings.
fn fjall_floor(dir: &Path, rows: u64, floor: Floor) -> (f64, u64) {
    let db = fjall::Database::builder(dir.join(match floor {
        Floor::Journal => "fjall-floor",
        Floor::Ingestion => "fjall-ingest-floor",
    }))
    .max_journaling_size(64 * 1024 * 1024)
    .open()
    .unwrap();
    let ks = db
        .keyspace("pairs", fjall::KeyspaceCreateOptions::default)
        .unwrap();
    let value = [7u8; 48];
    let started = Instant::now();
    let mut i = 0u64;
    match floor {
        Floor::Journal => {
            while i < rows {
                let mut batch = db.batch().durability(Some(fjall::PersistMode::Buffer));
                for j in i..(i + 8192).min(rows) {
                    let key = format!("europe-west1\x00\x01#{:04}#2024-01-01-{:08}", j % 1000, j);
                    batch.insert(&ks, key.into_bytes(), value.to_vec());
                }
                batch.commit().unwrap();
                i += 8192;
            }
            db.persist(fjall::PersistMode::SyncAll).unwrap();
            ks.rotate_memtable_and_wait().unwrap();
        }
        Floor::Ingestion => {
            // 64 readings of about 16 bytes each.
            let block = [7u8; 64 * 16];
            while i < rows {
                let mut ingestion = ks.start_ingestion().unwrap();
                for j in (i..(i + 65_536).min(rows)).step_by(64) {
                    let key = format!("europe-west1\x00\x01#{:04}#2024-01-01-{:08}", j / 16_000, j);
                    ingestion.write(key.into_bytes(), block.to_vec()).unwrap();
                }
                ingestion.finish().unwrap();
                i += 65_536;
            }
        }
    }
    (started.elapsed().as_secs_f64(), rows)
}

/// A table's bytes on disk once they hold still. Right after a
/// compaction the LSM's levels may read short (one family of four read
/// as empty once, a run's bytes then 0.59x of the next run's) while new
/// versions are installed: read until five readings 100 ms apart agree.
/// Waits until the store's LSM has had no flush or compaction under way
/// for a second (at most a minute): what a load leaves running in the
/// background after it returns and after its fold, which a measurement
/// would otherwise share the cores with.
pub fn lsm_quiet(session: &SqlSession) {
    let local = session.store().local().expect("embedded store");
    let started = Instant::now();
    let mut quiet_since = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if local.lsm_busy() {
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(1) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn settled_disk_space(session: &SqlSession, table: &str) -> u64 {
    lsm_quiet(session);
    let mut readings: Vec<u64> = Vec::new();
    for _ in 0..100 {
        readings.push(session.store().table_disk_space(table).unwrap());
        if let [.., a, b, c, d, e] = readings[..]
            && a > 0
            && [b, c, d, e].iter().all(|x| *x == a)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    readings.dedup();
    if readings.len() > 1 {
        eprintln!("  {table}: bytes on disk read {readings:?} before they held still");
    }
    readings.last().copied().unwrap_or(0)
}

/// A tall PACKED table for the load paths (the row key given as `_key`).
fn load_table(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
         FAMILY m FORMAT PACKED, pressure DOUBLE IN m, temperature DOUBLE IN m, \
         humidity DOUBLE IN m, altitude DOUBLE IN m)"
    )
}

/// One timed load: `load` fills a fresh table made by [`load_table`],
/// which is counted and dropped after (so that no table competes with the
/// next load for the store's background work); the seconds (the store
/// checkpointed, as a load ends) and the rows loaded.
async fn timed_load(
    session: &SqlSession,
    table: &str,
    load: &mut impl AsyncFnMut(&str),
) -> (f64, u64) {
    session.query(&load_table(table)).await.unwrap();
    let started = Instant::now();
    load(table).await;
    session.store().checkpoint().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let loaded = count_rows(session, table).await;
    session.query(&format!("DROP TABLE {table}")).await.unwrap();
    (seconds, loaded)
}

/// Loads timed: `load` run three times by [`timed_load`]; the median
/// seconds and the rows loaded.
async fn median_load(
    session: &SqlSession,
    name: &str,
    mut load: impl AsyncFnMut(&str),
) -> (f64, u64) {
    let (mut seconds, mut loaded) = (Vec::new(), 0);
    for i in 0..3 {
        let (s, rows) = timed_load(session, &format!("{name}_{i}"), &mut load).await;
        seconds.push(s);
        loaded = rows;
    }
    (median(seconds), loaded)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

async fn count_rows(session: &SqlSession, table: &str) -> u64 {
    let batches = session
        .query(&format!("SELECT count(*) FROM {table}"))
        .await
        .unwrap();
    let counts = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .unwrap();
    counts.value(0) as u64
}

/// Rounds of [`copy_and_flight_loads`].
const PAIRED_ROUNDS: usize = 5;

/// COPY FROM of the keyed readings into `table`.
async fn copy_load(session: &SqlSession, keyed: &Path, table: &str) {
    let copy = format!("COPY {table} FROM '{}'", keyed.display());
    session.query(&copy).await.unwrap();
}

/// COPY FROM and Flight ingest of the keyed readings, in turns: each
/// round loads by both, the first of the two alternating, so that the
/// machine's slow and fast spells (whole minutes here, 30–60 %) fall on
/// both alike. Their medians, and each round's ratio.
async fn copy_and_flight_loads(
    session: &SqlSession,
    client: &mut FlightSqlServiceClient<Channel>,
    keyed: &Path,
    report: &mut Report,
) {
    use arrow_flight::sql::{
        CommandStatementIngest, TableDefinitionOptions, TableExistsOption, TableNotExistOption,
    };
    // Read as a client sends a file: in its order (one partition).
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    let batches = ctx
        .read_parquet(keyed.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut copy = async |table: &str| copy_load(session, keyed, table).await;
    let mut flight = async |table: &str| {
        let command = CommandStatementIngest {
            table_definition_options: Some(TableDefinitionOptions {
                if_not_exist: TableNotExistOption::Fail.into(),
                if_exists: TableExistsOption::Append.into(),
            }),
            table: table.into(),
            schema: None,
            catalog: None,
            temporary: false,
            transaction_id: None,
            options: Default::default(),
        };
        let batches: Vec<_> = batches.iter().cloned().map(Ok).collect();
        let batches = futures::stream::iter(batches);
        client.execute_ingest(command, batches).await.unwrap();
    };
    let (mut copies, mut flights, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = (0, 0);
    let rounds = if timed() { PAIRED_ROUNDS } else { 1 };
    for round in 0..rounds {
        let (c, f) = if round % 2 == 0 {
            let c = timed_load(session, &format!("load_copy_{round}"), &mut copy).await;
            let f = timed_load(session, &format!("load_flight_{round}"), &mut flight).await;
            (c, f)
        } else {
            let f = timed_load(session, &format!("load_flight_{round}"), &mut flight).await;
            let c = timed_load(session, &format!("load_copy_{round}"), &mut copy).await;
            (c, f)
        };
        rows = (c.1, f.1);
        copies.push(c.0);
        flights.push(f.0);
        // Rows a second by Flight over rows a second by COPY.
        ratios.push(c.0 / f.0);
    }
    report.load("COPY FROM (Parquet)", median(copies), rows.0);
    report.load("Flight ingest (ADBC-style DoPut)", median(flights), rows.1);
    report.paired_ratio(ratios);
}

/// A prepared INSERT executed over Flight with 10 000 parameter rows:
/// planned once (VALUES) against once per row (the same rows through
/// `SELECT $1, ...`, which is not batched).
async fn prepared_loads(
    session: &SqlSession,
    client: &mut FlightSqlServiceClient<Channel>,
    report: &mut Report,
) {
    // Untimed (under `cargo test`) a few hundred rows show the same: a
    // plan per row in a debug build takes 9 ms.
    let n = if timed() { 10_000i64 } else { 300 };
    let params = RecordBatch::try_from_iter(vec![
        (
            "k",
            Arc::new(datafusion::arrow::array::StringArray::from_iter_values(
                (0..n).map(|i| format!("k{i:05}")),
            )) as datafusion::arrow::array::ArrayRef,
        ),
        (
            "v",
            Arc::new(datafusion::arrow::array::Float64Array::from_iter_values(
                (0..n).map(|i| i as f64),
            )) as _,
        ),
    ])
    .unwrap();
    for (what, table, sql) in [
        (
            "prepared INSERT, 10 000 rows, planned once",
            "load_prepared",
            "INSERT INTO load_prepared (_key, pressure) VALUES (?, ?)",
        ),
        (
            "prepared INSERT, 10 000 rows, a plan per row",
            "load_per_row",
            "INSERT INTO load_per_row (_key, pressure) SELECT ?, ?",
        ),
    ] {
        session.query(&load_table(table)).await.unwrap();
        let mut prepared = client.prepare(sql.to_string(), None).await.unwrap();
        prepared.set_parameters(params.clone()).unwrap();
        let started = Instant::now();
        prepared.execute_update().await.unwrap();
        let seconds = started.elapsed().as_secs_f64();
        assert_eq!(count_rows(session, table).await, n as u64, "{what}");
        report.load(what, seconds, n as u64);
    }
}

/// The series section: the events through `CREATE SERIES` in every
/// layout and into the peers; the mismatches.
async fn series_section(args: &Args, dir: &Path) -> Vec<String> {
    let size = args.size;
    let events = dir.join("events.parquet");
    series::write_events(size, &events).await;
    let queries = series::queries(size);
    let mut report = series::SeriesReport::new(size.rows(), &queries);
    let session = SqlSession::new(Store::open(dir.join("series-store")).unwrap());
    series::measure_layouts(
        &session,
        &events,
        &queries,
        args.only.as_deref(),
        &mut report,
    )
    .await;
    if let Some(python) = &args.python {
        eprintln!("series: SQLite and DuckDB ...");
        let job = series::peers_job(&events, dir, &queries, false);
        report.peers(&run_job(python, dir, &job));
    }
    for round in 2..=series::ROUNDS {
        eprintln!("series: round {round} of the per-series questions ...");
        series::measure_again(&session, &queries, &mut report).await;
        if let Some(python) = &args.python {
            let job = series::peers_job(&events, dir, &queries, true);
            report.peers(&run_job(python, dir, &job));
        }
    }
    if args.full {
        report.print();
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, report.svg()).unwrap();
        eprintln!("chart written to {}", path.display());
    }
    report.check()
}

fn main() {
    let args = args();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    if args.layouts || !args.full {
        let mismatches = rt.block_on(series_section(&args, dir.path()));
        for m in &mismatches {
            eprintln!("MISMATCH {m}");
        }
        if !mismatches.is_empty() {
            std::process::exit(1);
        }
        if args.layouts {
            if args.keep {
                eprintln!("kept {}", dir.keep().display());
            }
            return;
        }
    }
    let size = args.size;
    let rows = size.rows();
    let queries = layouts::queries(size);
    let mut report = Report::new(rows, &queries);
    eprintln!(
        "{rows} readings (4 regions × {} balloons × {} minutes) in {}",
        size.balloons,
        size.minutes,
        dir.path().display()
    );

    let parquet = dir.path().join("readings.parquet");
    let written = rt.block_on(write_parquet(size, &parquet));
    report.ingest("DataFusion/Parquet", written, file_size(&parquet));

    if let Some(python) = &args.python {
        eprintln!("SQLite and DuckDB ...");
        let peers = run_peers(python, dir.path(), &parquet, &queries);
        report.peers(&peers);
    }

    let (skew, counted) = rt.block_on(async {
        eprintln!("DataFusion over Parquet ...");
        let ctx = SessionContext::new();
        ctx.register_parquet(
            "readings",
            parquet.to_str().unwrap(),
            ParquetReadOptions::default(),
        )
        .await
        .unwrap();
        let mut runner = Runner::DataFusion(&ctx);
        for q in &queries {
            let m = measure(&mut runner, &q.plain).await.unwrap();
            report.query("DataFusion/Parquet", &q.name, m);
        }

        let session = SqlSession::new(Store::open(dir.path().join("store")).unwrap());
        let schema = Arc::new(MemorySchemaProvider::new());
        session
            .context()
            .catalog("cellar")
            .unwrap()
            .register_schema("bench", schema)
            .unwrap();
        session
            .context()
            .register_parquet(
                "bench.readings",
                parquet.to_str().unwrap(),
                ParquetReadOptions::default(),
            )
            .await
            .unwrap();
        session.query(layouts::PROTO).await.unwrap();
        let chosen = |l: &&Layout| {
            args.only
                .as_ref()
                .is_none_or(|o| l.name.contains(o.as_str()))
        };
        for layout in LAYOUTS.iter().filter(chosen) {
            eprintln!("cellar, {} ...", layout.name);
            session.query(layout.create).await.unwrap();
            let started = Instant::now();
            session.query(layout.ingest).await.unwrap();
            session.store().checkpoint().unwrap();
            let took = started.elapsed().as_secs_f64();
            if layout.settles {
                // Left to the background compaction, as a user would.
                let local = session.store().local().expect("embedded store");
                let waiting = Instant::now();
                while !local.folded(layout.table).unwrap() {
                    assert!(waiting.elapsed() < Duration::from_secs(600), "never folded");
                    std::thread::sleep(Duration::from_millis(50));
                }
                let waited = waiting.elapsed().as_secs_f64();
                eprintln!("  folded by the background compaction {waited:.1} s after the load");
                report.settled(layout.name, waited);
            } else {
                session.store().collect_and_compact(layout.table).unwrap();
            }
            let bytes = settled_disk_space(&session, layout.table);
            report.ingest(layout.name, Measured::time(took), bytes);
            // fjall's own pass over the layout's pairs, spread over the
            // cores as a scan is: the floor of a full scan.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let (mut best, mut pairs) = (f64::INFINITY, 0);
            for _ in 0..3 {
                let started = Instant::now();
                pairs = session
                    .store()
                    .local()
                    .expect("embedded store")
                    .scan_pairs(layout.table)
                    .unwrap()
                    .0;
                best = best.min(started.elapsed().as_secs_f64());
            }
            report.floor(layout.name, best / cores as f64, pairs);
        }
        let mut runner = Runner::Cellar(&session);
        for (engine, query, m) in measure_cellar(&mut runner, &queries, &chosen).await {
            report.query(engine, &query, m);
        }
        let variants: Vec<Vec<Query>> = (0..layouts::VARIANTS)
            .map(|shift| layouts::queries_at(size, shift))
            .collect();
        for (layout, query, seconds) in measure_cellar_afresh(&mut runner, &variants, &chosen).await
        {
            report.afresh(layout, &query, seconds);
        }
        let counted = if args.counters {
            Some(counters::measure(&session, &variants, &chosen).await)
        } else {
            None
        };

        // Load paths: the readings with their key as `_key` (what COPY TO
        // writes), in the source file's key order, loaded by COPY FROM;
        // Flight ingest follows below.
        eprintln!("cellar, load paths ...");
        let keyed = dir.path().join("readings_keyed.parquet");
        session
            .query(&format!(
                "COPY (SELECT key AS _key, pressure, temperature, humidity, altitude \
                 FROM bench.readings ORDER BY _key) TO '{}'",
                keyed.display()
            ))
            .await
            .unwrap();
        let client = if args.flight {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(cellar::flight::serve(
                session.clone(),
                listener,
                Default::default(),
            ));
            let channel = Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut client = FlightSqlServiceClient::new(channel);
            copy_and_flight_loads(&session, &mut client, &keyed, &mut report).await;
            prepared_loads(&session, &mut client, &mut report).await;
            Some(client)
        } else {
            let (seconds, loaded) = median_load(&session, "load_copy", async |table| {
                copy_load(&session, &keyed, table).await
            })
            .await;
            report.load("COPY FROM (Parquet)", seconds, loaded);
            None
        };
        let (seconds, readings) = fjall_floor(dir.path(), rows, Floor::Journal);
        report.load("fjall alone: as many pairs, no SQL", seconds, readings);
        let (seconds, readings) = fjall_floor(dir.path(), rows, Floor::Ingestion);
        report.load(
            "fjall ingestion alone: as many blocks in key order",
            seconds,
            readings,
        );

        if let Some(client) = client {
            eprintln!("cellar over Flight SQL ...");
            let mut runner = Runner::Flight(Box::new(client));
            for (engine, query, m) in measure_cellar(&mut runner, &queries, &chosen).await {
                report.flight(engine, &query, m);
            }
        }
        // A skewed key space beside an even one (up to a million rows).
        let wanted = args
            .only
            .as_ref()
            .is_none_or(|o| "skew".contains(o.as_str()));
        let skew = if wanted {
            Some(skew::measure(&session, rows.min(1_000_000)).await)
        } else {
            None
        };
        (skew, counted)
    });

    if args.keep {
        eprintln!("kept {}", dir.keep().display());
    }
    let mismatches = report.check("DataFusion/Parquet");
    if args.full {
        report.print();
        if let Some(skew) = &skew {
            skew.print();
        }
        if let Some(counted) = &counted {
            counted.print();
        }
    }
    if !mismatches.is_empty() {
        for m in &mismatches {
            eprintln!("MISMATCH {m}");
        }
        std::process::exit(1);
    }
}
