//! `COPY t FROM 'path' [WITH] [(option value, ...)]`: files into a cellar
//! table through its sink.
//!
//! A path is a file or a directory (its files of the format, in name
//! order). File columns map to the table's columns by name: `_key`, key
//! segments, declared columns, family maps (JSON objects in CSV, maps in
//! Parquet) and `_timestamp`. Options:
//!
//! - `FORMAT csv | parquet | json | arrow | cbt` (default: the extension);
//!   `json` is newline-delimited JSON; `cbt` is `cbt import`'s CSV layout.
//! - `HEADER true | false` (CSV, default true), `DELIMITER ','`.
//! - `ON_ERROR stop | skip`: a bad row stops the load before anything of
//!   its batch is written (default), or is skipped and counted.
//! - `COLUMN_FAMILY f` (cbt files without a family header row),
//!   `TIMESTAMP now | value-encoded` (cbt: `value@micros` cells).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::TableProvider;
use datafusion::common::Result as DfResult;
use datafusion::datasource::file_format::options::{ArrowReadOptions, JsonReadOptions};
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::{CsvReadOptions, DataFrame, ParquetReadOptions, SessionContext};
use futures::StreamExt;

use super::SqlSession;
use crate::query::{RowNames, WriteOptions, WriteProgress};
use crate::schema::{Encoding, TableSchema, decode_as};
use crate::store::{BadRows, BatchFamily, CellBatch, align_down, now_micros};
use crate::{error::Error, query::CellarTable};

/// The formats COPY FROM reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Format {
    Csv,
    Parquet,
    Json,
    Arrow,
    Cbt,
}

impl Format {
    fn named(name: &str) -> crate::error::Result<Format> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "parquet" => Format::Parquet,
            "json" | "ndjson" => Format::Json,
            "arrow" | "ipc" => Format::Arrow,
            "cbt" => Format::Cbt,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "COPY FROM reads FORMAT csv, parquet, json (newline-delimited), arrow or cbt, not {other:?}"
                )));
            }
        })
    }

    /// The format a file's extension says.
    fn of_file(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "csv" | "tsv" => Format::Csv,
            "parquet" => Format::Parquet,
            "json" | "ndjson" | "jsonl" => Format::Json,
            "arrow" | "ipc" | "feather" => Format::Arrow,
            _ => return None,
        })
    }

    /// Whether a file of a directory belongs to a load of this format.
    fn takes(self, path: &Path) -> bool {
        match (self, Format::of_file(path)) {
            (Format::Cbt, Some(f)) => f == Format::Csv,
            (me, Some(f)) => me == f,
            (_, None) => false,
        }
    }
}

/// Where cbt cells get their timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CbtTime {
    Now,
    ValueEncoded,
}

#[derive(Debug)]
struct Options {
    format: Option<Format>,
    header: bool,
    /// `None`: a tab for `.tsv` files, a comma otherwise.
    delimiter: Option<u8>,
    bad: BadRows,
    family: Option<String>,
    time: CbtTime,
}

const KNOWN: &str = "FORMAT, HEADER, DELIMITER, ON_ERROR, COLUMN_FAMILY, TIMESTAMP";

