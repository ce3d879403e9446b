//! Distributed execution on Ballista: a scheduler and two executors in
//! this process, on loopback, running the same SQL as the local path with
//! the same answers, over the embedded store and over the Bigtable
//! emulator (skipped, with the reason printed, where it is not installed).

#![cfg(feature = "ballista")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

#[cfg(feature = "bigtable")]
use crate::emulator;

use crate::rows::text;
use cellar::{SqlSession, Store};

/// Rows enough for a full scan to split into key ranges.
const ROWS: i64 = 120_000;

async fn load(session: &SqlSession, files: &std::path::Path) {
    for sql in [
        "CREATE TABLE readings (ROW KEY (sensor TEXT, seq INT(8)), FAMILY m, \
         value BIGINT IN m, note TEXT IN m)",
        &format!(
            "INSERT INTO readings (sensor, seq, value, note) \
             SELECT 's' || CAST(i % 7 AS VARCHAR), i, i * 3, 'n' || CAST(i % 11 AS VARCHAR) \
             FROM generate_series(1, {ROWS}) AS t(i)"
        ),
        "CREATE TABLE labels (FAMILY f, label TEXT IN f)",
        "INSERT INTO labels (_key, label) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three')",
        "CREATE SERIES hourly (KEY (location TEXT, balloon INT(5)), TIME ts, pressure BIGINT) \
         LAYOUT BUCKET '1 hour' CELL PER EVENT FORMAT CELLS",
        "INSERT INTO hourly VALUES ('us-west2', 3698, TIMESTAMP '2021-03-05 12:00:00', 94558), \
         ('us-west2', 3698, TIMESTAMP '2021-03-05 12:01:00', 94122), \
         ('us-east1', 7, TIMESTAMP '2021-03-05 13:30:00', 93000)",
        "CREATE SERIES columns (KEY (location TEXT, balloon INT(5)), TIME ts, pressure BIGINT) \
         LAYOUT BUCKET '1 hour' COLUMN PER EVENT FORMAT CELLS",
        "INSERT INTO columns SELECT * FROM hourly",
        "CREATE TABLE big (FAMILY f, n BIGINT IN f)",
        "INSERT INTO big (_key, n) VALUES ('a', 9000000000000000000), ('b', 9000000000000000000)",
    ] {
        session.query(sql).await.unwrap();
    }
    // A file beside the tables: a session table, joined as usual.
    let csv = files.join("weights.csv");
    std::fs::write(&csv, "sensor,weight\ns1,10\ns2,20\n").unwrap();
    session
        .query(&format!(
            "CREATE EXTERNAL TABLE weights STORED AS CSV LOCATION '{}' \
             OPTIONS ('format.has_header' 'true')",
            csv.display()
        ))
        .await
        .unwrap();
}

/// Queries whose answers must not depend on where they run.
const QUERIES: &[&str] = &[
    "SELECT count(*), sum(value), min(note), max(seq) FROM readings",
    "SELECT sensor, count(*), avg(value) FROM readings GROUP BY sensor ORDER BY sensor",
    "SELECT _key, value FROM readings WHERE sensor = 's3' AND seq BETWEEN 100 AND 160 ORDER BY _key",
    "SELECT _key, note FROM readings ORDER BY _key DESC LIMIT 3",
    "SELECT note, count(*) FROM readings WHERE value % 5 = 0 GROUP BY note ORDER BY note",
    "SELECT l.label, count(*), sum(r.value) FROM readings r JOIN labels l ON r.note = l._key \
     GROUP BY l.label ORDER BY l.label",
    "SELECT w.weight, count(*) FROM readings r JOIN weights w ON r.sensor = w.sensor \
     WHERE r.seq < 1000 GROUP BY w.weight ORDER BY w.weight",
    "SELECT count(*) FROM versions('readings') WHERE sensor = 's1'",
    "SELECT sum(value + 1) FROM readings WHERE value < 100",
    // A series' events, read from its hour buckets.
    "SELECT location, ts, pressure FROM hourly WHERE ts >= TIMESTAMP '2021-03-05 12:01:00' \
     ORDER BY location, ts",
    // ... and gathered from a column per event, the latest of one series.
    "SELECT location, ts, pressure FROM columns WHERE ts >= TIMESTAMP '2021-03-05 12:01:00' \
     ORDER BY location, ts",
    "SELECT ts, pressure FROM columns WHERE location = 'us-west2' AND balloon = 3698 \
     ORDER BY ts DESC LIMIT 1",
];

