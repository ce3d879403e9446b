//! Key activity through SQL: what the store counts per key range and
//! minute, read with `key_activity`, kept across a reopen, forgotten with
//! its table.

use cellar::{SqlSession, Store, StoreOptions};
use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};

async fn one_row_i64(session: &SqlSession, sql: &str) -> Vec<i64> {
    let batches = session.query(sql).await.unwrap();
    let batch = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    (0..batch.num_columns())
        .map(|c| {
            let col = batch.column(c);
            if col.is_null(0) {
                return -1;
            }
            col.as_primitive_opt::<Int64Type>()
                .map(|a| a.value(0))
                .unwrap_or_else(|| col.as_primitive::<Float64Type>().value(0) as i64)
        })
        .collect()
}

const TOTALS: &str = "SELECT sum(writes), sum(rows_written), sum(reads), sum(rows_read) \
                      FROM key_activity('events')";

async fn events(session: &SqlSession) {
    session
        .query("CREATE TABLE events (ROW KEY (user TEXT, n INT(4)), FAMILY e, v BIGINT IN e)")
        .await
        .unwrap();
    // Two INSERTs of 300 and 2 rows: two write requests.
    let values: Vec<String> = (0..300).map(|i| format!("('u{:02}', {i}, {i})", i % 30)).collect();
    session
        .query(&format!("INSERT INTO events (user, n, v) VALUES {}", values.join(", ")))
        .await
        .unwrap();
    session
        .query("INSERT INTO events (user, n, v) VALUES ('zz', 1, 1), ('zz', 2, 2)")
        .await
        .unwrap();
}

#[tokio::test]
async fn sql_reads_and_writes_are_counted_by_range_and_kept_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    events(&session).await;
    // A whole-table scan (302 rows), a point lookup (1 row), a lookup of
    // a key that is not there (no row, still a read).
    session.query("SELECT count(v) FROM events").await.unwrap();
    session
        .query("SELECT v FROM events WHERE user = 'u07' AND n = 7")
        .await
        .unwrap();
    session
        .query("SELECT v FROM events WHERE user = 'nobody' AND n = 1")
        .await
        .unwrap();
    let totals = one_row_i64(&session, TOTALS).await;
    assert_eq!(totals[..4], [2, 302, 3, 303], "writes, rows written, reads, rows read");

    // The metric form: the range, the minute and one value.
    let batches = session
        .query("SELECT sum(value) FROM key_activity('events', 'rows_written', '1h')")
        .await
        .unwrap();
    assert_eq!(batches[0].column(0).as_primitive::<Float64Type>().value(0), 302.0);
    let batches = session
        .query("SELECT range_start, range_end FROM key_activity('events') LIMIT 1")
        .await
        .unwrap();
    assert_eq!(batches[0].num_columns(), 2);

    // Closed and opened again: the same counts.
    store.checkpoint().unwrap();
    drop(session);
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    assert_eq!(one_row_i64(&session, TOTALS).await[..4], totals[..4]);
    // More after the reopen adds to them.
    session.query("SELECT count(*) FROM events").await.unwrap();
    let after = one_row_i64(&session, TOTALS).await;
    assert_eq!(after[2], 4);

    // A dropped table's activity goes with it.
    session.query("DROP TABLE events").await.unwrap();
    let err = session.query(TOTALS).await.unwrap_err().to_string();
    assert!(err.contains("events"), "{err}");
    events(&session).await;
    assert_eq!(one_row_i64(&session, TOTALS).await[..3], [2, 302, 0]);
}

#[tokio::test]
async fn bad_arguments_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let session = SqlSession::new(Store::open(dir.path()).unwrap());
    events(&session).await;
    for (sql, says) in [
        ("SELECT * FROM key_activity('nope')", "nope"),
        ("SELECT * FROM key_activity('events', 'heat')", "'heat'"),
        ("SELECT * FROM key_activity('events', 'rows_read', 'yesterday')", "'yesterday'"),
        ("SELECT * FROM key_activity('events', 'rows_read', '1h', 'x')", "1 to 3 arguments"),
        ("SELECT * FROM key_activity(7)", "must be a string"),
        ("SELECT * FROM key_activity()", "1 to 3 arguments"),
    ] {
        let err = session.query(sql).await.unwrap_err().to_string();
        assert!(err.contains(says), "{sql}: {err}");
    }
}

#[tokio::test]
async fn a_store_opened_without_counting_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        key_activity: None,
        ..StoreOptions::default()
    };
    let session = SqlSession::new(Store::open_with(dir.path(), options).unwrap());
    events(&session).await;
    let err = session
        .query("SELECT * FROM key_activity('events')")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("counts no key activity"), "{err}");
}
