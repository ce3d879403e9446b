//! The cost of a selective query follows its result, not its table: the
//! same query on a 10 000-row and a 1 000 000-row table reads the same
//! number of rows and cells, as EXPLAIN ANALYZE reports. Nothing is timed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use crate::rows::stat;
use cellar::{Mutation, RowMutation, SqlSession, Store};
use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::{collect, displayable};

/// Rows of the large table: 40 times the small one, and over the size
/// under which a table is read by one partition per range.
const LARGE: usize = 400_000;

/// Loads `rows` rows into `table`: 100 hosts, `rows / 100` samples each.
async fn load(session: &SqlSession, table: &str, rows: usize) {
    session
        .query(&format!(
            "CREATE TABLE {table} (ROW KEY (host TEXT, n INT(8)), FAMILY m, v BIGINT IN m)"
        ))
        .await
        .unwrap();
    let per_host = rows / 100;
    let store = session.store();
    let mut batch = Vec::with_capacity(10_000);
    for host in 0..100 {
        for n in 0..per_host {
            let key = format!("h{host:02}#{n:08}");
            let value = (n as i64).to_be_bytes().to_vec();
            batch.push(RowMutation::new(
                key,
                vec![Mutation::set_at("m", "v", 1, value)],
            ));
            if batch.len() == 10_000 {
                for r in store
                    .mutate_rows(table, std::mem::take(&mut batch))
                    .unwrap()
                {
                    r.unwrap();
                }
            }
        }
    }
    for r in store.mutate_rows(table, batch).unwrap() {
        r.unwrap();
    }
}

/// Plans `sql`, runs the plan to its end, and returns it with its
/// metrics.
async fn run(session: &SqlSession, sql: &str) -> Arc<dyn datafusion::physical_plan::ExecutionPlan> {
    let plan = session
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    collect(Arc::clone(&plan), session.context().task_ctx())
        .await
        .unwrap();
    plan
}

/// Runs `sql` and returns its scans' counters: (rows scanned, cells
/// scanned), summed over partitions, and whether any scan read the whole
/// table. These are the numbers EXPLAIN ANALYZE prints (rounded there).
async fn scanned(session: &SqlSession, sql: &str) -> (usize, usize, bool) {
    let plan = run(session, sql).await;
    let mut totals = (0, 0, false);
    let mut stack = vec![plan];
    while let Some(node) = stack.pop() {
        // A count the scan answers by itself runs as a scan-side
        // aggregate, which counts rows read (its one cell a row is not
        // counted apart).
        if matches!(node.name(), "KeyScanExec" | "ScanAggregateExec") {
            let metrics = node.metrics().unwrap();
            let rows = metrics.sum_by_name("rows_scanned").unwrap().as_usize();
            totals.0 += rows;
            totals.1 += metrics
                .sum_by_name("cells_scanned")
                .map_or(rows, |c| c.as_usize());
            let shown = displayable(node.as_ref()).one_line().to_string();
            totals.2 |= shown.contains("FULL TABLE SCAN");
        }
        stack.extend(node.children().into_iter().cloned());
    }
    totals
}

