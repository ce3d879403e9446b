//! Runs every `sql/*.slt` file against its own fresh store, twice: once
//! as written (families are AUTO, the default, unless they say otherwise,
//! and the store's background compaction folds their cells into blocks
//! every few milliseconds, so reads meet rows folded, half folded and
//! not) and once with every family's format turned (`FORMAT PACKED` in
//! the SQL becomes CELLS, CELLS becomes AUTO, and a family with no
//! FORMAT is PACKED; the output is turned back), so every format must
//! give the same answers. `--format auto` (as written) or `--format packed`
//! runs one pass only.
//!
//!
//! Files under `sql/series/` hold series queries whose answers do not
//! depend on the layout: each runs once per layout of [`LAYOUTS`], the
//! layout standing in for `__LAYOUT__` in its SQL.
//!
//! `--backend bigtable` (with `--features bigtable`) runs every file as
//! written against Google's Bigtable emulator instead, each file on an
//! instance of its own, except the files of [`BIGTABLE_SKIPS`], each with
//! the reason. Without the emulator installed it says so and passes.
//! `--backend bigtable-face` runs them the same way on the Bigtable backend
//! over cellar's own Bigtable face (a face over a fresh embedded store per
//! file, with the same skips): the guides' examples through the Bigtable
//! API, answers compared with the embedded store's.
//!
//! `cargo test --test sqllogictest -- --complete` rewrites the expected
//! output of the files from what cellar returns now (review the diff!).
//! A file name filter can follow: `-- battery`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test should fail loudly at the failing call"
)]

use std::path::{Path, PathBuf};
#[cfg(feature = "bigtable")]
use std::sync::Arc;
#[cfg(feature = "bigtable")]
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(feature = "bigtable")]
#[path = "common/emulator.rs"]
mod emulator;
#[cfg(feature = "bigtable")]
#[path = "common/skip.rs"]
mod skip;

use async_trait::async_trait;
use cellar::{FamilyFormat, SessionOptions, SqlSession, Store};
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;
use sqllogictest::{DBOutput, DefaultColumnType};

/// The layouts every file under `sql/series/` runs in.
const LAYOUTS: [&str; 11] = [
    "ROW PER EVENT",
    "ROW PER EVENT REVERSED",
    "ROW PER EVENT SALT 4",
    "BUCKET '1 hour' CELL PER EVENT",
    "BUCKET '15 minutes' CELL PER EVENT REVERSED",
    "BUCKET '1 day' CELL PER EVENT SALT 3",
    "BUCKET '1 week' CELL PER EVENT SALT 2 REVERSED",
    "SERIALIZED",
    "SERIALIZED BUCKET '1 hour' SALT 2 REVERSED",
    "BUCKET '1 hour' COLUMN PER EVENT",
    "BUCKET '1 day' COLUMN PER EVENT SALT 2 REVERSED",
];

/// Files that do not run on Bigtable, and why (what they test is a
/// feature of the embedded store; the Bigtable backend refuses it with an
/// error saying so).
const BIGTABLE_SKIPS: [(&str, &str); 3] = [
    (
        "packed.slt",
        "FORMAT PACKED is a format of the embedded store",
    ),
    (
        "blocks.slt",
        "blocks are PACKED rows merged by the embedded store",
    ),
    (
        "set_format.slt",
        "ALTER ... SET FORMAT PACKED: PACKED is a format of the embedded store",
    ),
];

/// Where a run's stores live.
#[derive(Clone)]
enum Backend {
    /// A fresh embedded store per file.
    Fjall,
    /// A fresh instance per file on the emulator at this endpoint.
    #[cfg(feature = "bigtable")]
    Bigtable(Arc<str>),
    /// The Bigtable backend over cellar's own Bigtable face: a fresh face
    /// over a fresh embedded store per file (the face serves one store
    /// whatever the instance, so files do not share one).
    #[cfg(feature = "bigtable")]
    Face,
}

/// Numbers the Bigtable instances of a run.
#[cfg(feature = "bigtable")]
static INSTANCES: AtomicUsize = AtomicUsize::new(0);

