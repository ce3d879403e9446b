//! Runs every `sql/*.slt` file against its own fresh store.
//!
//! `cargo test --test sqllogictest -- --complete` rewrites the expected
//! output of the files from what cellar returns now (review the diff!).
//! A file name filter can follow: `-- battery`.

#![allow(
    clippy::unwrap_used,
    reason = "a test should fail loudly at the failing call"
)]

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use cellar::{SqlSession, Store};
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{DBOutput, DefaultColumnType};

struct CellarDb {
    session: SqlSession,
    _dir: tempfile::TempDir,
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

#[async_trait]
impl sqllogictest::AsyncDB for CellarDb {
    type Error = DbError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DbError> {
        let batches = self
            .session
            .query(sql)
            .await
            .map_err(|e| DbError(e.to_string()))?;
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
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; columns],
            rows: rows(&batches),
        })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "cellar"
    }
}

fn open() -> CellarDb {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    CellarDb {
        session: SqlSession::new(store),
        _dir: dir,
    }
}

fn files(filter: Option<&str>) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| filter.is_none_or(|f| p.to_string_lossy().contains(f)))
        .collect();
    files.sort();
    files
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let complete = args.iter().any(|a| a == "--complete");
    let filter = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .map(String::as_str);
    let mut failures = Vec::new();
    for file in files(filter) {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let mut runner = sqllogictest::Runner::new(|| async { Ok(open()) });
        let result = if complete {
            let col_separator = " ";
            let validator = sqllogictest::default_validator;
            runner
                .update_test_file(
                    &file,
                    col_separator,
                    validator,
                    sqllogictest::default_normalizer,
                    sqllogictest::default_column_validator,
                )
                .await
                .map_err(|e| e.to_string())
        } else {
            runner
                .run_file_async(&file)
                .await
                .map_err(|e| e.display(true).to_string())
        };
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
