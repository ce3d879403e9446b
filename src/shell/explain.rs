//! EXPLAIN as the shell prints it: each plan an indented tree under its
//! name, as psql and DuckDB print theirs, and a scan's key ranges one per
//! line under it, rather than a two-column table whose plan lines run
//! hundreds of characters wide.

use std::fmt::Write as _;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::DataType;

use super::escape::escape_text;

/// The text of an EXPLAIN result (columns `plan_type` and `plan`), or
/// `None` for any other result.
pub fn tree(batches: &[RecordBatch]) -> Option<String> {
    let schema = batches.first()?.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let text = |i: usize| schema.field(i).data_type() == &DataType::Utf8;
    if names != ["plan_type", "plan"] || !text(0) || !text(1) {
        return None;
    }
    let mut out = String::new();
    for batch in batches {
        let kinds = batch.column(0).as_string_opt::<i32>()?;
        let plans = batch.column(1).as_string_opt::<i32>()?;
        for row in 0..batch.num_rows() {
            if !out.is_empty() {
                out.push('\n');
            }
            let _ = writeln!(out, "{}", escape_text(kinds.value(row)));
            for line in plans.value(row).lines() {
                let depth = line.len() - line.trim_start().len();
                let indent = " ".repeat(depth + 2);
                let (head, ranges) = split_ranges(line.trim_start());
                let _ = writeln!(out, "{indent}{}", escape_text(&head));
                if let Some((count, items)) = ranges {
                    let _ = writeln!(out, "{indent}    ranges ({count}):");
                    for item in items {
                        let _ = writeln!(out, "{indent}      {}", escape_text(&item));
                    }
                }
            }
        }
    }
    Some(out)
}

/// A plan line with its `ranges(N)=[...]` taken out: the rest of the
/// line, and the count and each range. A range reads `{start}..{end}
/// bytes [{hex}, {hex or +inf})`; only its hex part is known to hold no
/// `)`, so each range ends at the first `)` after its ` bytes [`.
fn split_ranges(line: &str) -> (String, Option<(String, Vec<String>)>) {
    const MARK: &str = ", ranges(";
    let unchanged = || (line.to_string(), None);
    let Some(at) = line.find(MARK) else {
        return unchanged();
    };
    let after = &line[at + MARK.len()..];
    let Some(close) = after.find(")=[") else {
        return unchanged();
    };
    let count = after[..close].to_string();
    let mut rest = &after[close + 3..];
    let mut items = Vec::new();
    loop {
        if let Some(tail) = rest.strip_prefix(", ...]") {
            items.push("...".to_string());
            rest = tail;
            break;
        }
        let Some(bytes) = rest.find(" bytes [") else {
            return unchanged();
        };
        let Some(end) = rest[bytes..].find(')') else {
            return unchanged();
        };
        let end = bytes + end + 1;
        items.push(rest[..end].to_string());
        rest = &rest[end..];
        if let Some(tail) = rest.strip_prefix(']') {
            rest = tail;
            break;
        }
        match rest.strip_prefix(", ") {
            Some(tail) => rest = tail,
            None => return unchanged(),
        }
    }
    (format!("{}{rest}", &line[..at]), Some((count, items)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, StringArray};

    use super::*;

    #[test]
    fn plans_print_as_trees_with_a_range_per_line() {
        let kinds: ArrayRef = Arc::new(StringArray::from(vec!["logical_plan", "physical_plan"]));
        let plans: ArrayRef = Arc::new(StringArray::from(vec![
            "Filter: t.v > Int64(0)\n  TableScan: t projection=[k, v]",
            "FilterExec: v@1 > 0\n  KeyScanExec: table=t, ranges(3)=[[a, b..a, b] bytes [61 2c 20 62 00 01, 61 2c 20 62 00 02), (x)..+inf) bytes [78 00 01, +inf), [y..y] bytes [79 00 01, 79 00 02)], partitions=2, families=[f]",
        ]));
        let batch = RecordBatch::try_from_iter(vec![("plan_type", kinds), ("plan", plans)])
            .unwrap_or_else(|e| panic!("{e}"));
        let shown = tree(&[batch]).unwrap_or_default();
        assert_eq!(
            shown,
            "logical_plan\n  Filter: t.v > Int64(0)\n    TableScan: t projection=[k, v]\n\n\
             physical_plan\n  FilterExec: v@1 > 0\n    KeyScanExec: table=t, partitions=2, families=[f]\n        ranges (3):\n          \
             [a, b..a, b] bytes [61 2c 20 62 00 01, 61 2c 20 62 00 02)\n          \
             (x)..+inf) bytes [78 00 01, +inf)\n          [y..y] bytes [79 00 01, 79 00 02)\n"
        );
        let other = RecordBatch::try_from_iter(vec![(
            "plan",
            Arc::new(StringArray::from(vec!["x"])) as ArrayRef,
        )])
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(tree(&[other]).is_none());
    }
}