struct CellarDb {
    session: SqlSession,
    /// The pass with every format turned (see [`ROTATION`]).
    swapped: bool,
    /// The layout of a series file's pass.
    layout: Option<&'static str>,
    /// The store's directory; its `files` folder is `__TMP__` in a file.
    dir: tempfile::TempDir,
    /// The Bigtable face the session's store reaches, stopped after it.
    #[cfg(feature = "bigtable")]
    _server: Option<emulator::Emulator>,
}

/// Where `__DATA__` in a file points: tests/data.
fn data_dir() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .display()
        .to_string()
}

/// The formats the second pass gives a family in place of each: every
/// family gets another format than in the first pass (a family with no
/// FORMAT is AUTO in the first and PACKED in the second).
const ROTATION: [(&str, &str); 3] = [("PACKED", "CELLS"), ("CELLS", "AUTO"), ("AUTO", "PACKED")];

/// The format names in `text` (whole words) turned as [`ROTATION`] says,
/// or back (`back`: what the second pass shows, as the first would).
fn rotate_formats(text: &str, back: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let turned = ROTATION.iter().find_map(|&(from, to)| {
            let (from, to) = if back { (to, from) } else { (from, to) };
            (word.as_str() == from).then_some(to)
        });
        out.push_str(turned.unwrap_or(word));
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[derive(Debug)]
struct DbError(String);

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DbError {}

fn cell_text(array: &dyn Array, row: usize) -> String {
    if array.is_null(row) {
        return "NULL".into();
    }
    let options = FormatOptions::default();
    let text = ArrayFormatter::try_new(array, &options)
        .map(|f| f.value(row).to_string())
        .unwrap_or_default();
    if text.is_empty() {
        "(empty)".into()
    } else {
        text
    }
}

fn rows(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for batch in batches {
        for row in 0..batch.num_rows() {
            let cells: Vec<String> = batch
                .columns()
                .iter()
                .map(|c| cell_text(c.as_ref(), row))
                .collect();
            // Multi-line values (plans) become one row per line, indentation
            // shown as dashes so that whitespace normalisation keeps it.
            let height = cells.iter().map(|c| c.lines().count()).max().unwrap_or(1);
            for line in 0..height {
                out.push(
                    cells
                        .iter()
                        .map(|c| {
                            let text =
                                c.lines()
                                    .nth(line)
                                    .unwrap_or(if line == 0 { c } else { "|" });
                            let indent = text.len() - text.trim_start().len();
                            format!("{}{}", "-".repeat(indent), text.trim_start())
                        })
                        .collect(),
                );
            }
        }
    }
    out
}

/// The counters of an EXPLAIN ANALYZE line that do not depend on timing
/// or on the family format: the rows a scan read, the values it decoded
/// and what each operator returned.
/// Everything else in `metrics=[...]` (times, memory, spills) goes.
fn counters_only(line: &str) -> String {
    // (`cells_scanned` counts fjall pairs, which differ between formats.)
    const KEPT: [&str; 4] = [
        "output_rows",
        "rows_scanned",
        "values_decoded",
        "key_misfits",
    ];
    let Some(start) = line.find("metrics=[") else {
        return line.to_string();
    };
    let inner_start = start + "metrics=[".len();
    let Some(len) = line[inner_start..].find(']') else {
        return line.to_string();
    };
    let kept: Vec<&str> = line[inner_start..inner_start + len]
        .split(", ")
        .filter(|m| m.split('=').next().is_some_and(|name| KEPT.contains(&name)))
        .collect();
    format!(
        "{}metrics=[{}]{}",
        &line[..start],
        kept.join(", "),
        &line[inner_start + len + 1..]
    )
}

#[async_trait]
impl sqllogictest::AsyncDB for CellarDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        // Files: `__TMP__` is a folder of this run, `__DATA__` tests/data.
        let tmp = self.dir.path().join("files").display().to_string();
        let data = data_dir();
        let located = sql.replace("__TMP__", &tmp).replace("__DATA__", &data);
        let located = match self.layout {
            Some(layout) => located.replace("__LAYOUT__", layout),
            None => located,
        };
        let swapped_sql;
        let sql = if self.swapped {
            swapped_sql = rotate_formats(&located, false);
            swapped_sql.as_str()
        } else {
            located.as_str()
        };
        let swap = |text: String| {
            // (Plans show paths without their leading slash.)
            let text = text
                .replace(&tmp, "__TMP__")
                .replace(&data, "__DATA__")
                .replace(tmp.trim_start_matches('/'), "__TMP__")
                .replace(data.trim_start_matches('/'), "__DATA__");
            if self.swapped {
                rotate_formats(&text, true)
            } else {
                text
            }
        };
        let batches = self
            .session
            .query(sql)
            .await
            .map_err(|e| DbError(swap(e.to_string())))?;
        let schema = batches.first().map(|b| b.schema());
        let is_statement = sql.split_whitespace().next().is_some_and(|w| {
            ["create", "insert", "delete", "update", "drop", "alter"]
                .contains(&w.to_ascii_lowercase().as_str())
        });
        if is_statement {
            let count = batches
                .first()
                .and_then(|b| b.column_by_name("count"))
                .and_then(|c| {
                    c.as_any()
                        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                        .map(|a| a.value(0))
                })
                .unwrap_or(0);
            return Ok(DBOutput::StatementComplete(count));
        }
        let columns = schema.map_or(0, |s| s.fields().len());
        let analyze = sql
            .trim_start()
            .get(..15)
            .is_some_and(|w| w.eq_ignore_ascii_case("explain analyze"));
        let rows = rows(&batches)
            .into_iter()
            .map(|row| {
                row.into_iter()
                    .map(|cell| if analyze { counters_only(&cell) } else { cell })
                    .map(swap)
                    .collect()
            })
            .collect();
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; columns],
            rows,
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "cellar"
    }
}

