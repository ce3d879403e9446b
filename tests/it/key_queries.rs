//! Queries over row-key schemas, checked against a plain DataFusion table
//! holding the same rows: random schemas (text, zero-padded integer, salt,
//! and timestamp segments in each format, reversed or not), random rows,
//! random conjunctions of segment predicates, ORDER BY segments ASC or
//! DESC with LIMIT. Whatever plan cellar chooses (key ranges, reverse
//! reads, merged salt buckets, LIMIT inside the scan), the answer must be
//! what the relational engine says.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use crate::rows;

use rows::texts;

use cellar::{FamilyFormat, SessionOptions, SqlSession, Store};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

/// How the key is laid out.
#[derive(Debug, Clone)]
struct Schema {
    /// A salt bucket of `dev` (or of `ts` when `dev` is absent) first.
    salt: Option<u32>,
    /// A text device segment.
    dev: bool,
    /// Written as `TEXT(3)`, padded with spaces.
    padded: bool,
    /// A zero-padded `INT(3)` segment.
    n: bool,
    /// The timestamp segment's format, as DDL.
    ts: &'static str,
    format: FamilyFormat,
}

impl Schema {
    /// Seconds the timestamp segment keeps: a minute pattern writes (and
    /// reads back) the start of the minute.
    fn precision(&self) -> i64 {
        if self.ts.ends_with("%M'") { 60 } else { 1 }
    }

    fn ddl(&self) -> String {
        let mut key = vec!["'T'".to_string()];
        match (self.salt, self.dev) {
            (Some(b), true) => key.push(format!("salt SALT({b}) OF (dev)")),
            (Some(b), false) => key.push(format!("salt SALT({b}) OF (ts)")),
            (None, _) => {}
        }
        if self.dev {
            key.push(
                if self.padded {
                    "dev TEXT(3)"
                } else {
                    "dev TEXT"
                }
                .into(),
            );
        }
        if self.n {
            key.push("n INT(3)".into());
        }
        key.push(format!("ts {}", self.ts));
        let format = self.format.to_string();
        format!(
            "CREATE TABLE t (ROW KEY ({}), FAMILY m FORMAT {format}, v BIGINT IN m)",
            key.join(", ")
        )
    }
}

fn schemas() -> impl Strategy<Value = Schema> {
    (
        prop_oneof![Just(None), (1u32..6).prop_map(Some)],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![
            Just("TIMESTAMP '%Y%m%d%H%M%S'"),
            Just("TIMESTAMP '%Y%m%d%H%M'"),
            Just("TIMESTAMP SECONDS"),
            Just("TIMESTAMP MILLIS"),
            Just("TIMESTAMP MILLIS REVERSED"),
            Just("TIMESTAMP MICROS REVERSED"),
        ],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(salt, dev, n, ts, packed, padded)| Schema {
            salt,
            dev,
            padded,
            n,
            ts,
            format: if packed {
                FamilyFormat::Packed
            } else {
                FamilyFormat::Cells
            },
        })
}

const DEVICES: [&str; 3] = ["a", "ab", "b"];
/// 2024-01-01T00:00:00 in seconds.
const BASE: i64 = 1_704_067_200;

