//! Seeing the key space: where a table's reads and writes land, drawn as
//! Key Visualizer draws it (`heatmap.rs`), from the counters the store
//! keeps ([`crate::store::ActivityRecord`]), and what the schema-design
//! guides advise about it (`advise/`).

mod advise;
mod heatmap;
mod pieces;

pub use advise::{Finding, RULES, Severity, advise};
pub use heatmap::Heatmap;

use crate::error::{Error, Result};
use crate::store::{Store, now_micros, parse_since};
use std::path::Path;

/// Rows of a drawn heatmap, at most.
const SVG_ROWS: usize = 120;
/// Columns of a drawn heatmap, at most.
const SVG_COLUMNS: usize = 360;
/// Rows and columns of the text rendering.
const TEXT_ROWS: usize = 16;
const TEXT_COLUMNS: usize = 60;

/// Draws `table`'s `metric` since `since` (`6h`, `30m`, `all`) into the
/// SVG file `out`; the text rendering, to print.
pub fn draw(store: &Store, table: &str, metric: &str, since: &str, out: &Path) -> Result<String> {
    let since = parse_since(since, now_micros())?;
    let records = store.activity_records(table, since)?;
    let svg = Heatmap::build(table, metric, &records, SVG_ROWS, SVG_COLUMNS)?.svg()?;
    std::fs::write(out, svg).map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot write the heatmap to {}: {e}", out.display()),
        ))
    })?;
    Ok(Heatmap::build(table, metric, &records, TEXT_ROWS, TEXT_COLUMNS)?.text())
}

/// The advisor's findings for `table` with key activity since `since`
/// (`6h`, `all`), as text for a terminal: each finding's severity, rule
/// and subject, then its evidence and advice, wrapped.
pub fn advise_text(store: &Store, table: &str, since: &str) -> Result<String> {
    let since = parse_since(since, now_micros())?;
    let mut out = String::new();
    for f in advise(store, table, since)? {
        out.push_str(&format!(
            "{:<10} {}: {}\n",
            f.severity.name(),
            f.rule,
            f.subject
        ));
        for (label, text) in [("evidence", &f.evidence), ("advice", &f.advice)] {
            out.push_str(&wrap(&format!("{label}: {text}"), TEXT_WIDTH, "    "));
        }
    }
    Ok(out)
}

/// Columns of the advisor's text.
const TEXT_WIDTH: usize = 80;

/// `text` in lines of at most `width` characters (longer words alone),
/// each after `indent`.
fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > width {
            out.push_str(&format!("{indent}{line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{indent}{line}\n"));
    }
    out
}
