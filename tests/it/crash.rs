//! Crash safety: a child process writes row mutations and reports each one
//! the store acknowledged; the parent kills it with SIGKILL at random
//! moments, reopens the store, and checks that every acknowledged row is
//! there and that no row was ever half-written.
//!
//! The child is this same test binary, re-run with `CELLAR_CRASH_CHILD` set.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cellar::{
    Durability, Error, FamilyFormat, FamilySpec, Mutation, ReadRequest, RowMutation, Store,
    StoreOptions, TableSpec,
};

const FAMILIES: [&str; 3] = ["a", "b", "c"];
const ROUNDS: u64 = 12;

fn options(mode: &str) -> StoreOptions {
    let durability = if mode == "synced" {
        Durability::Synced
    } else {
        Durability::Buffered
    };
    StoreOptions {
        durability,
        ..StoreOptions::default()
    }
}

/// The child's body, run only by the parent (ignored in a normal run, so
/// it is never counted as a passing test).
#[test]
#[ignore = "the writer child of the crash tests; they run it"]
fn crash_child_writer() {
    let (Ok(dir), Ok(mode), Ok(start)) = (
        std::env::var("CELLAR_CRASH_CHILD"),
        std::env::var("CELLAR_CRASH_MODE"),
        std::env::var("CELLAR_CRASH_START"),
    ) else {
        panic!("crash_child_writer runs only as the crash tests' child process");
    };
    let start: u64 = start.parse().expect("start index");
    let store = Store::open_with(&dir, options(&mode)).expect("child opens the store");
    if store.table("t").is_err() {
        let mut spec = TableSpec::new("t");
        // Both formats in one row: a is CELLS, b and c (with the big
        // cell) PACKED, so a crash tests each and their atomicity together.
        for f in FAMILIES {
            let format = if f == "a" {
                FamilyFormat::Cells
            } else {
                FamilyFormat::Packed
            };
            spec = spec.family(FamilySpec::new(f).format(format));
        }
        store.create_table(spec).expect("create table");
    }
    // Meanwhile the PACKED families' rows are merged into blocks, again
    // and again in small steps, so a kill also lands inside a merge.
    let merging = store.clone();
    std::thread::spawn(move || {
        let local = merging.local().expect("embedded store");
        loop {
            for f in ["b", "c"] {
                local.merge_blocks_sized("t", f, 4, 16).expect("merge");
            }
        }
    });
    println!("ready");
    let row = |i: u64| {
        // Every row gets the same payload in every family, plus a big cell
        // so batches span journal writes.
        let payload = format!("{i}").into_bytes();
        let mut muts: Vec<Mutation> = FAMILIES
            .iter()
            .map(|f| Mutation::set_at(*f, "n", 1, payload.clone()))
            .collect();
        muts.push(Mutation::set_at(
            "c",
            "pad",
            1,
            vec![b'x'; 4096 + (i as usize % 8192)],
        ));
        RowMutation::new(format!("row{i:010}"), muts)
    };
    for i in start.. {
        store.mutate_row("t", row(i)).expect("write");
        println!("ack {i}");
        // An older row written again (the same cells): by now it may be
        // in a block, which the new pair shadows.
        if i % 3 == 0 && i >= start + 40 {
            store.mutate_row("t", row(i - 40)).expect("rewrite");
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Checks every row: complete, and every acknowledged row present.
fn verify(dir: &std::path::Path, mode: &str, acked: &[u64]) -> usize {
    let store = Store::open_with(dir, options(mode)).expect("reopen after crash");
    let mut present = std::collections::BTreeSet::new();
    for row in store.read_rows("t", ReadRequest::all()).expect("scan") {
        let row = row.expect("row");
        let key = String::from_utf8(row.key.clone()).expect("utf8 key");
        let i: u64 = key.trim_start_matches("row").parse().expect("row number");
        for f in FAMILIES {
            assert_eq!(
                row.latest(f, b"n"),
                Some(format!("{i}").as_bytes()),
                "row {key} family {f} is incomplete"
            );
        }
        let pad = row
            .latest("c", b"pad")
            .unwrap_or_else(|| panic!("row {key} lost its pad cell"));
        assert_eq!(
            pad.len(),
            4096 + (i as usize % 8192),
            "row {key} has a torn pad cell"
        );
        present.insert(i);
    }
    for i in acked {
        assert!(
            present.contains(i),
            "{mode}: acknowledged row {i} is missing after the crash"
        );
    }
    let report = store.local().expect("embedded").check().expect("check");
    assert!(
        report.healthy(),
        "{mode}: damage after the crash: {report:?}"
    );
    present.len()
}

fn crash_loop(mode: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("{mode}: seed {seed}");
    let mut rng = Rng(seed);
    let mut acked_total = Vec::new();
    let exe = std::env::current_exe().expect("test binary");
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("CELLAR_CRASH_CHILD", dir.path())
            .env("CELLAR_CRASH_MODE", mode)
            .env("CELLAR_CRASH_START", (round * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("child never got ready");
            if line.ends_with("ready") {
                break;
            }
        }
        if round == 0 {
            // While the child holds the store, a second process is refused.
            match Store::open(dir.path()) {
                Err(Error::StoreInUse { .. }) => {}
                other => panic!("second open while the child runs: {:?}", other.map(|_| ())),
            }
        }
        std::thread::sleep(Duration::from_millis(20 + rng.next(250)));
        child.kill().expect("SIGKILL child");
        child.wait().expect("reap child");
        reader.join().expect("reader thread");
        let acks: Vec<u64> = rx
            .try_iter()
            .filter_map(|l| l.strip_prefix("ack ").and_then(|n| n.parse().ok()))
            .collect();
        acked_total.extend(acks);
        let present = verify(dir.path(), mode, &acked_total);
        assert!(present >= acked_total.len());
    }
    let def = Store::open_with(dir.path(), options(mode))
        .and_then(|store| store.table("t"))
        .expect("table");
    assert!(
        def.families
            .iter()
            .all(|f| (f.name == "a") == f.blocks.is_none()),
        "{mode}: the PACKED families were never merged into blocks"
    );
    assert!(
        acked_total.len() as u64 > ROUNDS,
        "{mode}: the child acknowledged only {} rows",
        acked_total.len()
    );
    eprintln!(
        "{mode}: {} rounds, {} acknowledged rows, all present",
        ROUNDS,
        acked_total.len()
    );
}

#[test]
fn synced_writes_survive_sigkill_whole() {
    crash_loop("synced");
}

#[test]
fn buffered_writes_survive_sigkill_whole() {
    crash_loop("buffered");
}

/// A COPY FROM killed with SIGKILL at a random moment leaves only whole
/// rows: every row in the store has all its cells, in both formats, and
/// the load run again completes the table.
#[test]
fn copy_from_killed_leaves_whole_rows() {
    copy_killed(
        "CREATE TABLE t (FAMILY a FORMAT CELLS, FAMILY b FORMAT PACKED, \
         x BIGINT IN a, y BIGINT IN b, z TEXT IN b)",
        "a",
    );
}

/// The same for a load into one family, which the store ingests (writes
/// as sorted tables, no journal): a kill leaves whole batches.
#[test]
fn ingesting_copy_from_killed_leaves_whole_rows() {
    copy_killed(
        "CREATE TABLE t (FAMILY b FORMAT PACKED, x BIGINT IN b, y BIGINT IN b, z TEXT IN b)",
        "b",
    );
}

fn copy_killed(create: &str, x_family: &str) {
    const ROWS: u64 = 200_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("rows.csv");
    let mut text = String::from("_key,x,y,z\n");
    for i in 0..ROWS {
        text.push_str(&format!("k{i:07},{i},{},v{i}\n", i * 2));
    }
    std::fs::write(&csv, text).expect("write csv");
    let store_dir = dir.path().join("store");
    let cellar = |sql: &str| {
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .arg("--store")
            .arg(&store_dir)
            .args(["-c", sql])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cellar")
    };
    let created = cellar(create).wait().expect("create");
    assert!(created.success());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("copy crash: seed {seed}");
    let mut rng = Rng(seed);
    let copy = format!("COPY t FROM '{}'", csv.display());
    let mut seen = Vec::new();
    for _ in 0..4 {
        // Killed at a random moment after its first write (opening a store
        // with a long journal takes a while in a debug build).
        let before = dir_size(&store_dir);
        let mut child = cellar(&copy);
        let deadline = Instant::now() + Duration::from_secs(60);
        while dir_size(&store_dir) == before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.next(800)));
        let _ = child.kill();
        child.wait().expect("reap child");
        seen.push(verify_copied(&store_dir, x_family));
    }
    let finished = cellar(&copy).wait().expect("last copy");
    assert!(finished.success());
    assert_eq!(verify_copied(&store_dir, x_family), ROWS);
    eprintln!("copy crash: rows after each kill {seen:?}, then all {ROWS}");
}

/// The bytes of the files under `dir`.
fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Checks every row of the copied table is whole; the number of rows.
fn verify_copied(dir: &std::path::Path, x_family: &str) -> u64 {
    let store = Store::open(dir).expect("reopen after the kill");
    let int = |v: Option<&[u8]>| i64::from_be_bytes(v.unwrap().try_into().unwrap());
    let mut rows = 0;
    for row in store.read_rows("t", ReadRequest::all()).expect("scan") {
        let row = row.expect("row");
        let key = String::from_utf8(row.key.clone()).expect("utf8 key");
        let i: i64 = key.trim_start_matches('k').parse().expect("row number");
        assert_eq!(int(row.latest(x_family, b"x")), i, "row {key}: x");
        assert_eq!(int(row.latest("b", b"y")), 2 * i, "row {key}: y");
        assert_eq!(
            row.latest("b", b"z"),
            Some(format!("v{i}").as_bytes()),
            "row {key}: z"
        );
        rows += 1;
    }
    rows
}

/// One step of [`a_dropped_keyspace_is_not_reborn_over_a_new_table`] in a
/// process of its own, which ends without closing the store (as a crash
/// would, its writes synced).
#[test]
#[ignore = "a child of the keyspace-number test; it runs it"]
fn crash_child_ddl() {
    let (Ok(dir), Ok(step)) = (
        std::env::var("CELLAR_DDL_CHILD"),
        std::env::var("CELLAR_DDL_STEP"),
    ) else {
        panic!("crash_child_ddl runs only as a child of the keyspace-number test");
    };
    let store = Store::open_with(&dir, options("synced")).expect("child opens the store");
    let table_with_row = |name: &str, format: FamilyFormat| {
        store
            .create_table(TableSpec::new(name).family(FamilySpec::new("a").format(format)))
            .expect("create");
        store
            .mutate_row(
                name,
                RowMutation::new(
                    "r",
                    vec![Mutation::set_at("a", "q", 1, name.as_bytes().to_vec())],
                ),
            )
            .expect("write");
    };
    match step.as_str() {
        // The newest keyspaces dropped, the newest first: a PACKED
        // family merged into blocks has a row keyspace newer than its
        // blocks' (the merge gives it a fresh one).
        "drop" => {
            table_with_row("keep", FamilyFormat::Cells);
            table_with_row("gone", FamilyFormat::Packed);
            store
                .local()
                .expect("embedded")
                .merge_blocks("gone", "a")
                .expect("merge");
            store.drop_table("gone").expect("drop");
        }
        "open" => {}
        "create" => table_with_row("fresh", FamilyFormat::Cells),
        other => panic!("no step {other}"),
    }
    std::process::exit(0);
}

/// fjall gave a deleted keyspace's number to the next keyspace created
/// two opens later, whose entries the deletion's tombstones then hid: the
/// open after that deleted the new table's data (or panicked on its
/// options, as the synced crash test once did). Each step here is a
/// process that ends without closing the store.
#[test]
fn a_dropped_keyspace_is_not_reborn_over_a_new_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    for step in ["drop", "open", "create", "open"] {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "crash::crash_child_ddl",
                "--ignored",
                "--test-threads=1",
            ])
            .env("CELLAR_DDL_CHILD", dir.path())
            .env("CELLAR_DDL_STEP", step)
            .output()
            .expect("run child");
        assert!(
            out.status.success(),
            "step {step} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let store = Store::open_with(dir.path(), options("synced")).expect("open after the steps");
    for name in ["keep", "fresh"] {
        let rows: Vec<_> = store
            .read_rows(name, ReadRequest::all())
            .unwrap_or_else(|e| panic!("table {name}: {e}"))
            .collect::<Result<_, _>>()
            .expect("rows");
        assert_eq!(rows.len(), 1, "table {name} lost its row");
        assert_eq!(rows[0].latest("a", b"q"), Some(name.as_bytes()));
    }
    assert!(store.table("gone").is_err());
    let report = store.local().expect("embedded").check().expect("check");
    assert!(report.healthy(), "damage: {report:?}");
}
