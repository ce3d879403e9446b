//! Series queries against a plain DataFusion table of the same events:
//! random events (random series, times, late arrivals, repeated times
//! whose measures replace the stored ones), written in random statements
//! into a random layout and family format, then random series key and
//! time predicates with ORDER BY and LIMIT. Whatever the layout and the
//! plan (key ranges, bucket ranges, cell-time ranges, reverse reads,
//! salt buckets, LIMIT in the scan), the answer must be the reference's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use crate::rows;

use rows::texts;

use std::collections::BTreeMap;

use cellar::{SessionOptions, SqlSession, Store};
use datafusion::prelude::SessionContext;
use proptest::prelude::*;

const LAYOUTS: [&str; 12] = [
    "ROW PER EVENT",
    "ROW PER EVENT REVERSED",
    "ROW PER EVENT SALT 3",
    "ROW PER EVENT SALT 2 REVERSED",
    "BUCKET '1 hour' CELL PER EVENT",
    "BUCKET '10 minutes' CELL PER EVENT REVERSED",
    "BUCKET '1 day' CELL PER EVENT SALT 3",
    "BUCKET '1 week' CELL PER EVENT SALT 2 REVERSED",
    "SERIALIZED",
    "SERIALIZED BUCKET '1 day' SALT 2",
    "BUCKET '1 hour' COLUMN PER EVENT",
    "BUCKET '1 week' COLUMN PER EVENT SALT 3 REVERSED",
];

const DEVICES: [&str; 3] = ["a", "ab", "z"];

/// 2024-12-28T00:00:00Z (a Saturday), in seconds: events span a week's
/// end, so week buckets have two.
const BASE: i64 = 1_735_344_000;
/// Minutes the events span: three days.
const MINUTES: i64 = 3 * 24 * 60;

/// Runs `work` to its end on a runtime of the calling thread.
fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// One event: series (device, n), time in microseconds, two measures
/// (at least one given).
#[derive(Debug, Clone)]
struct Event {
    dev: usize,
    n: i64,
    micros: i64,
    pressure: Option<i64>,
    temperature: Option<i64>,
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    // Times within a few days around a week's end, on minutes or with
    // microseconds; some from a handful, so that (series, time) repeats
    // within and across statements.
    let micros = prop_oneof![
        (0i64..MINUTES).prop_map(|m| (BASE + m * 60) * 1_000_000),
        (0i64..4).prop_map(|m| (BASE + m * 60) * 1_000_000),
        (0i64..MINUTES * 60_000_000).prop_map(|u| BASE * 1_000_000 + u),
    ];
    let event = (
        0usize..3,
        0i64..3,
        micros,
        proptest::option::of(-50i64..50),
        -50i64..50,
        any::<bool>(),
    )
        .prop_map(|(dev, n, micros, pressure, t, keep_t)| Event {
            dev,
            n,
            micros,
            pressure,
            temperature: (keep_t || pressure.is_none()).then_some(t),
        });
    proptest::collection::vec(event, 0..50)
}

