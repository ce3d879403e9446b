//! AUTO, the format a family gets by default: cells written as CELLS,
//! folded into blocks by merges and by the background compaction, reads
//! merging the two (the model test runs every operation over it too).

use cellar::{
    FamilyFormat, FamilySpec, GcPolicy, Mutation, ReadRequest, Row, RowMutation, RowRange, RowSet,
    Store, StoreOptions, TableSpec,
};
use std::time::{Duration, Instant};

fn open(dir: &std::path::Path, quiet: Option<Duration>) -> Store {
    let options = StoreOptions {
        background_compaction: quiet,
        ..StoreOptions::default()
    };
    Store::from(cellar::FjallStore::open_with(dir, options).unwrap())
}

fn all(store: &Store) -> Vec<Row> {
    store
        .read_rows("t", ReadRequest::all())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn set(store: &Store, row: &str, q: &str, ts: i64, v: &str) {
    store
        .mutate_row(
            "t",
            RowMutation::new(row.as_bytes(), vec![Mutation::set_at("f", q, ts, v)]),
        )
        .unwrap();
}

/// How many cells the table holds.
fn count(store: &Store) -> usize {
    all(store).iter().map(|r| r.cells.len()).sum()
}

/// The table's cells as (row, qualifier, timestamp, value), newest first.
fn cells(store: &Store) -> Vec<(String, String, i64, String)> {
    all(store)
        .into_iter()
        .flat_map(|r| {
            let key = String::from_utf8(r.key).unwrap();
            r.cells.into_iter().map(move |c| {
                (
                    key.clone(),
                    String::from_utf8(c.qualifier).unwrap(),
                    c.timestamp,
                    String::from_utf8(c.value).unwrap(),
                )
            })
        })
        .collect()
}

/// Writes rows `k{from}`..`k{to}` (8 digits) with a cell in each of
/// `columns` at time 7, the row number as the value, as one batch
/// prepared ahead, as INSERT writes one.
fn load(store: &Store, from: usize, to: usize, columns: &[&str]) {
    use cellar::{BadRows, CellBatch};
    let mut batch = CellBatch::new();
    let f = batch.family("f");
    for i in from..to {
        batch.begin_row(format!("k{i:08}").as_bytes());
        for q in columns {
            batch.set(f, q.as_bytes(), 7, &(i as u64).to_be_bytes());
        }
    }
    store.prepare_batch("t", &mut batch).unwrap();
    assert!(
        store
            .write_batch("t", &batch, BadRows::Stop)
            .unwrap()
            .is_empty()
    );
}

/// Pairs in the family's own keyspace and in its blocks, as `scan_pairs`
/// counts them (a block is one pair).
fn pairs(store: &Store) -> u64 {
    store.local().unwrap().scan_pairs("t").unwrap().0
}

#[test]
fn a_family_created_without_a_format_is_auto() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), None);
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let def = store.local().unwrap().table("t").unwrap();
    assert_eq!(def.families[0].format, FamilyFormat::Auto);
}

