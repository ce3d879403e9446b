//! The Cloud Bigtable backend against a Bigtable server: the store's
//! operations, SQL through a session, and a round trip with `cbt`. Each
//! test runs twice: against Google's emulator (skipped, with the reason
//! printed, where it is not installed) and against cellar's own Bigtable
//! face (`cellar serve --bigtable-addr`) over an embedded store, so the
//! face is held to what the emulator does for the same client.

#![cfg(feature = "bigtable")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use crate::emulator;

use std::sync::Arc;

use cellar::{
    BigtableStore, FamilyFormat, FamilyKind, FamilySpec, GcPolicy, Mutation, ReadFilter,
    ReadModifyWrite, ReadRequest, RowMutation, RowRange, RowSet, SqlSession, Store, TableSpec,
    TimeRange,
};
use datafusion::arrow::util::pretty::pretty_format_batches;
use emulator::Emulator;

const INSTANCE: &str = "projects/p/instances/i";

fn open(emulator: &Emulator) -> Store {
    Store::new(Arc::new(
        BigtableStore::connect(INSTANCE, &emulator.endpoint()).unwrap(),
    ))
}

/// `cbt ARGS` against the emulator: its output, once it succeeded.
fn cbt(emulator: &Emulator, args: &[&str]) -> String {
    let out = emulator.cbt().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "cbt {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a test of the Bigtable backend against Google's emulator (skipped
/// where it is not installed) and against cellar's own Bigtable face.
macro_rules! on_both_servers {
    ($name:ident) => {
        mod $name {
            use super::*;

            #[test]
            fn google_emulator() {
                if let Some(emulator) = Emulator::start() {
                    super::$name(&emulator);
                }
            }

            #[test]
            fn cellar_bigtable_face() {
                super::$name(&Emulator::cellar());
            }
        }
    };
    ($name:ident, async, $threads:literal) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
            async fn google_emulator() {
                if let Some(emulator) = Emulator::start() {
                    super::$name(&emulator).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
            async fn cellar_bigtable_face() {
                super::$name(&Emulator::cellar()).await;
            }
        }
    };
}

on_both_servers!(the_store_operations_keep_their_meaning_on_bigtable);
on_both_servers!(
    sql_runs_on_bigtable_and_cbt_sees_the_guides_layout,
    async,
    2
);
on_both_servers!(the_demo_runs_on_bigtable_without_packed_families);
on_both_servers!(
    a_series_in_hour_buckets_reads_and_aggregates_on_bigtable,
    async,
    2
);
on_both_servers!(a_slow_reader_of_a_long_scan_keeps_its_connection);
on_both_servers!(concurrent_updates_on_bigtable_lose_nothing, async, 4);
on_both_servers!(aggregate_families_are_bigtables_aggregates, async, 2);
on_both_servers!(hll_families_hold_cellars_sketches);
on_both_servers!(a_column_per_event_bucket_takes_new_events, async, 2);
on_both_servers!(a_series_changes_layout_on_bigtable, async, 2);

fn set(family: &str, qualifier: &str, ts: i64, value: &str) -> Mutation {
    Mutation::set_at(family, qualifier, ts, value)
}

fn values(store: &Store, table: &str, request: ReadRequest) -> Vec<String> {
    store
        .read_rows(table, request)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let cells: Vec<String> = row
                .cells
                .iter()
                .map(|c| {
                    format!(
                        "{}:{}@{}={}",
                        c.family,
                        String::from_utf8_lossy(&c.qualifier),
                        c.timestamp,
                        String::from_utf8_lossy(&c.value)
                    )
                })
                .collect();
            format!("{} {}", String::from_utf8_lossy(&row.key), cells.join(" "))
        })
        .collect()
}

