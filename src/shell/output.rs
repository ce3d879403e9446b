//! Printing results: aligned tables (with a truncation notice), CSV, TSV,
//! JSON and NDJSON. Control characters in text never reach the terminal
//! raw; they print escaped (`\x1b`).

use std::fmt::Write as _;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::escape::escape_text;

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns with borders.
    Table,
    /// One `column: value` line per field, rows separated: for wide rows.
    Vertical,
    /// Comma-separated, with a header.
    Csv,
    /// Tab-separated, with a header.
    Tsv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    Ndjson,
}

impl Format {
    /// Parses a format name.
    pub fn parse(name: &str) -> Option<Format> {
        Some(match name.to_ascii_lowercase().as_str() {
            "table" => Format::Table,
            "vertical" | "expanded" => Format::Vertical,
            "csv" => Format::Csv,
            "tsv" => Format::Tsv,
            "json" => Format::Json,
            "ndjson" | "jsonl" => Format::Ndjson,
            _ => return None,
        })
    }
}

/// The rows of `batches` as strings, at most `max_rows` of them, and the
/// total row count.
/// Header, rows as text, and the total row count.
type Cells = (Vec<String>, Vec<Vec<String>>, usize);

fn cells(batches: &[RecordBatch], max_rows: usize) -> Result<Cells, String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut header = Vec::new();
    if let Some(b) = batches.first() {
        header = b
            .schema()
            .fields()
            .iter()
            .map(|f| escape_text(f.name()))
            .collect();
    }
    let mut rows = Vec::new();
    let mut total = 0;
    for batch in batches {
        total += batch.num_rows();
        if rows.len() >= max_rows {
            continue;
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        for r in 0..batch.num_rows() {
            if rows.len() >= max_rows {
                break;
            }
            rows.push(
                formatters
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, column)| match binary_at(column.as_ref(), r) {
                        Some(bytes) => crate::codec::show_bytes(bytes),
                        None => escape_text(&f.value(r).to_string()),
                    })
                    .collect(),
            );
        }
    }
    Ok((header, rows, total))
}

