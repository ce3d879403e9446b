//! Hostile input through the library and SQL: nothing a user writes may
//! make the store unreadable, crash the process or corrupt stored data.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use cellar::{FamilySpec, GcPolicy, Mutation, RowMutation, SqlSession, Store, TableSpec};

fn nested_gc(depth: usize) -> String {
    let mut policy = "MAX_VERSIONS 1".to_string();
    for i in 0..depth {
        let op = if i % 2 == 0 { "OR" } else { "AND" };
        policy = format!("(MAX_VERSIONS {} {op} {policy})", i + 2);
    }
    policy
}

async fn run(session: &SqlSession, sql: &str) -> Result<String, String> {
    match session.query(sql).await {
        Ok(batches) => Ok(
            datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                .unwrap()
                .to_string(),
        ),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn deep_gc_policies_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    run(&session, "CREATE TABLE ok (FAMILY f)").await.unwrap();
    for depth in [9, 62, 5000] {
        let gc = nested_gc(depth);
        let err = run(&session, &format!("CREATE TABLE t (FAMILY f GC {gc})"))
            .await
            .unwrap_err();
        assert!(err.contains("levels"), "depth {depth}: {err}");
        let err = run(
            &session,
            &format!("ALTER TABLE ok ALTER FAMILY f SET GC {gc}"),
        )
        .await
        .unwrap_err();
        assert!(err.contains("levels"), "depth {depth}: {err}");
        let err = run(&session, &format!("ALTER TABLE ok ADD FAMILY g GC {gc}"))
            .await
            .unwrap_err();
        assert!(err.contains("levels"), "depth {depth}: {err}");
    }
    // Eight levels are fine, and so is the store after all that.
    run(
        &session,
        &format!("CREATE TABLE t (FAMILY f GC {})", nested_gc(7)),
    )
    .await
    .unwrap();
    let many = vec!["MAX_VERSIONS 2"; 65].join(" OR ");
    let err = run(&session, &format!("CREATE TABLE u (FAMILY f GC {many})"))
        .await
        .unwrap_err();
    assert!(err.contains("65 rules"), "{err}");
    let err = run(
        &session,
        "CREATE TABLE u (FAMILY f GC MAX_VERSIONS 4294967296)",
    )
    .await
    .unwrap_err();
    assert!(err.contains("out of range"), "{err}");
    drop(session);
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    assert_eq!(session.store().list_tables(), vec!["ok", "t"]);

    // The Rust API refuses the same.
    let mut deep = GcPolicy::MaxVersions(1);
    for _ in 0..62 {
        deep = GcPolicy::Union(vec![GcPolicy::MaxVersions(2), deep]);
    }
    let err = session
        .store()
        .create_table(TableSpec::new("api").family(FamilySpec::new("f").gc(deep)))
        .unwrap_err();
    assert!(err.to_string().contains("levels"), "{err}");
}

/// A catalog entry this build cannot read (written by an older build that
/// accepted a 62-level policy, or damaged on disk) takes only its own
/// table offline.
#[test]
fn a_store_with_an_unreadable_catalog_entry_opens_with_its_other_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path()).unwrap();
        for name in ["a", "b"] {
            store
                .create_table(TableSpec::new(name).family(FamilySpec::new("f")))
                .unwrap();
            store
                .mutate_row(
                    name,
                    RowMutation::new("k", vec![Mutation::set("f", "q", "v")]),
                )
                .unwrap();
        }
    }
    {
        // What an older build wrote: a policy nested past the JSON reader's limit.
        let mut gc = "{\"max_versions\":1}".to_string();
        for _ in 0..130 {
            gc = format!("{{\"union\":[{{\"max_versions\":2}},{gc}]}}");
        }
        let deep = format!(
            "{{\"id\":99,\"name\":\"deep\",\"families\":[{{\"id\":100,\"name\":\"f\",\"gc\":{gc}}}]}}"
        );
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let catalog = db
            .keyspace("catalog", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        catalog.insert("table/deep", deep).unwrap();
        catalog.insert("table/garbage", [0xff, 0x00, 0x7b]).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.list_tables(), vec!["a", "b"]);
    let damaged: Vec<String> = store.damaged_tables().into_iter().map(|(t, _)| t).collect();
    assert_eq!(damaged, vec!["deep", "garbage"]);
    for name in ["a", "b"] {
        let row = store
            .read_row(name, b"k", cellar::ReadFilter::default())
            .unwrap()
            .unwrap();
        assert_eq!(row.cells[0].value, b"v");
    }
    let err = store.table("deep").unwrap_err().to_string();
    assert!(
        err.contains("\"deep\" cannot be opened") && err.contains("DROP TABLE deep"),
        "{err}"
    );
    let err = store
        .create_table(TableSpec::new("deep").family(FamilySpec::new("f")))
        .unwrap_err();
    assert!(err.to_string().contains("cannot be opened"), "{err}");

    // Through SQL: the damaged table names its problem; the rest answers.
    let session = SqlSession::new(store.clone());
    let err = run(&session, "SELECT * FROM deep")
        .await_blocking()
        .unwrap_err();
    assert!(err.contains("cannot be opened"), "{err}");
    let out = run(&session, "SELECT count(*) AS n FROM a")
        .await_blocking()
        .unwrap();
    assert!(out.contains("| 1 |"), "{out}");
    run(&session, "DROP TABLE deep").await_blocking().unwrap();
    drop(session);
    store.drop_table("garbage").unwrap();
    assert!(store.damaged_tables().is_empty());
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert!(store.damaged_tables().is_empty());
    assert_eq!(store.list_tables(), vec!["a", "b"]);
}