fn predicate() -> impl Strategy<Value = String> {
    let at = (0i64..MINUTES).prop_map(|m| time((BASE + m * 60) * 1_000_000));
    prop_oneof![
        1 => (0usize..3).prop_map(|d| format!("dev = '{}'", DEVICES[d])),
        // One whole series: what the latest-events plans need.
        3 => (0usize..3, 0i64..3).prop_map(|(d, n)| format!("dev = '{}' AND n = {n}", DEVICES[d])),
        1 => (0i64..3).prop_map(|n| format!("n = {n}")),
        1 => (0i64..3, 0i64..3).prop_map(|(a, b)| format!("n IN ({a}, {b})")),
        1 => at.clone().prop_map(|t| format!("ts >= TIMESTAMP '{t}'")),
        1 => at.clone().prop_map(|t| format!("ts > TIMESTAMP '{t}'")),
        1 => at.clone().prop_map(|t| format!("ts < TIMESTAMP '{t}'")),
        1 => at.clone().prop_map(|t| format!("ts <= TIMESTAMP '{t}'")),
        1 => (at.clone(), at).prop_map(|(a, b)| format!("ts BETWEEN TIMESTAMP '{a}' AND TIMESTAMP '{b}'")),
        1 => (-50i64..50).prop_map(|v| format!("pressure > {v}")),
        1 => Just("temperature IS NULL".to_string()),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    layout: &'static str,
    packed: bool,
    events: Vec<Event>,
    /// Where the events are cut into INSERT statements.
    cuts: Vec<usize>,
    filters: Vec<String>,
    /// ORDER BY: `ts DESC`, `ts`, or the series then the time.
    order: &'static str,
    limit: Option<usize>,
    /// The GROUP BY of an aggregate over the same filters.
    grouping: &'static str,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        proptest::sample::select(LAYOUTS.to_vec()),
        any::<bool>(),
        events(),
        proptest::collection::vec(0usize..50, 0..4),
        proptest::collection::vec(predicate(), 0..4),
        proptest::sample::select(vec![
            "ts DESC",
            "ts",
            "dev, n, ts",
            "dev DESC, n DESC, ts DESC",
        ]),
        proptest::option::of(1usize..8),
        proptest::sample::select(vec![
            "date_trunc('hour', ts)",
            "dev, date_trunc('day', ts)",
            "dev, n, date_trunc('minute', ts)",
            "date_trunc('week', ts), date_trunc('hour', ts)",
            "n",
        ]),
    )
        .prop_map(
            |(layout, packed, events, cuts, filters, order, limit, grouping)| Case {
                layout,
                packed,
                events,
                cuts,
                filters,
                order,
                limit,
                grouping,
            },
        )
}

fn value(v: Option<i64>) -> String {
    v.map_or("NULL".into(), |v| v.to_string())
}

/// The events as stored: per (series, time), each measure the last one
/// given; serialized, the last event whole (a message is one cell).
fn stored(events: &[Event], serialized: bool) -> Vec<Event> {
    let mut by_key: BTreeMap<(usize, i64, i64), Event> = BTreeMap::new();
    for e in events {
        let m = by_key.entry((e.dev, e.n, e.micros)).or_insert(Event {
            pressure: None,
            temperature: None,
            ..e.clone()
        });
        if e.pressure.is_some() || serialized {
            m.pressure = e.pressure;
        }
        if e.temperature.is_some() || serialized {
            m.temperature = e.temperature;
        }
    }
    by_key.into_values().collect()
}

/// Aggregates over the case's filters, grouped by its grouping (which
/// bucket layouts answer inside their scans); with `count(*)` (events
/// counted from cells) or without (measures read as runs of numbers).
fn aggregate(case: &Case, table: &str, events: bool) -> String {
    // Commas outside parentheses separate the groups.
    let mut depth = 0i32;
    let groups = 1 + case
        .grouping
        .chars()
        .filter(|c| {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            *c == ',' && depth == 0
        })
        .count();
    let positions: Vec<String> = (1..=groups).map(|i| i.to_string()).collect();
    let mut sql = format!(
        "SELECT {}, {}count(pressure), sum(pressure), min(temperature), max(temperature), \
         avg(pressure), avg(temperature) FROM {table}",
        case.grouping,
        if events { "count(*), " } else { "" }
    );
    if !case.filters.is_empty() {
        sql += &format!(" WHERE {}", case.filters.join(" AND "));
    }
    let positions = positions.join(", ");
    sql += &format!(" GROUP BY {positions} ORDER BY {positions}");
    sql
}

fn query(case: &Case, table: &str) -> String {
    let mut sql = format!("SELECT dev, n, ts, pressure, temperature FROM {table}");
    if !case.filters.is_empty() {
        sql += &format!(" WHERE {}", case.filters.join(" AND "));
    }
    sql += &format!(" ORDER BY {}", case.order);
    sql
}

