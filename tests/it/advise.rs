//! The schema advisor: each rule finds its flaw in a table built with it
//! after a workload, and a well-designed table under the same kind of
//! workload draws no finding.

use cellar::keys::{Finding, RULES, Severity, advise};
use cellar::{Mutation, ReadRequest, RowMutation, RowSet, SqlSession, Store};
use datafusion::arrow::array::AsArray;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    session: SqlSession,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    Fixture {
        _dir: dir,
        store,
        session,
    }
}

impl Fixture {
    async fn sql(&self, sql: &str) {
        self.session
            .query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The findings for `table` but the closing summary.
    fn findings(&self, table: &str) -> Vec<Finding> {
        let mut f = advise(&self.store, table, i64::MIN).unwrap();
        let summary = f.pop().unwrap();
        assert_eq!(summary.rule, "summary", "the last finding sums up");
        assert_eq!(summary.severity, Severity::Info);
        f
    }

    /// Point reads of `key`, `n` times, through the store.
    fn read_key(&self, table: &str, key: &str, n: usize) {
        for _ in 0..n {
            let mut rows = self
                .store
                .read_rows(table, ReadRequest::rows(RowSet::keys([key])))
                .unwrap();
            while rows.next_view().unwrap().is_some() {}
        }
    }
}

fn rules(findings: &[Finding]) -> Vec<&'static str> {
    findings.iter().map(|f| f.rule).collect()
}

fn the<'a>(findings: &'a [Finding], rule: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.rule == rule)
        .unwrap_or_else(|| panic!("no {rule} finding in {findings:#?}"))
}

