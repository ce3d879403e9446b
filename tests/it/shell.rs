//! The `cellar` binary end to end: `-c`, `-f`, standard input, formats,
//! exit codes and one-line errors.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn cellar(store: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env("HOME", store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn commands_files_and_stdin_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let script = dir.path().join("setup.sql");
    std::fs::write(
        &script,
        "-- a comment; with a semicolon\nCREATE TABLE t (ROW KEY (host TEXT, n INT(4)), FAMILY m, v BIGINT IN m);\n\
         INSERT INTO t (host, n, v) VALUES ('a', 1, 10), ('b', 2, 20);\n",
    )
    .unwrap();
    let out = cellar(
        &store,
        &[
            "-f",
            script.to_str().unwrap(),
            "-c",
            "SELECT _key, v FROM t WHERE host = 'b'",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "+-----------------+\n| result          |\n+-----------------+\n| created table t |\n+-----------------+\n\
         +-------+\n| count |\n+-------+\n| 2     |\n+-------+\n\
         +--------+----+\n| _key   | v  |\n+--------+----+\n| b#0002 | 20 |\n+--------+----+\n"
    );

    let out = cellar(
        &store,
        &["--format", "csv"],
        Some("SELECT host, v\nFROM t\nORDER BY host;"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "host,v\na,10\nb,20\n");

    let out = cellar(
        &store,
        &["--format", "ndjson", "-c", "SELECT n FROM t"],
        None,
    );
    assert_eq!(text(&out.stdout), "{\"n\":1}\n{\"n\":2}\n");
}

#[test]
fn the_first_error_stops_with_one_line_and_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = cellar(&store, &[], Some("SELECT 1 AS a; SELEC 2; SELECT 3 AS c;"));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("| a |"));
    assert!(!text(&out.stdout).contains("| c |"), "ran past the error");
    assert_eq!(
        text(&out.stderr),
        "error: syntax error: Expected: an SQL statement, found: SELEC at Line: 1, Column: 1\n"
    );

    let out = cellar(&store, &["-c", "SELECT * FROM missing"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("missing"), "{err}");

    let out = cellar(&store, &["--format", "xml"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown format \"xml\""));
}

#[test]
fn meta_commands_work_in_scripts() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = cellar(
        &store,
        &[],
        Some(
            "\\d\nCREATE TABLE t (FAMILY f GC MAX_VERSIONS 2, v TEXT);\n\\d\n\\format csv\nDESCRIBE t;\n\\nope\n",
        ),
    );
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("no tables yet"), "{stdout}");
    assert!(stdout.contains("\nt: f (gc max versions 2)\n"), "{stdout}");
    assert!(
        stdout.contains("column_name,data_type,kind,detail\n_key,Utf8,row key,"),
        "{stdout}"
    );
    assert_eq!(
        text(&out.stderr),
        "error: unknown command \\nope; \\? lists the commands\n"
    );
}

/// "No rows" is not "no columns": an empty result keeps its header in
/// CSV and TSV, is an empty array in JSON and an empty table in tables.
#[test]
fn empty_results_keep_their_header() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let setup = cellar(
        &store,
        &[
            "-c",
            "CREATE TABLE t (ROW KEY (k TEXT), FAMILY f, n BIGINT IN f)",
            "-c",
            "INSERT INTO t (k, n) VALUES ('a', 1)",
        ],
        None,
    );
    assert_eq!(setup.status.code(), Some(0), "{}", text(&setup.stderr));
    let empty = "SELECT k, n FROM t WHERE k = 'zzz'";
    for (format, expected) in [
        ("csv", "k,n\n"),
        ("tsv", "k\tn\n"),
        ("json", "[]\n"),
        ("ndjson", ""),
        ("table", "+---+---+\n| k | n |\n+---+---+\n+---+---+\n"),
    ] {
        let out = cellar(&store, &["--format", format, "-c", empty], None);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{format}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), expected, "{format}");
    }
    // With rows, unchanged.
    let out = cellar(
        &store,
        &["--format", "csv", "-c", "SELECT k, n FROM t"],
        None,
    );
    assert_eq!(text(&out.stdout), "k,n\na,1\n");
}