impl Options {
    fn parse(options: &[(String, String)]) -> crate::error::Result<Options> {
        let mut o = Options {
            format: None,
            header: true,
            delimiter: None,
            bad: BadRows::Stop,
            family: None,
            time: CbtTime::Now,
        };
        for (key, value) in options {
            let bad_value = |what: &str| {
                Error::InvalidArgument(format!("COPY option {key} takes {what}, not {value:?}"))
            };
            match key.to_ascii_lowercase().as_str() {
                "format" => o.format = Some(Format::named(value)?),
                "header" | "has_header" | "format.has_header" => {
                    o.header = match value.to_ascii_lowercase().as_str() {
                        "true" | "on" | "1" => true,
                        "false" | "off" | "0" => false,
                        _ => return Err(bad_value("true or false")),
                    }
                }
                "delimiter" | "format.delimiter" => match value.as_bytes() {
                    [b] => o.delimiter = Some(*b),
                    _ if value == "\\t" => o.delimiter = Some(b'\t'),
                    _ => return Err(bad_value("one character")),
                },
                "on_error" => {
                    o.bad = match value.to_ascii_lowercase().as_str() {
                        "stop" | "abort" => BadRows::Stop,
                        "skip" | "ignore" => BadRows::Skip,
                        _ => return Err(bad_value("stop or skip")),
                    }
                }
                "column_family" | "column-family" => o.family = Some(value.clone()),
                "timestamp" => {
                    o.time = match value.to_ascii_lowercase().as_str() {
                        "now" => CbtTime::Now,
                        "value-encoded" | "value_encoded" => CbtTime::ValueEncoded,
                        _ => return Err(bad_value("now or value-encoded")),
                    }
                }
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "COPY FROM has no option {key:?}; its options are {KNOWN}"
                    )));
                }
            }
        }
        Ok(o)
    }
}

/// The bytes of a file, or of a directory's files (0 when unreadable).
pub(crate) fn size_of(path: &str) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The files a path names, with their formats.
fn files(path: &str, format: Option<Format>) -> crate::error::Result<Vec<(PathBuf, Format)>> {
    let at = Path::new(path);
    let meta = std::fs::metadata(at).map_err(|e| {
        Error::InvalidArgument(match e.kind() {
            std::io::ErrorKind::NotFound => format!("file {path:?} does not exist"),
            _ => format!("cannot read {path:?}: {e}"),
        })
    })?;
    if !meta.is_dir() {
        let format = format.or_else(|| Format::of_file(at)).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "cannot tell the format of {path:?} from its name; say (FORMAT csv), parquet, json, arrow or cbt"
            ))
        })?;
        return Ok(vec![(at.to_path_buf(), format)]);
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(at)? {
        let entry = entry?;
        let p = entry.path();
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.') || n.starts_with('_'));
        if hidden || !entry.file_type()?.is_file() {
            continue;
        }
        let take = match format {
            Some(f) => f.takes(&p).then_some(f),
            None => Format::of_file(&p),
        };
        if let Some(f) = take {
            found.push((p, f));
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "directory {path:?} holds no {} files",
            match format {
                Some(Format::Csv | Format::Cbt) => ".csv",
                Some(Format::Parquet) => ".parquet",
                Some(Format::Json) => ".json or .ndjson",
                Some(Format::Arrow) => ".arrow",
                None => ".csv, .parquet, .json or .arrow",
            }
        )));
    }
    Ok(found)
}