/// `n` rows from `first` into `table` (`user`, `ts`, `page`): `user`
/// from `users` users spread by a multiplier, `ts` the row's number.
fn clicks(table: &str, key: &str, first: u64, n: u64, users: u64) -> String {
    format!(
        "INSERT INTO {table} ({key}, page) SELECT {}, 'home' \
         FROM generate_series({first}, {first} + {n} - 1) AS t(n)",
        key.split(", ")
            .map(|k| match k {
                "ts" => "'2026-12-01T' || lpad(CAST(n AS VARCHAR), 9, '0')".to_string(),
                "user" => format!("'user' || lpad(CAST(n * 7919 % {users} AS VARCHAR), 4, '0')"),
                "salt" => "n % 8".to_string(),
                other => panic!("no column {other}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[tokio::test]
async fn a_timestamp_first_key_is_found_and_an_entity_first_key_is_clean() {
    let f = fixture();
    f.sql("CREATE TABLE by_time (ROW KEY (ts TEXT, user TEXT), FAMILY c, page TEXT IN c)")
        .await;
    f.sql("CREATE TABLE by_user (ROW KEY (user TEXT, ts TEXT), FAMILY c, page TEXT IN c)")
        .await;
    for round in 0..4 {
        f.sql(&clicks("by_time", "ts, user", round * 5000, 5000, 300))
            .await;
        f.sql(&clicks("by_user", "user, ts", round * 5000, 5000, 300))
            .await;
    }
    let found = f.findings("by_time");
    let t = the(&found, "timestamp-first-key");
    assert_eq!(t.severity, Severity::Warning);
    assert_eq!(t.subject, "ts (a timestamp)");
    assert!(
        t.evidence.contains("of the 20000 rows written") && t.evidence.contains("beyond every key"),
        "{}",
        t.evidence
    );
    assert!(t.advice.contains("field promotion"), "{}", t.advice);
    assert_eq!(rules(&found), ["timestamp-first-key"]);
    assert_eq!(rules(&f.findings("by_user")), Vec::<&str>::new());

    // A sequential number first is found by its writes; a number spread
    // over the key space (an id hashed) is not.
    f.sql("CREATE TABLE orders (ROW KEY (id INT(8)), FAMILY o, total BIGINT IN o)")
        .await;
    f.sql("CREATE TABLE spread (ROW KEY (id INT(8)), FAMILY o, total BIGINT IN o)")
        .await;
    for round in 0..3 {
        let first = round * 2000;
        f.sql(&format!(
            "INSERT INTO orders (id, total) SELECT n, n * 2 FROM generate_series({first}, {first} + 1999) AS t(n)"
        ))
        .await;
        f.sql(&format!(
            "INSERT INTO spread (id, total) SELECT n * 7919 % 99991, n FROM generate_series({first}, {first} + 1999) AS t(n)"
        ))
        .await;
    }
    let found = f.findings("orders");
    assert_eq!(the(&found, "timestamp-first-key").subject, "id (a number)");
    assert_eq!(rules(&f.findings("spread")), Vec::<&str>::new());
}

#[tokio::test]
async fn a_hot_range_is_found_with_its_prefix_and_spread_reads_are_clean() {
    let f = fixture();
    for t in ["hot", "even"] {
        f.sql(&format!(
            "CREATE TABLE {t} (ROW KEY (user TEXT, ts TEXT), FAMILY c, page TEXT IN c)"
        ))
        .await;
        for round in 0..4 {
            f.sql(&clicks(t, "user, ts", round * 10_000, 10_000, 400))
                .await;
        }
    }
    // One key read 300 times (user0042's click 118), a few others once
    // each.
    let key = "user0042#2026-12-01T000000118";
    f.read_key("hot", key, 300);
    for u in (0..400).step_by(40) {
        f.read_key("hot", &format!("user{u:04}#x"), 1);
    }
    let found = f.findings("hot");
    let hot = the(&found, "hot-range");
    assert_eq!(hot.severity, Severity::Warning);
    assert!(hot.subject.contains("user0042#"), "{hot:#?}");
    assert!(
        hot.evidence.contains("of the 310 reads"),
        "{}",
        hot.evidence
    );
    assert_eq!(rules(&found), ["hot-range"]);

    // The same number of point reads spread over every user.
    for u in 0..310 {
        let n = u * 7 % 400;
        f.read_key("even", &format!("user{n:04}#2026-12-01T{n:09}"), 1);
    }
    assert_eq!(rules(&f.findings("even")), Vec::<&str>::new());
}

#[tokio::test]
async fn uneven_salt_buckets_are_found_and_even_ones_are_clean() {
    let f = fixture();
    for t in ["uneven", "even"] {
        f.sql(&format!(
            "CREATE TABLE {t} (ROW KEY (salt INT(1), ts TEXT), FAMILY c, page TEXT IN c)"
        ))
        .await;
    }
    for round in 0..4u64 {
        let first = round * 10_000;
        // Salt 0 for every other row: bucket 0 takes half the writes.
        f.sql(&format!(
            "INSERT INTO uneven (salt, ts, page) SELECT CASE WHEN n % 2 = 0 THEN 0 ELSE n % 8 END, \
             '2026-12-01T' || lpad(CAST(n AS VARCHAR), 9, '0'), 'p' \
             FROM generate_series({first}, {first} + 9999) AS t(n)"
        ))
        .await;
        f.sql(&clicks("even", "salt, ts", first, 10_000, 1)).await;
    }
    let found = f.findings("uneven");
    let salt = the(&found, "salt-balance");
    assert_eq!(salt.severity, Severity::Warning);
    assert!(salt.subject.starts_with("salt ("), "{}", salt.subject);
    assert!(
        salt.evidence.starts_with("bucket '0' took"),
        "{}",
        salt.evidence
    );
    assert_eq!(rules(&found), ["salt-balance"]);
    assert_eq!(rules(&f.findings("even")), Vec::<&str>::new());
}

#[tokio::test]
async fn latest_first_reads_suggest_a_reversed_timestamp() {
    let f = fixture();
    for t in ["latest", "oldest"] {
        f.sql(&format!(
            "CREATE TABLE {t} (ROW KEY (host TEXT, ts TIMESTAMP MILLIS), FAMILY m, v BIGINT IN m)"
        ))
        .await;
        f.sql(&format!(
            "INSERT INTO {t} (host, ts, v) SELECT 'h' || CAST(n % 20 AS VARCHAR), \
             to_timestamp_millis(1700000000000 + n * 1000), n FROM generate_series(1, 4000) AS t(n)"
        ))
        .await;
    }
    for h in 0..20 {
        f.sql(&format!(
            "SELECT ts, v FROM latest WHERE host = 'h{h}' ORDER BY ts DESC LIMIT 1"
        ))
        .await;
        f.sql(&format!(
            "SELECT ts, v FROM oldest WHERE host = 'h{h}' ORDER BY ts LIMIT 1"
        ))
        .await;
    }
    let found = f.findings("latest");
    let r = the(&found, "reversed-timestamp");
    assert_eq!(r.severity, Severity::Suggestion);
    assert_eq!(r.subject, "ts");
    assert!(
        r.evidence.contains("descending key order"),
        "{}",
        r.evidence
    );
    assert_eq!(rules(&found), ["reversed-timestamp"]);
    assert_eq!(rules(&f.findings("oldest")), Vec::<&str>::new());
}

#[tokio::test]
async fn whole_table_scans_for_one_entity_suggest_field_promotion() {
    let f = fixture();
    for t in ["scanned", "keyed"] {
        f.sql(&format!(
            "CREATE TABLE {t} (ROW KEY (event TEXT), FAMILY e, user TEXT IN e, v BIGINT IN e)"
        ))
        .await;
    }
    let load = |t: &str, key: &str| {
        format!(
            "INSERT INTO {t} (event, user, v) SELECT {key}, 'u' || CAST(n % 25 AS VARCHAR), n \
             FROM generate_series(1, 20000) AS t(n)"
        )
    };
    // Events keyed by a hash-like id; the user only in a column.
    f.sql(&load(
        "scanned",
        "CAST(n * 7919 % 1000003 AS VARCHAR) || 'e'",
    ))
    .await;
    // The user promoted into the key.
    f.sql(&load(
        "keyed",
        "'u' || CAST(n % 25 AS VARCHAR) || '#' || CAST(n AS VARCHAR)",
    ))
    .await;
    for u in 0..12 {
        f.sql(&format!("SELECT sum(v) FROM scanned WHERE user = 'u{u}'"))
            .await;
        f.sql(&format!(
            "SELECT sum(v) FROM keyed WHERE event >= 'u{u}#' AND event < 'u{u}$'"
        ))
        .await;
    }
    let found = f.findings("scanned");
    let p = the(&found, "field-promotion");
    assert_eq!(p.severity, Severity::Suggestion);
    assert_eq!(p.subject, "user", "{p:#?}");
    assert!(p.evidence.contains("25 distinct values"), "{}", p.evidence);
    assert_eq!(rules(&found), ["field-promotion"]);
    assert_eq!(rules(&f.findings("keyed")), Vec::<&str>::new());
}

#[tokio::test]
async fn cells_and_rows_near_or_over_the_limits_are_found() {
    let f = fixture();
    f.sql("CREATE TABLE blobs (FAMILY b)").await;
    f.sql("CREATE TABLE small (FAMILY b)").await;
    let mb = 1 << 20;
    let put = |table: &str, key: &str, cells: usize, bytes: usize| {
        let mutations = (0..cells)
            .map(|i| Mutation::set("b", format!("q{i}"), vec![b'x'; bytes]))
            .collect();
        f.store
            .mutate_row(
                table,
                RowMutation {
                    key: key.into(),
                    mutations,
                },
            )
            .unwrap();
    };
    // A cell of 6 MB: near the 10 MB limit.
    put("blobs", "a", 1, 6 * mb);
    let found = f.findings("blobs");
    let cell = the(&found, "cell-size");
    assert_eq!(cell.severity, Severity::Warning);
    assert!(cell.evidence.contains("near"), "{}", cell.evidence);
    assert_eq!(cell.subject, "row 'a' column b:q0");
    // Over it, and a row of 11 cells of 9.5 MB: over the 100 MB row.
    put("blobs", "b", 1, 11 * mb);
    put("blobs", "c", 11, 19 * mb / 2);
    let found = f.findings("blobs");
    let cell = the(&found, "cell-size");
    assert_eq!(cell.severity, Severity::Critical);
    assert_eq!(cell.subject, "row 'b' column b:q0");
    let row = the(&found, "row-size");
    assert_eq!(row.severity, Severity::Critical);
    assert_eq!(row.subject, "row 'c'");
    assert!(row.evidence.contains("in 11 cells"), "{}", row.evidence);
    assert_eq!(found[0].severity, Severity::Critical, "most severe first");

    put("small", "a", 20, 1000);
    put("small", "b", 20, 1000);
    assert_eq!(rules(&f.findings("small")), Vec::<&str>::new());
}

#[tokio::test]
async fn wide_rows_read_by_point_reads_are_found() {
    let f = fixture();
    f.sql("CREATE TABLE wide (FAMILY s)").await;
    f.sql("CREATE TABLE narrow (FAMILY s)").await;
    let put = |table: &str, key: String, cells: usize| {
        let mutations = (0..cells)
            .map(|i| Mutation::set("s", format!("{i:05}"), b"1".to_vec()))
            .collect();
        f.store
            .mutate_row(
                table,
                RowMutation {
                    key: key.into_bytes(),
                    mutations,
                },
            )
            .unwrap();
    };
    // A meter's day in one row, a column per second (the smart-meter
    // guide's row grown far past its 96 quarter hours).
    for m in 0..3 {
        put("wide", format!("meter{m}#20261201"), 12_000);
    }
    for m in 0..300 {
        put("narrow", format!("meter{m:03}#20261201"), 96);
    }
    for m in 0..3 {
        f.read_key("wide", &format!("meter{m}#20261201"), 5);
    }
    for m in 0..15 {
        f.read_key("narrow", &format!("meter{:03}#20261201", m * 20), 1);
    }
    let found = f.findings("wide");
    let w = the(&found, "wide-rows");
    assert_eq!(w.severity, Severity::Warning);
    assert!(w.evidence.contains("12000 cells"), "{}", w.evidence);
    assert!(w.evidence.contains("point reads"), "{}", w.evidence);
    assert_eq!(rules(&found), ["wide-rows"]);
    assert_eq!(rules(&f.findings("narrow")), Vec::<&str>::new());
}

#[tokio::test]
async fn a_family_nothing_writes_is_found() {
    let f = fixture();
    f.sql("CREATE TABLE t (FAMILY used, FAMILY spare, a BIGINT IN used, b BIGINT IN spare)")
        .await;
    f.sql("INSERT INTO t (_key, a) VALUES ('k1', 1), ('k2', 2)")
        .await;
    let found = f.findings("t");
    let u = the(&found, "unused-family");
    assert_eq!(u.severity, Severity::Suggestion);
    assert_eq!(u.subject, "family spare");
    assert!(
        u.advice.contains("ALTER TABLE t DROP FAMILY spare"),
        "{}",
        u.advice
    );
    assert_eq!(rules(&found), ["unused-family"]);
    f.sql("INSERT INTO t (_key, b) VALUES ('k3', 3)").await;
    assert_eq!(rules(&f.findings("t")), Vec::<&str>::new());
    // An empty table is not told to drop its families.
    f.sql("CREATE TABLE fresh (FAMILY a, FAMILY b)").await;
    assert_eq!(rules(&f.findings("fresh")), Vec::<&str>::new());
}

#[tokio::test]
async fn advise_table_in_sql_and_its_errors() {
    let f = fixture();
    f.sql("CREATE TABLE t (ROW KEY (ts TIMESTAMP SECONDS, id INT(4)), FAMILY c, v BIGINT IN c)")
        .await;
    f.sql("INSERT INTO t (ts, id, v) VALUES (to_timestamp(1700000000), 1, 1)")
        .await;
    let batches = f.session.query("ADVISE TABLE t").await.unwrap();
    let b = &batches[0];
    let schema = b.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["severity", "rule", "subject", "evidence", "advice"]);
    let rule = b.column(1).as_string::<i32>();
    assert_eq!(
        rule.value(0),
        "timestamp-first-key",
        "from the key schema alone"
    );
    assert_eq!(rule.value(b.num_rows() - 1), "summary");
    assert!(RULES.contains(&rule.value(0)));
    f.session.query("ADVISE TABLE t SINCE '30m'").await.unwrap();
    let e = f.session.query("ADVISE TABLE nope").await.unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    let e = f
        .session
        .query("ADVISE TABLE t SINCE 'yesterday'")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("yesterday"), "{e}");
    let e = f.session.query("ADVISE TABLE").await.unwrap_err();
    assert!(e.to_string().contains("identifier"), "{e}");
}