#[test]
fn the_demo_fills_its_tables_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("demo");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(args)
            .arg("--store")
            .arg(&store)
            .env("HOME", dir.path())
            .env("CELLAR_DEMO_SMALL", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["demo"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("demo tables written"), "{stdout}");
    assert!(stdout.contains("Try these"), "{stdout}");
    let out = run(&[
        "-c",
        "SELECT count(*) AS n FROM weather WHERE location = 'us-west2'",
        "--format",
        "csv",
    ]);
    assert_eq!(text(&out.stdout), "n\n200\n");
    let out = run(&[
        "demo",
        "-c",
        "SELECT count(*) AS n FROM purchases",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("the demo tables are already here"),
        "{stdout}"
    );
    assert!(stdout.ends_with("n\n1000\n"), "{stdout}");
    // SQL piped in runs after the demo too.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["demo", "--format", "csv", "--store"])
        .arg(&store)
        .env("HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(b"SELECT count(*) AS n FROM purchases;")
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).ends_with("n\n1000\n"),
        "{}",
        text(&out.stdout)
    );
}

/// The interactive shell through a pseudo-terminal (driven by
/// tests/pty/interactive.py): multi-line input, Tab completion of a table
/// and a column, Ctrl-C during a long query and on a half-typed line,
/// Ctrl-D, and the history file.
#[test]
fn interactive_through_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("hist").join("history");
    let out = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/pty/interactive.py"
        ))
        .arg(env!("CARGO_BIN_EXE_cellar"))
        .arg(dir.path().join("store"))
        .arg(&history)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // Nothing was written in the working directory.
    assert!(!std::path::Path::new("history").exists());
}