/// Cells written after a fold join the block's row; a delete unfolds the
/// row (its block cells become its own, a marker hides the block's
/// copy); the next fold takes it all back; every read in between is what
/// the cells say.
#[test]
fn writes_after_a_fold_merge_with_the_block_and_deletes_unfold() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), None);
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f").gc(GcPolicy::MaxVersions(2))))
        .unwrap();
    for i in 0..200 {
        let row = format!("r{i:03}");
        set(&store, &row, "a", 10, &format!("a{i}"));
        set(&store, &row, "b", 10, "");
    }
    let before = pairs(&store);
    store.local().unwrap().merge_blocks("t", "f").unwrap();
    // 400 cells went into a handful of blocks.
    assert!(pairs(&store) < before / 20, "{} of {before}", pairs(&store));
    let mut want = cells(&store);
    assert_eq!(want.len(), 400);
    assert!(want.contains(&("r007".into(), "b".into(), 10, String::new())));

    // A newer version and a new column of a folded row; an empty value.
    set(&store, "r005", "a", 20, "new");
    set(&store, "r005", "c", 5, "");
    // The same cell again: the own pair's value is the one.
    set(&store, "r006", "a", 10, "again");
    let expect = |want: &mut Vec<(String, String, i64, String)>| {
        want.sort_by(|x, y| (&x.0, &x.1, -x.2).cmp(&(&y.0, &y.1, -y.2)));
    };
    want.push(("r005".into(), "a".into(), 20, "new".into()));
    want.push(("r005".into(), "c".into(), 5, String::new()));
    want.retain(|c| !(c.0 == "r006" && c.1 == "a"));
    want.push(("r006".into(), "a".into(), 10, "again".into()));
    expect(&mut want);
    assert_eq!(cells(&store), want);
    // A third version: max 2 versions hides the oldest at read.
    set(&store, "r005", "a", 30, "newest");
    want.retain(|c| !(c.0 == "r005" && c.1 == "a" && c.2 == 10));
    want.push(("r005".into(), "a".into(), 30, "newest".into()));
    expect(&mut want);
    assert_eq!(cells(&store), want);

    // Deletes: a column's time range, a family, a row.
    store
        .mutate_row(
            "t",
            RowMutation::new("r010", vec![Mutation::delete_column("f", "a")]),
        )
        .unwrap();
    want.retain(|c| !(c.0 == "r010" && c.1 == "a"));
    store
        .mutate_row(
            "t",
            RowMutation::new("r011", vec![Mutation::DeleteFamily { family: "f".into() }]),
        )
        .unwrap();
    want.retain(|c| c.0 != "r011");
    store
        .mutate_row("t", RowMutation::new("r012", vec![Mutation::DeleteRow]))
        .unwrap();
    want.retain(|c| c.0 != "r012");
    // A write to a deleted (unfolded) row.
    set(&store, "r012", "z", 1, "back");
    want.push(("r012".into(), "z".into(), 1, "back".into()));
    expect(&mut want);
    assert_eq!(cells(&store), want);

    // Reads of parts: a key range backwards, with a limit, a row set.
    let request = ReadRequest::rows(RowSet::range(RowRange::between(
        std::ops::Bound::Included(b"r004".to_vec()),
        std::ops::Bound::Excluded(b"r013".to_vec()),
    )))
    .reverse()
    .limit(4);
    let keys: Vec<Vec<u8>> = store
        .read_rows("t", request)
        .unwrap()
        .map(|r| r.unwrap().key)
        .collect();
    assert_eq!(
        keys,
        [&b"r012"[..], b"r010", b"r009", b"r008"].map(<[u8]>::to_vec)
    );
    let report = store.local().unwrap().check().unwrap();
    assert!(report.healthy(), "{report:?}");

    // Folded again, and after a reopen: the same cells, nothing left own.
    store.local().unwrap().merge_blocks("t", "f").unwrap();
    assert_eq!(cells(&store), want);
    drop(store);
    store = open(dir.path(), None);
    assert_eq!(cells(&store), want);
    let report = store.local().unwrap().check().unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// With nothing but writes and waiting, the background compaction folds
/// a default table's cells into blocks; reads meanwhile see every cell.
#[test]
fn the_background_compaction_folds_settled_cells() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Some(Duration::from_millis(50)));
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    for i in 0..500 {
        set(&store, &format!("r{i:03}"), "a", 1, "x");
    }
    let written = pairs(&store);
    assert_eq!(written, 500);
    let waited = Instant::now();
    while pairs(&store) > 20 {
        assert_eq!(cells(&store).len(), 500);
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "not folded: {} pairs",
            pairs(&store)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The own keyspace is replaced by an empty one once folded: its id
    // says when the next fold is done.
    let own = || store.local().unwrap().table("t").unwrap().families[0].clone();
    assert!(own().blocks.is_some());
    assert_eq!(cells(&store).len(), 500);
    // More writes land as cells beside the blocks and are folded in turn.
    let folded = own().id;
    set(&store, "r250", "b", 2, "y");
    assert_eq!(cells(&store).len(), 501);
    let waited = Instant::now();
    while own().id == folded {
        assert!(waited.elapsed() < Duration::from_secs(60), "not folded");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cells(&store).len(), 501);
    // Dropping the store stops the compaction before it closes: the
    // directory opens again at once.
    drop(store);
    let again = open(dir.path(), Some(Duration::from_millis(50)));
    assert_eq!(cells(&again).len(), 501);
}