async fn check(case: &Case) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::with_options(store, SessionOptions::default());
    let format = if case.packed { "PACKED" } else { "CELLS" };
    session
        .query(&format!(
            "CREATE SERIES s (KEY (dev TEXT, n INT(2)), TIME ts, pressure BIGINT, temperature BIGINT) \
             LAYOUT {} FORMAT {format}",
            case.layout
        ))
        .await
        .unwrap();
    let mut cuts: Vec<usize> = case
        .cuts
        .iter()
        .map(|c| (*c).min(case.events.len()))
        .chain([0, case.events.len()])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    for w in cuts.windows(2) {
        let rows: Vec<String> = case.events[w[0]..w[1]]
            .iter()
            .map(|e| {
                format!(
                    "('{}', {}, TIMESTAMP '{}', {}, {})",
                    DEVICES[e.dev],
                    e.n,
                    time(e.micros),
                    value(e.pressure),
                    value(e.temperature)
                )
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        session
            .query(&format!("INSERT INTO s VALUES {}", rows.join(", ")))
            .await
            .unwrap();
    }
    let reference = SessionContext::new();
    let rows: Vec<String> = stored(&case.events, case.layout.starts_with("SERIALIZED"))
        .iter()
        .map(|e| {
            format!(
                "('{}', CAST({} AS BIGINT), TIMESTAMP '{}', CAST({} AS BIGINT), CAST({} AS BIGINT))",
                DEVICES[e.dev],
                e.n,
                time(e.micros),
                value(e.pressure),
                value(e.temperature)
            )
        })
        .collect();
    let values = if rows.is_empty() {
        "SELECT 'x' AS dev, CAST(0 AS BIGINT) AS n, TIMESTAMP '2000-01-01T00:00:00' AS ts, \
         CAST(0 AS BIGINT) AS pressure, CAST(0 AS BIGINT) AS temperature WHERE false"
            .to_string()
    } else {
        format!(
            "SELECT column1 AS dev, column2 AS n, column3 AS ts, column4 AS pressure, \
             column5 AS temperature FROM (VALUES {})",
            rows.join(", ")
        )
    };
    reference
        .sql(&format!("CREATE TABLE r AS {values}"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut sql = query(case, "s");
    if let Some(n) = case.limit {
        sql += &format!(" LIMIT {n}");
    }
    let got = texts(&session.query(&sql).await.unwrap());
    let expected = texts(
        &reference
            .sql(&query(case, "r"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap(),
    );
    let want = case.limit.map_or(expected.len(), |n| n.min(expected.len()));
    prop_assert_eq!(
        got.len(),
        want,
        "{}\ngot {:?}\nexpected {:?}",
        sql,
        got,
        expected
    );
    // Rows tied under the ORDER BY may come in either order.
    let order_columns: Vec<usize> = case
        .order
        .split(',')
        .map(|c| match c.split_whitespace().next().unwrap() {
            "dev" => 0,
            "n" => 1,
            _ => 2,
        })
        .collect();
    let sort_key = |row: &Vec<String>| -> Vec<String> {
        order_columns.iter().map(|c| row[*c].clone()).collect()
    };
    let got_keys: Vec<Vec<String>> = got.iter().map(&sort_key).collect();
    let expected_keys: Vec<Vec<String>> = expected.iter().take(want).map(&sort_key).collect();
    prop_assert_eq!(&got_keys, &expected_keys, "{}", sql);
    for row in &got {
        prop_assert!(expected.contains(row), "{}: {:?} not expected", sql, row);
    }
    for events in [true, false] {
        let sql = aggregate(case, "s", events);
        let got = texts(&session.query(&sql).await.expect(&sql));
        let expected = texts(
            &reference
                .sql(&aggregate(case, "r", events))
                .await
                .expect(&sql)
                .collect()
                .await
                .unwrap(),
        );
        prop_assert_eq!(got, expected, "{}", sql);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn series_answer_as_a_relational_table(case in cases()) {
        block_on(check(&case))?;
    }
}

/// The answers every read must give whatever the layout.
async fn answers(session: &SqlSession) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for sql in [
        "SELECT count(*), sum(pressure), min(ts), max(ts) FROM s WHERE dev <> 'w'",
        "SELECT ts, pressure FROM s WHERE dev = 'ab' AND n = 1 ORDER BY ts DESC LIMIT 3",
        "SELECT count(*) FROM s WHERE ts >= TIMESTAMP '2024-12-29T00:00:00' AND ts < TIMESTAMP '2024-12-29T06:00:00'",
    ] {
        out.extend(texts(&session.query(sql).await.unwrap()));
    }
    out
}

/// ALTER SERIES ... SET LAYOUT while readers and a writer run: every read
/// gives the whole answer (of the old layout or the new: the same), and
/// every write either lands or fails saying so, in whichever layout.
#[test]
fn layout_changes_under_concurrent_reads_and_writes() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let session = SqlSession::new(Store::open(dir.path()).unwrap());
        session
            .query(
                "CREATE SERIES s (KEY (dev TEXT, n INT(2)), TIME ts, pressure BIGINT, temperature BIGINT) \
                 LAYOUT ROW PER EVENT",
            )
            .await
            .unwrap();
        session
            .query(&format!(
                "INSERT INTO s SELECT CASE WHEN i % 3 = 0 THEN 'a' WHEN i % 3 = 1 THEN 'ab' ELSE 'z' END, \
                 i % 4, to_timestamp_micros({} + i * 7000000), i, -i FROM generate_series(1, 30000) AS t(i)",
                BASE * 1_000_000
            ))
            .await
            .unwrap();
        let expected = answers(&session).await;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut readers = Vec::new();
        for _ in 0..2 {
            let (session, expected, done) = (session.clone(), expected.clone(), done.clone());
            readers.push(tokio::spawn(async move {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || reads == 0 {
                    assert_eq!(answers(&session).await, expected, "read {reads}");
                    reads += 1;
                }
                reads
            }));
        }
        // Writes of another series (the readers' answers leave it out):
        // each lands, or fails and is not there.
        let writer = {
            let (session, done) = (session.clone(), done.clone());
            tokio::spawn(async move {
                let mut landed = Vec::new();
                let mut i = 0i64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let t = time((BASE + 1_000_000 + i) * 1_000_000);
                    let sql = format!("INSERT INTO s VALUES ('w', 0, TIMESTAMP '{t}', {i}, {i})");
                    match session.query(&sql).await {
                        Ok(_) => landed.push(i),
                        Err(e) => assert!(e.to_string().contains("changed layout"), "{e}"),
                    }
                    i += 1;
                }
                landed
            })
        };
        for layout in [
            "BUCKET '1 hour' CELL PER EVENT FORMAT PACKED",
            "ROW PER EVENT SALT 3 REVERSED",
            "BUCKET '1 day' CELL PER EVENT REVERSED FORMAT CELLS",
        ] {
            session
                .query(&format!("ALTER SERIES s SET LAYOUT {layout}"))
                .await
                .unwrap();
            // Writes land between changes, and wait through them.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            assert!(r.await.unwrap() > 0);
        }
        let landed = writer.await.unwrap();
        assert!(!landed.is_empty());
        let stored = texts(
            &session
                .query("SELECT pressure FROM s WHERE dev = 'w' ORDER BY pressure")
                .await
                .unwrap(),
        );
        let landed: Vec<Vec<String>> = landed.iter().map(|i| vec![i.to_string()]).collect();
        assert_eq!(stored, landed);
        assert!(!session.store().list_tables().iter().any(|t| t.contains("relayout")));
    });
}

/// A cell of the series' family that no measure declares (written by
/// another tool) is no event's measure: the series reads past it, in
/// every layout, and the table's views still show it.
#[test]
fn undeclared_cells_are_not_measures() {
    block_on(async {
        for layout in LAYOUTS {
            let dir = tempfile::tempdir().unwrap();
            let session = SqlSession::new(Store::open(dir.path()).unwrap());
            session
                .query(&format!(
                    "CREATE SERIES s (KEY (dev TEXT, n INT(2)), TIME ts, pressure BIGINT, temperature BIGINT) \
                     LAYOUT {layout}"
                ))
                .await
                .unwrap();
            session
                .query("INSERT INTO s VALUES ('a', 1, TIMESTAMP '2024-12-30T10:00:00', 5, 6)")
                .await
                .unwrap();
            let key = texts(
                &session
                    .query("SELECT _key FROM versions('s')")
                    .await
                    .unwrap(),
            )[0][0]
                .clone();
            // A column per event: another tool's row beside the measures'.
            let key = key.replace("#pressure#", "#other#");
            let other = cellar::RowMutation::new(
                key.into_bytes(),
                vec![cellar::Mutation::SetCell {
                    family: "measurements".into(),
                    qualifier: b"other".to_vec(),
                    timestamp: Some(1_735_552_860_000_000),
                    value: b"x".to_vec(),
                }],
            );
            for r in session.store().mutate_rows("s", vec![other]).unwrap() {
                r.unwrap();
            }
            let rows = texts(
                &session
                    .query("SELECT pressure, temperature FROM s")
                    .await
                    .unwrap(),
            );
            assert_eq!(
                rows,
                vec![vec!["5".to_string(), "6".to_string()]],
                "{layout}"
            );
            let cells = texts(
                &session
                    .query("SELECT qualifier FROM cells('s') WHERE qualifier = 'other'")
                    .await
                    .unwrap(),
            );
            assert_eq!(cells.len(), 1, "{layout}");
        }
    });
}

/// A measure's cell that does not decode (written by another tool) fails
/// a query that reads it, naming the column, and no other.
#[test]
fn undecodable_measures_fail_the_queries_that_read_them() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let session = SqlSession::new(Store::open(dir.path()).unwrap());
        session
            .query(
                "CREATE SERIES s (KEY (dev TEXT), TIME ts, pressure BIGINT, temperature BIGINT) \
                 LAYOUT BUCKET '1 day' CELL PER EVENT FORMAT PACKED",
            )
            .await
            .unwrap();
        session
            .query("INSERT INTO s VALUES ('a', TIMESTAMP '2024-12-30T10:00:00', 5, 6)")
            .await
            .unwrap();
        let at = Some(1_735_552_860_000_000);
        let cell = |qualifier: &str, value: Vec<u8>| cellar::Mutation::SetCell {
            family: "measurements".into(),
            qualifier: qualifier.as_bytes().to_vec(),
            timestamp: at,
            value,
        };
        let bad = cellar::RowMutation::new(
            b"a#2024-12-30".to_vec(),
            vec![
                cell("pressure", vec![1, 2, 3]),
                cell("temperature", 7i64.to_be_bytes().to_vec()),
            ],
        );
        for r in session.store().mutate_rows("s", vec![bad]).unwrap() {
            r.unwrap();
        }
        let temperatures = texts(
            &session
                .query("SELECT temperature FROM s ORDER BY 1")
                .await
                .unwrap(),
        );
        assert_eq!(
            temperatures,
            vec![vec!["6".to_string()], vec!["7".to_string()]]
        );
        let e = session
            .query("SELECT pressure FROM s")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column pressure") && e.contains("not an 8-byte big-endian integer"),
            "{e}"
        );
        // So does an aggregate computed in the scan, which reads the
        // measure as numbers.
        let e = session
            .query("SELECT date_trunc('hour', ts), avg(pressure) FROM s GROUP BY 1")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column pressure") && e.contains("not an 8-byte big-endian integer"),
            "{e}"
        );
        let averages = texts(
            &session
                .query("SELECT date_trunc('hour', ts), avg(temperature) FROM s GROUP BY 1")
                .await
                .unwrap(),
        );
        assert_eq!(
            averages,
            vec![vec!["2024-12-30T10:00:00".to_string(), "6.5".to_string()]]
        );
        // A row the predicate turns away raises nothing.
        let ok = texts(
            &session
                .query("SELECT pressure FROM s WHERE ts < TIMESTAMP '2024-12-30T10:01:00'")
                .await
                .unwrap(),
        );
        assert_eq!(ok, vec![vec!["5".to_string()]]);
    });
}

