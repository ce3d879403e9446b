//! A test that cannot run its subject (a tool or environment it needs is
//! missing) never passes silently.

use std::io::Write;

/// Under `CI=true`, fails, saying what is missing and how to get it.
/// Elsewhere prints a `SKIP:` line past the test harness's capture (so it
/// shows even when the test passes) and records it in the file
/// `CELLAR_SKIPS` names, which `scripts/test` counts in its summary.
pub fn skip(test: &str, missing: &str, install: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test}: {missing}, and CI=true requires every test to run: {install}"
    );
    let line = format!("SKIP: {test}: {missing} ({install})\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("CELLAR_SKIPS")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}
