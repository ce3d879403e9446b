//! Plans kept for the shape of a statement: a read run again with other
//! literals is planned from its shape's template, and answers exactly as
//! the same text planned afresh does (rows, column names, errors).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use crate::rows::stat;
use cellar::{SqlSession, Store};
use datafusion::arrow::util::pretty::pretty_format_batches;

/// The answer to `sql` as text (its error's text where it fails).
async fn answer(session: &SqlSession, sql: &str) -> String {
    match session.query(sql).await {
        Ok(batches) => {
            let schema = batches[0].schema();
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            format!("{names:?}\n{}", pretty_format_batches(&batches).unwrap())
        }
        Err(e) => format!("error: {e}"),
    }
}

async fn balloons(store: &Store) {
    let session = SqlSession::new(store.clone());
    session
        .query(
            "CREATE TABLE t (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), \
             FAMILY m, p DOUBLE IN m, n BIGINT IN m)",
        )
        .await
        .unwrap();
    let mut values = Vec::new();
    for (r, region) in ["eu", "us"].iter().enumerate() {
        for balloon in 1..=3 {
            for minute in 0..20 {
                let n = r * 100 + balloon * 20 + minute;
                values.push(format!(
                    "('{region}', {balloon}, TIMESTAMP '2021-03-01T00:{minute:02}:00', {n}.5, {n})"
                ));
            }
        }
    }
    session
        .query(&format!(
            "INSERT INTO t (region, balloon, ts, p, n) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn statements_of_one_shape_answer_as_the_text_planned_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    balloons(&store).await;
    let shaped = SqlSession::new(store.clone());
    let shapes: Vec<(&str, Vec<Vec<&str>>)> = vec![
        (
            "SELECT p, n FROM t WHERE _key = {}",
            vec![
                vec!["'eu#0001#2021-03-01-0003'"],
                vec!["'us#0002#2021-03-01-0019'"],
                vec!["'us#0009#2021-03-01-0000'"],
                vec!["'eu#0003#2021-03-01-0007'"],
            ],
        ),
        (
            "SELECT count(*), avg(p) FROM t WHERE _key >= {} AND _key < {}",
            vec![
                vec!["'eu#0001'", "'eu#0002'"],
                vec!["'eu'", "'us#0002#2021-03-01-0010'"],
                vec!["'z'", "'a'"],
                vec!["'us#0003'", "'us#0004'"],
            ],
        ),
        (
            // An INT(4) segment and a timestamp segment: the integers and
            // strings become the segments' types.
            "SELECT ts, p FROM t WHERE region = {} AND balloon = {} \
             AND ts BETWEEN {} AND {} ORDER BY ts",
            vec![
                vec!["'eu'", "2", "'2021-03-01T00:03:00'", "'2021-03-01 00:06'"],
                vec![
                    "'us'",
                    "3",
                    "'2021-03-01T00:00:00'",
                    "'2021-03-01T00:02:00'",
                ],
                // Too large for the segment's type: no template, no error.
                vec![
                    "'us'",
                    "5000000000",
                    "'2021-03-01T00:00:00'",
                    "'2021-03-01T00:09:00'",
                ],
                vec!["'eu'", "1", "'not a time'", "'2021-03-01T00:09:00'"],
                vec![
                    "'eu'",
                    "1",
                    "'2021-03-01T00:18:00'",
                    "'2021-03-01T01:00:00'",
                ],
            ],
        ),
        (
            // TIMESTAMP literals: a whole microsecond goes into the
            // template; one between two microseconds equals no time of
            // the segment, as the text planned afresh says; text that is
            // no time is the planner's error.
            "SELECT ts, p FROM t WHERE region = {} AND balloon = {} AND ts = {}",
            vec![
                vec!["'eu'", "1", "TIMESTAMP '2021-03-01 00:03:00'"],
                vec!["'eu'", "2", "TIMESTAMP '2021-03-01T00:07:00'"],
                vec!["'us'", "2", "TIMESTAMP '2021-03-01 00:19:00.000000'"],
                vec!["'eu'", "1", "TIMESTAMP '2021-03-01 00:03:00.0000001'"],
                vec!["'eu'", "1", "TIMESTAMP '2021-03-01 00:02:59.9999999'"],
                vec!["'eu'", "1", "TIMESTAMP 'not a time'"],
                vec!["'eu'", "3", "TIMESTAMP '2021-03-01 00:08:00'"],
            ],
        ),
        (
            "SELECT count(*) FROM t WHERE ts >= {} AND ts < {}",
            vec![
                vec![
                    "TIMESTAMP '2021-03-01 00:03:00'",
                    "TIMESTAMP '2021-03-01 00:05:00'",
                ],
                vec![
                    "TIMESTAMP '2021-03-01 00:03:00'",
                    "TIMESTAMP '2021-03-01 00:05:00.0000001'",
                ],
                vec![
                    "TIMESTAMP '2021-03-01 00:02:59.9999999'",
                    "TIMESTAMP '2021-03-01 00:04:00'",
                ],
                vec![
                    "TIMESTAMP '2021-03-01 00:00:00'",
                    "TIMESTAMP '2021-03-02 00:00:00'",
                ],
            ],
        ),
        (
            // A string compared with an integer segment, an integer with
            // a double and a bigint.
            "SELECT count(*) FROM t WHERE balloon = {} AND p > {} AND n <> {}",
            vec![
                vec!["'2'", "30", "45"],
                vec!["'02'", "30", "45"],
                vec!["2", "30", "45"],
                vec!["'x'", "30", "45"],
                vec!["3", "130", "0"],
                vec!["1", "-1", "0"],
            ],
        ),
        (
            "SELECT region, balloon, sum(n) AS s FROM t WHERE balloon IN ({}, {}) \
             AND _key < {} GROUP BY region, balloon ORDER BY 1, 2",
            vec![
                vec!["1", "3", "'us'"],
                vec!["2", "2", "'z'"],
                vec!["3", "300", "'us#0003'"],
            ],
        ),
        (
            // The natural hourly average: its filters in a subquery in
            // FROM, its groups labelled outside it.
            "SELECT concat(region, '#', CAST(balloon AS VARCHAR)) AS k, h, a FROM \
             (SELECT region, balloon, date_trunc('hour', ts) AS h, avg(p) AS a FROM t \
             WHERE region = {} AND balloon >= {} GROUP BY region, balloon, date_trunc('hour', ts)) \
             WHERE a > {} ORDER BY 1, 2",
            vec![
                vec!["'eu'", "1", "0"],
                vec!["'us'", "2", "10"],
                vec!["'eu'", "3", "-5"],
                vec!["'us'", "0", "1000"],
            ],
        ),
        (
            // Ranges of one key group and of several: the scan of a kept
            // physical plan is made anew only where it is cut and ordered
            // as the first statement's was.
            "SELECT _key, n FROM t WHERE _key >= {} AND _key < {} ORDER BY _key",
            vec![
                vec!["'eu#0001'", "'eu#0001#2021-03-01-0005'"],
                vec!["'eu#0002'", "'eu#0003'"],
                vec!["'a'", "'z'"],
                vec!["'us#0003#2021-03-01-0010'", "'us#0004'"],
                vec!["'eu#0003#2021-03-01-0018'", "'us#0001#2021-03-01-0002'"],
            ],
        ),
        (
            "SELECT _key, p FROM t WHERE _key < {} ORDER BY _key DESC LIMIT 3",
            vec![
                vec!["'eu#0002'"],
                vec!["'us'"],
                vec!["'us#0003#2021-03-01-0005'"],
                vec!["'a'"],
            ],
        ),
    ];
    let mut statements = 0;
    for (shape, literal_sets) in &shapes {
        for literals in literal_sets {
            let mut sql = shape.to_string();
            for literal in literals {
                sql = sql.replacen("{}", literal, 1);
            }
            let afresh = SqlSession::new(store.clone());
            let expected = answer(&afresh, &sql).await;
            assert_eq!(answer(&shaped, &sql).await, expected, "{sql}");
            statements += 1;
        }
    }
    // The first two statements of each shape are planned as text or make
    // the template; most of the rest come from templates.
    let by_shape = stat(&shaped, "plans_by_shape").await;
    assert!(
        by_shape >= (statements - 2 * shapes.len() - 3) as u64,
        "{by_shape} of {statements} statements planned by shape"
    );
    // Those of shapes whose placeholders are all in their scan's filters
    // run from the first one's physical plan, their scan made anew.
    let rebound = stat(&shaped, "plans_rebound").await;
    assert!(
        (8..by_shape).contains(&rebound),
        "{rebound} of {by_shape} statements planned by shape ran from a kept physical plan"
    );
    // Most found their shape from their tokens, without a parse (the
    // third of a shape on; one whose literal the shape would not take,
    // or whose kept literal differs, is parsed).
    let by_tokens = stat(&shaped, "plans_by_tokens").await;
    assert!(
        by_tokens >= (statements - 3 * shapes.len() - 3) as u64 && by_tokens <= by_shape,
        "{by_tokens} of {by_shape} statements planned by shape found it by their tokens"
    );
}

#[tokio::test]
async fn a_shape_is_planned_once_and_its_template_sees_writes_and_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    balloons(&store).await;
    let session = SqlSession::new(store.clone());
    let q = |key: &str| format!("SELECT n FROM t WHERE _key = 'eu#0001#2021-03-01-00{key}'");
    let planned = stat(&session, "statements_planned").await;
    for minute in ["01", "02", "03", "04", "05"] {
        let out = answer(&session, &q(minute)).await;
        assert!(
            out.contains(&format!("| {} ", 20 + minute.parse::<u32>().unwrap())),
            "{out}"
        );
    }
    assert_eq!(
        stat(&session, "statements_planned").await,
        planned + 1,
        "only the first statement of the shape is planned as text"
    );
    assert_eq!(stat(&session, "plans_by_shape").await, 4);
    // A write is seen: rows are read when the plan runs.
    session
        .query("INSERT INTO t (region, balloon, ts, n) VALUES ('eu', 1, TIMESTAMP '2021-03-01T00:30:00', 7)")
        .await
        .unwrap();
    assert!(answer(&session, &q("30")).await.contains("| 7 "));
    // A changed table is planned afresh: the template was made for the
    // table as it was.
    session.query("ALTER TABLE t ADD FAMILY g").await.unwrap();
    let before = stat(&session, "plans_by_shape").await;
    let out = answer(&session, &q("06")).await;
    assert!(out.contains("| 26 "), "{out}");
    assert_eq!(stat(&session, "plans_by_shape").await, before);
}

/// One event of a series looked up by its key and time, as a user types
/// it again and again with other values: after the first two statements
/// each runs from the shape's kept physical plan, its scan made anew,
/// and answers as the text planned afresh (an event that is not there,
/// another series, a time between two events).
#[tokio::test]
async fn a_series_point_lookup_runs_from_its_kept_physical_plan() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    session
        .query(
            "CREATE SERIES s (KEY (region TEXT, balloon BIGINT), TIME ts, p DOUBLE) \
             LAYOUT BUCKET '1 day' CELL PER EVENT",
        )
        .await
        .unwrap();
    let mut values = Vec::new();
    for (region, balloon) in [("eu", 1), ("eu", 2), ("us", 1)] {
        for minute in 0..30 {
            values.push(format!(
                "('{region}', {balloon}, TIMESTAMP '2024-01-01 23:{minute:02}:00', {minute}.{balloon})"
            ));
        }
    }
    session
        .query(&format!("INSERT INTO s VALUES {}", values.join(", ")))
        .await
        .unwrap();
    let lookups = [
        ("eu", 1, "23:05:00"),
        ("eu", 2, "23:29:00"),
        ("us", 1, "23:00:00"),
        ("us", 2, "23:00:00"),
        ("eu", 1, "23:05:30"),
        ("eu", 2, "23:31:00"),
        ("us", 1, "23:17:00"),
    ];
    for (region, balloon, time) in lookups {
        let sql = format!(
            "SELECT CAST(ts AS BIGINT) AS t, p FROM s WHERE region = '{region}' \
             AND balloon = {balloon} AND ts = TIMESTAMP '2024-01-01 {time}'"
        );
        let afresh = SqlSession::new(store.clone());
        assert_eq!(
            answer(&session, &sql).await,
            answer(&afresh, &sql).await,
            "{sql}"
        );
    }
    assert_eq!(stat(&session, "plans_rebound").await, 5);
}