/// Runs `COPY table FROM path`; one row: `count` (and with ON_ERROR skip,
/// `skipped` and the first skipped rows' errors).
pub(crate) async fn copy_from(
    session: &SqlSession,
    table: &str,
    path: &str,
    options: &[(String, String)],
    progress: Arc<WriteProgress>,
) -> DfResult<RecordBatch> {
    let o = Options::parse(options)?;
    let target = CellarTable::new(session.store().clone(), table)?;
    let files = files(path, o.format)?;
    // A directory's files one by one: a link among them may lead out of
    // the directories a server allows.
    for (file, _) in &files {
        session.access().files.check(file, super::FileUse::Read)?;
    }
    for (file, format) in &files {
        let shown = file.display().to_string();
        let result = match format {
            Format::Cbt => load_cbt(session, table, file, &o, &progress).await,
            _ => {
                let (frame, names) =
                    read(session, file, *format, &o, Some(&target.schema())).await?;
                let options = WriteOptions {
                    bad: o.bad,
                    names,
                    progress: Arc::clone(&progress),
                    by_name: Some(format!("{shown:?}")),
                };
                target
                    .load(frame.execute_stream().await?, &options)
                    .await
                    .map(|_| ())
            }
        };
        result.map_err(|e| stopped(e, &progress))?;
    }
    let written = progress.written.load(Ordering::Relaxed);
    let mut fields = vec![Field::new("count", DataType::UInt64, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(vec![written]))];
    if o.bad == BadRows::Skip {
        let skipped = progress.skipped.load(Ordering::Relaxed);
        let first = progress
            .first_skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("; ");
        fields.push(Field::new("skipped", DataType::UInt64, false));
        fields.push(Field::new("first_skipped", DataType::Utf8, false));
        columns.push(Arc::new(UInt64Array::from(vec![skipped])));
        columns.push(Arc::new(StringArray::from(vec![first])));
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// A load stopped by a bad row says how much was written before it.
fn stopped(
    e: datafusion::error::DataFusionError,
    progress: &WriteProgress,
) -> datafusion::error::DataFusionError {
    let written = progress.written.load(Ordering::Relaxed);
    match e.find_root() {
        datafusion::error::DataFusionError::External(inner) => {
            match inner.downcast_ref::<Error>() {
                Some(Error::AtRow { at, error }) => Error::AtRow {
                    at: at.clone(),
                    error: Box::new(Error::InvalidArgument(format!(
                        "{error}; nothing of its batch was written{}",
                        if written > 0 {
                            format!(", the {written} rows before that batch were")
                        } else {
                            String::new()
                        }
                    ))),
                }
                .into(),
                _ => e,
            }
        }
        _ => e,
    }
}

/// A context like `ctx` that reads a file as one stream, in the file's
/// order: a file split across partitions would arrive interleaved, naming
/// rows in errors wrongly and handing the store batches whose key ranges
/// overlap (so a load in key order could not be ingested).
fn in_file_order(ctx: &SessionContext) -> SessionContext {
    let state = ctx.state();
    let config = state.config().clone().with_target_partitions(1);
    SessionContext::new_with_state(
        SessionStateBuilder::new_from_existing(state)
            .with_config(config)
            .build(),
    )
}

/// A DataFrame reading one file, and how its rows are named in errors.
async fn read(
    session: &SqlSession,
    file: &Path,
    format: Format,
    o: &Options,
    view: Option<&Schema>,
) -> DfResult<(DataFrame, RowNames)> {
    let ctx = &in_file_order(session.context());
    let path = file.display().to_string();
    let ext = file
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| format!(".{e}"))
        .unwrap_or_default();
    let lines = |first_line| RowNames::Lines {
        file: path.clone(),
        first_line,
    };
    Ok(match format {
        Format::Csv | Format::Cbt => {
            let options = || {
                CsvReadOptions::new()
                    .has_header(o.header)
                    .delimiter(
                        o.delimiter
                            .unwrap_or(if ext == ".tsv" { b'\t' } else { b',' }),
                    )
                    .file_extension(&ext)
            };
            // Every column as text: a value that is not of its column's
            // type is then a bad row with a line number, not a failed read.
            let inferred = ctx.read_csv(&path, options()).await?;
            let text = Schema::new(
                inferred
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| Field::new(f.name(), DataType::Utf8, true))
                    .collect::<Vec<_>>(),
            );
            let frame = ctx.read_csv(&path, options().schema(&text)).await?;
            (frame, lines(if o.header { 2 } else { 1 }))
        }
        Format::Parquet => (
            ctx.read_parquet(&path, ParquetReadOptions::new().file_extension(&ext))
                .await?,
            RowNames::FileRows { file: path.clone() },
        ),
        Format::Json => {
            let options = || JsonReadOptions::default().file_extension(&ext);
            // Objects that are family maps or messages read as such;
            // scalars as inferred, converted (or named bad) later.
            let inferred = ctx.read_json(&path, options()).await?;
            let schema = Schema::new(
                inferred
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| {
                        let nested =
                            view.and_then(|v| v.field_with_name(f.name()).ok())
                                .filter(|v| {
                                    matches!(v.data_type(), DataType::Map(..) | DataType::Struct(_))
                                });
                        match nested {
                            Some(v) => Field::new(f.name(), v.data_type().clone(), true),
                            None => f.as_ref().clone(),
                        }
                    })
                    .collect::<Vec<_>>(),
            );
            (
                ctx.read_json(&path, options().schema(&schema)).await?,
                lines(1),
            )
        }
        Format::Arrow => {
            let options = ArrowReadOptions {
                file_extension: &ext,
                ..Default::default()
            };
            (
                ctx.read_arrow(&path, options).await?,
                RowNames::FileRows { file: path.clone() },
            )
        }
    })
}