/// `split`: whether the table is large enough for its scan to split (1
/// MiB: on both backends the test's table is).
async fn same_answers(local: &SqlSession, split: bool) {
    // Two partitions wherever the test runs (the scheduler plans with the
    // session's settings).
    local
        .query("SET datafusion.execution.target_partitions = 2")
        .await
        .unwrap();
    let url = cellar::start_cluster(local, 2, 1).await.unwrap();
    let remote = local.distributed(&url).unwrap();
    for sql in QUERIES {
        assert_eq!(text(&remote, sql).await, text(local, sql).await, "{sql}");
    }
    // cellar's own statements answer with in-memory tables, which stay
    // where the session is.
    for sql in ["DESCRIBE readings", "SHOW TABLES", "SELECT 1"] {
        assert_eq!(text(&remote, sql).await, text(local, sql).await, "{sql}");
    }
    remote
        .query("CREATE TABLE made_remotely (FAMILY f)")
        .await
        .unwrap();
    // The plan has stages, and the scan its key ranges, one task each.
    let explain = text(
        &remote,
        "EXPLAIN SELECT sensor, count(*) FROM readings GROUP BY sensor",
    )
    .await;
    assert!(explain.contains("distributed_plan"), "{explain}");
    let groups = if split {
        "file_groups={2 groups: [[readings/(-inf.."
    } else {
        "file_groups={1 group: [[readings/(-inf..+inf)]]}"
    };
    assert!(explain.contains(groups), "{explain}");
    if split {
        assert!(
            explain.contains("ResolvedStage[stage_id=1.0, partitions=2]"),
            "{explain}"
        );
    }
    assert!(
        explain.contains("scan=KeyScanExec: table=readings"),
        "{explain}"
    );
    let narrow = text(
        &remote,
        "EXPLAIN SELECT count(*) FROM readings WHERE sensor = 's3' AND seq < 50",
    )
    .await;
    assert!(narrow.contains("ranges(1)=[[s3#"), "{narrow}");
    // Checked arithmetic stays checked on the executors.
    let overflow = remote
        .query("SELECT sum(n) FROM big")
        .await
        .unwrap_err()
        .to_string();
    assert!(overflow.contains("integer overflow"), "{overflow}");
    // Writes run here, and the cluster sees them.
    remote
        .query("INSERT INTO big (_key, n) VALUES ('c', 1)")
        .await
        .unwrap();
    let written = text(&remote, "SELECT _key, n FROM big WHERE _key = 'c'").await;
    assert!(written.contains("| c    | 1 |"), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ballista_answers_as_the_local_path_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path().join("store")).unwrap());
    load(&session, dir.path()).await;
    same_answers(&session, true).await;
}

#[cfg(feature = "bigtable")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ballista_answers_as_the_local_path_on_bigtable() {
    let Some(emulator) = emulator::Emulator::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(std::sync::Arc::new(
        cellar::BigtableStore::connect("projects/p/instances/i", &emulator.endpoint()).unwrap(),
    ));
    let session = SqlSession::new(store);
    load(&session, dir.path()).await;
    same_answers(&session, true).await;
}

/// A child process killed when dropped.
#[cfg(feature = "bigtable")]
struct Child(std::process::Child);

#[cfg(feature = "bigtable")]
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The scheduler and two executors as `cellar ballista` processes, the
/// shell sending its queries to them: the same output as without them.
#[cfg(feature = "bigtable")]
#[test]
fn cellar_ballista_processes_answer_the_shell() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let Some(emulator) = emulator::Emulator::start() else {
        return;
    };
    let cellar = env!("CARGO_BIN_EXE_cellar");
    let mut scheduler = Command::new(cellar)
        .args(["ballista", "scheduler", "--addr", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(scheduler.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let scheduler = Child(scheduler);
    // "cellar Ballista scheduler on 127.0.0.1:PORT"
    let at = banner.trim().rsplit(' ').next().unwrap().to_string();
    assert!(at.starts_with("127.0.0.1:"), "{banner}");
    let executors: Vec<Child> = (0..2)
        .map(|_| {
            Child(
                Command::new(cellar)
                    .args(["ballista", "executor", "--scheduler", &at, "--slots", "1"])
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let shell = |extra: &[&str], sql: &str| {
        let out = Command::new(cellar)
            .env("BIGTABLE_EMULATOR_HOST", &emulator.host)
            .args(["--bigtable", "projects/p/instances/i"])
            .args(extra)
            .args(["-c", sql])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{sql}: {stderr}");
        (String::from_utf8_lossy(&out.stdout).to_string(), stderr)
    };
    shell(
        &[],
        "CREATE TABLE t (ROW KEY (k TEXT, n INT(6)), FAMILY f, v BIGINT IN f); \
         INSERT INTO t (k, n, v) SELECT 'k' || CAST(i % 5 AS VARCHAR), i, i * 2 \
         FROM generate_series(1, 3000) AS s(i)",
    );
    let query = "SELECT k, count(*), sum(v) FROM t WHERE n > 10 GROUP BY k ORDER BY k";
    let (local, _) = shell(&[], query);
    let (remote, said) = shell(&["--ballista", &at], query);
    assert_eq!(remote, local);
    assert!(
        said.contains(&format!("Ballista scheduler at http://{at}")),
        "{said}"
    );
    assert!(local.contains("| k0 | 598"), "{local}");
    // A scheduler nobody runs is named, at once.
    let out = Command::new(cellar)
        .env("BIGTABLE_EMULATOR_HOST", &emulator.host)
        .args([
            "--bigtable",
            "projects/p/instances/i",
            "--ballista",
            "127.0.0.1:9",
        ])
        .args(["-c", "SELECT 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("127.0.0.1:9"), "{error}");
    drop(executors);
    drop(scheduler);
}