/// An aggregate the scan computes (`ScanAggregateExec`) over a range
/// given by the statement's values runs from the kept physical plan, the
/// aggregate made again over the new scan; every answer is the text's
/// planned afresh, and a range cut otherwise (another number of
/// partitions) is planned anew.
#[tokio::test]
async fn a_scan_side_aggregate_runs_from_its_kept_physical_plan() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    balloons(&store).await;
    let session = SqlSession::new(store.clone());
    session
        .query("CREATE TABLE packed (ROW KEY (region TEXT, balloon INT(4), ts TIMESTAMP '%Y-%m-%d-%H%M'), FAMILY m FORMAT PACKED, p DOUBLE IN m, n BIGINT IN m)")
        .await
        .unwrap();
    session
        .query("INSERT INTO packed (_key, p, n) SELECT _key, p, n FROM t")
        .await
        .unwrap();
    session.query("COMPACT TABLE packed").await.unwrap();
    let shapes = [
        "SELECT count(*), avg(p), sum(n), min(p), max(n) FROM {t} WHERE _key >= {} AND _key < {}",
        "SELECT date_trunc('minute', ts) AS m, count(*), avg(p) FROM {t} \
         WHERE region = {} AND balloon = {} GROUP BY 1 ORDER BY 1",
    ];
    let literals = [
        ["'eu#0001'", "'eu#0002'"],
        ["'eu#0002'", "'eu#0003'"],
        ["'us#0001#2021-03-01-0005'", "'us#0001#2021-03-01-0015'"],
        ["'us#0003'", "'us#0004'"],
        ["'eu#0003'", "'eu#0002'"],
        ["'eu'", "'us#0002'"],
        ["'eu#0001#2021-03-01-0019'", "'eu#0002#2021-03-01-0001'"],
    ];
    let balloon_literals = [
        ["'eu'", "1"],
        ["'us'", "2"],
        ["'eu'", "3"],
        ["'us'", "9"],
        ["'eu'", "2"],
    ];
    for table in ["t", "packed"] {
        for (i, shape) in shapes.iter().enumerate() {
            let shape = shape.replace("{t}", table);
            let sets: Vec<&[&str; 2]> = match i {
                0 => literals.iter().collect(),
                _ => balloon_literals.iter().collect(),
            };
            let before = stat(&session, "plans_rebound").await;
            for (k, [a, b]) in sets.iter().enumerate() {
                let sql = shape.replacen("{}", a, 1).replacen("{}", b, 1);
                if k == 0 {
                    let plan = answer(&session, &format!("EXPLAIN {sql}")).await;
                    assert!(plan.contains("ScanAggregateExec"), "{plan}");
                }
                let afresh = SqlSession::new(store.clone());
                assert_eq!(
                    answer(&session, &sql).await,
                    answer(&afresh, &sql).await,
                    "{sql}"
                );
            }
            // The first makes the template, the second its kept plan;
            // most of the rest run from it.
            let rebound = stat(&session, "plans_rebound").await - before;
            assert!(
                rebound >= 2 && rebound < sets.len() as u64,
                "{rebound} of {} statements of {shape} ran from a kept physical plan",
                sets.len()
            );
        }
    }
}
