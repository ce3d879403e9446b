//! Batches from outside (a file, a Flight client) made into a table's
//! view: columns matched by name, in the view's order and types. A value
//! that does not convert makes its row bad, with the column and the value
//! named; a column the table does not have fails the whole write before
//! anything is written.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast, cast_with_options};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::encode::BadRow;
use crate::error::Error;
use crate::query::view::{ColumnSource, Layout};

/// Where each view column comes from in a batch of `schema`: the index
/// of the source column, if any. `source` names the input in errors.
pub(crate) fn column_map(
    layout: &Layout,
    schema: &Schema,
    source: &str,
) -> crate::error::Result<Vec<Option<usize>>> {
    let view = &layout.arrow;
    let mut map: Vec<Option<usize>> = vec![None; view.fields().len()];
    for (i, field) in schema.fields().iter().enumerate() {
        let name = field.name();
        let exact = view.index_of(name).ok();
        let folded = || {
            let matches: Vec<usize> = view
                .fields()
                .iter()
                .enumerate()
                .filter(|(_, f)| f.name().eq_ignore_ascii_case(name))
                .map(|(j, _)| j)
                .collect();
            (matches.len() == 1).then(|| matches[0])
        };
        let Some(at) = exact.or_else(folded) else {
            let columns: Vec<&str> = view.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::InvalidArgument(format!(
                "column {name:?} of {source} is not a column of table {}; its columns are {} \
                 (rename the column, or load through INSERT INTO {} SELECT ... FROM the file)",
                layout.table,
                columns.join(", "),
                layout.table
            )));
        };
        if let Some(other) = map[at] {
            return Err(Error::InvalidArgument(format!(
                "columns {:?} and {name:?} of {source} both name column {} of table {}",
                schema.field(other).name(),
                view.field(at).name(),
                layout.table
            )));
        }
        map[at] = Some(i);
    }
    Ok(map)
}

/// `batch` as the view's columns and types; rows holding a value that
/// does not convert are returned as bad (their other columns stay). The
/// one exception: a `_key` given as string views (what Parquet files are
/// read as) stays so, for the encoder reads them as they are (copying a
/// load's keys into another array cost a few percent of it).
pub(crate) fn conform(
    layout: &Layout,
    batch: &RecordBatch,
    map: &[Option<usize>],
) -> crate::error::Result<(RecordBatch, Vec<BadRow>)> {
    let view = &layout.arrow;
    let rows = batch.num_rows();
    let mut bad = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(view.fields().len());
    let mut fields: Vec<Arc<Field>> = view.fields().iter().cloned().collect();
    for (at, (field, source)) in view.fields().iter().zip(map).enumerate() {
        let array = match source {
            None => new_null_array(field.data_type(), rows),
            Some(i) if is_key_view(layout, at, batch.column(*i)) => {
                let array = Arc::clone(batch.column(*i));
                fields[at] = Arc::new(field.as_ref().clone().with_data_type(DataType::Utf8View));
                array
            }
            Some(i) => convert(batch.column(*i), field, &mut bad)?,
        };
        columns.push(array);
    }
    bad.sort_by_key(|(row, _)| *row);
    bad.dedup_by_key(|(row, _)| *row);
    let schema = match fields.iter().zip(view.fields()).all(|(a, b)| a == b) {
        true => Arc::clone(view),
        false => Arc::new(Schema::new(fields)),
    };
    let batch = RecordBatch::try_new(schema, columns)
        .map_err(|e| Error::Internal(format!("conformed batch: {e}")))?;
    Ok((batch, bad))
}

/// Whether view column `at` is `_key`, given as string views.
fn is_key_view(layout: &Layout, at: usize, array: &ArrayRef) -> bool {
    matches!(layout.sources.get(at), Some(ColumnSource::Key))
        && array.data_type() == &DataType::Utf8View
}