/// A load of new columns over rows a tall load put in blocks, folded by
/// the background compaction while more loads come: every cell stays.
#[test]
fn cells_over_loaded_blocks_survive_background_folds() {
    use cellar::INGEST_MIN_ROWS;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Some(Duration::from_millis(1)));
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let n = 2 * INGEST_MIN_ROWS;
    load(&store, 0, n, &["a", "b"]);
    load(&store, n / 2, 3 * n / 2, &["a", "b", "z"]);
    let want = 2 * (3 * n / 2) + n;
    let waited = Instant::now();
    loop {
        let got: usize = count(&store);
        assert_eq!(got, want, "after {:?}", waited.elapsed());
        if store.local().unwrap().folded("t").unwrap() {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(120), "not folded");
        std::thread::sleep(Duration::from_millis(5));
    }
    let got: usize = count(&store);
    assert_eq!(got, want);
}

/// A read under way while a fold rewrites the rows ahead of it reads
/// them as they were when it began.
#[test]
fn a_read_sees_its_snapshot_while_a_fold_runs() {
    use cellar::INGEST_MIN_ROWS;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), None);
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let n = 2 * INGEST_MIN_ROWS;
    load(&store, 0, n, &["a", "b"]);
    load(&store, n / 2, 3 * n / 2, &["a", "b", "z"]);
    let want = 2 * (3 * n / 2) + n;
    let mut rows = store.read_rows("t", ReadRequest::all()).unwrap();
    let mut got: usize = rows.by_ref().take(10).map(|r| r.unwrap().cells.len()).sum();
    store.local().unwrap().merge_blocks("t", "f").unwrap();
    got += rows.map(|r| r.unwrap().cells.len()).sum::<usize>();
    assert_eq!(got, want);
    let after: usize = count(&store);
    assert_eq!(after, want);
}

/// Reads under way while the background compaction folds steps ahead of
/// and behind them see their snapshot.
#[test]
fn slow_reads_see_their_snapshot_while_the_background_folds() {
    use cellar::INGEST_MIN_ROWS;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), Some(Duration::from_millis(1)));
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    let n = 2 * INGEST_MIN_ROWS;
    load(&store, 0, n, &["a", "b"]);
    load(&store, n / 2, 3 * n / 2, &["a", "b", "z"]);
    let want = 2 * (3 * n / 2) + n;
    for _ in 0..20 {
        store.local().unwrap().compact("t").unwrap();
        let mut got = 0;
        for (i, row) in store
            .read_rows("t", ReadRequest::all())
            .unwrap()
            .enumerate()
        {
            got += row.unwrap().cells.len();
            if i % 500 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        assert_eq!(got, want);
        if store.local().unwrap().folded("t").unwrap() {
            break;
        }
    }
}

/// COPY FROM of a file sorted by key into a table created with no format
/// goes straight into column-wise blocks, as into a PACKED one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_into_a_default_table_goes_into_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("store"), None);
    let session = cellar::SqlSession::new(store.clone());
    let file = dir.path().join("rows.parquet");
    session
        .query(&format!(
            "COPY (SELECT concat('k', lpad(CAST(x AS VARCHAR), 8, '0')) AS _key, \
             CAST(x AS DOUBLE) AS v, CAST(x * 2 AS DOUBLE) AS w \
             FROM generate_series(1, 40000) AS t(x) ORDER BY 1) TO '{}'",
            file.display()
        ))
        .await
        .unwrap();
    session
        .query("CREATE TABLE t (FAMILY m, v DOUBLE IN m, w DOUBLE IN m)")
        .await
        .unwrap();
    session
        .query(&format!("COPY t FROM '{}'", file.display()))
        .await
        .unwrap();
    let pairs = store.local().unwrap().scan_pairs("t").unwrap().0;
    assert!(pairs < 40_000 / 16, "{pairs} pairs for 40000 rows");
    assert!(store.local().unwrap().folded("t").unwrap());
    let out = session
        .query("SELECT count(*), sum(v), sum(w) FROM t")
        .await
        .unwrap();
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::{Float64Type, Int64Type};
    let row = &out[0];
    assert_eq!(row.column(0).as_primitive::<Int64Type>().value(0), 40_000);
    assert_eq!(
        row.column(1).as_primitive::<Float64Type>().value(0),
        800_020_000.0
    );
    assert_eq!(
        row.column(2).as_primitive::<Float64Type>().value(0),
        1_600_040_000.0
    );
}