/// Loads a file in `cbt import`'s CSV layout: an optional header row of
/// families (each applies to its column and those to its right until the
/// next), a header row of qualifiers, then rows of a key and cells; an
/// empty cell writes nothing. A column declared in the table takes its
/// type (the text is parsed as that type); others take their family's
/// value type.
async fn load_cbt(
    session: &SqlSession,
    table: &str,
    file: &Path,
    o: &Options,
    progress: &Arc<WriteProgress>,
) -> DfResult<()> {
    let path = file.display().to_string();
    let no_header = Options {
        header: false,
        format: None,
        family: None,
        ..*o
    };
    let (frame, _) = read(session, file, Format::Cbt, &no_header, None).await?;
    let mut stream = frame.execute_stream().await?;
    let store = session.store().clone();
    let def = store.table(table)?;
    let schema = TableSchema::of(&def)?;
    let header_rows = if o.family.is_some() { 1 } else { 2 };
    let mut header: Vec<Vec<Option<String>>> = Vec::new();
    let mut columns: Option<Vec<CbtColumn>> = None;
    let mut line = 0u64;
    let now = align_down(now_micros(), store.timestamp_granularity());
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let text: Vec<StringArray> = batch
            .columns()
            .iter()
            .map(|c| cast(c, &DataType::Utf8).map(|a| a.as_string::<i32>().clone()))
            .collect::<Result<_, _>>()?;
        let cell = |c: usize, r: usize| -> Option<&str> {
            let a = &text[c];
            (a.is_valid(r) && !a.value(r).is_empty()).then(|| a.value(r))
        };
        let mut cells = CellBatch::new();
        // Each data column's family, named once per batch.
        let mut families: Vec<BatchFamily> = columns
            .iter()
            .flatten()
            .map(|c| cells.family(&c.family))
            .collect();
        let mut rows = Vec::new();
        for r in 0..batch.num_rows() {
            line += 1;
            if header.len() < header_rows {
                header.push(
                    (0..text.len())
                        .map(|c| cell(c, r).map(str::to_string))
                        .collect(),
                );
                if header.len() == header_rows {
                    let found = cbt_columns(&header, o, &schema, &path)?;
                    families = found.iter().map(|c| cells.family(&c.family)).collect();
                    columns = Some(found);
                }
                continue;
            }
            let Some(columns) = &columns else { continue };
            let at = |error: Error| Error::AtRow {
                at: format!("line {line} of {path:?}"),
                error: Box::new(error),
            };
            let Some(key) = cell(0, r) else {
                let e = at(Error::InvalidArgument(
                    "the row key (first column) is empty".into(),
                ));
                if o.bad == BadRows::Stop {
                    return Err(e.into());
                }
                progress.skipped_row(&e);
                continue;
            };
            cells.begin_row(key.as_bytes());
            let mut failed = None;
            for (c, column) in columns.iter().enumerate() {
                let Some(text) = cell(c + 1, r) else { continue };
                let (value, ts) = match o.time {
                    CbtTime::ValueEncoded => split_timestamp(text),
                    CbtTime::Now => (text, None),
                };
                match column.encode(value) {
                    Ok(bytes) => {
                        let at = ts.unwrap_or(now);
                        cells.set(families[c], column.qualifier.as_bytes(), at, &bytes);
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                cells.discard_row();
                if o.bad == BadRows::Stop {
                    return Err(at(e).into());
                }
                progress.skipped_row(&at(e));
                continue;
            }
            rows.push(line);
        }
        let (store, table_name) = (store.clone(), table.to_string());
        let bad = o.bad;
        let (cells, failed) = tokio::task::spawn_blocking(move || {
            let failed = store.write_batch(&table_name, &cells, bad);
            (cells, failed)
        })
        .await
        .map_err(|e| Error::Internal(format!("cbt load failed: {e}")))?;
        let failed = failed?;
        let written = (cells.len() - failed.len()) as u64;
        for (i, e) in failed {
            let e = Error::AtRow {
                at: format!("line {} of {path:?}", rows[i]),
                error: Box::new(e),
            };
            if o.bad == BadRows::Stop {
                return Err(e.into());
            }
            progress.skipped_row(&e);
        }
        progress.written.fetch_add(written, Ordering::Relaxed);
        progress
            .rows
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
    }
    if columns.is_none() {
        return Err(Error::InvalidArgument(format!(
            "{path:?} has no header rows; the cbt layout starts with a row of families (unless COLUMN_FAMILY is given) and a row of qualifiers"
        )).into());
    }
    Ok(())
}

/// `value@micros` as (value, timestamp); a suffix that is not a number
/// stays part of the value (as `cbt import` reads it).
fn split_timestamp(text: &str) -> (&str, Option<i64>) {
    match text.rsplit_once('@') {
        Some((value, ts)) => match ts.parse::<i64>() {
            Ok(ts) => (value, Some(ts)),
            Err(_) => (text, None),
        },
        None => (text, None),
    }
}

/// One data column of a cbt file.
struct CbtColumn {
    family: String,
    qualifier: String,
    /// How its text becomes a cell value: the declared column's type, or
    /// the family's value type.
    def: crate::schema::ColumnDef,
}

impl CbtColumn {
    fn encode(&self, text: &str) -> crate::error::Result<Vec<u8>> {
        let value =
            decode_as(self.def.value_type, Encoding::Text, text.as_bytes()).map_err(|why| {
                Error::InvalidArgument(format!(
                    "column {}:{}: {text:?} {why}",
                    self.family, self.qualifier
                ))
            })?;
        self.def.encode(&value)
    }
}

/// The (family, qualifier) of each data column from the header rows.
fn cbt_columns(
    header: &[Vec<Option<String>>],
    o: &Options,
    schema: &TableSchema,
    path: &str,
) -> crate::error::Result<Vec<CbtColumn>> {
    let (families, qualifiers) = match (&o.family, header) {
        (Some(_), [qualifiers]) => (None, qualifiers),
        (None, [families, qualifiers]) => (Some(families), qualifiers),
        _ => return Err(Error::Internal("cbt header rows".into())),
    };
    for (n, row) in header.iter().enumerate() {
        if let Some(Some(first)) = row.first() {
            return Err(Error::InvalidArgument(format!(
                "line {} of {path:?} starts with {first:?}: the cbt layout's header rows leave the first (row key) cell empty{}",
                n + 1,
                if o.family.is_none() {
                    "; a file without a family row needs COLUMN_FAMILY"
                } else {
                    ""
                }
            )));
        }
    }
    let mut family = o.family.clone();
    let mut columns = Vec::new();
    for (c, qualifier) in qualifiers.iter().enumerate().skip(1) {
        if let Some(Some(f)) = families.and_then(|fs| fs.get(c)) {
            family = Some(f.clone());
        }
        let Some(family) = family.clone() else {
            return Err(Error::InvalidArgument(format!(
                "column {} of {path:?} has no family: the family row names none at or before it",
                c + 1
            )));
        };
        let qualifier = qualifier.clone().unwrap_or_default();
        let def = match schema
            .columns
            .iter()
            .find(|d| d.family == family && d.qualifier == qualifier)
        {
            Some(d) if d.proto.is_none() => d.clone(),
            Some(d) => {
                return Err(Error::InvalidArgument(format!(
                    "column {family}:{qualifier} of {path:?} is protobuf column {}; load it from Parquet or JSON",
                    d.name
                )));
            }
            None => schema.family_types(&family).value,
        };
        columns.push(CbtColumn {
            family,
            qualifier,
            def,
        });
    }
    Ok(columns)
}
