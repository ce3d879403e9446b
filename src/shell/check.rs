//! `cellar check [--repair]`: what is damaged in a store, by table and
//! family; with `--repair`, a journal that stops the store from opening is
//! cut after its last intact write.

use std::path::Path;

use crate::Error;
use crate::store::FjallStore;
use crate::store::journal;

/// Checks the store in `dir` and prints the report; returns whether the
/// store is healthy (false also after a repair: something was lost).
pub fn run(dir: &Path, repair: bool) -> bool {
    if !dir.exists() {
        eprintln!("error: there is no store at {}", dir.display());
        return false;
    }
    let mut repaired = false;
    let store = match FjallStore::open(dir) {
        Ok(s) => s,
        Err(e) => {
            println!("store {}: cannot be opened", dir.display());
            println!("  {e}");
            // Only a journal the engine refused is cut, never a store that
            // is in use or damaged elsewhere.
            if !repair {
                return false;
            }
            if matches!(e, Error::StoreDamaged { .. }) {
                match crate::store::repair_version_marker(dir) {
                    Ok(true) => {
                        println!("  repaired: rewrote the format marker file `version`");
                        repaired = true;
                    }
                    Ok(false) => {
                        println!(
                            "  --repair: cellar cannot rebuild that file; nothing was changed"
                        );
                        return false;
                    }
                    Err(e) => {
                        println!("  --repair failed: {e}");
                        return false;
                    }
                }
            } else if !matches!(e, Error::JournalDamaged { .. }) {
                println!("  --repair: nothing to repair for that; nothing was changed");
                return false;
            } else {
                match journal::repair(dir) {
                    Ok(report) if report.actions.is_empty() => {
                        println!("  --repair: no journal reads as damaged; nothing was changed");
                        return false;
                    }
                    Ok(report) => {
                        for action in &report.actions {
                            println!("  repaired {action}");
                        }
                    }
                    Err(e) => {
                        println!("  --repair failed: {e}");
                        return false;
                    }
                }
                repaired = true;
            }
            match FjallStore::open(dir) {
                Ok(s) => s,
                Err(e) => {
                    println!("  still cannot be opened after the repair: {e}");
                    return false;
                }
            }
        }
    };
    let report = match store.check() {
        Ok(r) => r,
        Err(e) => {
            println!("store {}: the check failed: {e}", dir.display());
            return false;
        }
    };
    println!("store {}", dir.display());
    for note in store.recovery_notes() {
        println!("  {note}");
    }
    for (table, reason) in &report.damaged_tables {
        println!("  table {table}: DAMAGED: {reason}");
        println!("    it cannot be read or written; DROP TABLE {table} removes it");
    }
    for (damage, owner) in &report.files {
        let owner = owner.as_deref().unwrap_or("owner unknown");
        println!("  file {damage} ({owner}): DAMAGED");
    }
    for aside in &report.set_aside {
        println!(
            "  set aside: {} because {} (see {}.txt)",
            aside.dir.display(),
            aside.reason,
            aside.dir.display()
        );
    }
    for (table, families) in &report.tables {
        println!("  table {table}");
        for f in families {
            let state = if f.healthy() { "ok" } else { "DAMAGED" };
            let (what, unit) = match f.blocks {
                true => (", blocks", "rows"),
                false => ("", "cells"),
            };
            println!(
                "    family {} ({}{what}): {state}, {} {unit} read",
                f.family, f.keyspace, f.cells
            );
            if f.bad_keys > 0 && f.blocks {
                println!(
                    "      {} blocks are damaged (first: {})",
                    f.bad_keys,
                    f.first_bad_key.as_deref().unwrap_or("?")
                );
            } else if f.bad_keys > 0 {
                println!(
                    "      {} cells have keys that are not cell keys (first: {})",
                    f.bad_keys,
                    f.first_bad_key.as_deref().unwrap_or("?")
                );
            }
            if let Some(e) = &f.error {
                println!("      reading stopped at a damaged block: {e}");
                println!(
                    "      cells after it are unreadable; copy what reads (COPY or INSERT ... SELECT) before dropping the family"
                );
            }
        }
    }
    let healthy = report.healthy() && !repaired;
    println!(
        "{}",
        if repaired && report.healthy() {
            "repaired; no other damage found"
        } else if healthy {
            "no damage found"
        } else {
            "damage found (see above)"
        }
    );
    healthy
}
