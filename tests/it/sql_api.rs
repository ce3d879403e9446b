//! The embedding API: open a store, run SQL through a session, share the
//! store between sessions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use cellar::{SqlSession, Store};
use datafusion::arrow::array::{AsArray, Int64Array};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sql_increments_all_apply() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    session
        .query("CREATE TABLE c (ROW KEY (name TEXT), FAMILY f, n BIGINT IN f)")
        .await
        .unwrap();
    session
        .query("INSERT INTO c (name, n) VALUES ('a', 0), ('b', 0)")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        // Each task has its own session over the same store.
        let session = SqlSession::new(store.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                session
                    .query("UPDATE c SET n = n + 1 WHERE name IN ('a', 'b')")
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let batches = session
        .query("SELECT n FROM c ORDER BY name")
        .await
        .unwrap();
    let values: Vec<i64> = batches
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(values, vec![200, 200]);
}

/// An UPDATE mixing an atomic increment with computed assignments commits
/// each row's cells together: every version has `t` equal to `n` and `s`
/// at `n`'s timestamp, whatever ran concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_update_of_several_columns_is_one_commit_per_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    session
        .query(
            "CREATE TABLE c (ROW KEY (name TEXT), FAMILY f GC NONE, n BIGINT IN f, t BIGINT AS TEXT IN f, s TEXT IN f)",
        )
        .await
        .unwrap();
    session
        .query("INSERT INTO c (name, n, t, s) VALUES ('a', 0, 0, 'x'), ('b', 0, 0, 'x')")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let session = SqlSession::new(store.clone());
        tasks.push(tokio::spawn(async move {
            for j in 0..15 {
                session
                    .query(&format!(
                        "UPDATE c SET n = n + 1, t = t + 1, s = 'w{i}-{j}' WHERE name IN ('a', 'b')"
                    ))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let count = |sql: &'static str| {
        let session = &session;
        async move {
            let batches = session.query(sql).await.unwrap();
            batches[0]
                .column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .value(0)
        }
    };
    // Every version of a row holds all three columns, in step.
    assert_eq!(count("SELECT count(*) FROM versions('c')").await, 2 * 91);
    assert_eq!(
        count("SELECT count(*) FROM versions('c') WHERE n = t AND s IS NOT NULL").await,
        2 * 91
    );
    assert_eq!(count("SELECT min(n) FROM c").await, 90);
    assert_eq!(count("SELECT max(t) FROM c").await, 90);
}

#[tokio::test]
async fn tables_are_visible_to_a_plain_session_context() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    session
        .query("CREATE TABLE t (FAMILY f, v BIGINT)")
        .await
        .unwrap();
    session
        .query("INSERT INTO t (_key, v) VALUES ('x', 41)")
        .await
        .unwrap();
    // The DataFusion context is usable directly, with the store's catalog.
    let ctx = session.context();
    let batches = ctx
        .sql("SELECT v + 1 AS v FROM cellar.public.t")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let v = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(v.value(0), 42);
    let tables = ctx
        .sql("SHOW TABLES")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&tables)
        .unwrap()
        .to_string();
    assert!(
        text.contains("| cellar        | public             | t "),
        "{text}"
    );
}

/// The scan's plan text of an EXPLAIN ANALYZE.
async fn analyzed_scan(session: &SqlSession, sql: &str) -> String {
    let batches = session
        .query(&format!("EXPLAIN ANALYZE {sql}"))
        .await
        .unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    text.lines()
        .find(|l| l.contains("KeyScanExec"))
        .unwrap_or_default()
        .to_string()
}