/// A fold that gives the family a fresh own keyspace leaves nothing for
/// a clean close to wait for: the close records the journals as written
/// out (the next open replays nothing).
#[test]
fn a_clean_close_after_a_fold_records_the_journals() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), None);
    store
        .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
        .unwrap();
    set(&store, "a", "q", 1, "x");
    store.local().unwrap().merge_blocks("t", "f").unwrap();
    assert!(store.local().unwrap().folded("t").unwrap());
    assert!(store.local().unwrap().checkpoint().unwrap());
}

/// One batch of wide rows (a series' buckets): per (row, first, last)
/// the row's cells `v{n}` at times `first..last` in columns `a` and `b`;
/// `ahead`: prepared ahead as INSERT and COPY write one (else encoded
/// under the row locks).
fn load_wide(store: &Store, table: &str, rows: &[(&str, i64, i64)], ahead: bool) {
    use cellar::{BadRows, CellBatch};
    let mut batch = CellBatch::new();
    let f = batch.family("f");
    for &(row, first, last) in rows {
        batch.begin_row(row.as_bytes());
        for ts in first..last {
            batch.set(f, b"a", ts, format!("v{ts}").as_bytes());
            batch.set(f, b"b", ts, &ts.to_be_bytes());
        }
    }
    if ahead {
        store.prepare_batch(table, &mut batch).unwrap();
    }
    assert!(
        store
            .write_batch(table, &batch, BadRows::Stop)
            .unwrap()
            .is_empty()
    );
}

