//! Aggregates grouped the way a user writes them over a tall table: by
//! key segments and by `date_trunc`/`date_bin` of a time segment. The
//! scan computes them (`ScanAggregateExec`); each answer must be the one
//! DataFusion's own aggregate gives for the same rows (the same query
//! with its measure written `abs(p)`, which the scan does not take; the
//! values are not negative), in
//! every family format, with keys that do not fit the schema, rows
//! rewritten and deleted after a compaction, and segment filters.

use crate::rows::text;
use cellar::{SqlSession, Store};

/// A table of `format` with 48 000 readings (three regions, four
/// balloons, 4 000 minutes each; a note of 32 bytes each, so that the
/// scan is split) a quarter apart in value (so that sums in any order
/// are exact), compacted, then changed: rows rewritten,
/// deleted, added, and rows whose keys do not fit the schema.
async fn readings(session: &SqlSession, table: &str, format: &str) {
    let run = |sql: String| async move { session.query(&sql).await.unwrap() };
    run(format!(
        "CREATE TABLE {table} (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
         FAMILY m FORMAT {format}, p DOUBLE IN m, q BIGINT IN m, note TEXT IN m)"
    ))
    .await;
    run(format!(
        "INSERT INTO {table} (region, balloon, ts, p, q, note) \
         SELECT CASE value / 16000 WHEN 0 THEN 'east' WHEN 1 THEN 'north' ELSE 'west' END, \
         (value / 4000) % 4, to_timestamp_seconds(1767225600 + (value % 4000) * 60), \
         (value % 1001) / 4.0, value, md5(CAST(value AS VARCHAR)) FROM generate_series(0, 47999)"
    ))
    .await;
    run(format!("COMPACT TABLE {table}")).await;
    for sql in [
        format!("UPDATE {table} SET p = 0.25 WHERE region = 'north' AND q % 97 = 0"),
        format!("DELETE FROM {table} WHERE region = 'west' AND q % 89 = 0"),
        format!(
            "INSERT INTO {table} (region, balloon, ts, p, q) VALUES \
             ('east', 9, TIMESTAMP '2026-01-03 10:07:00', 2.5, 1), \
             ('north', 2, TIMESTAMP '2025-12-31 23:59:00', 1.75, 2)"
        ),
        // Keys the schema does not read: NULL segments in the view.
        format!(
            "INSERT INTO {table} (_key, p, q) VALUES ('east#0001#2026-01-01-0099', 4.0, 3), \
             ('north#0002#soon', 8.5, 4), ('zz', 16.0, 5), ('west#x#2026-01-01-0000', 0.5, 6)"
        ),
    ] {
        run(sql).await;
    }
}

/// Each query, with `{m}` the measure and `{t}` the table, answered by
/// the scan (`{m}` = `p`) and by DataFusion (`abs(p)`).
const QUERIES: [&str; 10] = [
    "SELECT region, balloon, date_trunc('hour', ts) AS h, avg({m}) AS a, count(*) AS n, sum({m}) AS s \
     FROM {t} GROUP BY region, balloon, date_trunc('hour', ts) ORDER BY 1, 2, 3",
    "SELECT date_trunc('day', ts) AS d, count(*) AS n, max({m}) AS x, min({m}) AS y FROM {t} GROUP BY 1 ORDER BY 1",
    "SELECT balloon, date_trunc('minute', ts) AS h, sum({m}) AS s FROM {t} GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT region, date_trunc('hour', ts) AS h, date_trunc('day', ts) AS d, avg({m}) AS a \
     FROM {t} GROUP BY 1, 2, 3 ORDER BY 1, 2",
    "SELECT region, balloon, date_trunc('hour', ts) AS h, avg({m}) AS a FROM {t} \
     WHERE region = 'north' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    "SELECT balloon, date_trunc('hour', ts) AS h, count(*) AS n, sum({m}) AS s FROM {t} \
     WHERE region IN ('east', 'west') AND balloon = 1 GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT region, date_bin(INTERVAL '15 minutes', ts) AS b, avg({m}) AS a FROM {t} GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT date_bin(INTERVAL '2 hours', ts, TIMESTAMP '2026-01-01 00:30:00') AS b, count(*) AS n, sum({m}) AS s \
     FROM {t} GROUP BY 1 ORDER BY 1",
    "SELECT region, balloon, CAST(date_trunc('hour', ts) AS BIGINT) AS h, sum({m}) AS s FROM {t} \
     GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    // Versions by the time of their cells.
    "SELECT region, date_bin(INTERVAL '1 second', _timestamp) AS b, count({m}) AS n, sum({m}) AS s \
     FROM versions('{t}') GROUP BY 1, 2 ORDER BY 1, 2",
];

#[tokio::test]
async fn grouped_by_segments_and_time_buckets_answers_as_datafusion() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    for (table, format) in [("a", "AUTO"), ("c", "CELLS"), ("p", "PACKED")] {
        readings(&session, table, format).await;
        for query in QUERIES {
            let sql = |m: &str| query.replace("{t}", table).replace("{m}", m);
            let plan = text(&session, &format!("EXPLAIN {}", sql("p"))).await;
            assert!(
                plan.contains("ScanAggregateExec"),
                "{format}: the scan aggregates {query}\n{plan}"
            );
            let reference = text(&session, &format!("EXPLAIN {}", sql("abs(p)"))).await;
            assert!(!reference.contains("ScanAggregateExec"), "{reference}");
            let (scan, datafusion) = (
                text(&session, &sql("p")).await,
                text(&session, &sql("abs(p)")).await,
            );
            assert!(scan.lines().count() > 5, "{query}: rows come\n{scan}");
            assert_eq!(scan, datafusion, "{format}: {query}");
        }
    }
}

/// Keys that do not fit are in the groups of NULL segments and NULL
/// time, as the view shows them; grouping by the time segment itself
/// beside a bucket of it answers as DataFusion does.
#[tokio::test]
async fn keys_that_do_not_fit_group_as_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    readings(&session, "t", "PACKED").await;
    let grouped = "SELECT region, date_trunc('hour', ts) AS h, count(*) AS n, sum({m}) AS s \
                   FROM t GROUP BY 1, 2 ORDER BY 1, 2";
    let plan = text(
        &session,
        &format!("EXPLAIN {}", grouped.replace("{m}", "q")),
    )
    .await;
    assert!(plan.contains("ScanAggregateExec"), "{plan}");
    let scanned = text(&session, &grouped.replace("{m}", "q")).await;
    assert_eq!(
        scanned,
        text(&session, &grouped.replace("{m}", "abs(q)")).await
    );
    // The four keys that do not fit: one group, NULL region and hour.
    let cells =
        |line: &str| -> Vec<String> { line.split('|').map(|c| c.trim().to_string()).collect() };
    assert!(
        scanned
            .lines()
            .any(|l| cells(l) == ["", "", "", "4", "18", ""]),
        "{scanned}"
    );
    let both =
        "SELECT ts, date_trunc('hour', ts) AS h, sum({m}) AS s FROM t GROUP BY 1, 2 ORDER BY 1";
    assert_eq!(
        text(&session, &both.replace("{m}", "p")).await,
        text(&session, &both.replace("{m}", "abs(p)")).await
    );
}