/// Runs a future to completion on a fresh runtime (for sync tests).
trait AwaitBlocking: std::future::Future + Sized {
    fn await_blocking(self) -> Self::Output {
        tokio::runtime::Runtime::new().unwrap().block_on(self)
    }
}

impl<F: std::future::Future> AwaitBlocking for F {}

/// A cell that does not decode as its declared column (written by an
/// older build, or by another tool) names itself and can be repaired.
#[tokio::test]
async fn a_bad_cell_is_named_and_repairable() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    run(
        &session,
        "CREATE TABLE k (FAMILY f, v BIGINT IN f, s TEXT IN f)",
    )
    .await
    .unwrap();
    run(
        &session,
        "INSERT INTO k (_key, v, s) VALUES ('good', 1, 'x'), ('bad', 2, 'y')",
    )
    .await
    .unwrap();
    session
        .store()
        .mutate_row(
            "k",
            RowMutation::new("bad", vec![Mutation::set("f", "v", vec![0xff, 0x80])]),
        )
        .unwrap();
    let err = run(&session, "SELECT v FROM k").await.unwrap_err();
    assert!(
        err.contains("row \"bad\"") || err.contains("row bad"),
        "names the row: {err}"
    );
    assert!(
        err.contains("column v") && err.contains("SET v = NULL WHERE _key = 'bad'"),
        "{err}"
    );
    // Columns that do not read v are unaffected.
    let out = run(&session, "SELECT _key, s FROM k ORDER BY _key")
        .await
        .unwrap();
    assert!(out.contains("| bad  | y |"), "{out}");
    // Setting the column (to NULL, or to a value) repairs it.
    run(&session, "UPDATE k SET v = NULL WHERE _key = 'bad'")
        .await
        .unwrap();
    let out = run(&session, "SELECT _key, v FROM k ORDER BY _key")
        .await
        .unwrap();
    assert!(out.contains("| bad  |   |"), "{out}");
    session
        .store()
        .mutate_row(
            "k",
            RowMutation::new("bad", vec![Mutation::set("f", "v", vec![0x01])]),
        )
        .unwrap();
    run(&session, "UPDATE k SET v = 3 WHERE _key = 'bad'")
        .await
        .unwrap();
    let out = run(&session, "SELECT v FROM k WHERE _key = 'bad'")
        .await
        .unwrap();
    assert!(out.contains("| 3 |"), "{out}");
}

/// Every single-row UPDATE reads, computes and writes under the row's
/// lock, whatever the encoding or expression: no update is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_of_one_row_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    run(
        &session,
        "CREATE TABLE c (FAMILY f, n BIGINT IN f, t BIGINT AS TEXT IN f, d DOUBLE IN f, s TEXT IN f)",
    )
    .await
    .unwrap();
    run(
        &session,
        "INSERT INTO c (_key, n, t, d, s) VALUES ('r', 0, 0, 0.0, '')",
    )
    .await
    .unwrap();
    let statements = [
        "UPDATE c SET t = t + 1 WHERE _key = 'r'",
        "UPDATE c SET n = n * 1 + 1, d = d + 0.5 WHERE _key = 'r'",
        "UPDATE c SET s = s || 'x' WHERE _key = 'r'",
    ];
    let mut tasks = Vec::new();
    for client in 0..8 {
        let session = session.clone();
        let sql = statements[client % statements.len()];
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                session.query(sql).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Clients 0, 3, 6 ran the first statement; 1, 4, 7 the second; 2, 5 the third.
    let out = run(&session, "SELECT n, t, d, length(s) AS l FROM c")
        .await
        .unwrap();
    assert!(out.contains("| 120 | 120 | 60.0 | 80 |"), "{out}");
}

/// The versions view fills columns written together column by column; a
/// value that does not decode still fails only the query whose rows keep
/// it, and names its row.
#[tokio::test]
async fn a_bad_value_in_the_versions_view_fails_only_the_rows_that_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    run(
        &session,
        "CREATE TABLE k (ROW KEY (name TEXT), FAMILY f, v BIGINT IN f, s TEXT IN f)",
    )
    .await
    .unwrap();
    for (row, v, s) in [
        ("a", 7i64.to_be_bytes().to_vec(), "fine"),
        ("b", vec![0xff, 0x80], "worse"),
        ("c", 9i64.to_be_bytes().to_vec(), "fine"),
    ] {
        let cells = (1..=3)
            .flat_map(|ts| {
                [
                    Mutation::set_at("f", "v", ts, v.clone()),
                    Mutation::set_at("f", "s", ts, s.as_bytes().to_vec()),
                ]
            })
            .collect();
        session
            .store()
            .mutate_row("k", RowMutation::new(row, cells))
            .unwrap();
    }
    let err = run(&session, "SELECT sum(v) FROM versions('k')")
        .await
        .unwrap_err();
    assert!(err.contains("row b") && err.contains("column v"), "{err}");
    // The scan reads row b and its own re-check turns it away.
    let plan = run(
        &session,
        "EXPLAIN SELECT v FROM versions('k') WHERE name <> 'b'",
    )
    .await
    .unwrap();
    assert!(plan.contains("FULL TABLE SCAN, rechecked=[name"), "{plan}");
    let out = run(
        &session,
        "SELECT _key, count(*) AS n, sum(v) AS total FROM versions('k') WHERE name <> 'b' GROUP BY _key ORDER BY _key",
    )
    .await
    .unwrap();
    assert!(
        out.contains("| a    | 3 | 21    |") && out.contains("| c    | 3 | 27    |"),
        "{out}"
    );
}

