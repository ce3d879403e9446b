//! Interoperability: the Python ADBC Flight SQL driver (the one analysts
//! use from pandas/polars/DuckDB) against the `cellar serve` binary with a
//! user name and password, a reader from a users file and one directory
//! clients may use for files. `./scripts/test` creates the virtual
//! environment and sets CELLAR_PYTHON; the script itself is
//! tests/python/adbc_interop.py.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

use crate::common;

use std::io::Read;
use std::process::Command;

#[test]
fn python_adbc_driver_works_against_cellar_serve() {
    let Some(python) = std::env::var_os("CELLAR_PYTHON") else {
        crate::skip::skip(
            "flight_python::python_adbc_driver_works_against_cellar_serve",
            "CELLAR_PYTHON (a Python with the ADBC Flight SQL driver) is not set",
            "run ./scripts/test, which sets up the virtual environment",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let password = "horse battery staple";
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "user rita reader rita's password\n").unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let common::Served {
        child: mut server,
        addr,
        banner,
        mut stderr,
    } = common::start(
        Command::new(env!("CARGO_BIN_EXE_cellar"))
            .args(["serve", "--addr", "127.0.0.1:0", "--user", "analyst"])
            .arg("--store")
            .arg(dir.path().join("store"))
            .arg("--password-file")
            .arg(&password_file)
            .arg("--users")
            .arg(&users)
            .arg("--files-dir-rw")
            .arg(&files),
    );
    assert!(banner.contains("user analyst with a password"), "{banner}");
    assert!(
        banner.contains("1 users and 0 tokens of the users file"),
        "{banner}"
    );

    let out = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/adbc_interop.py"
        ))
        .args([
            &format!("grpc://{addr}"),
            "analyst",
            password,
            "rita's password",
        ])
        .arg(&files)
        .arg(dir.path())
        .output()
        .unwrap();
    // SIGTERM stops the server cleanly (it checkpoints the store).
    let pid = server.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let stopped = server.wait().unwrap();
    let mut log = banner.clone();
    stderr.read_to_string(&mut log).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("all ADBC checks passed"),
        "python said:\n{stdout}\n{errors}"
    );
    assert!(
        stopped.success() && log.contains("stopped"),
        "{stopped:?}: {log}"
    );
    // Nothing the server wrote shows the password or a token.
    assert!(!log.contains(password), "{log}");
    assert!(!log.to_lowercase().contains("bearer"), "{log}");
}