/// count(*) and key-only queries never decode a cell value; a query of
/// one column decodes that column's values and no others.
#[tokio::test]
async fn key_only_queries_decode_no_values() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    session
        .query(
            "CREATE TABLE w (ROW KEY (region TEXT, n INT(4)), FAMILY m, \
             a BIGINT IN m, b DOUBLE IN m, c TEXT IN m)",
        )
        .await
        .unwrap();
    session
        .query(
            "INSERT INTO w (region, n, a, b, c) VALUES ('eu', 1, 1, 0.5, 'x'), \
             ('eu', 2, 2, 1.5, 'y'), ('us', 1, 3, 2.5, 'z')",
        )
        .await
        .unwrap();
    for sql in [
        "SELECT count(*) FROM w",
        "SELECT count(*) FROM w WHERE region = 'eu'",
        "SELECT _key FROM w",
        "SELECT region, n FROM w WHERE n > 1",
    ] {
        let scan = analyzed_scan(&session, sql).await;
        assert!(scan.contains("values_decoded=0"), "{sql}: {scan}");
    }
    let scan = analyzed_scan(&session, "SELECT sum(a) FROM w").await;
    assert!(scan.contains("values_decoded=3"), "{scan}");
    let scan = analyzed_scan(&session, "SELECT b, c FROM w WHERE region = 'us'").await;
    assert!(scan.contains("values_decoded=2"), "{scan}");
}

/// A load larger than one write unit: the units before a bad row are
/// written (in order, while the next is encoded), nothing of the bad
/// row's unit is, and the error names the row's line and what was
/// written; loaded again with `ON_ERROR skip` everything else arrives.
#[tokio::test]
async fn a_bad_row_in_a_later_unit_stops_after_the_units_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    let session = SqlSession::new(store);
    session
        .query("CREATE TABLE t (FAMILY m FORMAT PACKED, v BIGINT IN m)")
        .await
        .unwrap();
    let rows = 150_000;
    let bad = 140_000;
    let mut csv = String::from("_key,v\n");
    for i in 0..rows {
        if i == bad {
            csv.push_str(&format!("k{i:07},lots\n"));
        } else {
            csv.push_str(&format!("k{i:07},{i}\n"));
        }
    }
    let path = dir.path().join("rows.csv");
    std::fs::write(&path, csv).unwrap();
    let err = session
        .query(&format!("COPY t FROM '{}'", path.display()))
        .await
        .unwrap_err()
        .to_string();
    let line = bad + 2;
    assert!(err.contains(&format!("line {line} of")), "{err}");
    assert!(
        err.contains("the 131072 rows before that batch were"),
        "{err}"
    );
    let count = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
        batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0)
    };
    let written = session.query("SELECT count(*) FROM t").await.unwrap();
    assert_eq!(count(written), 131_072);
    let max = session.query("SELECT max(v) FROM t").await.unwrap();
    assert_eq!(count(max), 131_071, "whole units, in order");
    session
        .query(&format!("COPY t FROM '{}' (ON_ERROR skip)", path.display()))
        .await
        .unwrap();
    let written = session.query("SELECT count(*) FROM t").await.unwrap();
    assert_eq!(count(written), rows as i64 - 1);
}

