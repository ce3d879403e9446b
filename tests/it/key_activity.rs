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
    let values: Vec<String> = (0..300)
        .map(|i| format!("('u{:02}', {i}, {i})", i % 30))
        .collect();
    session
        .query(&format!(
            "INSERT INTO events (user, n, v) VALUES {}",
            values.join(", ")
        ))
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
    assert_eq!(
        totals[..4],
        [2, 302, 3, 303],
        "writes, rows written, reads, rows read"
    );

    // The metric form: the range, the minute and one value.
    let batches = session
        .query("SELECT sum(value) FROM key_activity('events', 'rows_written', '1h')")
        .await
        .unwrap();
    assert_eq!(
        batches[0].column(0).as_primitive::<Float64Type>().value(0),
        302.0
    );
    let batches = session
        .query("SELECT range_start, range_end FROM key_activity('events') LIMIT 1")
        .await
        .unwrap();
    assert_eq!(batches[0].num_columns(), 2);

    // Folded into column-wise blocks: a count reads runs of rows (and
    // makes no key but a run's first to count where it lies), a range
    // starting within a block too; each counts the rows it read as it
    // did before the fold.
    const SOME: &str = "SELECT count(*) FROM events WHERE user >= 'u10' AND user < 'u20'";
    let before = one_row_i64(&session, TOTALS).await;
    assert_eq!(one_row_i64(&session, SOME).await, [100]);
    let unfolded = one_row_i64(&session, TOTALS).await[3] - before[3];
    session.query("COMPACT TABLE events").await.unwrap();
    let before = one_row_i64(&session, TOTALS).await;
    assert_eq!(
        one_row_i64(&session, "SELECT count(*) FROM events").await,
        [302]
    );
    let after = one_row_i64(&session, TOTALS).await;
    assert_eq!(
        after[2..4],
        [before[2] + 1, before[3] + 302],
        "reads, rows read"
    );
    assert_eq!(one_row_i64(&session, SOME).await, [100]);
    let folded = one_row_i64(&session, TOTALS).await[3] - after[3];
    assert!(unfolded >= 100, "{unfolded} rows read for 100");
    assert_eq!(folded, unfolded, "rows read from blocks and from cells");
    let totals = one_row_i64(&session, TOTALS).await;

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
    assert_eq!(after[2], totals[2] + 1);

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
        (
            "SELECT * FROM key_activity('events', 'rows_read', 'yesterday')",
            "'yesterday'",
        ),
        (
            "SELECT * FROM key_activity('events', 'rows_read', '1h', 'x')",
            "1 to 3 arguments",
        ),
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