/// Batches of rows of hundreds to thousands of cells each (encoded ahead
/// or under the row locks) into a default table go into blocks as PACKED
/// rows, but for rows the table holds (a batch's rows continuing the last
/// one's, as a series' day buckets from a sorted file, one per run of a
/// file read in two parts), whose new cells go in as cells, and a batch
/// whose rows fall among a stored block's, which goes in as cells. Every
/// read (after a reopen and a fold too) is what the same batches give a
/// CELLS table of the same GC policy.
#[test]
fn wide_rows_of_a_load_go_into_blocks_with_every_cell() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path(), None);
    for (name, format) in [("t", None), ("c", Some(FamilyFormat::Cells))] {
        let mut family = FamilySpec::new("f").gc(GcPolicy::MaxVersions(3000));
        if let Some(format) = format {
            family = family.format(format);
        }
        store
            .create_table(TableSpec::new(name).family(family))
            .unwrap();
    }
    let first: Vec<(String, i64, i64)> = (0..60).map(|i| (format!("d{i:02}"), 0, 200)).collect();
    let batches: [Vec<(String, i64, i64)>; 5] = [
        first,
        // d59 continues; d60 and d61 are new.
        vec![
            ("d59".into(), 200, 3000),
            ("d60".into(), 0, 4000),
            ("d61".into(), 0, 3000),
        ],
        // Among a stored block's rows: cells.
        vec![("d05x".into(), 0, 5000), ("d06x".into(), 0, 4000)],
        // New rows after every stored one, from the first.
        vec![
            ("e1".into(), 0, 3000),
            ("e2".into(), 5, 3005),
            ("e3".into(), 10, 4000),
        ],
        // Two runs, as a file read in two parts gives: each continues a
        // stored row and adds a new one.
        vec![
            ("e3".into(), 4000, 4500),
            ("e4".into(), 0, 5000),
            ("d61".into(), 3000, 3500),
            ("d62".into(), 0, 4000),
        ],
    ];
    for (n, batch) in batches.iter().enumerate() {
        let rows: Vec<(&str, i64, i64)> =
            batch.iter().map(|(r, a, b)| (r.as_str(), *a, *b)).collect();
        for table in ["t", "c"] {
            // (Every other batch encoded under the locks.)
            load_wide(&store, table, &rows, n % 2 == 0);
        }
    }
    let read = |store: &Store, table: &str| -> Vec<Row> {
        store
            .read_rows(table, ReadRequest::all())
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let want = read(&store, "c");
    assert_eq!(want.len(), 69);
    // (Over 3000 versions a column loses its oldest to the GC policy.)
    let cells_of = |key: &[u8]| want.iter().find(|r| r.key == key).unwrap().cells.len();
    assert_eq!(cells_of(b"d05x"), 6000);
    assert_eq!(cells_of(b"e3"), 6000);
    assert_eq!(cells_of(b"d59"), 6000);
    assert_eq!(read(&store, "t"), want);
    assert_eq!(cells_of(b"d62"), 6000);
    // Every row in a few blocks but d59's, e3's and d61's continued
    // parts, d05x and d06x.
    let (t_pairs, _) = store.local().unwrap().scan_pairs("t").unwrap();
    let cell_pairs = 2 * (2800 + 500 + 500 + 5000 + 4000);
    assert!(
        t_pairs <= cell_pairs + 50,
        "{t_pairs} pairs, {cell_pairs} of them cells"
    );
    let report = store.local().unwrap().check().unwrap();
    assert!(report.healthy(), "{report:?}");
    drop(store);
    store = open(dir.path(), None);
    assert_eq!(read(&store, "t"), want);
    store.local().unwrap().merge_blocks("t", "f").unwrap();
    assert!(store.local().unwrap().folded("t").unwrap());
    assert_eq!(read(&store, "t"), want);
    let report = store.local().unwrap().check().unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// A day-bucket series created with no FORMAT, loaded by two COPYs from
/// files sorted by series and time, the second's first bucket continuing
/// the first's last: its buckets go into blocks (only the continued
/// bucket's new events are cells), and every answer is the same as a
/// PACKED series' loaded alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_series_load_goes_into_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("store"), None);
    let session = cellar::SqlSession::new(store.clone());
    // Every 30 s over two days: series a, b, c's first morning; then the
    // rest of c, and d.
    let event = |dev: &str, step: i64| {
        let micros = 1_700_006_400_000_000 + step * 30_000_000;
        let secs = micros / 1_000_000;
        let time = chrono::DateTime::from_timestamp(secs, 0)
            .unwrap()
            .naive_utc();
        format!(
            "{dev},{},{},{}\n",
            time.format("%Y-%m-%dT%H:%M:%S"),
            step % 997,
            -(step % 89)
        )
    };
    let day = 2880;
    let files = [
        ("a", 0..2 * day, "b", 0..2 * day, "c", 0..day / 2),
        ("c", day / 2..2 * day, "d", 0..2 * day, "e", 0..0),
    ];
    for (layout, name) in [("", "s"), (" FORMAT PACKED", "p")] {
        session
            .query(&format!(
                "CREATE SERIES {name} (KEY (dev TEXT), TIME ts, pressure BIGINT, temperature BIGINT) \
                 LAYOUT BUCKET '1 day' CELL PER EVENT{layout}"
            ))
            .await
            .unwrap();
    }
    for (i, (d1, r1, d2, r2, d3, r3)) in files.into_iter().enumerate() {
        let mut csv = String::from("dev,ts,pressure,temperature\n");
        for (dev, range) in [(d1, r1), (d2, r2), (d3, r3)] {
            for step in range {
                csv.push_str(&event(dev, step));
            }
        }
        let file = dir.path().join(format!("events{i}.csv"));
        std::fs::write(&file, csv).unwrap();
        for name in ["s", "p"] {
            session
                .query(&format!("COPY {name} FROM '{}'", file.display()))
                .await
                .unwrap();
        }
    }
    use crate::rows::texts;
    for query in [
        "SELECT dev, CAST(ts AS BIGINT) AS t, pressure, temperature FROM {} ORDER BY dev, t",
        "SELECT dev, date_trunc('hour', ts) AS h, count(*), avg(pressure), min(temperature) \
         FROM {} GROUP BY dev, h ORDER BY dev, h",
    ] {
        let (s, p) = (query.replace("{}", "s"), query.replace("{}", "p"));
        let got = texts(&session.query(&s).await.unwrap());
        let want = texts(&session.query(&p).await.unwrap());
        assert_eq!(
            got.len(),
            if query.contains("GROUP") {
                4 * 48
            } else {
                8 * day as usize
            }
        );
        assert_eq!(got, want, "{query}");
    }
    // Four series of two days are eight buckets; c's first day's evening
    // is cells (a pair per measure and event).
    let (pairs, _) = store.local().unwrap().scan_pairs("s").unwrap();
    let cells = 2 * (day / 2) as u64;
    assert!(pairs <= cells + 16, "{pairs} pairs, {cells} of them cells");
}