/// One column converted to its view type.
fn convert(
    array: &ArrayRef,
    field: &Field,
    bad: &mut Vec<BadRow>,
) -> crate::error::Result<ArrayRef> {
    let target = field.data_type();
    if array.data_type() == target {
        return Ok(Arc::clone(array));
    }
    let text = matches!(
        array.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    if text
        && matches!(
            target,
            DataType::Map(..) | DataType::Struct(_) | DataType::List(_)
        )
    {
        return from_json(array, field, bad);
    }
    if let Ok(converted) = cast_with_options(
        array,
        target,
        &CastOptions {
            safe: false,
            ..Default::default()
        },
    ) {
        return Ok(converted);
    }
    // Some value does not convert: which ones.
    let converted = cast(array, target).map_err(|e| {
        Error::InvalidArgument(format!(
            "column {} is {}, and a {} cannot become one: {e}",
            field.name(),
            target,
            array.data_type()
        ))
    })?;
    let shown = ArrayFormatter::try_new(array.as_ref(), &FormatOptions::default()).ok();
    for row in 0..array.len() {
        if array.is_valid(row) && converted.is_null(row) {
            let value = shown
                .as_ref()
                .map_or_else(String::new, |f| f.value(row).to_string());
            bad.push((
                row,
                Error::InvalidArgument(format!(
                    "column {}: {value:?} is not a {}",
                    field.name(),
                    sql_type(target)
                )),
            ));
        }
    }
    Ok(converted)
}

/// The SQL name of a view type, for errors.
fn sql_type(t: &DataType) -> String {
    match t {
        DataType::Int64 => "BIGINT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Utf8 => "TEXT".into(),
        DataType::Binary => "BYTES".into(),
        DataType::Timestamp(..) => "TIMESTAMP".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        other => other.to_string(),
    }
}

/// A text column holding JSON (a family map as a JSON object, a message
/// as one), as COPY TO writes nested columns into CSV.
fn from_json(
    array: &ArrayRef,
    field: &Field,
    bad: &mut Vec<BadRow>,
) -> crate::error::Result<ArrayRef> {
    let text = cast(array, &DataType::Utf8).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let text = text.as_string::<i32>();
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        field.data_type().clone(),
        true,
    )]));
    let decode = |lines: &[u8], rows: usize| -> Result<ArrayRef, String> {
        let mut decoder = ReaderBuilder::new(Arc::clone(&schema))
            .with_batch_size(rows.max(1))
            .with_strict_mode(true)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        let used = decoder.decode(lines).map_err(|e| e.to_string())?;
        if used != lines.len() {
            return Err("trailing text".into());
        }
        match decoder.flush().map_err(|e| e.to_string())? {
            Some(b) if b.num_rows() == rows => Ok(Arc::clone(b.column(0))),
            _ => Err("not one value".into()),
        }
    };
    let line = |row: usize| -> Vec<u8> {
        let value = if text.is_valid(row) && !text.value(row).trim().is_empty() {
            text.value(row)
        } else {
            "null"
        };
        format!("{{\"v\":{value}}}\n").into_bytes()
    };
    let mut all = Vec::new();
    for row in 0..text.len() {
        all.extend(line(row));
    }
    if let Ok(decoded) = decode(&all, text.len()) {
        return Ok(decoded);
    }
    // Some row does not decode: find which, and leave them NULL.
    let mut parts: Vec<ArrayRef> = Vec::with_capacity(text.len());
    let null = new_null_array(field.data_type(), 1);
    for row in 0..text.len() {
        match decode(&line(row), 1) {
            Ok(one) => parts.push(one),
            Err(why) => {
                bad.push((
                    row,
                    Error::InvalidArgument(format!(
                        "column {}: {:?} is not JSON of its type {} ({why})",
                        field.name(),
                        text.value(row),
                        field.data_type()
                    )),
                ));
                parts.push(Arc::clone(&null));
            }
        }
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    datafusion::arrow::compute::concat(&refs).map_err(|e| Error::Internal(e.to_string()))
}
