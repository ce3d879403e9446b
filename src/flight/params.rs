//! Statement parameters: JDBC and ADBC write `?`, DataFusion numbers them
//! (`$1`, `$2`, ...); a bound parameter batch runs the statement once per
//! row.

use datafusion::arrow::array::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tonic::Status;

/// Rewrites each `?` placeholder (outside strings and comments) to `$n`,
/// numbered from 1 in order of appearance. SQL that does not tokenize is
/// returned unchanged: planning reports the error with its position.
pub fn number_placeholders(sql: &str) -> String {
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql).tokenize_with_location() else {
        return sql.to_string();
    };
    // Token locations are 1-based (line, column in characters); a cursor
    // walks the text once, as tokens come in order.
    let mut chars = sql.char_indices().peekable();
    let (mut line, mut column) = (1u64, 1u64);
    let mut out = String::with_capacity(sql.len() + 8);
    let mut copied = 0usize;
    let mut n = 0usize;
    for t in tokens {
        let Token::Placeholder(p) = &t.token else {
            continue;
        };
        if !p.starts_with('?') {
            continue;
        }
        let target = (t.span.start.line, t.span.start.column);
        let mut start = None;
        while let Some(&(i, c)) = chars.peek() {
            if (line, column) == target {
                start = Some(i);
                break;
            }
            if (line, column) > target {
                break;
            }
            chars.next();
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        let Some(start) = start else {
            return sql.to_string();
        };
        if start < copied || !sql[start..].starts_with(p.as_str()) {
            return sql.to_string();
        }
        n += 1;
        out.push_str(&sql[copied..start]);
        // `?3` names its position; a bare `?` takes the next one.
        let number = p[1..].parse::<usize>().unwrap_or(n);
        out.push_str(&format!("${number}"));
        copied = start + p.len();
    }
    out.push_str(&sql[copied..]);
    out
}

/// The parameter values of each row of a bound batch (one execution per
/// row); no batch means one execution without parameters.
pub fn parameter_rows(batch: Option<&RecordBatch>) -> Result<Vec<ParamValues>, Status> {
    let Some(batch) = batch else {
        return Ok(vec![ParamValues::List(Vec::new())]);
    };
    if batch.num_columns() == 0 {
        return Ok(vec![ParamValues::List(Vec::new())]);
    }
    (0..batch.num_rows())
        .map(|row| crate::sql::row_parameters(batch, row).map_err(Status::invalid_argument))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_are_numbered_outside_strings_and_comments() {
        assert_eq!(
            number_placeholders("SELECT * FROM t WHERE a = ? AND b > ?"),
            "SELECT * FROM t WHERE a = $1 AND b > $2"
        );
        assert_eq!(
            number_placeholders("SELECT '?', x -- why?\nFROM t WHERE k = ?"),
            "SELECT '?', x -- why?\nFROM t WHERE k = $1"
        );
        assert_eq!(
            number_placeholders("SELECT 'é', ? FROM t\nWHERE a = ?"),
            "SELECT 'é', $1 FROM t\nWHERE a = $2"
        );
        assert_eq!(number_placeholders("SELECT $1, $2"), "SELECT $1, $2");
        assert_eq!(number_placeholders("SELECT 'unclosed"), "SELECT 'unclosed");
        let many = vec!["?"; 3000].join(",\n ?, ");
        let numbered = number_placeholders(&format!("SELECT {many}"));
        assert!(
            numbered.ends_with("$5999") && numbered.contains("$17,\n $18"),
            "{numbered}"
        );
    }

    #[test]
    fn each_bound_row_is_one_execution() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use std::sync::Arc;
        let batch = RecordBatch::try_from_iter(vec![
            (
                "a",
                Arc::new(Int64Array::from(vec![1, 2])) as datafusion::arrow::array::ArrayRef,
            ),
            ("b", Arc::new(StringArray::from(vec!["x", "y"])) as _),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let rows = parameter_rows(Some(&batch)).unwrap_or_default();
        assert_eq!(rows.len(), 2);
        assert_eq!(parameter_rows(None).map(|r| r.len()).ok(), Some(1));
    }
}
