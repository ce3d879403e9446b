//! Answers in one comparable shape, whichever engine gave them: rows of
//! text and numbers, sorted, numbers equal within a relative 1e-9 (engines
//! add floats in different orders).

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use serde_json::Value as Json;

#[derive(Clone, Debug, PartialEq, PartialOrd)]
pub enum Cell {
    Null,
    Num(f64),
    Text(String),
}

pub type Answer = Vec<Vec<Cell>>;

/// The rows of Arrow batches: strings as text, everything numeric as f64.
pub fn from_batches(batches: &[RecordBatch]) -> Result<Answer, String> {
    let mut rows = Vec::new();
    for batch in batches {
        let mut columns = Vec::new();
        for column in batch.columns() {
            let cells: Vec<Cell> = match column.data_type() {
                DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => {
                    let text = cast(column, &DataType::Utf8).map_err(|e| e.to_string())?;
                    let text = text
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::StringArray>()
                        .ok_or("a text column that is not text")?;
                    (0..text.len())
                        .map(|i| {
                            if text.is_null(i) {
                                Cell::Null
                            } else {
                                Cell::Text(text.value(i).to_string())
                            }
                        })
                        .collect()
                }
                _ => {
                    let num = cast(column, &DataType::Float64).map_err(|e| e.to_string())?;
                    let num = num
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::Float64Array>()
                        .ok_or("a numeric column that is not numeric")?;
                    (0..num.len())
                        .map(|i| {
                            if num.is_null(i) {
                                Cell::Null
                            } else {
                                Cell::Num(num.value(i))
                            }
                        })
                        .collect()
                }
            };
            columns.push(cells);
        }
        for i in 0..batch.num_rows() {
            rows.push(columns.iter().map(|c| c[i].clone()).collect());
        }
    }
    Ok(sorted(rows))
}

/// The rows of a JSON answer (`[[...], ...]`) from the Python peers.
pub fn from_json(rows: &Json) -> Result<Answer, String> {
    let rows = rows
        .as_array()
        .ok_or("an answer that is not a list of rows")?;
    let mut out = Vec::new();
    for row in rows {
        let row = row.as_array().ok_or("a row that is not a list")?;
        out.push(
            row.iter()
                .map(|v| match v {
                    Json::Null => Ok(Cell::Null),
                    Json::Number(n) => n.as_f64().map(Cell::Num).ok_or("a number out of range"),
                    Json::String(s) => Ok(Cell::Text(s.clone())),
                    _ => Err("a value that is neither a number nor text"),
                })
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    Ok(sorted(out))
}

fn sorted(mut rows: Answer) -> Answer {
    rows.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    rows
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// `None` when equal, else the first difference.
pub fn difference(expected: &Answer, got: &Answer) -> Option<String> {
    if expected.len() != got.len() {
        return Some(format!("{} rows, expected {}", got.len(), expected.len()));
    }
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        let same = e.len() == g.len()
            && e.iter().zip(g).all(|(x, y)| match (x, y) {
                (Cell::Num(x), Cell::Num(y)) => close(*x, *y),
                _ => x == y,
            });
        if !same {
            return Some(format!("row {i}: {g:?}, expected {e:?}"));
        }
    }
    None
}
