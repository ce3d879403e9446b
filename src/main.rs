//! The `cellar` command line. The interactive shell grows here (issue #4);
//! for now it opens a store and describes its tables.

use std::path::PathBuf;
use std::process::ExitCode;

fn default_store() -> PathBuf {
    std::env::var_os("HOME").map_or_else(
        || PathBuf::from("cellar-data"),
        |home| PathBuf::from(home).join(".local/share/cellar/default"),
    )
}

fn run() -> cellar::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut store_dir = default_store();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--store" => {
                store_dir = args.next().map(PathBuf::from).ok_or_else(|| {
                    cellar::Error::InvalidArgument("--store needs a directory".into())
                })?
            }
            "--version" | "-V" => {
                println!("cellar {}", env!("CARGO_PKG_VERSION"));
                return Ok(());
            }
            "--help" | "-h" => {
                println!(
                    "usage: cellar [--store DIR]\n\nOpens the store (default {}) and describes its tables.",
                    default_store().display()
                );
                return Ok(());
            }
            other => {
                return Err(cellar::Error::InvalidArgument(format!(
                    "unknown argument {other:?}; try --help"
                )));
            }
        }
    }
    std::fs::create_dir_all(&store_dir)?;
    let store = cellar::Store::open(&store_dir)?;
    println!("store {}", store_dir.display());
    for name in store.list_tables() {
        let def = store.table(&name)?;
        let families: Vec<String> = def
            .families
            .iter()
            .map(|f| format!("{} (gc: {})", f.name, f.gc))
            .collect();
        println!("  {name}: {}", families.join(", "));
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
