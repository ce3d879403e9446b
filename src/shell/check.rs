//! `cellar check [--repair]`: what is damaged in a store, by table and
//! family; with `--repair`, a journal that stops the store from opening is
//! cut after its last intact write.

use std::path::Path;

/// Prints a line of the report; a closed stdout (`cellar check | head`)
/// ends the output, not the check.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

use crate::error::Error;
use crate::store::journal;
use crate::store::{CheckReport, FjallStore};

/// Checks the store in `dir` and prints the report; returns whether the
/// store is healthy (false also after a repair: something was lost).
pub fn run(dir: &Path, repair: bool) -> bool {
    if !dir.exists() {
        eprintln!("error: there is no store at {}", dir.display());
        return false;
    }
    // What an open would replay, read before this one opens the store.
    let replay = match crate::store::clean_close::is_clean(dir) {
        Ok(true) => Some(0),
        _ => journal::survey(dir)
            .ok()
            .map(|js| js.iter().map(|j| j.valid_end).sum::<u64>()),
    };
    let (store, repaired) = match FjallStore::open(dir) {
        Ok(s) => (s, false),
        Err(e) => match open_repaired(dir, &e, repair) {
            Some(store) => (store, true),
            None => return false,
        },
    };
    let report = match store.check() {
        Ok(r) => r,
        Err(e) => {
            say!("store {}: the check failed: {e}", dir.display());
            return false;
        }
    };
    print_report(dir, replay, &store, &report);
    let healthy = report.healthy() && !repaired;
    say!(
        "{}",
        if repaired && report.healthy() {
            "repaired; no other damage found"
        } else if healthy {
            "no damage found"
        } else {
            "damage found (see above)"
        }
    );
    // A clean close, so that the next open replays nothing.
    if let Err(e) = store.checkpoint() {
        say!("  could not write the store out on closing: {e}");
    }
    healthy
}

/// After the open failed with `e`: says so, and with `repair` repairs what
/// cellar can (a damaged journal, the format marker) and opens the store
/// again; `None` when there is nothing to repair or it stays closed.
fn open_repaired(dir: &Path, e: &Error, repair: bool) -> Option<FjallStore> {
    say!("store {}: cannot be opened", dir.display());
    say!("  {e}");
    // Only a journal the engine refused is cut, never a store that
    // is in use or damaged elsewhere.
    if !repair {
        return None;
    }
    if matches!(e, Error::StoreDamaged { .. }) {
        match crate::store::repair_version_marker(dir) {
            Ok(true) => {
                say!("  repaired: rewrote the format marker file `version`");
            }
            Ok(false) => {
                say!("  --repair: cellar cannot rebuild that file; nothing was changed");
                return None;
            }
            Err(e) => {
                say!("  --repair failed: {e}");
                return None;
            }
        }
    } else if !matches!(e, Error::JournalDamaged { .. }) {
        say!("  --repair: nothing to repair for that; nothing was changed");
        return None;
    } else {
        match journal::repair(dir) {
            Ok(report) if report.actions.is_empty() => {
                say!("  --repair: no journal reads as damaged; nothing was changed");
                return None;
            }
            Ok(report) => {
                for action in &report.actions {
                    say!("  repaired {action}");
                }
            }
            Err(e) => {
                say!("  --repair failed: {e}");
                return None;
            }
        }
    }
    match FjallStore::open(dir) {
        Ok(s) => Some(s),
        Err(e) => {
            say!("  still cannot be opened after the repair: {e}");
            None
        }
    }
}

/// Prints what the check found, table by table.
fn print_report(dir: &Path, replay: Option<u64>, store: &FjallStore, report: &CheckReport) {
    say!("store {}", dir.display());
    match replay {
        Some(0) => say!("  journal: an open replays nothing (closed cleanly)"),
        Some(bytes) => say!(
            "  journal: an open replays {bytes} bytes (not closed cleanly; a clean close of this check retires them)"
        ),
        None => {}
    }
    for note in store.recovery_notes() {
        say!("  {note}");
    }
    for (table, reason) in &report.damaged_tables {
        say!("  table {table}: DAMAGED: {reason}");
        say!("    it cannot be read or written; DROP TABLE {table} removes it");
    }
    for (damage, owner) in &report.files {
        let owner = owner.as_deref().unwrap_or("owner unknown");
        say!("  file {damage} ({owner}): DAMAGED");
    }
    for aside in &report.set_aside {
        say!(
            "  set aside: {} because {} (see {}.txt)",
            aside.dir.display(),
            aside.reason,
            aside.dir.display()
        );
    }
    for (table, families) in &report.tables {
        say!("  table {table}");
        for f in families {
            let state = if f.healthy() { "ok" } else { "DAMAGED" };
            let (what, unit) = match f.blocks {
                true => (", blocks", "rows"),
                false => ("", "cells"),
            };
            say!(
                "    family {} ({}{what}): {state}, {} {unit} read",
                f.family,
                f.keyspace,
                f.cells
            );
            if f.bad_keys > 0 && f.blocks {
                say!(
                    "      {} blocks are damaged (first: {})",
                    f.bad_keys,
                    f.first_bad_key.as_deref().unwrap_or("?")
                );
            } else if f.bad_keys > 0 {
                say!(
                    "      {} cells have keys that are not cell keys (first: {})",
                    f.bad_keys,
                    f.first_bad_key.as_deref().unwrap_or("?")
                );
            }
            if let Some(e) = &f.error {
                say!("      reading stopped at a damaged block: {e}");
                say!(
                    "      cells after it are unreadable; copy what reads (COPY or INSERT ... SELECT) before dropping the family"
                );
            }
        }
    }
}