/// The resident memory of this process, in bytes (Linux).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Fields of an Arrow type at every level.
fn fields_in(t: &datafusion::arrow::datatypes::DataType) -> usize {
    use datafusion::arrow::datatypes::DataType;
    match t {
        DataType::Struct(fields) => fields.iter().map(|f| 1 + fields_in(f.data_type())).sum(),
        DataType::List(f) | DataType::Map(f, _) => fields_in(f.data_type()),
        _ => 0,
    }
}

/// A self-recursive protobuf type (each level four times the last) is
/// shown as a struct for as many levels as fit a bounded type, and as its
/// bytes below: listing, describing and querying the table stay small
/// and quick (a watchdog stops the test should memory run away), values
/// round-trip, and a message too wide to show at all is refused at CREATE.
#[tokio::test]
async fn recursive_and_wide_protobuf_types_have_bounded_schemas() {
    // Its watchdog watches the memory of the whole process.
    if !crate::common::in_own_process(
        "hostile::recursive_and_wide_protobuf_types_have_bounded_schemas",
    ) {
        return;
    }
    // Fails the test (the whole process) long before the machine suffers.
    let start = resident_bytes();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watching = std::sync::Arc::clone(&done);
    let watchdog = std::thread::spawn(move || {
        while !watching.load(std::sync::atomic::Ordering::Relaxed) {
            let now = resident_bytes();
            if now > start + (1 << 30) {
                eprintln!("schema building took {} MB: runaway", (now - start) >> 20);
                std::process::abort();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    run(
        &session,
        "CREATE PROTO 'r.proto' AS 'syntax = \"proto3\"; package r; \
         message T { T f0 = 1; T f1 = 2; T f2 = 3; T f3 = 4; int64 n = 5; }'",
    )
    .await
    .unwrap();
    run(&session, "CREATE TABLE rec (FAMILY m, x PROTO 'r.T' IN m)")
        .await
        .unwrap();
    for _ in 0..20 {
        run(&session, "SHOW TABLES").await.unwrap();
        run(&session, "DESCRIBE rec").await.unwrap();
        run(&session, "SELECT count(*) FROM information_schema.columns")
            .await
            .unwrap();
    }
    let schema = session.query("SELECT x FROM rec").await.unwrap()[0].schema();
    let fields = fields_in(schema.field(0).data_type());
    assert!(
        (1000..=cellar::proto::MAX_SCHEMA_FIELDS).contains(&fields),
        "{fields} fields"
    );
    // A value nesting 8 levels of f0 (n = its level at each): the levels
    // shown are structs, the one below them its bytes.
    fn level(n: u8) -> Vec<u8> {
        let mut out = vec![0x28, n];
        if n < 8 {
            let inner = level(n + 1);
            out.push(0x0a);
            out.push(u8::try_from(inner.len()).unwrap());
            out.extend(inner);
        }
        out
    }
    session
        .store()
        .mutate_row(
            "rec",
            RowMutation::new("a", vec![Mutation::set("m", "x", level(1))]),
        )
        .unwrap();
    let got = run(
        &session,
        "SELECT x['n'] AS a, x['f0']['n'] AS b, x['f0']['f0']['f0']['f0']['n'] AS e, \
         arrow_typeof(x['f0']['f0']['f0']['f0']['f0']) AS below, \
         length(x['f0']['f0']['f0']['f0']['f0']) AS bytes FROM rec",
    )
    .await
    .unwrap();
    assert!(got.contains("| 1 | 2 | 5 | Binary | 10    |"), "{got}");

    // A message too wide for any column: refused, naming it.
    let wide: String = (1..=5000).map(|i| format!("int32 f{i} = {i}; ")).collect();
    run(
        &session,
        &format!(
            "CREATE PROTO 'w.proto' AS 'syntax = \"proto3\"; package w; message W {{ {wide} }}'"
        ),
    )
    .await
    .unwrap();
    let err = run(&session, "CREATE TABLE wide (FAMILY m, x PROTO 'w.W' IN m)")
        .await
        .unwrap_err();
    assert!(err.contains("w.W has 5000 fields"), "{err}");
    assert!(run(&session, "DESCRIBE wide").await.is_err());
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    watchdog.join().unwrap();
}