/// The bytes of a non-NULL binary value, shown escaped (`\x00`) rather
/// than as hex.
fn binary_at(column: &dyn datafusion::arrow::array::Array, row: usize) -> Option<&[u8]> {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::DataType;
    if column.is_null(row) {
        return None;
    }
    match column.data_type() {
        DataType::Binary => Some(column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => Some(column.as_binary::<i64>().value(row)),
        DataType::BinaryView => Some(column.as_binary_view().value(row)),
        _ => None,
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// Formats a result. Tables end with a notice when rows were left out.
pub fn render(batches: &[RecordBatch], format: Format, max_rows: usize) -> Result<String, String> {
    if format == Format::Table
        && let Some(tree) = super::explain::tree(batches)
    {
        return Ok(tree);
    }
    let limit = if matches!(format, Format::Table | Format::Vertical) {
        max_rows
    } else {
        usize::MAX
    };
    let (header, rows, total) = cells(batches, limit)?;
    let mut out = String::new();
    match format {
        Format::Table => {
            if header.is_empty() {
                return Ok(out);
            }
            let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
            for row in &rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = cell.lines().map(width).fold(*w, usize::max);
                }
            }
            let line = |out: &mut String| {
                out.push('+');
                for w in &widths {
                    out.push_str(&"-".repeat(w + 2));
                    out.push('+');
                }
                out.push('\n');
            };
            let print_row = |out: &mut String, row: &[String]| {
                let lines: Vec<Vec<&str>> = row.iter().map(|c| c.split('\n').collect()).collect();
                let height = lines.iter().map(Vec::len).max().unwrap_or(1);
                for i in 0..height {
                    out.push('|');
                    for (w, cell) in widths.iter().zip(&lines) {
                        let part = cell.get(i).copied().unwrap_or("");
                        let _ = write!(out, " {part}{} |", " ".repeat(w - width(part)));
                    }
                    out.push('\n');
                }
            };
            line(&mut out);
            print_row(&mut out, &header);
            line(&mut out);
            for row in &rows {
                print_row(&mut out, row);
            }
            line(&mut out);
        }
        Format::Vertical => {
            let name_width = header.iter().map(|h| width(h)).max().unwrap_or(0);
            for (i, row) in rows.iter().enumerate() {
                let _ = writeln!(out, "-[ row {} ]{}", i + 1, "-".repeat(20));
                for (h, cell) in header.iter().zip(row) {
                    let cell = cell.replace('\n', &format!("\n{} | ", " ".repeat(name_width)));
                    let _ = writeln!(out, "{h}{} | {cell}", " ".repeat(name_width - width(h)));
                }
            }
        }
        Format::Csv | Format::Tsv => {
            let sep = if format == Format::Csv { "," } else { "\t" };
            let quote = |s: &str| {
                if format == Format::Csv && (s.contains([',', '"', '\n']) || s.is_empty()) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            let _ = writeln!(
                out,
                "{}",
                header
                    .iter()
                    .map(|h| quote(h))
                    .collect::<Vec<_>>()
                    .join(sep)
            );
            for row in &rows {
                let _ = writeln!(
                    out,
                    "{}",
                    row.iter().map(|c| quote(c)).collect::<Vec<_>>().join(sep)
                );
            }
        }
        Format::Json | Format::Ndjson => {
            let mut buf = Vec::new();
            if format == Format::Json {
                let mut w = datafusion::arrow::json::ArrayWriter::new(&mut buf);
                for b in batches {
                    w.write(b).map_err(|e| e.to_string())?;
                }
                w.finish().map_err(|e| e.to_string())?;
            } else {
                let mut w = datafusion::arrow::json::LineDelimitedWriter::new(&mut buf);
                for b in batches {
                    w.write(b).map_err(|e| e.to_string())?;
                }
                w.finish().map_err(|e| e.to_string())?;
            }
            out = String::from_utf8_lossy(&buf).into_owned();
            if format == Format::Json && out.is_empty() {
                // No rows: an empty array, so a script tells it from no output.
                out.push_str("[]");
            }
            if format == Format::Json && !out.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    if total > rows.len() && limit != usize::MAX {
        let _ = writeln!(
            out,
            "({} of {total} rows shown; \\maxrows N or --maxrows N shows more)",
            rows.len()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, BinaryArray, Int64Array, StringArray};

    use super::*;

    fn batch() -> RecordBatch {
        let k: ArrayRef = Arc::new(StringArray::from(vec!["a\u{1b}[31m", "b,c"]));
        let v: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), None]));
        let b: ArrayRef = Arc::new(BinaryArray::from(vec![&b"\x00\xff"[..], b"ok"]));
        RecordBatch::try_from_iter(vec![("_key", k), ("v", v), ("raw", b)])
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn tables_align_and_escape() {
        let text = render(&[batch()], Format::Table, 100).unwrap_or_default();
        assert_eq!(
            text,
            "+-----------+------+----------+\n\
             | _key      | v    | raw      |\n\
             +-----------+------+----------+\n\
             | a\\x1b[31m | 1    | \\x00\\xff |\n\
             | b,c       | NULL | ok       |\n\
             +-----------+------+----------+\n"
        );
        let k: ArrayRef = Arc::new(StringArray::from(vec!["two\nlines"]));
        let two = RecordBatch::try_from_iter(vec![("plan", k)]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            render(&[two], Format::Table, 10).unwrap_or_default(),
            "+-------+\n| plan  |\n+-------+\n| two   |\n| lines |\n+-------+\n"
        );
        let cut = render(&[batch()], Format::Table, 1).unwrap_or_default();
        assert!(
            cut.ends_with("(1 of 2 rows shown; \\maxrows N or --maxrows N shows more)\n"),
            "{cut}"
        );
    }

    #[test]
    fn csv_quotes_and_json_lines() {
        let csv = render(&[batch()], Format::Csv, 1).unwrap_or_default();
        assert_eq!(
            csv,
            "_key,v,raw\na\\x1b[31m,1,\\x00\\xff\n\"b,c\",NULL,ok\n"
        );
        let nd = render(&[batch()], Format::Ndjson, 10).unwrap_or_default();
        assert_eq!(nd.lines().count(), 2);
        assert_eq!(Format::parse("JSONL"), Some(Format::Ndjson));
        assert_eq!(Format::parse("xml"), None);
    }
}
