//! Plans kept for statements that run again: a kept plan gives what
//! planning again would give, sees every write, and goes when the tables
//! or the session's settings change.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use crate::rows::{stat, text};
use cellar::{SqlSession, Store};

/// How many statements ran from a kept plan so far.
async fn reused(session: &SqlSession) -> u64 {
    stat(session, "plans_reused").await
}

async fn readings(session: &SqlSession) {
    session
        .query(
            "CREATE TABLE r (ROW KEY (host TEXT, at BIGINT(6)), FAMILY m, v BIGINT IN m, \
             w DOUBLE IN m)",
        )
        .await
        .unwrap();
    session
        .query("INSERT INTO r (host, at, v, w) VALUES ('a', 1, 10, 1.5), ('a', 2, 20, 2.5), ('b', 1, 30, 3.5)")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_kept_plan_sees_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    readings(&session).await;
    let q = "SELECT host, count(*) AS n, sum(v) AS s FROM r GROUP BY host ORDER BY host";
    let first = text(&session, q).await;
    let before = reused(&session).await;
    assert_eq!(text(&session, q).await, first);
    assert_eq!(
        reused(&session).await,
        before + 1,
        "the second run reuses the plan"
    );
    session
        .query("INSERT INTO r (host, at, v, w) VALUES ('b', 2, 5, 0.5), ('c', 1, 1, 0.0)")
        .await
        .unwrap();
    let after = text(&session, q).await;
    assert!(after.contains("| b    | 2 | 35 |"), "{after}");
    assert!(after.contains("| c    | 1 | 1  |"), "{after}");
    session
        .query("DELETE FROM r WHERE host = 'a'")
        .await
        .unwrap();
    let deleted = text(&session, q).await;
    assert!(!deleted.contains("| a "), "{deleted}");
    // A selective read, its LIMIT and order answered by the key order.
    let latest = "SELECT at, v FROM r WHERE host = 'b' ORDER BY _key DESC LIMIT 1";
    assert!(text(&session, latest).await.contains("| 2  | 5 |"));
    session
        .query("INSERT INTO r (host, at, v, w) VALUES ('b', 3, 7, 0.5)")
        .await
        .unwrap();
    assert!(text(&session, latest).await.contains("| 3  | 7 |"));
}

#[tokio::test]
async fn changing_a_table_makes_its_plans_go() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    readings(&session).await;
    let q = "SELECT * FROM r WHERE host = 'a' ORDER BY at";
    let first = text(&session, q).await;
    assert_eq!(text(&session, q).await, first);
    // Another session over the same store changes the table: the store's
    // catalog generation moves on, and the first session plans again.
    let other = SqlSession::new(store);
    other.query("DROP TABLE r").await.unwrap();
    other
        .query("CREATE TABLE r (ROW KEY (host TEXT, at BIGINT(6)), FAMILY m, label TEXT IN m)")
        .await
        .unwrap();
    other
        .query("INSERT INTO r (host, at, label) VALUES ('a', 9, 'new')")
        .await
        .unwrap();
    let after = text(&session, q).await;
    assert!(after.contains("label") && after.contains("new"), "{after}");
    assert!(!after.contains("| v "), "{after}");
    // Adding a family through this session: the wide view gains its map.
    session
        .query("ALTER TABLE r ADD FAMILY extra")
        .await
        .unwrap();
    assert!(text(&session, q).await.contains("extra"));
}

#[tokio::test]
async fn settings_and_time_are_planned_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    readings(&session).await;
    let q = "SELECT host, v FROM r ORDER BY _key";
    text(&session, q).await;
    text(&session, q).await;
    let before = reused(&session).await;
    // SET changes what planning sees: the kept plans go.
    session
        .query("SET datafusion.execution.batch_size = 1")
        .await
        .unwrap();
    let after_set = text(&session, q).await;
    assert_eq!(reused(&session).await, before, "planned again after SET");
    assert!(after_set.contains("| b    | 30 |"));
    // now() is folded into a plan when it is made: never kept.
    let now = "SELECT CAST(now() AS BIGINT) AS t";
    let a = text(&session, now).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let b = text(&session, now).await;
    assert_ne!(a, b, "now() moves");
    assert_eq!(reused(&session).await, before);
    // After forget_plans, a statement run before is planned again.
    text(&session, q).await;
    let kept = reused(&session).await;
    session.forget_plans();
    text(&session, q).await;
    assert_eq!(reused(&session).await, kept);
}

#[tokio::test]
async fn files_are_listed_again_each_time() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path().join("store")).unwrap());
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("1.csv"), "a,b\n1,2\n").unwrap();
    session
        .query(&format!(
            "CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '{}/' \
             OPTIONS ('format.has_header' 'true')",
            files.display()
        ))
        .await
        .unwrap();
    let q = "SELECT count(*) AS n FROM x";
    assert!(text(&session, q).await.contains("| 1 |"));
    assert!(text(&session, q).await.contains("| 1 |"));
    // A file more in the directory: a plan made before lists one file.
    std::fs::write(files.join("2.csv"), "a,b\n3,4\n5,6\n").unwrap();
    let after = text(&session, q).await;
    assert!(after.contains("| 3 |"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_kept_plan_runs_many_times_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    readings(&session).await;
    session
        .query("CREATE TABLE hosts (ROW KEY (host TEXT), FAMILY d, region TEXT IN d)")
        .await
        .unwrap();
    session
        .query("INSERT INTO hosts (host, region) VALUES ('a', 'eu'), ('b', 'us')")
        .await
        .unwrap();
    // A join, an aggregate and a top-k: operators that keep state from a
    // run get it fresh each time.
    let queries = [
        "SELECT h.region, sum(r.v) AS s FROM r JOIN hosts h ON r.host = h.host \
         GROUP BY h.region ORDER BY h.region",
        "SELECT host, v FROM r ORDER BY v DESC LIMIT 2",
        "SELECT count(*) AS n, sum(w) AS s FROM r",
    ];
    let mut expected = Vec::new();
    for q in queries {
        expected.push(text(&session, q).await);
    }
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let session = session.clone();
        let expected = expected.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                for (q, want) in queries.iter().zip(&expected) {
                    assert_eq!(&text(&session, q).await, want, "{q}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(reused(&session).await >= 6 * 20 * 3);
}