/// A table's rows whose wanted columns are all BIGINT or DOUBLE are read
/// as numbers (no cell in between): the same answers as when a TEXT
/// column makes the scan read cells, in either format, with a bad value
/// failing the queries that read its row's column.
#[tokio::test]
async fn rows_read_as_numbers_answer_as_rows_read_as_cells() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    for format in ["CELLS", "PACKED"] {
        let t = format!("n_{}", format.to_lowercase());
        session
            .query(&format!(
                "CREATE TABLE {t} (ROW KEY (region TEXT, n INT(4)), FAMILY m FORMAT {format}, \
                 FAMILY o FORMAT {format}, a BIGINT IN m, b DOUBLE IN m, c TEXT IN m, d BIGINT IN o)"
            ))
            .await
            .unwrap();
        session
            .query(&format!(
                "INSERT INTO {t} (region, n, a, b, c, d) VALUES ('eu', 1, 1, 0.5, 'x', 10), \
                 ('eu', 2, NULL, 1.5, 'y', NULL), ('us', 1, 3, NULL, 'z', 30), ('us', 2, -4, 2.25, 'w', 40)"
            ))
            .await
            .unwrap();
        // A row only the other family holds, a key that does not fit the
        // schema, and a value that is not 8 bytes long.
        let cell = |family: &str, qualifier: &str, value: Vec<u8>| cellar::Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.as_bytes().to_vec(),
            timestamp: Some(1_000),
            value,
        };
        let rows = vec![
            cellar::RowMutation::new(
                b"us#0003".to_vec(),
                vec![cell("o", "d", 50i64.to_be_bytes().to_vec())],
            ),
            cellar::RowMutation::new(
                b"odd".to_vec(),
                vec![cell("m", "a", 6i64.to_be_bytes().to_vec())],
            ),
            cellar::RowMutation::new(
                b"zz#0001".to_vec(),
                vec![
                    cell("m", "a", vec![1, 2, 3]),
                    cell("m", "b", 9.5f64.to_be_bytes().to_vec()),
                ],
            ),
        ];
        for r in session.store().mutate_rows(&t, rows).unwrap() {
            r.unwrap();
        }
        let answer = |sql: String| {
            let session = &session;
            async move {
                let batches = session.query(&sql).await.map_err(|e| e.to_string())?;
                Ok::<_, String>(
                    datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                        .unwrap()
                        .to_string(),
                )
            }
        };
        // Each query's numbers against the same rows read with a TEXT
        // column beside them (which makes the scan read cells).
        for (numbers, where_) in [
            ("_key, a, b, d", "WHERE region < 'zz'"),
            ("region, n, a, b", "WHERE region = 'eu'"),
            ("a, d", "WHERE _key >= 'eu' AND _key < 'us#0002'"),
            ("b", "WHERE b > 1"),
            ("n, d", "WHERE d IS NULL OR d > 20"),
        ] {
            let fast = answer(format!(
                "SELECT {numbers} FROM {t} {where_} ORDER BY {numbers}"
            ))
            .await;
            let cells = answer(format!(
                "SELECT {numbers} FROM {t} {where_} AND coalesce(c, '') <> 'never' ORDER BY {numbers}"
            ))
            .await;
            let fast = fast.unwrap_or_else(|e| panic!("{format} {numbers} {where_}: {e}"));
            assert_eq!(fast, cells.unwrap(), "{format}: {numbers} {where_}");
        }
        let scan = analyzed_scan(&session, &format!("SELECT a FROM {t} WHERE region = 'eu'")).await;
        assert!(scan.contains("values_decoded=1"), "{format}: {scan}");
        // The bad value fails the queries that read it, naming the column,
        // the row and the repair.
        for sql in [
            format!("SELECT a FROM {t}"),
            format!("SELECT a, b FROM {t} WHERE b > 9"),
        ] {
            let e = answer(sql.clone()).await.unwrap_err();
            assert!(
                e.contains("column a (m:a) is not an 8-byte big-endian integer")
                    && e.contains("zz#0001")
                    && e.contains("SET a = NULL"),
                "{format}: {sql}: {e}"
            );
        }
        let fine = answer(format!("SELECT a FROM {t} WHERE region < 'zz' ORDER BY a")).await;
        assert!(fine.is_ok(), "{format}: {fine:?}");
        let fine = answer(format!("SELECT b FROM {t} WHERE region = 'zz'"))
            .await
            .unwrap();
        assert!(fine.contains("9.5"), "{format}: {fine}");
    }
}

/// A session over a fresh store with table `t` of 1000 rows (`n`, `v`),
/// reading `batch_size` rows a batch.
async fn thousand_rows(batch_size: usize) -> (tempfile::TempDir, SqlSession) {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    session
        .query("CREATE TABLE t (ROW KEY (n INT(4)), FAMILY f FORMAT PACKED, v BIGINT)")
        .await
        .unwrap();
    session
        .query("INSERT INTO t (n, v) SELECT value AS n, value AS v FROM generate_series(0, 999)")
        .await
        .unwrap();
    session
        .query(&format!(
            "SET datafusion.execution.batch_size = {batch_size}"
        ))
        .await
        .unwrap();
    (dir, session)
}