fn the_store_operations_keep_their_meaning_on_bigtable(emulator: &Emulator) {
    let store = open(emulator);
    store
        .create_table(
            TableSpec::new("t")
                .family(FamilySpec::new("a").gc(GcPolicy::MaxVersions(2)))
                .family(FamilySpec::new("b"))
                .metadata("note", "kept"),
        )
        .unwrap();
    // What cannot be on Bigtable is refused by name.
    let packed = store
        .create_table(TableSpec::new("p").family(FamilySpec::new("m").format(FamilyFormat::Packed)))
        .unwrap_err()
        .to_string();
    assert!(packed.contains("PACKED"), "{packed}");
    store
        .mutate_row(
            "t",
            RowMutation::new(
                "r1",
                vec![
                    set("a", "x", 1000, "v1"),
                    set("a", "x", 2000, "v2"),
                    set("a", "x", 3000, "v3"),
                    set("b", "y", 1000, "w"),
                ],
            ),
        )
        .unwrap();
    let results = store
        .mutate_rows(
            "t",
            vec![
                RowMutation::new("r2", vec![set("b", "y", 5000, "w2")]),
                RowMutation::new("r3", vec![set("nope", "y", 5000, "bad")]),
                RowMutation::new("r4", vec![set("a", "z", 7000, "z")]),
            ],
        )
        .unwrap();
    assert!(results[0].is_ok() && results[2].is_ok());
    assert!(
        results[1]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("nope")
    );
    // GC at read time: two versions of a:x, newest first.
    assert_eq!(
        values(&store, "t", ReadRequest::all()),
        vec![
            "r1 a:x@3000=v3 a:x@2000=v2 b:y@1000=w",
            "r2 b:y@5000=w2",
            "r4 a:z@7000=z"
        ]
    );
    // Time ranges count versions first: v1 is garbage, so [0, 2500) sees v2 only.
    let old = ReadRequest::all().filter(ReadFilter::all().time_range(TimeRange::new(0, 2500)));
    assert_eq!(values(&store, "t", old), vec!["r1 a:x@2000=v2 b:y@1000=w"]);
    // Row ranges, a limit, the latest cell per column, one family.
    let range = ReadRequest::rows(RowSet::range(RowRange::between(
        std::ops::Bound::Excluded(b"r1".to_vec()),
        std::ops::Bound::Unbounded,
    )))
    .limit(1);
    assert_eq!(values(&store, "t", range), vec!["r2 b:y@5000=w2"]);
    let backwards = ReadRequest::all().reverse().limit(2);
    assert_eq!(
        values(&store, "t", backwards),
        vec!["r4 a:z@7000=z", "r2 b:y@5000=w2"]
    );
    let latest = ReadRequest::all().filter(ReadFilter::latest().families(["a"]));
    assert_eq!(
        values(&store, "t", latest),
        vec!["r1 a:x@3000=v3", "r4 a:z@7000=z"]
    );
    // An empty row set reads nothing (to Bigtable it would mean every row).
    assert!(values(&store, "t", ReadRequest::rows(RowSet::default())).is_empty());
    // Deletes.
    store
        .mutate_row(
            "t",
            RowMutation::new(
                "r1",
                vec![Mutation::DeleteCells {
                    family: "b".into(),
                    qualifier: b"y".to_vec(),
                    // Microsecond bounds: [1, 1500) holds the cell at 1000.
                    time_range: TimeRange::new(1, 1500),
                }],
            ),
        )
        .unwrap();
    store
        .mutate_row("t", RowMutation::new("r4", vec![Mutation::DeleteRow]))
        .unwrap();
    assert_eq!(
        values(&store, "t", ReadRequest::all()),
        vec!["r1 a:x@3000=v3 a:x@2000=v2", "r2 b:y@5000=w2"]
    );
    // Bigtable keeps milliseconds: a timestamp between them is refused.
    let odd = store
        .mutate_row("t", RowMutation::new("r1", vec![set("a", "x", 1500, "v")]))
        .unwrap_err()
        .to_string();
    assert!(odd.contains("1500") && odd.contains("millisecond"), "{odd}");
    // Check-and-mutate and read-modify-write.
    let matched = store
        .check_and_mutate(
            "t",
            b"r2",
            ReadFilter::all().families(["b"]),
            vec![set("a", "flag", 9000, "yes")],
            vec![],
        )
        .unwrap();
    assert!(matched);
    let missed = store
        .check_and_mutate(
            "t",
            b"r9",
            ReadFilter::all(),
            vec![],
            vec![set("b", "y", 1000, "new")],
        )
        .unwrap();
    assert!(!missed);
    let row = store
        .read_modify_write(
            "t",
            b"r5",
            vec![ReadModifyWrite::Increment {
                family: "b".into(),
                qualifier: b"n".to_vec(),
                delta: 5,
            }],
        )
        .unwrap();
    assert_eq!(row.cells[0].value, 5i64.to_be_bytes());
    // The catalog survives a new connection; ALTER maps to the admin API.
    drop(store);
    let store = open(emulator);
    let def = store.table("t").unwrap();
    assert_eq!(def.metadata["note"], "kept");
    assert_eq!(def.families[0].gc, GcPolicy::MaxVersions(2));
    store
        .alter_table(
            "t",
            vec![
                cellar::AlterOp::AddFamily(FamilySpec::new("c")),
                cellar::AlterOp::DropFamily("b".into()),
            ],
        )
        .unwrap();
    let families: Vec<String> = store
        .table("t")
        .unwrap()
        .families
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(families, vec!["a", "c"]);
    let samples = store.sample_row_keys("t").unwrap();
    assert!(samples.last().unwrap().0.is_empty());
    store
        .put_setting("proto/x", Some("syntax = \"proto3\";"))
        .unwrap();
    assert_eq!(store.settings("proto/").unwrap().len(), 1);
    store.drop_table("t").unwrap();
    assert!(store.table("t").is_err());
    assert!(store.list_tables().is_empty());
}