#[test]
fn bigtable_verbs_output_files_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out_file = dir.path().join("out.csv");
    let script = format!(
        "CREATE TABLE weather (ROW KEY (loc TEXT, n INT(2)), FAMILY m, p BIGINT AS TEXT IN m);\n\
         INSERT INTO weather (loc, n, p, _timestamp) VALUES ('a', 1, 5, '2024-01-01T00:00:00'), ('a', 2, 6, '2024-01-01T00:00:00'), ('b', 1, 7, '2024-01-01T00:00:00');\n\
         \\o {}\n\\format csv\nSELECT _key FROM weather;\n\\o\n\\format table\n\
         \\lookup weather a#01\n\\scan weather a#\n",
        out_file.display()
    );
    let out = cellar(&store, &[], Some(&script));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&out_file).unwrap(),
        "_key\na#01\na#02\nb#01\n"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "a#01\n  m:p                              @ 2024/01/01-00:00:00.000000\n    \"5\"\n"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("2 rows, 2 cells\n"), "{stdout}");

    let out = cellar(&store, &["-c", "SELECT * FROM wheather"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("did you mean weather?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn durability_is_an_option_of_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = cellar(
        &store,
        &[
            "--durability",
            "synced",
            "-c",
            "CREATE TABLE t (FAMILY f, v BIGINT IN f)",
            "-c",
            "INSERT INTO t (_key, v) VALUES ('a', 1)",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = cellar(&store, &["-c", "SELECT v FROM t"], None);
    assert!(text(&out.stdout).contains('1'), "{}", text(&out.stdout));
    let out = cellar(&store, &["--durability", "never"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("synced"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_block_cache_size_is_an_option() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    for size in ["64M", "0"] {
        let out = cellar(
            &store,
            &[
                "--cache-size",
                size,
                "-c",
                "CREATE TABLE IF NOT EXISTS t (FAMILY f, v BIGINT IN f)",
                "-c",
                &format!("INSERT INTO t (_key, v) VALUES ('{size}', 1)"),
                "-c",
                "SELECT count(*) AS n, sum(v) AS s FROM t",
            ],
            None,
        );
        assert!(out.status.success(), "{size}: {}", text(&out.stderr));
    }
    let out = cellar(
        &store,
        &["--format", "csv", "-c", "SELECT sum(v) AS s FROM t"],
        None,
    );
    assert_eq!(text(&out.stdout), "s\n2\n");
    let out = cellar(&store, &["--cache-size", "lots"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--cache-size \"lots\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn serve_refuses_incomplete_options_and_keeps_secrets_off_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cellar"));
        cmd.arg("serve")
            .args(args)
            .env_remove("CELLAR_PASSWORD")
            .env_remove("CELLAR_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let cases: &[(&[&str], &str)] = &[
        (&["--user", "ana"], "--user ana needs a password"),
        (
            &["--tls-cert", "c.pem"],
            "needs both --tls-cert FILE and --tls-key FILE",
        ),
        (&["--addr", "nowhere"], "--addr \"nowhere\""),
        (&["--password", "x"], "not \"--password\""),
        (
            &["--password-file", "/no/such/file"],
            "reading the password file /no/such/file",
        ),
        (&["--store"], "--store needs a value"),
        (&["--durability", "sometimes"], "durability \"sometimes\""),
    ];
    for (args, expected) in cases {
        let out = run(args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = run(&["--token-file", empty.to_str().unwrap()], &[]);
    assert!(
        text(&out.stderr).contains("is empty"),
        "{}",
        text(&out.stderr)
    );
    // An empty password or token in the environment would let anyone in.
    let out = run(&["--user", "ana"], &[("CELLAR_PASSWORD", "")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("CELLAR_PASSWORD is set but empty"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[], &[("CELLAR_TOKEN", "")]);
    assert!(
        text(&out.stderr).contains("CELLAR_TOKEN is set but empty"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--help"], &[]);
    assert!(
        out.status.success() && text(&out.stdout).contains("usage: cellar serve"),
        "{}",
        text(&out.stderr)
    );
    // A password from the environment without a user is refused, unprinted.
    let out = run(&[], &[("CELLAR_PASSWORD", "s3cret-value")]);
    let err = text(&out.stderr);
    assert!(
        err.contains("without --user") && !err.contains("s3cret-value"),
        "{err}"
    );
    // TLS files that are not PEM are named.
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not a certificate").unwrap();
    let store = dir.path().join("store");
    let out = run(
        &[
            "--store",
            store.to_str().unwrap(),
            "--addr",
            "127.0.0.1:0",
            "--tls-cert",
            bad.to_str().unwrap(),
            "--tls-key",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("bad.pem"), "{err}");
}

#[test]
fn type_errors_name_the_value_without_optimizer_noise() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = cellar(
        &store,
        &[
            "-c",
            "CREATE TABLE k (FAMILY f, v BIGINT IN f)",
            "-c",
            "INSERT INTO k (_key, v) VALUES ('a', 'abc')",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("column v (Int64) cannot take 'abc' (row 1 of VALUES)")
            && !err.contains("Optimizer rule"),
        "{err}"
    );
    // From a query, the value is named.
    let out = cellar(
        &store,
        &["-c", "INSERT INTO k (_key, v) SELECT 'b', 'x'"],
        None,
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("'x'") && !err.contains("Optimizer rule"),
        "{err}"
    );
}

/// The end of the data in a store's journal (files are preallocated with
/// zeros).
fn journal_data_end(store: &std::path::Path) -> (std::path::PathBuf, Vec<u8>, usize) {
    let journal = store.join("0.jnl");
    let bytes = std::fs::read(&journal).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    (journal, bytes, end)
}

fn check_store(store: &std::path::Path, repair: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cellar"));
    command.args(["check", "--store"]).arg(store);
    if repair {
        command.arg("--repair");
    }
    command.output().unwrap()
}

/// A store in `dir` with table t holding ('a', 1) and ('b', 2), closed.
fn two_rows(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let store = dir.path().join("store");
    let out = cellar(
        &store,
        &[
            "-c",
            "CREATE TABLE t (FAMILY f, v BIGINT IN f)",
            "-c",
            "INSERT INTO t (_key, v) VALUES ('a', 1), ('b', 2)",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    store
}

/// A write a crash interrupted (an incomplete batch at the journal's end)
/// is dropped by the open, which says so; the next open says nothing.
#[test]
fn a_torn_journal_tail_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_rows(&dir);
    // A torn write: the start of a batch (its 13-byte header and the first
    // 7 bytes of an item), then the preallocated zeros.
    let (journal, mut bytes, end) = journal_data_end(&store);
    let torn: Vec<u8> = bytes[..20].to_vec();
    bytes[end..end + 20].copy_from_slice(&torn);
    std::fs::write(&journal, &bytes).unwrap();
    let out = cellar(&store, &["-c", "SELECT count(*), sum(v) FROM t"], None);
    let err = text(&out.stderr);
    assert!(
        err.contains("note: journal 0.jnl")
            && err.contains(&format!("after byte {end}"))
            && err.contains("not a complete write"),
        "{err}"
    );
    assert!(
        text(&out.stdout).contains("| 2        | 3        |"),
        "{}",
        text(&out.stdout)
    );
    let again = cellar(&store, &["-c", "SELECT count(*) FROM t"], None);
    assert!(
        !text(&again.stderr).contains("journal"),
        "{}",
        text(&again.stderr)
    );
    // --repair never touches a store another process has open.
    let open = cellar::Store::open(&store).unwrap();
    let journal_before = std::fs::read(&journal).unwrap();
    let refused = check_store(&store, true);
    let report = text(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{report}");
    assert!(
        report.contains("in use") && report.contains("nothing was changed"),
        "{report}"
    );
    assert_eq!(std::fs::read(&journal).unwrap(), journal_before);
    assert!(!store.join("damaged-journal").exists());
    drop(open);
}

/// A complete write whose checksum is wrong stops the open: the error names
/// the journal, the byte and the repair; `cellar check --repair` keeps the
/// intact writes, sets the damaged file aside, and the store opens.
#[test]
fn a_damaged_journal_is_named_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_rows(&dir);
    // The last byte of the last write's last item (before its 13-byte end).
    let (journal, mut bytes, end) = journal_data_end(&store);
    bytes[end - 14] ^= 0x55;
    std::fs::write(&journal, &bytes).unwrap();
    let out = cellar(&store, &["-c", "SELECT count(*) FROM t"], None);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("journal 0.jnl is damaged at byte")
            && err.contains("checksum")
            && err.contains("cellar check --repair"),
        "{err}"
    );
    // Without --repair, check reports and changes nothing.
    let checked = check_store(&store, false);
    assert_eq!(checked.status.code(), Some(1));
    assert!(text(&checked.stdout).contains("cannot be opened"));
    assert_eq!(std::fs::read(&journal).unwrap(), bytes);
    // With it, the journal is cut and the original kept aside.
    let repaired = check_store(&store, true);
    let report = text(&repaired.stdout);
    assert_eq!(repaired.status.code(), Some(1), "{report}");
    assert!(
        report.contains("repaired journal 0.jnl: kept its")
            && report.contains("damaged-journal")
            && report.contains("table t"),
        "{report}"
    );
    assert_eq!(
        std::fs::read(store.join("damaged-journal").join("0.jnl")).unwrap(),
        bytes
    );
    let out = cellar(&store, &["-c", "SELECT count(*), sum(v) FROM t"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("| 2        | 3        |"),
        "{}",
        text(&out.stdout)
    );
    let healthy = check_store(&store, false);
    assert!(healthy.status.success(), "{}", text(&healthy.stdout));
}

/// A damaged file of one family: `cellar check` names the table and the
/// family, the other tables stay readable.
#[test]
fn check_reports_a_damaged_family_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let out = cellar(
        &store,
        &[
            "-c",
            "CREATE TABLE big (FAMILY f, v TEXT IN f)",
            "-c",
            "CREATE TABLE small (FAMILY g, v BIGINT IN g)",
            "-c",
            "INSERT INTO big (_key, v) SELECT 'k' || CAST(x AS VARCHAR), repeat(CAST(x AS VARCHAR), 40) FROM generate_series(1, 20000) AS t(x)",
            "-c",
            "INSERT INTO small (_key, v) VALUES ('a', 1), ('b', 2)",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let check = |store: &std::path::Path| check_store(store, false);
    let healthy = check(&store);
    assert!(healthy.status.success(), "{}", text(&healthy.stdout));
    assert!(text(&healthy.stdout).contains("no damage found"));
    // Damage the middle of the largest on-disk table: big's family.
    let mut files: Vec<(u64, std::path::PathBuf)> = Vec::new();
    let mut dirs = vec![store.join("keyspaces")];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.parent().is_some_and(|p| p.ends_with("tables")) {
                files.push((std::fs::metadata(&path).unwrap().len(), path));
            }
        }
    }
    files.sort();
    let (len, largest) = files.pop().unwrap();
    let mut bytes = std::fs::read(&largest).unwrap();
    let middle = usize::try_from(len / 3).unwrap();
    for b in &mut bytes[middle..middle + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&largest, bytes).unwrap();
    let damaged = check(&store);
    let report = text(&damaged.stdout);
    assert_eq!(damaged.status.code(), Some(1), "{report}");
    assert!(
        report.contains("table big") && report.contains("family f (") && report.contains("DAMAGED"),
        "{report}"
    );
    // The file, checked against its checksum, and whose it is.
    let file = largest.strip_prefix(&store).unwrap().display().to_string();
    assert!(
        report.contains(&format!("file {file} does not match the checksum"))
            && report.contains("(table big, family f)"),
        "{report}"
    );
    assert!(
        report.contains("family g (f") && report.contains(": ok"),
        "{report}"
    );
    // The undamaged table still answers.
    let out = cellar(&store, &["-c", "SELECT sum(v) FROM small"], None);
    assert!(text(&out.stdout).contains('3'), "{}", text(&out.stderr));
    // The damaged one says where the damage is.
    let out = cellar(&store, &["-c", "SELECT count(*), max(v) FROM big"], None);
    let err = text(&out.stderr);
    assert!(
        err.contains("table \"big\": stored data is damaged") && err.contains("cellar check"),
        "{err}"
    );
}

/// The segment files under `store`'s keyspaces, largest last.
fn segment_files(store: &std::path::Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut files: Vec<(u64, std::path::PathBuf)> = Vec::new();
    let mut dirs = vec![store.join("keyspaces")];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.parent().is_some_and(|p| p.ends_with("tables")) {
                files.push((std::fs::metadata(&path).unwrap().len(), path));
            }
        }
    }
    files.sort();
    files
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// One table's segment file damaged (trailer flipped, truncated, deleted,
/// or its keyspace's `current` deleted): the store opens, the other table
/// answers, the damaged one names the file and is never silently empty;
/// `cellar check` names the file; the keyspace is set aside, not deleted,
/// and putting it back with the file restored gives the table back.
#[test]
fn one_damaged_segment_file_closes_only_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original");
    let out = cellar(
        &original,
        &[
            "-c",
            "CREATE TABLE big (FAMILY f, v TEXT IN f)",
            "-c",
            "CREATE TABLE small (FAMILY g, v BIGINT IN g)",
            "-c",
            "INSERT INTO big (_key, v) SELECT 'k' || CAST(x AS VARCHAR), repeat(CAST(x AS VARCHAR), 40) FROM generate_series(1, 5000) AS t(x)",
            "-c",
            "INSERT INTO small (_key, v) VALUES ('a', 1), ('b', 2)",
            "-c",
            "COMPACT TABLE big",
            "-c",
            "COMPACT TABLE small",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // big's segment: the largest file; its keyspace directory's id.
    let (_, largest) = segment_files(&original).pop().unwrap();
    let relative = largest.strip_prefix(&original).unwrap().to_path_buf();
    let keyspace_dir = relative.parent().unwrap().parent().unwrap().to_path_buf();
    let id = keyspace_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    type Damage = fn(&std::path::Path, &std::path::Path);
    let cases: [(&str, Damage, &str); 4] = [
        (
            "flipped trailer",
            |_, f| {
                let mut bytes = std::fs::read(f).unwrap();
                let at = bytes.len() - 30;
                bytes[at] ^= 0xff;
                std::fs::write(f, bytes).unwrap();
            },
            "fails its checksum",
        ),
        (
            "truncated",
            |_, f| {
                let file = std::fs::OpenOptions::new().write(true).open(f).unwrap();
                let len = file.metadata().unwrap().len();
                file.set_len(len / 2).unwrap();
            },
            "does not end in a trailer",
        ),
        (
            "deleted",
            |_, f| std::fs::remove_file(f).unwrap(),
            "is missing",
        ),
        (
            "current deleted",
            |ks, _| std::fs::remove_file(ks.join("current")).unwrap(),
            "current is missing",
        ),
    ];
    for (name, damage, says) in cases {
        let store = dir.path().join(name.replace(' ', "-"));
        copy_dir(&original, &store);
        damage(&store.join(&keyspace_dir), &store.join(&relative));
        let out = cellar(
            &store,
            &[
                "-c",
                "SELECT sum(v) FROM small",
                "-c",
                "SELECT count(*) FROM big",
            ],
            None,
        );
        let (stdout, err) = (text(&out.stdout), text(&out.stderr));
        assert!(stdout.contains("| 3 "), "{name}: {stdout}{err}");
        assert!(!out.status.success(), "{name}: big answered: {stdout}");
        let file = if name == "current deleted" {
            keyspace_dir.join("current")
        } else {
            relative.clone()
        };
        let file = file.display().to_string();
        assert!(
            err.contains("table \"big\" cannot be opened")
                && err.contains(&file)
                && err.contains(says)
                && err.contains(&format!("damaged-keyspaces/{id}")),
            "{name}: {err}"
        );
        assert!(
            !err.contains("Storage(") && !err.contains("Unrecoverable"),
            "{err}"
        );
        // check names the file, and the table; the small one is fine.
        let checked = check_store(&store, false);
        let report = text(&checked.stdout);
        assert_eq!(checked.status.code(), Some(1), "{name}: {report}");
        assert!(
            report.contains("table big: DAMAGED")
                && report.contains(&file)
                && report.contains("family g (f")
                && report.contains(": ok"),
            "{name}: {report}"
        );
        // Nothing was deleted: the directory is set aside whole, and
        // putting it back as its note says gives the table back.
        let aside = store.join("damaged-keyspaces").join(&id);
        assert!(aside.is_dir(), "{name}");
        let note =
            std::fs::read_to_string(store.join(format!("damaged-keyspaces/{id}.txt"))).unwrap();
        assert!(note.contains(&file), "{note}");
        let restored = aside.join(relative.strip_prefix(&keyspace_dir).unwrap());
        std::fs::copy(original.join(&relative), restored).unwrap();
        if name == "current deleted" {
            std::fs::copy(
                original.join(&keyspace_dir).join("current"),
                aside.join("current"),
            )
            .unwrap();
        }
        std::fs::remove_file(store.join(&keyspace_dir)).unwrap();
        std::fs::rename(&aside, store.join(&keyspace_dir)).unwrap();
        let out = cellar(&store, &["-c", "SELECT count(*) FROM big"], None);
        assert!(
            text(&out.stdout).contains("| 5000 "),
            "{name}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// Damage to the files of the whole store names the file and what is
/// lost, never the engine's debug text, and changes nothing: cellar's
/// catalog keyspace, fjall's directory of keyspaces, and the format
/// marker, which `cellar check --repair` rewrites.
#[test]
fn damage_to_store_wide_files_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let original = two_rows(&dir);
    let out = cellar(&original, &["-c", "COMPACT TABLE t"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let catalog = dir.path().join("catalog");
    copy_dir(&original, &catalog);
    // cellar's catalog is keyspace 1; its one segment truncated.
    let (_, segment) = segment_files(&catalog)
        .into_iter()
        .find(|(_, p)| p.starts_with(catalog.join("keyspaces/1")))
        .unwrap();
    let before = std::fs::read(&segment).unwrap();
    std::fs::write(&segment, &before[..before.len() / 2]).unwrap();
    for _ in 0..2 {
        let out = cellar(&catalog, &["-c", "SELECT count(*) FROM t"], None);
        let err = text(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("catalog")
                && err.contains("keyspaces/1/tables/")
                && err.contains("does not end in a trailer"),
            "{err}"
        );
        // Not set aside (the store would open empty), not recreated.
        assert!(catalog.join("keyspaces/1/current").is_file());
        assert!(!catalog.join("damaged-keyspaces/1").exists());
    }
    // fjall's directory of keyspaces.
    let meta = dir.path().join("meta");
    copy_dir(&original, &meta);
    let (_, segment) = segment_files(&meta)
        .into_iter()
        .find(|(_, p)| p.starts_with(meta.join("keyspaces/0")))
        .unwrap();
    std::fs::remove_file(&segment).unwrap();
    let out = cellar(&meta, &["-c", "SELECT count(*) FROM t"], None);
    let err = text(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("keyspaces/0/tables/")
            && err.contains("is missing")
            && err.contains("restore")
            && !err.contains("Unrecoverable"),
        "{err}"
    );
    // Every other keyspace is where it was (the catalog is 1).
    let keyspaces = |store: &std::path::Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(store.join("keyspaces"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "0")
            .collect();
        names.sort();
        names
    };
    let kept = keyspaces(&original);
    assert!(
        kept.len() >= 2 && kept.contains(&"1".to_string()),
        "{kept:?}"
    );
    assert_eq!(keyspaces(&meta), kept);
    // The format marker: named, and rewritten by --repair.
    let marker = dir.path().join("marker");
    copy_dir(&original, &marker);
    std::fs::remove_file(marker.join("version")).unwrap();
    let out = cellar(&marker, &["-c", "SELECT count(*) FROM t"], None);
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains("version is missing") && err.contains("--repair"),
        "{err}"
    );
    let repaired = check_store(&marker, true);
    let report = text(&repaired.stdout);
    assert!(report.contains("rewrote the format marker"), "{report}");
    let out = cellar(&marker, &["-c", "SELECT sum(v) FROM t"], None);
    assert!(text(&out.stdout).contains("| 3 "), "{}", text(&out.stderr));
}

#[test]
fn external_tables_and_views_are_listed_for_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let csv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/readings.csv");
    let out = cellar(
        &store,
        &[
            "-c",
            &format!(
                "CREATE EXTERNAL TABLE r STORED AS CSV LOCATION '{}'",
                csv.display()
            ),
            "-c",
            "CREATE VIEW v AS SELECT sensor FROM r",
            "-c",
            "\\d",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("r: external table of this session")
            && listed.contains("v: view of this session"),
        "{listed}"
    );
    // A session's tables are not written to the store.
    let out = cellar(&store, &["-c", "\\d"], None);
    assert!(
        text(&out.stdout).contains("no tables yet"),
        "{}",
        text(&out.stdout)
    );
    // A series says its layout.
    let out = cellar(
        &store,
        &[
            "-c",
            "CREATE SERIES s (KEY (k TEXT), TIME ts, v DOUBLE) LAYOUT BUCKET '1 day' CELL PER EVENT SALT 2",
            "-c",
            "\\d",
        ],
        None,
    );
    assert!(
        text(&out.stdout).contains(
            "s: series, LAYOUT BUCKET '1 day' CELL PER EVENT SALT 2; measurements (gc keep all)"
        ),
        "{}",
        text(&out.stdout)
    );
}

/// Every demo table, exported with COPY TO (every version of every cell,
/// through `versions`) as Parquet and as CSV and loaded with COPY FROM
/// into a fresh store holding the same tables emptied, comes back cell for
/// cell, timestamps included.
#[test]
fn demo_tables_round_trip_through_copy() {
    let dir = tempfile::tempdir().unwrap();
    let run = |store: &std::path::Path, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(args)
            .arg("--store")
            .arg(store)
            .env("HOME", dir.path())
            .env("CELLAR_DEMO_SMALL", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let source = dir.path().join("source");
    run(&source, &["demo"]);
    let tables: Vec<String> = run(
        &source,
        &[
            "--format",
            "csv",
            "-c",
            "SELECT table_name FROM information_schema.tables \
             WHERE table_schema = 'public' ORDER BY 1",
        ],
    )
    .lines()
    .skip(1)
    .map(str::to_string)
    .collect();
    // The guides' eight tables and the two of the click workload.
    assert_eq!(tables.len(), 10, "{tables:?}");
    let cells = |store: &std::path::Path, table: &str| {
        run(
            store,
            &[
                "--format",
                "csv",
                "-c",
                &format!(
                    "SELECT family, _key, qualifier, _timestamp, value FROM cells('{table}') \
                     ORDER BY family, _key, qualifier, _timestamp"
                ),
            ],
        )
    };
    for format in ["parquet", "csv"] {
        let target = dir.path().join(format!("target-{format}"));
        run(&target, &["demo"]);
        for t in &tables {
            let file = dir.path().join(format!("{t}.{format}"));
            let file = file.display();
            // A table exports every version of its cells; the series
            // (weather) its events, which is what it loads.
            let export = if t == "weather" {
                format!("COPY (SELECT * FROM {t}) TO '{file}'")
            } else {
                format!("COPY (SELECT * FROM versions('{t}')) TO '{file}'")
            };
            run(&source, &["-c", &export]);
            run(
                &target,
                &[
                    "-c",
                    &format!("DELETE FROM {t}"),
                    "-c",
                    &format!("COPY {t} FROM '{file}'"),
                ],
            );
            let (before, after) = (cells(&source, t), cells(&target, t));
            assert!(before.lines().count() > 1, "{t} has cells");
            assert!(before == after, "{t} through {format} differs");
        }
    }
}

/// Whatever is under `dir`, as paths relative to it.
fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out
}

/// A query over the memory limit spills under `--spill-dir`, in a
/// directory of the process's own; none is left behind when the shell
/// ends on an error, a timeout or SIGTERM, and what a killed process left
/// is removed by the next start.
#[test]
fn spill_files_do_not_outlive_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let spill = dir.path().join("spill");
    // What a killed cellar left (no process has such a PID).
    std::fs::create_dir_all(spill.join("4000000000-1/datafusion-x")).unwrap();
    std::fs::write(spill.join("4000000000-1/datafusion-x/a.arrow"), b"x").unwrap();
    let spilling = "SELECT x % 3000000 AS g, count(*) FROM generate_series(1, 40000000) AS t(x) \
                    GROUP BY g ORDER BY 2 DESC, 1 LIMIT 1";
    let spill_arg = spill.to_str().unwrap();
    // Stopped by the timeout while spilling: an error exit.
    let out = cellar(
        &store,
        &[
            "--spill-dir",
            spill_arg,
            "--memory-limit",
            "40M",
            "--query-timeout",
            "3s",
            "-c",
            spilling,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("query timeout"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(listing(&spill), Vec::<String>::new());

    // SIGTERM while it spills.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .arg("--store")
        .arg(&store)
        .args([
            "--spill-dir",
            spill_arg,
            "--memory-limit",
            "40M",
            "-c",
            spilling,
        ])
        .env("HOME", &store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    // Wait until it has spilled something (or a while).
    while started.elapsed() < std::time::Duration::from_secs(20)
        && !listing(&spill).iter().any(|p| p.matches('/').count() >= 2)
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        listing(&spill).iter().any(|p| p.matches('/').count() >= 2),
        "the query spilled: {:?}",
        listing(&spill)
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(listing(&spill), Vec::<String>::new());
}