/// The same in a series kept a row per event, whose measures a scan
/// reads as numbers: in either format, the bad value fails the queries
/// that read its measure, naming it, and a row the predicate turns away
/// raises nothing.
#[test]
fn undecodable_measures_of_rows_per_event_fail_the_queries_that_read_them() {
    block_on(async {
        for format in ["PACKED", "CELLS"] {
            let dir = tempfile::tempdir().unwrap();
            let session = SqlSession::new(Store::open(dir.path()).unwrap());
            session
                .query(&format!(
                    "CREATE SERIES s (KEY (dev TEXT), TIME ts, pressure BIGINT, temperature DOUBLE) \
                     LAYOUT ROW PER EVENT FORMAT {format}"
                ))
                .await
                .unwrap();
            session
                .query(
                    "INSERT INTO s VALUES ('a', TIMESTAMP '2024-12-30T10:00:00', 5, 6.5), \
                     ('a', TIMESTAMP '2024-12-30T10:01:00', 7, 8.5)",
                )
                .await
                .unwrap();
            // The later event's pressure, overwritten with three bytes.
            let rows: Vec<cellar::Row> = session
                .store()
                .read_rows("s", cellar::ReadRequest::all())
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let last = rows.last().unwrap();
            let family = last.cells[0].family.to_string();
            let bad = cellar::RowMutation::new(
                last.key.clone(),
                vec![cellar::Mutation::SetCell {
                    family,
                    qualifier: b"pressure".to_vec(),
                    timestamp: Some(last.cells[0].timestamp + 1),
                    value: vec![1, 2, 3],
                }],
            );
            for r in session.store().mutate_rows("s", vec![bad]).unwrap() {
                r.unwrap();
            }
            let e = session
                .query("SELECT ts, pressure FROM s")
                .await
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("column pressure") && e.contains("not an 8-byte big-endian integer"),
                "{format}: {e}"
            );
            let temperatures = texts(
                &session
                    .query("SELECT CAST(ts AS BIGINT), temperature FROM s ORDER BY 1")
                    .await
                    .unwrap(),
            );
            assert_eq!(
                temperatures,
                vec![
                    vec!["1735552800000000".to_string(), "6.5".to_string()],
                    vec!["1735552860000000".to_string(), "8.5".to_string()]
                ],
                "{format}"
            );
            let ok = texts(
                &session
                    .query("SELECT pressure FROM s WHERE ts < TIMESTAMP '2024-12-30T10:01:00'")
                    .await
                    .unwrap(),
            );
            assert_eq!(ok, vec![vec!["5".to_string()]], "{format}");
        }
    });
}