/// Runs every partition of the operator called `name` in the plan of
/// `sql`, polling by hand: how often its stream let its task go, and the
/// batches and rows it gave.
async fn polled_by_hand(session: &SqlSession, sql: &str, name: &str) -> (usize, usize, usize) {
    use datafusion::physical_plan::ExecutionPlan;
    use futures::StreamExt;
    use std::sync::Arc;
    fn find(plan: &Arc<dyn ExecutionPlan>, name: &str) -> Option<Arc<dyn ExecutionPlan>> {
        if plan.name() == name {
            return Some(Arc::clone(plan));
        }
        plan.children().into_iter().find_map(|c| find(c, name))
    }
    let plan = session
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let node = find(&plan, name).unwrap_or_else(|| {
        panic!(
            "no {name} in {}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        )
    });
    let (mut pending, mut batches, mut rows) = (0, 0, 0);
    for partition in 0..node.properties().partitioning.partition_count() {
        let mut stream = node
            .execute(partition, session.context().task_ctx())
            .unwrap();
        loop {
            match futures::poll!(stream.next()) {
                std::task::Poll::Pending => pending += 1,
                std::task::Poll::Ready(Some(batch)) => {
                    batches += 1;
                    rows += batch.unwrap().num_rows();
                }
                std::task::Poll::Ready(None) => break,
            }
        }
    }
    (pending, batches, rows)
}

/// A scan gives a batch a poll and lets its task go every few batches: an
/// operator pulling it in a loop (a partial aggregate, a repartition's
/// input task) does not hold its task for the whole read, so a cancelled
/// query's task is dropped there.
#[tokio::test]
async fn a_scan_lets_its_task_go_every_few_batches() {
    let (_dir, session) = thousand_rows(10).await;
    let (pending, batches, rows) = polled_by_hand(&session, "SELECT v FROM t", "KeyScanExec").await;
    assert_eq!(rows, 1000);
    assert!(batches >= 100, "{batches} batches");
    // Every 8 batches, at least.
    assert!(
        pending * 9 >= batches - 9,
        "let go {pending} times in {batches} batches"
    );
}

/// A read whose filter selects nothing of most rows (a time range only the
/// last rows have cells in) lets its task go while it steps over them,
/// rather than in one poll over the whole table: a cancelled query stops.
#[tokio::test]
async fn a_read_passing_over_unselected_rows_lets_its_task_go() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    session
        .query("CREATE TABLE t (ROW KEY (n INT(5)), FAMILY f FORMAT PACKED, v BIGINT)")
        .await
        .unwrap();
    session
        .query(
            "INSERT INTO t (n, v, _timestamp) SELECT value AS n, value AS v, \
             to_timestamp_micros(value * 1000) AS _timestamp FROM generate_series(0, 19999)",
        )
        .await
        .unwrap();
    let recent = "_timestamp >= to_timestamp_micros(19990000)";
    let (pending, _, rows) = polled_by_hand(
        &session,
        &format!("SELECT n FROM versions('t') WHERE {recent}"),
        "KeyScanExec",
    )
    .await;
    assert_eq!(rows, 10);
    // 19 990 rows passed over, at most 4096 a step.
    assert!(pending >= 4, "let go {pending} times");
    let (pending, _, _) = polled_by_hand(
        &session,
        &format!("SELECT date_trunc('hour', _timestamp), sum(v) FROM versions('t') WHERE {recent} GROUP BY 1"),
        "ScanAggregateExec",
    )
    .await;
    assert!(pending >= 4, "the aggregate let go {pending} times");
    let batches = session
        .query(&format!(
            "SELECT count(*), sum(v) FROM versions('t') WHERE {recent}"
        ))
        .await
        .unwrap();
    let sum = batches[0]
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    assert_eq!(sum.value(0), (19990..20000).sum::<i64>());
}

