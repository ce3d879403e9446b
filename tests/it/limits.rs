//! What a session lets one query take: memory, time, a turn among heavy
//! queries; and seeing and cancelling the queries that run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use std::time::{Duration, Instant};

use cellar::{SessionOptions, SqlSession, Store};
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Int64Type, UInt64Type};

fn session(options: SessionOptions) -> (tempfile::TempDir, SqlSession) {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::with_options(Store::open(dir.path()).unwrap(), options);
    (dir, session)
}

/// A query that runs until stopped.
const ENDLESS: &str =
    "SELECT count(*) FROM generate_series(1, 9000000000000) AS t(x) WHERE x % 7 = 3";

fn first_i64(batches: &[RecordBatch]) -> i64 {
    batches[0].column(0).as_primitive::<Int64Type>().value(0)
}

async fn queries(session: &SqlSession) -> Vec<(u64, String, String)> {
    let batches = session.query("SHOW QUERIES").await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            out.push((
                b.column(0).as_primitive::<UInt64Type>().value(r),
                b.column(1).as_string::<i32>().value(r).to_string(),
                b.column_by_name("sql")
                    .unwrap()
                    .as_string::<i32>()
                    .value(r)
                    .to_string(),
            ));
        }
    }
    out
}

#[tokio::test]
async fn a_query_over_the_memory_limit_fails_clearly_and_the_session_goes_on() {
    let (_dir, session) = session(SessionOptions {
        memory_limit: Some(4 << 20),
        ..SessionOptions::default()
    });
    // A hash join's build side cannot spill.
    let err = session
        .query(
            "SELECT count(*) FROM generate_series(1, 2000000) AS a(x) \
             JOIN generate_series(1, 2000000) AS b(y) ON a.x = b.y",
        )
        .await
        .unwrap_err();
    let text = cellar::shell::error_line(&err);
    assert!(text.contains("memory limit"), "{text}");
    // A small query still runs.
    let out = session.query("SELECT 40 + 2").await.unwrap();
    assert_eq!(first_i64(&out), 42);
}

#[tokio::test]
async fn a_query_past_the_timeout_is_stopped() {
    let (_dir, session) = session(SessionOptions {
        query_timeout: Some(Duration::from_millis(300)),
        ..SessionOptions::default()
    });
    let err = session.query(ENDLESS).await.unwrap_err().to_string();
    assert!(err.contains("query timeout of 300ms"), "{err}");
    assert_eq!(queries(&session).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_queries_are_listed_and_can_be_cancelled() {
    let (_dir, session) = session(SessionOptions::default());
    let running = session.clone();
    // Written over several lines, it is listed on one.
    let task = tokio::spawn(async move {
        running
            .query(&ENDLESS.replace(" FROM ", "\n    FROM  "))
            .await
    });
    let id = loop {
        if let Some((id, _, sql)) = queries(&session)
            .await
            .into_iter()
            .find(|(_, _, sql)| sql.contains("9000000000000"))
        {
            assert_eq!(sql, ENDLESS);
            break id;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let out = session.query(&format!("CANCEL QUERY {id}")).await.unwrap();
    assert_eq!(
        out[0].column(0).as_string::<i32>().value(0),
        format!("cancelled query {id}")
    );
    let err = task.await.unwrap().unwrap_err().to_string();
    assert!(err.contains(&format!("query {id} was cancelled")), "{err}");
    assert_eq!(queries(&session).await, vec![]);
    let err = session
        .query("CANCEL QUERY 999999")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no query 999999 is running"), "{err}");
}

/// With one heavy query at a time, a second waits (queued) while point
/// lookups go past it; cancelling the first lets the second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_queries_take_turns_and_point_lookups_skip_the_queue() {
    let (_dir, session) = session(SessionOptions {
        heavy_queries: 1,
        ..SessionOptions::default()
    });
    session
        .query("CREATE TABLE t (FAMILY f, v BIGINT IN f)")
        .await
        .unwrap();
    session
        .query("INSERT INTO t (_key, v) VALUES ('a', 1), ('b', 2)")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for n in [1, 2] {
        let s = session.clone();
        let sql = ENDLESS.replace("= 3", &format!("= {n}"));
        tasks.push(tokio::spawn(async move { s.query(&sql).await }));
    }
    // Both are registered as queued before either takes the one turn:
    // wait until one has it. The other must stay queued.
    let waited = Instant::now();
    let listed = loop {
        let q = queries(&session).await;
        let states: Vec<&str> = q.iter().map(|(_, s, _)| s.as_str()).collect();
        if q.len() == 2 && states.contains(&"running") {
            assert!(states.contains(&"queued"), "{q:?}");
            break q;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "no heavy query started: {q:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // A point lookup is light: it runs now, not after the heavy ones.
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        session.query("SELECT v FROM t WHERE _key = 'b'"),
    )
    .await
    .expect("a point lookup does not wait behind heavy queries")
    .unwrap();
    assert_eq!(first_i64(&out), 2);
    // So is a range that held few rows when planned, even where a scan
    // reads one partition (one core): its rows are counted all the same.
    for partitions in [1, 2] {
        session
            .query(&format!(
                "SET datafusion.execution.target_partitions = {partitions}"
            ))
            .await
            .unwrap();
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            session.query("SELECT sum(v) FROM t WHERE _key >= 'a' AND _key < 'c'"),
        )
        .await
        .unwrap_or_else(|_| panic!("a short range waited behind heavy queries ({partitions})"))
        .unwrap();
        assert_eq!(first_i64(&out), 3);
    }
    for (id, _, _) in &listed {
        session.query(&format!("CANCEL QUERY {id}")).await.unwrap();
    }
    for t in tasks {
        assert!(t.await.unwrap().is_err());
    }
    assert_eq!(queries(&session).await, vec![]);
}

/// CPU time this process has used (user + system), from /proc (Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is
    // the 14th field, stime the 15th, in clock ticks (100 a second).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// A query stopped by the timeout stops using the CPU at once, even one
/// inside a long operator that emits nothing (a nested-loop join whose
/// condition never holds), and the next query answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_query_stops_using_the_cpu() {
    // It measures the CPU time of the whole process.
    if !crate::common::in_own_process("limits::a_timed_out_query_stops_using_the_cpu") {
        return;
    }
    let (_dir, session) = session(SessionOptions {
        query_timeout: Some(std::time::Duration::from_millis(800)),
        ..SessionOptions::default()
    });
    let err = session
        .query(
            "SELECT count(*) FROM generate_series(1, 300000) AS a(x) \
             JOIN generate_series(1, 300000) AS b(y) ON a.x + b.y < 0",
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("query timeout"), "{err}");
    // Give the stopped work a moment to notice, then watch the CPU.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let before = cpu_seconds();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let used = cpu_seconds() - before;
    assert!(
        used < 0.3,
        "{used:.2} s of CPU in the second after the timeout"
    );
    let out = session.query("SELECT 40 + 2").await.unwrap();
    assert_eq!(first_i64(&out), 42);
}