/// What other tools leave in a column-per-event series' rows: a value
/// that is not of its measure's type fails only the queries that read
/// that measure (saying which), two values at one time read as the
/// greatest (as numbers), and a row whose key does not fit is no event.
#[test]
fn foreign_cells_of_a_column_per_event_series() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let session = SqlSession::new(Store::open(dir.path()).unwrap());
        session
            .query(
                "CREATE SERIES s (KEY (dev TEXT), TIME ts, pressure BIGINT, temperature BIGINT) \
                 LAYOUT BUCKET '1 day' COLUMN PER EVENT",
            )
            .await
            .unwrap();
        session
            .query("INSERT INTO s VALUES ('a', TIMESTAMP '2024-12-30T10:00:00', 5, 6)")
            .await
            .unwrap();
        let at = |minute: i64| Some(1_735_552_800_000_000 + minute * 60_000_000);
        let cell = |qualifier: &str, minute: i64| cellar::Mutation::SetCell {
            family: "measurements".into(),
            qualifier: qualifier.as_bytes().to_vec(),
            timestamp: at(minute),
            value: Vec::new(),
        };
        let rows = vec![
            // Two values at 10:01: 12 is the greater number (not "5").
            cellar::RowMutation::new(
                b"a#pressure#2024-12-30".to_vec(),
                vec![cell("12", 1), cell("5", 1), cell("high", 2)],
            ),
            cellar::RowMutation::new(
                b"a#temperature#2024-12-30".to_vec(),
                vec![cell("7", 1), cell("8", 2)],
            ),
            // Not a bucket: no event of the series.
            cellar::RowMutation::new(b"a#temperature#soon".to_vec(), vec![cell("9", 3)]),
        ];
        for r in session.store().mutate_rows("s", rows).unwrap() {
            r.unwrap();
        }
        let temperatures = texts(
            &session
                .query("SELECT CAST(ts AS BIGINT), temperature FROM s ORDER BY 1")
                .await
                .unwrap(),
        );
        let minute = |m: i64| at(m).unwrap().to_string();
        assert_eq!(
            temperatures,
            vec![
                vec![minute(0), "6".to_string()],
                vec![minute(1), "7".to_string()],
                vec![minute(2), "8".to_string()],
            ]
        );
        let e = session
            .query("SELECT pressure FROM s")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("measure pressure") && e.contains("not a BIGINT") && e.contains("high"),
            "{e}"
        );
        let early = texts(
            &session
                .query(
                    "SELECT pressure FROM s WHERE dev = 'a' AND ts < TIMESTAMP '2024-12-30T10:02:00' \
                     ORDER BY ts DESC LIMIT 1",
                )
                .await
                .unwrap(),
        );
        assert_eq!(early, vec![vec!["12".to_string()]]);
    });
}