/// A scan-side aggregate reads a step of rows a poll and lets its task go
/// between steps (a cancelled query's task is dropped at such a point),
/// rather than reading its whole partition in one poll.
#[tokio::test]
async fn a_scan_aggregate_yields_between_steps() {
    let (_dir, session) = thousand_rows(100).await;
    let (pending, _, rows) = polled_by_hand(
        &session,
        "SELECT date_trunc('hour', _timestamp), sum(v) FROM versions('t') GROUP BY 1",
        "ScanAggregateExec",
    )
    .await;
    // 1000 rows in steps of 100: about ten times it let go.
    assert!(pending >= 8, "yielded {pending} times");
    assert!(rows >= 1, "each partition sends its groups");
    let batches = session
        .query("SELECT sum(s) FROM (SELECT date_trunc('hour', _timestamp), sum(v) AS s FROM versions('t') GROUP BY 1)")
        .await
        .unwrap();
    let sum = batches[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    assert_eq!(sum.value(0), 999 * 1000 / 2);
}

/// `COMPACT TABLE` merges every family, the one its GC pass sweeps and
/// the one that keeps every version (which the pass skips): a bulk load
/// left raw in fjall's level 1 comes out compressed in both, and reads
/// the same. (Were either left raw, the table would keep half its size.)
#[tokio::test]
async fn compact_table_compresses_a_bulk_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("store")).unwrap();
    let session = SqlSession::new(store.clone());
    session
        .query(
            "CREATE TABLE t (FAMILY m FORMAT PACKED, FAMILY g GC MAX_VERSIONS 1 FORMAT PACKED, \
             note TEXT IN m, again TEXT IN g)",
        )
        .await
        .unwrap();
    session
        .query(
            "INSERT INTO t (_key, note, again) SELECT 'k' || lpad(CAST(value AS TEXT), 8, '0'), \
             repeat('the same reading, again and again, ', 4) AS note, \
             repeat('the same reading, again and again, ', 4) AS again \
             FROM generate_series(1, 40000)",
        )
        .await
        .unwrap();
    store.checkpoint().unwrap();
    let raw = store.table_disk_space("t").unwrap();
    assert!(raw > 2 * 40_000 * 140, "{raw}");
    let said = session.query("COMPACT TABLE t").await.unwrap();
    let said = said[0].column(0).as_string::<i32>().value(0).to_string();
    assert_eq!(said, "compacted table t (0 cells reclaimed)");
    let compacted = store.table_disk_space("t").unwrap();
    assert!(compacted * 4 < raw, "disk use {raw} -> {compacted}");
    let count = session
        .query("SELECT count(*) FROM t WHERE note LIKE 'the same reading%' AND note = again")
        .await
        .unwrap();
    let count = count[0]
        .column(0)
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    assert_eq!(count.value(0), 40_000);
    let missing = session.query("COMPACT TABLE nope").await.unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("table \"nope\" does not exist"),
        "{missing}"
    );
}

