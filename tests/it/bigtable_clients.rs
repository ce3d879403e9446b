//! Google's own Bigtable tools and client tests against the binary's
//! Bigtable face (`cellar serve --addr none --bigtable-addr`): `cbt`, a
//! script of Google's Python client (tests/python/bigtable_client.py), and
//! that client's own system tests, compared with Google's emulator.

#![cfg(feature = "bigtable")]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command};

use crate::emulator::Emulator;

/// `cellar serve --addr none --bigtable-addr 127.0.0.1:0` over a new store:
/// the process and the address its banner gives Bigtable clients.
fn serve_bigtable_only(dir: &Path) -> (Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cellar"))
        .args(["serve", "--addr", "none", "--bigtable-addr", "127.0.0.1:0"])
        .arg("--store")
        .arg(dir.join("store"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let host = banner
        .split("BIGTABLE_EMULATOR_HOST=")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no Bigtable address in {banner:?}"))
        .to_string();
    assert!(banner.contains("cellar Bigtable API on"), "{banner}");
    (child, host)
}

/// Google's `cbt` command: a table, families and a GC policy, writes,
/// reads, counts, deletes, through the binary's Bigtable face.
#[test]
fn cbt_works_against_cellar_serve() {
    let Some(cbt) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("cbt"))
            .find(|p| p.is_file())
    }) else {
        crate::skip::skip(
            "bigtable_clients::cbt_works_against_cellar_serve",
            "cbt (Google's Bigtable command) is not installed",
            "install the gcloud SDK's cbt component",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut server, host) = serve_bigtable_only(dir.path());
    let run = |args: &[&str]| {
        let out = Command::new(&cbt)
            .env("BIGTABLE_EMULATOR_HOST", &host)
            .args(["-project", "p", "-instance", "i"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ok = |args: &[&str]| {
        let (success, stdout, stderr) = run(args);
        assert!(success, "cbt {args:?}: {stderr}");
        stdout
    };
    ok(&["createtable", "t"]);
    ok(&["createfamily", "t", "cf"]);
    ok(&["setgcpolicy", "t", "cf", "maxversions=2"]);
    assert!(ok(&["ls"]).lines().any(|l| l == "t"));
    let families = ok(&["ls", "t"]);
    assert!(families.contains("versions() > 2"), "{families}");
    for v in ["a", "b", "c"] {
        ok(&["set", "t", "r1", &format!("cf:q={v}")]);
    }
    ok(&["set", "t", "r2", "cf:q=x", "cf:z=y"]);
    let all = ok(&["read", "t"]);
    // Two versions kept of r1's three.
    assert!(
        all.contains("\"c\"") && all.contains("\"b\"") && !all.contains("\"a\""),
        "{all}"
    );
    let one = ok(&["read", "t", "prefix=r2", "columns=cf:z"]);
    assert!(one.contains("cf:z") && !one.contains("cf:q"), "{one}");
    // start is inclusive, end exclusive; count stops after that many rows;
    // cells-per-column keeps the newest.
    let r1_only = ok(&["read", "t", "start=r1", "end=r2"]);
    assert!(
        r1_only.contains("r1") && !r1_only.contains("r2"),
        "{r1_only}"
    );
    let r2_only = ok(&["read", "t", "start=r2"]);
    assert!(
        !r2_only.contains("r1") && r2_only.contains("r2"),
        "{r2_only}"
    );
    let first = ok(&["read", "t", "count=1"]);
    assert!(first.contains("r1") && !first.contains("r2"), "{first}");
    let newest = ok(&["read", "t", "prefix=r1", "cells-per-column=1"]);
    assert!(
        newest.contains("\"c\"") && !newest.contains("\"b\""),
        "{newest}"
    );
    assert!(ok(&["lookup", "t", "r2"]).contains("\"y\""));
    assert_eq!(ok(&["count", "t"]).trim(), "2");
    ok(&["deleterow", "t", "r1"]);
    assert_eq!(ok(&["count", "t"]).trim(), "1");
    ok(&["deleteallrows", "t"]);
    assert_eq!(ok(&["count", "t"]).trim(), "0");
    let (success, _, stderr) = run(&["read", "nosuch"]);
    assert!(
        !success && stderr.contains("NotFound") && stderr.contains("nosuch"),
        "{stderr}"
    );
    ok(&["deletetable", "t"]);
    assert!(!ok(&["ls"]).lines().any(|l| l == "t"));
    server.kill().unwrap();
    server.wait().unwrap();
}

/// Google's Python client library (`google-cloud-bigtable`) through the
/// binary's Bigtable face: tests/python/bigtable_client.py.
#[test]
fn googles_python_client_works_against_cellar_serve() {
    let Some(python) = std::env::var_os("CELLAR_PYTHON") else {
        crate::skip::skip(
            "bigtable_clients::googles_python_client_works_against_cellar_serve",
            "CELLAR_PYTHON (a Python with google-cloud-bigtable) is not set",
            "run ./scripts/test, which sets up the virtual environment",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut server, host) = serve_bigtable_only(dir.path());
    let out = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/bigtable_client.py"
        ))
        .env("BIGTABLE_EMULATOR_HOST", &host)
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pinned `google-cloud-bigtable`'s own system tests (`tests/system`
/// of its source distribution, which `scripts/test` unpacks and names in
/// `CELLAR_BIGTABLE_SYSTEM_TESTS`) run against Google's emulator and
/// against the binary's face, each suite on a fresh server of each: every
/// test that passes against the emulator passes against cellar, and none
/// fails or errs against cellar. Left out, for both servers:
/// `tests/system/cross_sync` (it tests the library's code generator and
/// talks to no server) and `test_table_mutate_rows_retries_timeout` (its
/// calls are mocked in the client; it only waits out a retry deadline),
/// and `tests/system/admin_overlay`, which the library skips whole in
/// emulator mode. The tests both servers skip are the library's own
/// choice in emulator mode (docs/bigtable-server.md lists them).
#[test]
fn googles_python_system_tests_pass_against_cellar_as_against_the_emulator() {
    let (Some(python), Some(suite)) = (
        std::env::var_os("CELLAR_PYTHON"),
        std::env::var_os("CELLAR_BIGTABLE_SYSTEM_TESTS"),
    ) else {
        crate::skip::skip(
            "bigtable_clients::googles_python_system_tests_pass_against_cellar_as_against_the_emulator",
            "CELLAR_PYTHON or CELLAR_BIGTABLE_SYSTEM_TESTS (google-cloud-bigtable's source) is not set",
            "run ./scripts/test, which sets up the virtual environment and the source",
        );
        return;
    };
    let suite = Path::new(&suite);
    let mut totals = (0, 0);
    for dir in ["tests/system/data", "tests/system/v2_client"] {
        let Some(google) = Emulator::start() else {
            return;
        };
        let store = tempfile::tempdir().unwrap();
        let (mut server, host) = serve_bigtable_only(store.path());
        let (on_google, on_cellar) = std::thread::scope(|s| {
            let google = s.spawn(|| pytest(&python, suite, dir, &google.host));
            let cellar = s.spawn(|| pytest(&python, suite, dir, &host));
            (google.join().unwrap(), cellar.join().unwrap())
        });
        server.kill().unwrap();
        server.wait().unwrap();
        assert!(
            on_cellar.failed.is_empty(),
            "{dir}: failed against cellar: {:?}\n{}",
            on_cellar.failed,
            on_cellar.tail
        );
        let missing: Vec<_> = on_google.passed.difference(&on_cellar.passed).collect();
        assert!(
            missing.is_empty(),
            "{dir}: passed against the emulator, not against cellar: {missing:?}\n{}",
            on_cellar.tail
        );
        totals.0 += on_google.passed.len();
        totals.1 += on_cellar.passed.len();
    }
    // The suites ran: 166 pass against the emulator with 2.50.2.
    assert!(totals.0 >= 150 && totals.1 >= totals.0, "{totals:?}");
}

/// What one pytest run reported, by test id.
struct Outcome {
    passed: BTreeSet<String>,
    /// Failed or erred.
    failed: BTreeSet<String>,
    /// The end of its output, for a failure message.
    tail: String,
}

fn pytest(python: &std::ffi::OsStr, suite: &Path, dir: &str, host: &str) -> Outcome {
    let out = Command::new(python)
        .current_dir(suite)
        .args([
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore",
        ])
        .arg(dir)
        .args([
            "--deselect",
            "tests/system/v2_client/test_data_api.py::test_table_mutate_rows_retries_timeout",
        ])
        .env("BIGTABLE_EMULATOR_HOST", host)
        .env("GOOGLE_CLOUD_PROJECT", "p")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut outcome = Outcome {
        passed: BTreeSet::new(),
        failed: BTreeSet::new(),
        tail: {
            let kept: Vec<&str> = stdout
                .lines()
                .filter(|l| !l.starts_with("PASSED"))
                .collect();
            kept[kept.len().saturating_sub(80)..].join("\n")
        },
    };
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("PASSED"), Some(id)) => {
                outcome.passed.insert(id.to_string());
            }
            (Some("FAILED" | "ERROR"), Some(id)) => {
                outcome.failed.insert(id.to_string());
            }
            _ => {}
        }
    }
    // pytest's codes: 0 all passed, 1 some failed; others (none
    // collected, a usage error) mean the suite did not run.
    if !matches!(out.status.code(), Some(0 | 1)) {
        outcome
            .failed
            .insert(format!("pytest {dir} exited with {}", out.status));
    }
    outcome
}