/// A table whose writes go half to 20 keys under `hot#` and half to
/// new keys spread over eight other prefixes; drawn and rendered to
/// pixels, the hot range is the bright one and is outlined.
#[tokio::test]
async fn the_heatmap_shows_the_hot_range_brightest() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let session = SqlSession::new(store.clone());
    session
        .query("CREATE TABLE t (ROW KEY (k TEXT), FAMILY f, v BIGINT IN f)")
        .await
        .unwrap();
    let mut rows = Vec::new();
    for i in 0..30_000u64 {
        let spread = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16;
        let key = if i % 2 == 0 {
            let prefix = ["a", "b", "c", "d", "e", "f", "g", "j"][(i / 2 % 8) as usize];
            format!("{prefix}#{spread:012x}")
        } else {
            format!("hot#{:02}", i % 20)
        };
        rows.push(cellar::RowMutation {
            key: key.into_bytes(),
            mutations: vec![cellar::Mutation::SetCell {
                family: "f".into(),
                qualifier: b"v".to_vec(),
                timestamp: None,
                value: 1i64.to_be_bytes().to_vec(),
            }],
        });
        if rows.len() == 500 {
            store.mutate_rows("t", std::mem::take(&mut rows)).unwrap();
        }
    }
    let records = store.key_activity("t", i64::MIN).unwrap().unwrap();
    let map = cellar::keys::Heatmap::build("t", "rows_written", &records, 120, 360).unwrap();
    assert!(map.rows.len() > 4, "{} rows", map.rows.len());
    let hot: Vec<usize> = (0..map.rows.len()).filter(|&r| map.hot[r]).collect();
    assert!(!hot.is_empty(), "no hot row: {}", map.text());
    for &r in &hot {
        assert!(
            map.rows[r].0.starts_with(b"hot#") || map.label(r).is_empty(),
            "{}",
            map.text()
        );
    }
    // Rendered: the brightest cell of a hot row is brighter than every
    // cell of a row that is not hot.
    let svg = map.svg().unwrap();
    let tree = resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default()).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let brightness = |r: usize| -> u32 {
        (0..map.columns.len())
            .map(|c| {
                let ((x0, y0), (x1, y1)) = map.cell_box(r, c);
                let p = pixmap
                    .pixel(((x0 + x1) / 2) as u32, ((y0 + y1) / 2) as u32)
                    .unwrap();
                u32::from(p.red()) + u32::from(p.green()) + u32::from(p.blue())
            })
            .max()
            .unwrap()
    };
    let hottest = hot.iter().map(|&r| brightness(r)).max().unwrap();
    let coldest_max = (0..map.rows.len())
        .filter(|r| !map.hot[*r])
        .map(brightness)
        .max()
        .unwrap();
    assert!(
        hottest > coldest_max + 60,
        "hot {hottest}, others up to {coldest_max}"
    );
    // The outline: red pixels just above the hot row's first cell.
    let ((x0, y0), _) = map.cell_box(hot[0], 0);
    let edge = pixmap
        .pixel((x0 + 2) as u32, (y0 - 1).max(0) as u32)
        .unwrap();
    // Red, and not a color of the scale (purples have as much blue).
    let (r, g, b) = (
        u16::from(edge.red()),
        u16::from(edge.green()),
        u16::from(edge.blue()),
    );
    assert!(r > 150 && r > 2 * g && r > 2 * b, "{edge:?}");

    // The same through the function the shell and `cellar keys` call.
    let out = dir.path().join("t.svg");
    let text = cellar::keys::draw(&store, "t", "rows_written", "1h", &out).unwrap();
    assert!(text.contains("<- hot"), "{text}");
    assert!(std::fs::read_to_string(&out).unwrap().starts_with("<svg"));
    let err = cellar::keys::draw(&store, "t", "heat", "1h", &out).unwrap_err();
    assert!(err.to_string().contains("'heat'"), "{err}");
}

/// The real binary, as a user meets it: `\keys` in the shell and `cellar
/// keys` on the command line each write the heatmap and say where; bad
/// input is named and exits non-zero.
#[test]
fn the_shell_and_the_command_draw_the_heatmap() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(args)
            .current_dir(dir.path())
            .env("HOME", dir.path())
            .output()
            .unwrap()
    };
    let out = run(&[
        "--store",
        store.to_str().unwrap(),
        "-c",
        "CREATE TABLE t (ROW KEY (k TEXT), FAMILY f, v BIGINT IN f)",
        "-c",
        "INSERT INTO t (k, v) SELECT 'k' || CAST(i AS VARCHAR), i FROM generate_series(1, 500) AS g(i)",
        "-c",
        "\\keys t",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("heatmap written to t-keys.svg"), "{stdout}");
    assert!(dir.path().join("t-keys.svg").exists());

    let out = run(&[
        "keys",
        "t",
        "--store",
        store.to_str().unwrap(),
        "-o",
        "w.svg",
        "--since",
        "all",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("t: rows_written per key range"), "{stdout}");
    assert!(
        std::fs::read_to_string(dir.path().join("w.svg"))
            .unwrap()
            .contains("<svg")
    );

    for (args, says) in [
        (
            vec!["keys", "nope", "--store", store.to_str().unwrap()],
            "nope",
        ),
        (
            vec![
                "keys",
                "t",
                "--store",
                store.to_str().unwrap(),
                "--metric",
                "heat",
            ],
            "'heat'",
        ),
        (
            vec![
                "keys",
                "t",
                "--store",
                store.to_str().unwrap(),
                "--since",
                "soon",
            ],
            "'soon'",
        ),
        (
            vec!["keys", "--store", store.to_str().unwrap()],
            "needs a table",
        ),
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    }
}