/// Queries over a tall PACKED table merged into column-wise blocks, whose
/// rows a scan and a scan-side aggregate take a block at a time (and the
/// cells and versions views take from the block's columns), answer
/// exactly as over the same rows in a CELLS table (read a row at a time):
/// with rows rewritten, deleted and added among the blocks, grouped by a
/// key segment or not, over key ranges that cut blocks, with a LIMIT.
#[tokio::test]
async fn block_reads_answer_as_row_reads_do() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    for (table, format) in [("p", "PACKED"), ("c", "CELLS")] {
        session
            .query(&format!(
                "CREATE TABLE {table} (ROW KEY (region TEXT, n INT(5)), FAMILY m FORMAT {format}, \
                 a DOUBLE IN m, b BIGINT IN m)"
            ))
            .await
            .unwrap();
        // Values a quarter apart, so that sums in any order are exact.
        session
            .query(&format!(
                "INSERT INTO {table} (region, n, a, b) SELECT CASE value % 3 WHEN 0 THEN 'east' \
                 WHEN 1 THEN 'north' ELSE 'west' END, value, value / 4.0, value * 3 \
                 FROM generate_series(0, 20999)"
            ))
            .await
            .unwrap();
        session
            .query(&format!("COMPACT TABLE {table}"))
            .await
            .unwrap();
        for sql in [
            format!("UPDATE {table} SET a = 0.5 WHERE region = 'north' AND n % 97 = 0"),
            format!("DELETE FROM {table} WHERE region = 'west' AND n % 89 = 0"),
            format!(
                "INSERT INTO {table} (region, n, b) VALUES ('east', 99999, 7), ('north', 3, 1)"
            ),
        ] {
            session.query(&sql).await.unwrap();
        }
    }
    let plan = session
        .query("EXPLAIN SELECT count(*), sum(a), max(b) FROM p WHERE region IN ('east', 'west')")
        .await
        .unwrap();
    let plan = datafusion::arrow::util::pretty::pretty_format_batches(&plan)
        .unwrap()
        .to_string();
    assert!(plan.contains("ScanAggregateExec"), "{plan}");
    let queries = [
        "SELECT count(*), sum(b), sum(a), min(a), max(b), count(a) FROM {t}",
        "SELECT count(*), sum(a), min(a), max(b), count(a) FROM {t} WHERE region IN ('east', 'west')",
        "SELECT region, count(*), sum(a), max(a) FROM {t} WHERE region IN ('east', 'north') \
         GROUP BY region ORDER BY region",
        "SELECT count(*), sum(a) FROM {t} WHERE region IN ('east', 'west') AND n < 20000",
        "SELECT count(*), sum(a), max(b) FROM {t} WHERE _key < 'east#20000' OR _key >= 'west#00500'",
        "SELECT region, count(*), sum(b), sum(a), max(a) FROM {t} GROUP BY region ORDER BY region",
        "SELECT count(*), sum(a) FROM {t} WHERE region = 'north' AND n BETWEEN 1000 AND 17000",
        "SELECT count(*), sum(b) FROM {t} WHERE _key >= 'east#00100' AND _key < 'west#00050'",
        "SELECT substr(_key, 1, 8) AS k, sum(a), count(b) FROM {t} GROUP BY 1 ORDER BY 1",
        "SELECT region, n, a, b FROM {t} WHERE region = 'west' ORDER BY n LIMIT 200",
        "SELECT _key, region, n, a, b FROM {t} WHERE _key > 'north#19000' LIMIT 70",
        "SELECT _key, a, b FROM {t} ORDER BY _key",
        "SELECT _key, qualifier, value FROM cells('{n}', 'm') WHERE _key >= 'north#18000' ORDER BY 1, 2",
        "SELECT count(*), count(DISTINCT qualifier), max(value) FROM cells('{n}', 'm')",
        "SELECT _key, a, b FROM versions('{n}') WHERE _key < 'east#00300' ORDER BY _key",
    ];
    for query in queries {
        let answer = |table: &str| {
            let sql = query
                .replace("{t}", &format!("{table} AS x"))
                .replace("{n}", table);
            let session = &session;
            async move {
                let batches = session.query(&sql).await.unwrap();
                datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .unwrap()
                    .to_string()
            }
        };
        let (packed, cells) = (answer("p").await, answer("c").await);
        assert!(packed.lines().count() > 4, "{query}: rows come\n{packed}");
        assert_eq!(packed, cells, "{query}");
    }
}