/// A bucket's events that come one after another go to the store as one
/// row (their cells together); an event among them that cannot be written
/// is refused alone: skipped with ON_ERROR skip (its bucket's other events
/// written, the count saying so), or stopping the load with nothing of
/// its batch written.
#[test]
fn a_bad_event_among_its_buckets_events_is_refused_alone() {
    block_on(async {
        for format in ["", " FORMAT PACKED", " FORMAT CELLS"] {
            let dir = tempfile::tempdir().unwrap();
            let session = SqlSession::new(Store::open(dir.path()).unwrap());
            session
                .query(&format!(
                    "CREATE SERIES s (KEY (dev TEXT, n INT(2)), TIME ts, pressure BIGINT, temperature BIGINT) \
                     LAYOUT BUCKET '1 day' CELL PER EVENT{format}"
                ))
                .await
                .unwrap();
            // Three events of one day, the second with no measure.
            let csv = dir.path().join("events.csv");
            std::fs::write(
                &csv,
                "dev,n,ts,pressure,temperature\n\
                 a,1,2024-12-30T10:00:00,5,6\n\
                 a,1,2024-12-30T10:01:00,,\n\
                 a,1,2024-12-30T10:02:00,7,\n\
                 b,2,2024-12-30T10:00:00,1,2\n",
            )
            .unwrap();
            let stopped = session
                .query(&format!("COPY s FROM '{}'", csv.display()))
                .await
                .unwrap_err()
                .to_string();
            assert!(
                stopped.contains("no non-NULL column"),
                "{format}: {stopped}"
            );
            assert!(stopped.contains("line 3"), "{format}: {stopped}");
            let none = texts(&session.query("SELECT count(*) FROM s").await.unwrap());
            assert_eq!(none, vec![vec!["0".to_string()]], "{format}");
            let loaded = texts(
                &session
                    .query(&format!("COPY s FROM '{}' (ON_ERROR skip)", csv.display()))
                    .await
                    .unwrap(),
            );
            assert_eq!(loaded[0][0], "3", "{format}: {loaded:?}");
            assert_eq!(loaded[0][1], "1", "{format}: {loaded:?}");
            let rows = texts(
                &session
                    .query("SELECT dev, CAST(ts AS VARCHAR) AS t, pressure, temperature FROM s ORDER BY dev, t")
                    .await
                    .unwrap(),
            );
            let want = [
                ["a", "2024-12-30T10:00:00", "5", "6"],
                ["a", "2024-12-30T10:02:00", "7", "NULL"],
                ["b", "2024-12-30T10:00:00", "1", "2"],
            ];
            assert_eq!(
                rows,
                want.map(|r| r.map(String::from).to_vec()).to_vec(),
                "{format}"
            );
            // The day's three events are one bucket row.
            let buckets = texts(
                &session
                    .query("SELECT count(*) FROM versions('s') WHERE _key LIKE 'a#%'")
                    .await
                    .unwrap(),
            );
            assert_eq!(buckets[0][0], "2", "{format}: two events' versions");
        }
    });
}

