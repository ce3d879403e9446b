//! Bigtable-style quick looks, printed cell by cell like `cbt read`:
//! `\lookup TABLE KEY` and `\scan TABLE [PREFIX | START..END] [LIMIT n]`.

use std::fmt::Write as _;

use crate::codec::show_bytes;
use crate::store::{ReadFilter, ReadRequest, Row, RowRange, RowSet, Store};

const RULE: &str = "----------------------------------------";

fn time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros).map_or_else(
        || format!("{micros}µs"),
        |t| t.format("%Y/%m/%d-%H:%M:%S%.6f").to_string(),
    )
}

/// One row in the `cbt read` layout: the key, then per cell
/// `family:qualifier @ time` and the value quoted, bytes escaped.
fn render_row(out: &mut String, row: &Row) {
    let _ = writeln!(out, "{RULE}\n{}", show_bytes(&row.key));
    for cell in &row.cells {
        let _ = writeln!(
            out,
            "  {}:{:<30} @ {}\n    \"{}\"",
            cell.family,
            show_bytes(&cell.qualifier),
            time(cell.timestamp),
            show_bytes(&cell.value)
        );
    }
}

/// `\lookup TABLE KEY`: every cell of one row.
pub fn lookup(store: &Store, args: &str) -> Result<String, String> {
    let (table, key) = args
        .split_once(char::is_whitespace)
        .map(|(t, k)| (t, k.trim()))
        .ok_or("usage: \\lookup TABLE KEY")?;
    let row = store
        .read_row(table, key.as_bytes(), ReadFilter::all())
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    match row {
        Some(row) => {
            render_row(&mut out, &row);
            let _ = writeln!(out, "{RULE}\n1 row, {} cells", row.cells.len());
        }
        None => {
            let _ = writeln!(out, "no row {} in {table}", show_bytes(key.as_bytes()));
        }
    }
    Ok(out)
}

/// `\scan TABLE [PREFIX | START..END] [LIMIT n]`: rows of a key range,
/// latest cell per column, at most 100 rows unless LIMIT says otherwise.
pub fn scan(store: &Store, args: &str) -> Result<String, String> {
    let mut words: Vec<&str> = args.split_whitespace().collect();
    let mut limit = 100usize;
    if words.len() >= 2 && words[words.len() - 2].eq_ignore_ascii_case("LIMIT") {
        limit = words[words.len() - 1]
            .parse()
            .map_err(|_| format!("LIMIT needs a number, got {:?}", words[words.len() - 1]))?;
        words.truncate(words.len() - 2);
    }
    let (table, range) = match words.as_slice() {
        [table] => (*table, RowRange::all()),
        [table, spec] => {
            let range = match spec.split_once("..") {
                Some((start, end)) => {
                    use std::ops::Bound;
                    let start = if start.is_empty() {
                        Bound::Unbounded
                    } else {
                        Bound::Included(start.as_bytes().to_vec())
                    };
                    let end = if end.is_empty() {
                        Bound::Unbounded
                    } else {
                        Bound::Excluded(end.as_bytes().to_vec())
                    };
                    RowRange::between(start, end)
                }
                None => RowRange::prefix(spec.as_bytes().to_vec()),
            };
            (*table, range)
        }
        _ => return Err("usage: \\scan TABLE [PREFIX | START..END] [LIMIT n]".into()),
    };
    let request = ReadRequest::rows(RowSet::range(range))
        .filter(ReadFilter::latest())
        .limit(limit);
    let rows = store.read_rows(table, request).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let (mut n, mut cells) = (0usize, 0usize);
    for row in rows {
        let row = row.map_err(|e| e.to_string())?;
        n += 1;
        cells += row.cells.len();
        render_row(&mut out, &row);
    }
    let more = if n == limit { " (LIMIT reached)" } else { "" };
    let _ = writeln!(out, "{RULE}\n{n} rows, {cells} cells{more}");
    Ok(out)
}

/// The name in `candidates` nearest to `name` (edit distance at most a
/// third of its length), for "did you mean" hints.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let cost = usize::from(ca != *cb);
                cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    };
    candidates
        .into_iter()
        .map(|c| (distance(&name.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= (name.chars().count() / 3).max(1))
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{FamilySpec, Mutation, RowMutation, TableSpec};

    #[test]
    fn lookup_and_scan_print_cells() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = Store::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        store
            .create_table(TableSpec::new("t").family(FamilySpec::new("f")))
            .unwrap_or_else(|e| panic!("{e}"));
        for key in ["a#1", "a#2", "b#1"] {
            store
                .mutate_row(
                    "t",
                    RowMutation::new(
                        key,
                        vec![Mutation::set_at("f", "q", 1_000_000, b"v\x00".to_vec())],
                    ),
                )
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let one = lookup(&store, "t a#2").unwrap_or_default();
        assert_eq!(
            one,
            format!(
                "{RULE}\na#2\n  f:q                              @ 1970/01/01-00:00:01.000000\n    \"v\\x00\"\n{RULE}\n1 row, 1 cells\n"
            )
        );
        let rows = scan(&store, "t a#").unwrap_or_default();
        assert!(rows.ends_with("2 rows, 2 cells\n"), "{rows}");
        let rows = scan(&store, "t a#2.. LIMIT 1").unwrap_or_default();
        assert!(
            rows.contains("a#2") && rows.ends_with("1 rows, 1 cells (LIMIT reached)\n"),
            "{rows}"
        );
        assert!(
            lookup(&store, "t zz")
                .unwrap_or_default()
                .starts_with("no row zz")
        );
        assert!(scan(&store, "nope").unwrap_err().contains("nope"));
        assert_eq!(nearest("wheather", ["weather", "metric"]), Some("weather"));
        assert_eq!(nearest("xyz", ["weather"]), None);
    }
}