/// A load into a PACKED family large enough to go to the store a column
/// at a time (declared columns, none NULL) answers as the same load into
/// a CELLS family, which goes cell by cell: every cell with its time,
/// the same bad rows skipped with the same reasons, or the same row
/// stopping the load; and a NULL sends the load cell by cell, to the same
/// end.
#[tokio::test]
async fn a_load_given_column_wise_answers_as_one_given_cell_by_cell() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path().join("s")).unwrap());
    let rows = 40_000;
    let bad_key = 30_001;
    let negative = 30_002;
    let csv = |null_at: Option<usize>| {
        let mut csv = String::from("_key,_timestamp,a,b,flag,d\n");
        for i in 0..rows {
            let key = match i {
                _ if i == bad_key => "k".repeat(cellar::MAX_KEY_LEN + 1),
                _ => format!("k{i:07}"),
            };
            let ts = match i {
                _ if i == negative => "1969-12-31T23:59:59".to_string(),
                _ => format!("2026-01-01T00:{:02}:{:02}", i / 60 % 60, i % 60),
            };
            let b = if null_at == Some(i) {
                String::new()
            } else {
                (i * 3).to_string()
            };
            let flag = i % 3 == 0;
            let d = format!("{}.{:02}", i / 7, i % 100);
            csv.push_str(&format!("{key},{ts},{},{b},{flag},{d}\n", i as f64 / 8.0));
        }
        csv
    };
    let (full, with_null) = (dir.path().join("full.csv"), dir.path().join("null.csv"));
    std::fs::write(&full, csv(None)).unwrap();
    std::fs::write(&with_null, csv(Some(20_000))).unwrap();
    let text = |batches: &[datafusion::arrow::array::RecordBatch]| {
        datafusion::arrow::util::pretty::pretty_format_batches(batches)
            .unwrap()
            .to_string()
    };
    let mut answers: Vec<Vec<String>> = Vec::new();
    for (table, format) in [("p", "PACKED"), ("c", "CELLS"), ("n", "PACKED")] {
        session
            .query(&format!(
                "CREATE TABLE {table} (FAMILY m FORMAT {format}, a DOUBLE IN m, b BIGINT IN m, \
                 flag BOOLEAN IN m, d DECIMAL(12, 2) IN m)"
            ))
            .await
            .unwrap();
        let file = if table == "n" { &with_null } else { &full };
        let stopped = session
            .query(&format!("COPY {table} FROM '{}'", file.display()))
            .await
            .unwrap_err()
            .to_string();
        let loaded = session
            .query(&format!(
                "COPY {table} FROM '{}' (ON_ERROR skip)",
                file.display()
            ))
            .await
            .unwrap();
        let mut answer = vec![stopped, text(&loaded)];
        for sql in [
            format!("SELECT * FROM {table} ORDER BY _key"),
            format!(
                "SELECT _key, qualifier, _timestamp, value FROM cells('{table}') \
                 ORDER BY _key, qualifier"
            ),
        ] {
            answer.push(text(&session.query(&sql).await.unwrap()));
        }
        answers.push(answer);
    }
    let (p, c, n) = (&answers[0], &answers[1], &answers[2]);
    // (The time is refused as the row is read, the key as it is written.)
    assert!(p[0].contains(&format!("line {}", negative + 2)), "{}", p[0]);
    assert!(p[1].contains("39998"), "{}", p[1]);
    for (k, what) in ["the stop", "the load", "the rows", "the cells"]
        .iter()
        .enumerate()
    {
        // (Not printed: the tables are long.)
        assert!(p[k] == c[k], "{what} differ");
    }
    // The NULL's row lacks that cell, and the rest is as before.
    let n_rows = n[2].lines().filter(|l| l.starts_with("| k")).count();
    assert_eq!(n_rows, rows - 2);
    assert_eq!(n[3].lines().count(), p[3].lines().count() - 1);
}

/// cellar's own statements led by a comment run as they do without one
/// (the text a client sends often starts with one); this panicked in the
/// statement parser before.
#[tokio::test]
async fn statements_led_by_comments_run() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    for sql in [
        "-- the readings\nCREATE TABLE r (ROW KEY (a TEXT), FAMILY f, v BIGINT IN f)",
        "/* a series */ CREATE SERIES s (KEY (a TEXT), TIME ts, v DOUBLE) LAYOUT ROW PER EVENT",
        "-- one row\nINSERT INTO r (a, v) VALUES ('x', 1)",
        "/* gone */ DROP SERIES s",
    ] {
        session
            .query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let batches = session
        .query("-- count\nSELECT count(*) FROM r")
        .await
        .unwrap();
    assert_eq!(
        batches[0]
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        1
    );
    let missing = session
        .query("-- s was dropped\nSELECT * FROM s")
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("public.s' not found"), "{missing}");
}