/// An event whose value is over the store's limit is refused alone, by
/// the limit's own error, while its bucket's other events are written.
#[test]
fn an_oversized_event_among_its_buckets_events_is_refused_alone() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let session = SqlSession::new(Store::open(dir.path()).unwrap());
        session
            .query(
                "CREATE SERIES s (KEY (dev TEXT), TIME ts, note TEXT) \
                 LAYOUT BUCKET '1 day' CELL PER EVENT FORMAT PACKED",
            )
            .await
            .unwrap();
        let huge = "x".repeat(cellar::MAX_VALUE_LEN + 1);
        let csv = dir.path().join("events.csv");
        std::fs::write(
            &csv,
            format!(
                "dev,ts,note\na,2024-12-30T10:00:00,first\na,2024-12-30T10:01:00,{huge}\n\
                 a,2024-12-30T10:02:00,third\n"
            ),
        )
        .unwrap();
        drop(huge);
        let loaded = texts(
            &session
                .query(&format!("COPY s FROM '{}' (ON_ERROR skip)", csv.display()))
                .await
                .unwrap(),
        );
        assert_eq!(loaded[0][0], "2", "{loaded:?}");
        assert_eq!(loaded[0][1], "1", "{loaded:?}");
        assert!(
            loaded[0][2].contains(&format!("{}", cellar::MAX_VALUE_LEN + 1)),
            "{loaded:?}"
        );
        let notes = texts(
            &session
                .query("SELECT note FROM s ORDER BY ts")
                .await
                .unwrap(),
        );
        assert_eq!(
            notes,
            vec![vec!["first".to_string()], vec!["third".to_string()]]
        );
    });
}
