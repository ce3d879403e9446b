//! `cellar check`: what is damaged in a store, by table and family.

use std::path::Path;

use crate::Store;

/// Checks the store in `dir` and prints the report; returns whether the
/// store is healthy.
pub fn run(dir: &Path) -> bool {
    if !dir.exists() {
        eprintln!("error: there is no store at {}", dir.display());
        return false;
    }
    let store = match Store::open(dir) {
        Ok(s) => s,
        Err(e) => {
            println!("store {}: cannot be opened", dir.display());
            println!("  {e}");
            return false;
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
    for (table, reason) in &report.damaged_tables {
        println!("  table {table}: DAMAGED definition: {reason}");
        println!("    its cells cannot be read without it; DROP TABLE {table} removes it");
    }
    for (table, families) in &report.tables {
        println!("  table {table}");
        for f in families {
            let state = if f.healthy() { "ok" } else { "DAMAGED" };
            println!(
                "    family {} ({}): {state}, {} cells read",
                f.family, f.keyspace, f.cells
            );
            if f.bad_keys > 0 {
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
    let healthy = report.healthy();
    println!(
        "{}",
        if healthy {
            "no damage found"
        } else {
            "damage found (see above)"
        }
    );
    healthy
}