async fn analyze(session: &SqlSession, sql: &str) -> String {
    let batches = session
        .query(&format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}

/// A session on a store in `dir` whose scans split into two partitions,
/// as on the two-core machines CI runs on, whatever this one has.
fn two_partitions(dir: &tempfile::TempDir) -> SqlSession {
    two_partitions_on(Store::open(dir.path()).unwrap())
}

/// [`two_partitions`] on an open `store`.
fn two_partitions_on(store: Store) -> SqlSession {
    let session = SqlSession::new(store);
    session
        .context()
        .state_ref()
        .write()
        .config_mut()
        .options_mut()
        .execution
        .target_partitions = 2;
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selective_queries_read_their_result_not_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let session = two_partitions(&dir);
    load(&session, "small", 10_000).await;
    load(&session, "large", LARGE).await;

    let queries = [
        // a key range inside one host
        (
            "SELECT sum(v) FROM {t} WHERE host = 'h42' AND n BETWEEN 10 AND 59",
            50,
        ),
        // an IN list on the leading segment, a range on the next
        (
            "SELECT count(*) FROM {t} WHERE host IN ('h01', 'h99') AND n < 20",
            40,
        ),
        // point lookups by full key
        (
            "SELECT v FROM {t} WHERE _key IN ('h07#00000003', 'h08#00000004')",
            2,
        ),
        // LIMIT stops the scan
        ("SELECT v FROM {t} LIMIT 5", 5),
    ];
    for (template, expected_rows) in queries {
        let mut counts = Vec::new();
        for table in ["small", "large"] {
            let sql = template.replace("{t}", table);
            let (rows, cells, full) = scanned(&session, &sql).await;
            assert_eq!(rows, expected_rows, "{sql}: rows scanned");
            assert_eq!(cells, rows, "{sql}: cells scanned (one per row)");
            assert_eq!(
                full,
                sql.contains("LIMIT"),
                "{sql}: full scan (only LIMIT may say so)"
            );
            counts.push((rows, cells));
        }
        assert_eq!(counts[0], counts[1], "{template}: small vs large differ");
    }

    // A query that cannot use the key reads everything, and says so.
    let (rows, _, full) = scanned(&session, "SELECT count(*) FROM large WHERE v = 7").await;
    assert_eq!(rows, LARGE);
    assert!(full);

    // A whole-table read of the large table is cut into key ranges read in
    // parallel, and still sees every row once.
    let plan = analyze(&session, "SELECT count(*) FROM large").await;
    assert!(plan.contains("partitions=2"), "{plan}");
    let count = session
        .query("SELECT count(*) AS n FROM large")
        .await
        .unwrap();
    let text = pretty_format_batches(&count).unwrap().to_string();
    assert!(text.contains("| 400000 |"), "{text}");

    // The split scan's partitions are key ranges, declared as such: a
    // GROUP BY _key aggregates each partition on its own (no repartition,
    // no merge that would read the partitions one after the other), and a
    // join of two scans split alike pairs partitions; answers stay whole.
    let grouped = "SELECT count(*) AS keys, sum(c) AS rows, max(c) AS most \
                   FROM (SELECT _key, count(*) AS c FROM large GROUP BY _key)";
    let plan = analyze(&session, grouped).await;
    // (Here in the scan itself, which finishes each partition's groups.)
    assert!(
        plan.contains("mode=SinglePartitioned") || plan.contains("whole aggregate in the scan"),
        "{plan}"
    );
    assert!(!plan.contains("RepartitionExec"), "{plan}");
    let checks = [
        (grouped, "| 400000 | 400000 | 1    |"),
        (
            "SELECT count(*) AS n FROM large a JOIN large b ON a._key = b._key",
            "| 400000 |",
        ),
        (
            "SELECT count(*) AS n FROM large a JOIN small b ON a._key = b._key",
            "| 10000 |",
        ),
        (
            "SELECT count(*) AS hosts, min(c) AS least, max(c) AS most \
             FROM (SELECT host, count(*) AS c FROM large GROUP BY host)",
            "| 100   | 4000  | 4000 |",
        ),
        (
            "SELECT count(*) AS keys FROM (SELECT _key FROM cells('large', 'm') GROUP BY _key)",
            "| 400000 |",
        ),
        // Aggregates of the rows computed in the scan (its partitions
        // each): every row once, its newest cell.
        (
            "SELECT count(*) AS n, sum(v) AS s, min(v) AS lo, max(v) AS hi, avg(v) AS a FROM large",
            "| 400000 | 799800000 | 0  | 3999 | 1999.5 |",
        ),
        (
            "SELECT count(*) AS hosts, min(s) AS least, max(s) AS most \
             FROM (SELECT host, sum(v) AS s FROM large GROUP BY host)",
            "| 100   | 7998000 | 7998000 |",
        ),
    ];
    let plan = analyze(&session, "SELECT count(*), sum(v), avg(v) FROM large").await;
    assert!(plan.contains("ScanAggregateExec"), "{plan}");
    for (sql, expected) in checks {
        let batches = session.query(sql).await.unwrap();
        let text = pretty_format_batches(&batches).unwrap().to_string();
        assert!(text.contains(expected), "{sql}:\n{text}");
    }

    // A range of a few rows of the large table is read by one partition,
    // on no thread of its own: nothing spreads ten rows over threads; nor
    // a range of a few blocks on disk (one host's 4 000 rows). A range of
    // many rows is still cut.
    let plan = analyze(
        &session,
        "SELECT v FROM large WHERE host = 'h42' AND n < 10",
    )
    .await;
    assert!(!plan.contains("RepartitionExec"), "{plan}");
    assert!(!plan.contains("partitions=2"), "{plan}");
    let host = analyze(&session, "SELECT count(v) FROM large WHERE host = 'h42'").await;
    assert!(!host.contains("partitions=2"), "{host}");
    assert!(!host.contains("RepartitionExec"), "{host}");
    assert!(host.contains("rows_scanned=4.00 K"), "{host}");
    let wide = analyze(
        &session,
        "SELECT count(v) FROM large WHERE host >= 'h20' AND host < 'h60'",
    )
    .await;
    assert!(wide.contains("partitions=2"), "{wide}");
    // Compressed blocks count as the bytes they hold: once compacted into
    // fjall's compressed last level, the 160 000 rows are still cut, and
    // one host's 4 000 still are not.
    session.query("COMPACT TABLE large").await.unwrap();
    let wide = analyze(
        &session,
        "SELECT count(v) FROM large WHERE host >= 'h20' AND host < 'h60'",
    )
    .await;
    assert!(wide.contains("partitions=2"), "compacted: {wide}");
    assert!(wide.contains("output_rows=160.0 K"), "compacted: {wide}");
    let host = analyze(&session, "SELECT count(v) FROM large WHERE host = 'h42'").await;
    assert!(!host.contains("partitions=2"), "compacted: {host}");
    // EXPLAIN ANALYZE shows the counters next to the rows returned.
    for metric in [
        "rows_scanned=10",
        "cells_scanned=10",
        "output_rows=10",
        "key_misfits=0",
    ] {
        assert!(plan.contains(metric), "{metric} missing in\n{plan}");
    }

    // A shape's kept physical plan follows the partitions its statements
    // are read by: the first statement planned from the shape's template
    // (its second: one host, one partition) keeps its plan; the next (40
    // hosts, two partitions) does not fit it and is planned and kept in
    // its stead; the ones after it, over other hosts of as many rows, run
    // from that plan with only the scan made anew, and answer as each
    // text planned afresh in another session.
    let fresh = two_partitions_on(session.store().clone());
    let counted = |from: u32, to: u32| {
        format!("SELECT count(v) FROM large WHERE host >= 'h{from:02}' AND host < 'h{to:02}'")
    };
    let rebound = stat(&session, "plans_rebound").await;
    for (from, to) in [(42, 43), (41, 42), (20, 60), (10, 50), (30, 70), (0, 40)] {
        let sql = counted(from, to);
        let answer = crate::rows::text(&session, &sql).await;
        assert_eq!(answer, crate::rows::text(&fresh, &sql).await, "{sql}");
        assert!(
            answer.contains(&((to - from) * 4_000).to_string()),
            "{sql}: {answer}"
        );
    }
    assert_eq!(
        stat(&session, "plans_rebound").await - rebound,
        3,
        "the three statements after the one whose plan replaced the first's"
    );
}

/// Rows scanned by each partition of the scans of `sql`'s plan, in
/// partition order.
async fn rows_per_partition(session: &SqlSession, sql: &str) -> Vec<usize> {
    let plan = run(session, sql).await;
    let mut stack = vec![plan];
    let mut rows = Vec::new();
    while let Some(node) = stack.pop() {
        if matches!(node.name(), "KeyScanExec" | "ScanAggregateExec") {
            let metrics = node.metrics().unwrap();
            let mut by_partition: Vec<(usize, usize)> = metrics
                .iter()
                .filter(|m| m.value().name() == "rows_scanned")
                .map(|m| (m.partition().unwrap_or(0), m.value().as_usize()))
                .collect();
            by_partition.sort_unstable();
            rows.extend(by_partition.into_iter().map(|(_, r)| r));
        }
        stack.extend(node.children().into_iter().cloned());
    }
    rows
}

/// A table with 90 % of its rows under one key prefix is still read by
/// two partitions of about equal work: the split follows where the
/// table's bytes are (its on-disk tables' block indexes), not the key
/// space between its first and last row (which gives one partition the
/// prefix's every row). In every family format, once the rows are on
/// disk; a table still in memory is split by key space as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_table_is_split_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let session = two_partitions(&dir);
    for format in ["", " FORMAT CELLS", " FORMAT PACKED"] {
        let table = format!("skew{}", format.trim().replace(' ', "_").to_lowercase());
        session
            .query(&format!(
                "CREATE TABLE {table} (ROW KEY (host TEXT, n INT(8)), FAMILY m{format}, v BIGINT IN m)"
            ))
            .await
            .unwrap();
        // 360 000 rows under `a`, 40 000 over the hosts `b` to `u`.
        let store = session.store();
        let mut batch = Vec::with_capacity(10_000);
        let hosts = std::iter::repeat_n(("a".to_string(), 360_000), 1)
            .chain((b'b'..=b'u').map(|h| ((h as char).to_string(), 2_000)));
        for (host, count) in hosts {
            for n in 0..count {
                batch.push(RowMutation::new(
                    format!("{host}#{n:08}"),
                    // Values of no pattern: a counter's column-wise
                    // blocks take under a byte a row, and a table that
                    // small is read by one partition.
                    vec![Mutation::set_at(
                        "m",
                        "v",
                        1,
                        ((n as i64 * 2_654_435_761) % 1_000_003)
                            .to_be_bytes()
                            .to_vec(),
                    )],
                ));
                if batch.len() == 10_000 {
                    for r in store
                        .mutate_rows(&table, std::mem::take(&mut batch))
                        .unwrap()
                    {
                        r.unwrap();
                    }
                }
            }
        }
        for r in store.mutate_rows(&table, batch).unwrap() {
            r.unwrap();
        }
        session
            .query(&format!("COMPACT TABLE {table}"))
            .await
            .unwrap();
        let rows = rows_per_partition(&session, &format!("SELECT sum(v) FROM {table}")).await;
        assert_eq!(rows.len(), 2, "{table}: {rows:?}");
        assert_eq!(rows.iter().sum::<usize>(), 400_000, "{table}: {rows:?}");
        let (least, most) = (rows.iter().min().unwrap(), rows.iter().max().unwrap());
        assert!(
            *most as f64 <= 1.5 * *least as f64,
            "{table}: partitions read {rows:?} rows"
        );
        // A range inside the prefix is cut by size too, and answers whole.
        let rows = rows_per_partition(
            &session,
            &format!("SELECT sum(v) FROM {table} WHERE host = 'a' AND n >= 100000"),
        )
        .await;
        assert_eq!(rows.iter().sum::<usize>(), 260_000, "{table}: {rows:?}");
        let (least, most) = (rows.iter().min().unwrap(), rows.iter().max().unwrap());
        assert!(
            rows.len() == 2 && *most as f64 <= 1.5 * *least as f64,
            "{table}: partitions read {rows:?} rows"
        );
    }
}