async fn sql_runs_on_bigtable_and_cbt_sees_the_guides_layout(emulator: &Emulator) {
    let store = open(emulator);
    let session = SqlSession::new(store.clone());
    session
        .query(
            "CREATE TABLE readings (ROW KEY (sensor TEXT, day TEXT) DELIMITER '#', \
             FAMILY m GC MAX_VERSIONS 3, temp DOUBLE IN m, note TEXT IN m)",
        )
        .await
        .unwrap();
    session
        .query(
            "INSERT INTO readings (sensor, day, temp, note) VALUES \
             ('s1', '2026-01-01', 20.5, 'ok'), ('s1', '2026-01-02', 21.0, NULL), \
             ('s2', '2026-01-01', 19.0, 'cold')",
        )
        .await
        .unwrap();
    let show = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
        pretty_format_batches(&batches).unwrap().to_string()
    };
    let got = show(
        session
            .query("SELECT sensor, day, temp, note FROM readings WHERE sensor = 's1' ORDER BY day")
            .await
            .unwrap(),
    );
    assert!(
        got.contains("| s1     | 2026-01-01 | 20.5 | ok   |"),
        "{got}"
    );
    assert!(
        got.contains("| s1     | 2026-01-02 | 21.0 |      |"),
        "{got}"
    );
    assert!(!got.contains("s2"), "{got}");
    session
        .query("UPDATE readings SET temp = temp + 1 WHERE sensor = 's2'")
        .await
        .unwrap();
    session
        .query("DELETE FROM readings WHERE sensor = 's1' AND day = '2026-01-02'")
        .await
        .unwrap();
    let got = show(
        session
            .query("SELECT sensor, day, temp FROM readings ORDER BY sensor, day")
            .await
            .unwrap(),
    );
    assert!(got.contains("| s2     | 2026-01-01 | 20.0 |"), "{got}");
    assert!(!got.contains("2026-01-02"), "{got}");
    // cbt sees the row keys, family and qualifiers as the guides lay them out.
    let text = cbt(emulator, &["read", "readings"]);
    assert!(text.contains("s1#2026-01-01"), "{text}");
    assert!(text.contains("m:temp"), "{text}");
    // A row written with cbt reads through SQL.
    cbt(
        emulator,
        &["set", "readings", "s3#2026-01-05", "m:note=from-cbt"],
    );
    let got = show(
        session
            .query("SELECT sensor, day, note FROM readings WHERE sensor = 's3'")
            .await
            .unwrap(),
    );
    assert!(got.contains("| s3     | 2026-01-05 | from-cbt |"), "{got}");
    // A family cellar does not know (added with cbt) stays out of every
    // read: a full scan, which does not name the families to Bigtable,
    // drops its cells and a row that has nothing else; a read with a row
    // limit names them.
    for args in [
        &["createfamily", "readings", "x"][..],
        &["set", "readings", "s3#2026-01-05", "x:q=extra"],
        &["set", "readings", "s4#2026-01-06", "x:q=only-x"],
    ] {
        cbt(emulator, args);
    }
    for sql in [
        "SELECT sensor, day, note FROM readings ORDER BY sensor, day",
        "SELECT sensor, day, note FROM readings LIMIT 10",
    ] {
        let got = show(session.query(sql).await.unwrap());
        assert!(!got.contains("s4"), "{sql}: {got}");
        assert_eq!(got.lines().count(), 3 + 4, "{sql}: {got}");
    }
    let got = show(
        session
            .query("SELECT count(*) AS n FROM readings")
            .await
            .unwrap(),
    );
    assert!(got.contains("| 3 |"), "{got}");
    // cellar's schema is where a Bigtable user can read it.
    let text = cbt(emulator, &["read", cellar::CATALOG_TABLE]);
    assert!(text.contains("table/readings"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_nothing_or_a_bad_name_says_what_and_where() {
    // No emulator needed: nothing listens on port 1.
    let e = BigtableStore::connect(INSTANCE, "http://127.0.0.1:1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("127.0.0.1:1"), "{e}");
    let e = BigtableStore::connect("projects/p", "http://127.0.0.1:1")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("projects/<project>/instances/<instance>") && e.contains("projects/p"),
        "{e}"
    );
}

fn the_demo_runs_on_bigtable_without_packed_families(emulator: &Emulator) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["demo", "--bigtable", INSTANCE, "--format", "csv"])
        .args(["-c", "SELECT count(*) FROM weather"])
        .env("BIGTABLE_EMULATOR_HOST", &emulator.host)
        .env("CELLAR_DEMO_SMALL", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Four locations, two balloons, a hundred minutes.
    assert!(stdout.contains("800"), "{stdout}");
    let store = open(emulator);
    let formats: Vec<FamilyFormat> = store
        .list_tables()
        .iter()
        .flat_map(|t| store.table(t).unwrap().families)
        .map(|f| f.format)
        .collect();
    assert!(!formats.is_empty());
    // (AUTO, the default, is what Bigtable does anyway; PACKED it has not.)
    assert!(
        formats.iter().all(|f| *f != FamilyFormat::Packed),
        "{formats:?}"
    );
}

async fn a_series_in_hour_buckets_reads_and_aggregates_on_bigtable(emulator: &Emulator) {
    let session = SqlSession::new(open(emulator));
    session
        .query(
            "CREATE SERIES w (KEY (location TEXT, balloon INT(5)), TIME ts, pressure BIGINT) \
             LAYOUT BUCKET '1 hour' CELL PER EVENT",
        )
        .await
        .unwrap();
    session
        .query(
            "INSERT INTO w VALUES \
             ('us', 1, TIMESTAMP '2021-03-05 12:00:00', 100), \
             ('us', 1, TIMESTAMP '2021-03-05 12:30:00.250', 110), \
             ('us', 1, TIMESTAMP '2021-03-05 13:10:00', 120), \
             ('eu', 2, TIMESTAMP '2021-03-05 12:15:00', 200)",
        )
        .await
        .unwrap();
    let got = pretty_format_batches(
        &session
            .query(
                "SELECT location, date_trunc('hour', ts) AS hour, count(*) AS n, avg(pressure) AS p \
                 FROM w WHERE ts < TIMESTAMP '2021-03-05 13:00:00' \
                 GROUP BY location, hour ORDER BY location",
            )
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    assert!(
        got.contains("| eu       | 2021-03-05T12:00:00 | 1 | 200.0 |"),
        "{got}"
    );
    assert!(
        got.contains("| us       | 2021-03-05T12:00:00 | 2 | 105.0 |"),
        "{got}"
    );
    // The guide's layout: one row per series and hour, a cell per event.
    assert_eq!(cbt(emulator, &["count", "w"]).trim(), "3");
}

/// A long scan of small rows read slower than Bigtable sends them: the
/// connection must hold (h2 once closed it with ENHANCE_YOUR_CALM when the
/// small frames waiting to be read outgrew its budget).
fn a_slow_reader_of_a_long_scan_keeps_its_connection(emulator: &Emulator) {
    let store = open(emulator);
    store
        .create_table(TableSpec::new("many").family(FamilySpec::new("f")))
        .unwrap();
    let rows: Vec<RowMutation> = (0..60_000)
        .map(|i| RowMutation::new(format!("k{i:06}"), vec![set("f", "q", 1000, "v")]))
        .collect();
    for result in store.mutate_rows("many", rows).unwrap() {
        result.unwrap();
    }
    let mut stream = store.read_rows("many", ReadRequest::all()).unwrap();
    assert!(stream.next().unwrap().is_ok());
    // Everything the windows allow arrives while nothing is read.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let rest = stream
        .map(|row| row.map(|_| ()))
        .collect::<Result<Vec<()>, _>>();
    assert_eq!(rest.unwrap().len(), 59_999);
}

/// Without the emulator, `--bigtable` goes to Cloud Bigtable with
/// application default credentials; credentials that cannot be read are
/// an error that says where credentials come from, before anything runs.
#[test]
fn cloud_bigtable_without_credentials_says_where_they_come_from() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, "this is not a service account key").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cellar"))
        .env_remove("BIGTABLE_EMULATOR_HOST")
        .env("GOOGLE_APPLICATION_CREDENTIALS", &key)
        .env("HOME", dir.path())
        .args(["--bigtable", "projects/p/instances/i", "-c", "SELECT 1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{error}");
    assert!(error.contains("BIGTABLE_EMULATOR_HOST"), "{error}");
}

/// UPDATE on Bigtable writes each row conditioned on what it read
/// (CheckAndMutateRow) and tries again when another client changed the
/// row in between: 4 clients × 50 increments of one counter, of a BIGINT
/// kept as text and of a computed expression each end at exactly 200.
async fn concurrent_updates_on_bigtable_lose_nothing(emulator: &Emulator) {
    let store = open(emulator);
    let session = SqlSession::new(store.clone());
    session
        .query("CREATE TABLE c (FAMILY f, n BIGINT IN f, t BIGINT AS TEXT IN f, m BIGINT IN f)")
        .await
        .unwrap();
    session
        .query("INSERT INTO c (_key, n, t, m) VALUES ('r', 0, 0, 0)")
        .await
        .unwrap();
    let statements = [
        "UPDATE c SET n = n + 1 WHERE _key = 'r'",
        "UPDATE c SET t = t + 1 WHERE _key = 'r'",
        "UPDATE c SET m = m * 1 + 1 WHERE _key = 'r'",
    ];
    let mut tasks = Vec::new();
    for sql in statements {
        for _ in 0..4 {
            // Each client a session of its own over the one store.
            let session = SqlSession::new(store.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let batches = session.query(sql).await.unwrap();
                    let shown = pretty_format_batches(&batches).unwrap().to_string();
                    assert!(shown.contains("| 1 "), "{sql}: {shown}");
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = pretty_format_batches(&session.query("SELECT n, t, m FROM c").await.unwrap())
        .unwrap()
        .to_string();
    assert!(got.contains("| 200 | 200 | 200 |"), "{got}");
}

/// Sum, Min and Max families are Bigtable's aggregate families: made with
/// their types, added to with AddToCell, read as 8-byte int64, through
/// the store and through SQL.
async fn aggregate_families_are_bigtables_aggregates(emulator: &Emulator) {
    let store = open(emulator);
    store
        .create_table(
            TableSpec::new("agg")
                .family(FamilySpec::new("s").kind(FamilyKind::Sum))
                .family(FamilySpec::new("lo").kind(FamilyKind::Min))
                .family(FamilySpec::new("hi").kind(FamilyKind::Max)),
        )
        .unwrap();
    for n in [5i64, -2, 9, 1] {
        store
            .mutate_row(
                "agg",
                RowMutation::new(
                    "k",
                    vec![
                        Mutation::add_i64("s", "n", n),
                        Mutation::add_i64("lo", "n", n),
                        Mutation::add_i64("hi", "n", n),
                    ],
                ),
            )
            .unwrap();
    }
    let row = store
        .read_row("agg", b"k", ReadFilter::latest())
        .unwrap()
        .unwrap();
    let value =
        |family: &str| i64::from_be_bytes(row.latest(family, b"n").unwrap().try_into().unwrap());
    if emulator.is_google() {
        // The emulator installed here sums, but keeps the last input of a
        // Min or Max family (Cloud Bigtable and cellar's face aggregate).
        assert_eq!(value("s"), 13);
    } else {
        assert_eq!((value("s"), value("lo"), value("hi")), (13, -2, 9));
    }
    // SQL's aggregate families on Bigtable: a SUM family of the guides'
    // coarse buckets.
    let session = SqlSession::new(store);
    session
        .query(
            "CREATE TABLE sales (ROW KEY (shop TEXT, year TEXT), FAMILY s SUM, total BIGINT IN s)",
        )
        .await
        .unwrap();
    for amount in [10, 32] {
        session
            .query(&format!(
                "INSERT INTO sales (shop, year, total) VALUES ('a', '2026', {amount})"
            ))
            .await
            .unwrap();
    }
    let got = pretty_format_batches(&session.query("SELECT total FROM sales").await.unwrap())
        .unwrap()
        .to_string();
    assert!(got.contains("| 42 "), "{got}");
}

fn add_item(family: &str, qualifier: &str, item: &str) -> Mutation {
    Mutation::AddToCell {
        family: family.into(),
        qualifier: qualifier.into(),
        timestamp: Some(0),
        input: item.as_bytes().to_vec(),
    }
}

/// HLL families on Bigtable hold cellar's sketches, merged by cellar:
/// items added by one call, by a batch that adds to one row many times
/// (in order with the row's other mutations), and by writers at once end
/// up in a sketch byte for byte the one the embedded store builds from
/// the same items (a merge is a register-wise max, whatever the order),
/// so no writer's items are lost; a row that adds to a corrupt sketch
/// fails alone.
fn hll_families_hold_cellars_sketches(emulator: &Emulator) {
    let spec = || {
        TableSpec::new("h")
            .family(FamilySpec::new("u").kind(FamilyKind::HyperLogLog))
            .family(FamilySpec::new("n"))
    };
    let remote = open(emulator);
    remote.create_table(spec()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = Store::open(dir.path()).unwrap();
    local.create_table(spec()).unwrap();
    // One row a call, then a batch that adds to one row 300 times, with
    // a delete of the column in the middle, and a second row.
    let mut batch: Vec<RowMutation> = (0..300)
        .map(|i| RowMutation::new("a", vec![add_item("u", "v", &format!("item{i}"))]))
        .collect();
    batch.insert(
        150,
        RowMutation::new("a", vec![Mutation::delete_column("u", "v")]),
    );
    batch.push(RowMutation::new(
        "b",
        vec![add_item("u", "v", "x"), set("n", "q", 1000, "plain")],
    ));
    for store in [&remote, &local] {
        store
            .mutate_row(
                "h",
                RowMutation::new("a", vec![add_item("u", "v", "first")]),
            )
            .unwrap();
        for outcome in store.mutate_rows("h", batch.clone()).unwrap() {
            outcome.unwrap();
        }
    }
    // Four writers adding 50 items each to one sketch at once.
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let remote = &remote;
            let local = &local;
            scope.spawn(move || {
                for i in 0..50 {
                    let row =
                        RowMutation::new("c", vec![add_item("u", "v", &format!("{writer}-{i}"))]);
                    remote.mutate_row("h", row.clone()).unwrap();
                    local.mutate_row("h", row).unwrap();
                }
            });
        }
    });
    let sketch = |store: &Store, key: &str| {
        store
            .read_row("h", key.as_bytes(), ReadFilter::latest())
            .unwrap()
            .unwrap()
            .latest("u", b"v")
            .unwrap()
            .to_vec()
    };
    for key in ["a", "b", "c"] {
        let (remote, local) = (sketch(&remote, key), sketch(&local, key));
        assert!(
            remote == local,
            "row {key}: the sketches differ (estimates {:?} on Bigtable, {:?} embedded)",
            cellar::hll_estimate(&remote),
            cellar::hll_estimate(&local)
        );
    }
    // The delete in the middle: the items after it only (and none lost).
    let after_delete = cellar::hll_estimate(&sketch(&remote, "a")).unwrap();
    assert!((145..=155).contains(&after_delete), "{after_delete}");
    let writers = cellar::hll_estimate(&sketch(&remote, "c")).unwrap();
    assert!((190..=210).contains(&writers), "{writers}");
    // A cell that holds no sketch (written by another client): the row
    // adding to it fails, by name, and none of its mutations is written;
    // the other rows of its call, of its key too, are.
    cbt(emulator, &["set", "h", "bad", "u:v=junk@0"]);
    let outcomes = remote
        .mutate_rows(
            "h",
            vec![
                RowMutation::new(
                    "bad",
                    vec![set("n", "q", 0, "lost"), add_item("u", "v", "y")],
                ),
                RowMutation::new("bad", vec![set("n", "q", 1000, "kept")]),
                RowMutation::new("d", vec![add_item("u", "v", "z")]),
            ],
        )
        .unwrap();
    let error = outcomes[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("u:v") && error.contains("sketch"), "{error}");
    assert!(outcomes[1].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    let bad = remote
        .read_row("h", b"bad", ReadFilter::all())
        .unwrap()
        .unwrap();
    assert_eq!(bad.latest("n", b"q"), Some(&b"kept"[..]));
    assert_eq!(bad.cells.iter().filter(|c| &*c.family == "n").count(), 1);
}

/// New events of a COLUMN PER EVENT bucket that already holds others:
/// each INSERT reads and writes only its own times of the bucket, so the
/// bucket's other events are not a concurrent change (on Bigtable every
/// such INSERT once failed its conditional write 32 times).
async fn a_column_per_event_bucket_takes_new_events(emulator: &Emulator) {
    let session = SqlSession::new(open(emulator));
    session
        .query(
            "CREATE SERIES w (KEY (location TEXT), TIME ts, v BIGINT) \
             LAYOUT BUCKET '1 hour' COLUMN PER EVENT",
        )
        .await
        .unwrap();
    for (time, v) in [
        ("12:00:00", 1),
        ("12:01:00", 2),
        ("12:30:00", 3),
        ("12:00:00", 4),
    ] {
        session
            .query(&format!(
                "INSERT INTO w VALUES ('us', TIMESTAMP '2021-03-05 {time}', {v})"
            ))
            .await
            .unwrap();
    }
    let got = pretty_format_batches(
        &session
            .query("SELECT ts, v FROM w ORDER BY ts")
            .await
            .unwrap(),
    )
    .unwrap()
    .to_string();
    // The last INSERT at 12:00 replaced that event.
    assert!(got.contains("| 2021-03-05T12:00:00 | 4 |"), "{got}");
    assert!(got.contains("| 2021-03-05T12:01:00 | 2 |"), "{got}");
    assert!(got.contains("| 2021-03-05T12:30:00 | 3 |"), "{got}");
    assert_eq!(got.lines().count(), 3 + 4, "{got}");
}

/// `ALTER SERIES ... SET LAYOUT` on Bigtable, which cannot rename a table:
/// the events are copied into a new Bigtable table and the catalog maps
/// the series' name to it. Twice (the second copy may not reuse the first
/// one's Bigtable table, which the series now holds its rows in), with
/// the answers kept, the old Bigtable tables gone, and a drop removing
/// the table the rows are in.
async fn a_series_changes_layout_on_bigtable(emulator: &Emulator) {
    let session = SqlSession::new(open(emulator));
    let run = |sql: &'static str| {
        let session = session.clone();
        async move {
            pretty_format_batches(&session.query(sql).await.unwrap())
                .unwrap()
                .to_string()
        }
    };
    run("CREATE SERIES w (KEY (site TEXT), TIME ts, v BIGINT) LAYOUT BUCKET '1 hour' CELL PER EVENT")
        .await;
    run(
        "INSERT INTO w VALUES ('a', TIMESTAMP '2021-03-05 12:00:00', 1), \
         ('a', TIMESTAMP '2021-03-05 12:30:00', 2), ('b', TIMESTAMP '2021-03-05 13:00:00', 3)",
    )
    .await;
    let query = "SELECT site, ts, v FROM w ORDER BY site, ts";
    let before = run(query).await;
    let tables = |emulator: &Emulator| -> Vec<String> {
        let mut listed: Vec<String> = cbt(emulator, &["ls"])
            .lines()
            .map(str::to_string)
            .filter(|t| t != "_cellar")
            .collect();
        listed.sort();
        listed
    };
    assert_eq!(tables(emulator), ["w"]);
    run("ALTER SERIES w SET LAYOUT ROW PER EVENT").await;
    assert_eq!(run(query).await, before);
    // One row per event now, in the table the events were copied into.
    assert_eq!(tables(emulator), ["w__relayout"]);
    assert_eq!(cbt(emulator, &["count", "w__relayout"]).trim(), "3");
    // DESCRIBE says where cbt finds the rows.
    assert!(
        run("DESCRIBE w")
            .await
            .contains("rows in Bigtable table w__relayout"),
        "{}",
        run("DESCRIBE w").await
    );
    run("ALTER SERIES w SET LAYOUT BUCKET '1 day' CELL PER EVENT").await;
    assert_eq!(run(query).await, before);
    assert_eq!(tables(emulator), ["w__relayout-1"]);
    assert_eq!(cbt(emulator, &["count", "w__relayout-1"]).trim(), "2");
    // Writes after the change go where reads look.
    run("INSERT INTO w VALUES ('c', TIMESTAMP '2021-03-06 00:00:00', 4)").await;
    assert!(run("SELECT sum(v) AS s FROM w").await.contains("| 10 |"));
    // A new table may take the series' old name of a Bigtable table.
    run("CREATE TABLE w__relayout (ROW KEY (k TEXT), FAMILY f, n BIGINT IN f)").await;
    assert_eq!(tables(emulator), ["w__relayout", "w__relayout-1"]);
    run("DROP TABLE w").await;
    assert_eq!(tables(emulator), ["w__relayout"]);
    assert!(
        run("SELECT count(*) AS n FROM w__relayout")
            .await
            .contains("| 0 |")
    );
}