fn time(offset: i64) -> String {
    chrono::DateTime::from_timestamp(BASE + offset, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// One predicate, in SQL, on a segment the schema has.
fn predicate(schema: &Schema) -> impl Strategy<Value = Option<String>> + use<> {
    let dev = schema.dev;
    let n = schema.n;
    prop_oneof![
        (0usize..3).prop_map(move |d| dev.then(|| format!("dev = '{}'", DEVICES[d]))),
        (0usize..3).prop_map(move |d| dev.then(|| format!("dev LIKE '{}%'", DEVICES[d]))),
        (0usize..3, 0usize..3).prop_map(
            move |(a, b)| dev.then(|| format!("dev IN ('{}', '{}')", DEVICES[a], DEVICES[b]))
        ),
        (0i64..8).prop_map(move |k| n.then(|| format!("n = {k}"))),
        (
            0i64..8,
            prop_oneof![Just("<"), Just("<="), Just(">"), Just(">=")]
        )
            .prop_map(move |(k, op)| n.then(|| format!("n {op} {k}"))),
        (
            0i64..40,
            prop_oneof![Just("<"), Just("<="), Just(">"), Just(">="), Just("=")]
        )
            .prop_map(|(t, op)| Some(format!("ts {op} '{}'", time(t * 30)))),
        // Between whole seconds: every format cuts it.
        (
            0i64..40,
            prop_oneof![Just("<"), Just("<="), Just(">"), Just(">=")]
        )
            .prop_map(|(t, op)| Some(format!("ts {op} '{}.5'", time(t * 30)))),
        (0i64..40, 0i64..20).prop_map(|(t, w)| Some(format!(
            "ts BETWEEN '{}' AND '{}'",
            time(t * 30),
            time((t + w) * 30)
        ))),
    ]
}

/// ORDER BY columns (each with its direction) and a LIMIT.
fn ordering(
    schema: &Schema,
) -> impl Strategy<Value = (Vec<(String, bool)>, Option<usize>)> + use<> {
    let mut columns = Vec::new();
    if schema.dev {
        columns.push("dev");
    }
    if schema.n {
        columns.push("n");
    }
    columns.push("ts");
    let count = columns.len();
    (
        proptest::sample::subsequence(columns, 1..=count),
        proptest::collection::vec(any::<bool>(), count),
        prop_oneof![Just(None), (1usize..6).prop_map(Some)],
    )
        .prop_map(|(cols, desc, limit)| {
            let order = cols
                .into_iter()
                .zip(desc)
                .map(|(c, d)| (c.to_string(), d))
                .collect();
            (order, limit)
        })
}

#[derive(Debug, Clone)]
struct Case {
    schema: Schema,
    /// (dev, n, ts offset in seconds).
    rows: Vec<(usize, i64, i64)>,
    filters: Vec<Option<String>>,
    order: Vec<(String, bool)>,
    limit: Option<usize>,
}

fn cases() -> impl Strategy<Value = Case> {
    schemas().prop_flat_map(|schema| {
        (
            proptest::collection::vec((0usize..3, 0i64..8, 0i64..1200), 0..60),
            proptest::collection::vec(predicate(&schema), 0..3),
            ordering(&schema),
            Just(schema),
        )
            .prop_map(|(rows, filters, (order, limit), schema)| Case {
                schema,
                rows,
                filters,
                order,
                limit,
            })
    })
}

/// The query over `table`; the select list is every column, so that rows
/// tied under the ORDER BY can be told apart.
fn query(case: &Case, table: &str) -> String {
    let mut columns: Vec<&str> = Vec::new();
    if case.schema.dev {
        columns.push("dev");
    }
    if case.schema.n {
        columns.push("n");
    }
    columns.extend(["ts", "v"]);
    let mut sql = format!("SELECT {} FROM {table}", columns.join(", "));
    let filters: Vec<&String> = case.filters.iter().flatten().collect();
    if !filters.is_empty() {
        let joined: Vec<&str> = filters.iter().map(|f| f.as_str()).collect();
        sql += &format!(" WHERE {}", joined.join(" AND "));
    }
    let order: Vec<String> = case
        .order
        .iter()
        .map(|(c, d)| format!("{c}{}", if *d { " DESC" } else { "" }))
        .collect();
    sql += &format!(" ORDER BY {}", order.join(", "));
    if let Some(n) = case.limit {
        sql += &format!(" LIMIT {n}");
    }
    sql
}

async fn check(case: &Case) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::with_options(store, SessionOptions::default());
    session.query(&case.schema.ddl()).await.unwrap();
    let reference = SessionContext::new();
    // The last write of a key wins; rows of one key are one row.
    let mut rows: Vec<(String, i64, i64, usize)> = Vec::new();
    let precision = case.schema.precision();
    for (i, (d, n, t)) in case.rows.iter().enumerate() {
        let dev = if case.schema.dev { DEVICES[*d] } else { "-" };
        let n = if case.schema.n { *n } else { 0 };
        let kept = t - t.rem_euclid(precision);
        rows.retain(|(a, b, c, _)| (a.as_str(), *b, *c) != (dev, n, kept));
        rows.push((dev.to_string(), n, kept, i));
    }
    let values: Vec<String> = rows
        .iter()
        .map(|(dev, n, t, v)| format!("('{dev}', {n}, TIMESTAMP '{}', {v})", time(*t)))
        .collect();
    let values = if values.is_empty() {
        // An empty table of the right types.
        "SELECT 'x' AS dev, 0 AS n, TIMESTAMP '2000-01-01T00:00:00' AS ts, 0 AS v WHERE false"
            .to_string()
    } else {
        format!(
            "SELECT column1 AS dev, column2 AS n, column3 AS ts, column4 AS v FROM (VALUES {})",
            values.join(", ")
        )
    };
    reference
        .sql(&format!("CREATE TABLE r AS {values}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    for (dev, n, t, v) in &rows {
        let mut columns = vec!["ts", "v"];
        let mut values = vec![format!("'{}'", time(*t)), v.to_string()];
        if case.schema.dev {
            columns.push("dev");
            values.push(format!("'{dev}'"));
        }
        if case.schema.n {
            columns.push("n");
            values.push(n.to_string());
        }
        session
            .query(&format!(
                "INSERT INTO t ({}) VALUES ({})",
                columns.join(", "),
                values.join(", ")
            ))
            .await
            .unwrap();
    }
    let sql = query(case, "t");
    let got = texts(&session.query(&sql).await.unwrap());
    let all = Case {
        limit: None,
        ..case.clone()
    };
    let expected = texts(
        &reference
            .sql(&query(&all, "r"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    );
    // Positions of the ORDER BY columns in the select list.
    let mut columns: Vec<&str> = Vec::new();
    if case.schema.dev {
        columns.push("dev");
    }
    if case.schema.n {
        columns.push("n");
    }
    columns.extend(["ts", "v"]);
    let keys: Vec<usize> = case
        .order
        .iter()
        .map(|(c, _)| columns.iter().position(|x| x == c).unwrap())
        .collect();
    let sort_key =
        |row: &Vec<String>| -> Vec<String> { keys.iter().map(|k| row[*k].clone()).collect() };
    let want = case.limit.map_or(expected.len(), |n| n.min(expected.len()));
    prop_assert_eq!(
        got.len(),
        want,
        "{}\ngot {:?}\nexpected {:?}",
        sql,
        got,
        expected
    );
    // Same ORDER BY values in the same order; rows tied under them may
    // differ, but each must be a row the reference returns.
    let got_keys: Vec<Vec<String>> = got.iter().map(&sort_key).collect();
    let expected_keys: Vec<Vec<String>> = expected.iter().take(want).map(&sort_key).collect();
    prop_assert_eq!(&got_keys, &expected_keys, "{}", sql);
    for row in &got {
        prop_assert!(expected.contains(row), "{}: {:?} not expected", sql, row);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn segment_queries_answer_as_a_relational_table(case in cases()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(check(&case))?;
    }
}