fn open(backend: &Backend, swapped: bool, layout: Option<&'static str>) -> CellarDb {
    let dir = tempfile::tempdir().unwrap();
    #[cfg(feature = "bigtable")]
    let mut server = None;
    let store = match backend {
        Backend::Fjall => {
            let options = cellar::StoreOptions {
                background_compaction: Some(std::time::Duration::from_millis(5)),
                ..cellar::StoreOptions::default()
            };
            Store::from(cellar::FjallStore::open_with(dir.path().join("store"), options).unwrap())
        }
        #[cfg(feature = "bigtable")]
        Backend::Bigtable(endpoint) => bigtable_store(endpoint),
        #[cfg(feature = "bigtable")]
        Backend::Face => {
            let face = emulator::Emulator::cellar();
            let store = bigtable_store(&face.endpoint());
            server = Some(face);
            store
        }
    };
    std::fs::create_dir(dir.path().join("files")).unwrap();
    let options = SessionOptions {
        family_format: if swapped {
            FamilyFormat::Packed
        } else {
            FamilyFormat::Auto
        },
        ..SessionOptions::default()
    };
    CellarDb {
        session: SqlSession::with_options(store, options),
        swapped,
        layout,
        dir,
        #[cfg(feature = "bigtable")]
        _server: server,
    }
}

/// A store on a fresh instance of the emulator at `endpoint`.
#[cfg(feature = "bigtable")]
fn bigtable_store(endpoint: &str) -> Store {
    let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
    let instance = format!("projects/slt/instances/run{n}");
    Store::new(Arc::new(
        cellar::BigtableStore::connect(&instance, endpoint).unwrap(),
    ))
}

/// The `.slt` files of `sql/` (or `sql/series/`) whose path holds `filter`.
fn files(folder: &str, filter: Option<&str>) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| filter.is_none_or(|f| p.to_string_lossy().contains(f)))
        .collect();
    files.sort();
    files
}

/// Every run: a file, whether formats are swapped, and its layout.
fn runs(filter: Option<&str>, passes: &[bool]) -> Vec<(PathBuf, bool, Option<&'static str>)> {
    let mut out = Vec::new();
    for file in files("sql", filter) {
        for swapped in passes {
            out.push((file.clone(), *swapped, None));
        }
    }
    for file in files("sql/series", filter) {
        for layout in LAYOUTS {
            for swapped in passes {
                out.push((file.clone(), *swapped, Some(layout)));
            }
        }
    }
    out
}

/// Runs (or, `complete`, writes the output of) one file on a fresh store.
async fn run_one(
    backend: Backend,
    file: &Path,
    swapped: bool,
    layout: Option<&'static str>,
    complete: bool,
) -> Result<(), String> {
    // `skipif`/`onlyif` in a file name the backend by these labels.
    let label = match &backend {
        Backend::Fjall => "fjall",
        #[cfg(feature = "bigtable")]
        Backend::Bigtable(_) => "bigtable",
        #[cfg(feature = "bigtable")]
        Backend::Face => "bigtable-face",
    };
    let mut runner = sqllogictest::Runner::new(move || {
        let backend = backend.clone();
        async move { Ok(open(&backend, swapped, layout)) }
    });
    runner.add_label(label);
    if complete {
        let col_separator = " ";
        let validator = sqllogictest::default_validator;
        runner
            .update_test_file(
                file,
                col_separator,
                validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            )
            .await
            .map_err(|e| e.to_string())
    } else {
        runner
            .run_file_async(file)
            .await
            .map_err(|e| e.display(true).to_string())
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let complete = args.iter().any(|a| a == "--complete");
    let only = args
        .iter()
        .position(|a| a == "--format")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    let backend_name = args
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| args.get(i + 1))
        .map_or("fjall", String::as_str);
    let filter = args
        .iter()
        .enumerate()
        .find(|(i, a)| {
            !a.starts_with('-')
                && (*i == 0 || (args[i - 1] != "--format" && args[i - 1] != "--backend"))
        })
        .map(|(_, a)| a.as_str());
    #[cfg(feature = "bigtable")]
    let mut _emulator = None;
    let backend = match backend_name {
        "fjall" => Backend::Fjall,
        #[cfg(feature = "bigtable")]
        #[cfg(feature = "bigtable")]
        "bigtable-face" => Backend::Face,
        #[cfg(feature = "bigtable")]
        "bigtable" => {
            let Some(running) = emulator::Emulator::start() else {
                return;
            };
            let endpoint = running.endpoint();
            _emulator = Some(running);
            Backend::Bigtable(Arc::from(endpoint))
        }
        other => {
            eprintln!(
                "--backend takes fjall, or bigtable or bigtable-face in a build with --features bigtable; not {other:?}"
            );
            std::process::exit(2);
        }
    };
    let on_bigtable = !matches!(backend, Backend::Fjall);
    let passes: Vec<bool> = match only {
        Some("auto") => vec![false],
        Some("packed") => vec![true],
        _ if complete || on_bigtable => vec![false],
        _ => vec![false, true],
    };
    // Runs are independent (a store of their own, or an instance of
    // their own on the emulator), so as many run at once as there are
    // cores; results are printed in order. Completing writes files, one
    // at a time.
    let jobs = if complete {
        1
    } else {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    };
    let mut completed = Vec::new();
    let mut queue = Vec::new();
    for (file, swapped, layout) in runs(filter, &passes) {
        let pass = if swapped {
            "formats turned"
        } else {
            "as written"
        };
        let name = match layout {
            None => format!("{} ({pass})", file.file_name().unwrap().to_string_lossy()),
            Some(l) => format!(
                "{} ({l}, {pass})",
                file.file_name().unwrap().to_string_lossy()
            ),
        };
        // Completing writes a file's output once, from its first layout.
        if complete && completed.contains(&file) {
            continue;
        }
        let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
        if on_bigtable && let Some((_, why)) = BIGTABLE_SKIPS.iter().find(|(f, _)| *f == file_name)
        {
            println!("skip {name} on Bigtable: {why}");
            continue;
        }
        completed.push(file.clone());
        queue.push((name, file, swapped, layout));
    }
    let outcomes = futures::stream::iter(queue.into_iter().map(|(name, file, swapped, layout)| {
        let backend = backend.clone();
        tokio::spawn(async move {
            let result = run_one(backend, &file, swapped, layout, complete).await;
            (name, result)
        })
    }))
    .buffered(jobs);
    futures::pin_mut!(outcomes);
    let mut failures = Vec::new();
    while let Some(outcome) = outcomes.next().await {
        let (name, result) = outcome.expect("an sqllogictest run panicked");
        match result {
            Ok(()) => println!("ok   {name}"),
            Err(e) => {
                println!("FAIL {name}\n{e}");
                failures.push(name);
            }
        }
    }
    if !failures.is_empty() {
        eprintln!(
            "{} sqllogictest file(s) failed: {}",
            failures.len(),
            failures.join(", ")
        );
        std::process::exit(1);
    }
}
