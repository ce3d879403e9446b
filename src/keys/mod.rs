//! Seeing the key space: where a table's reads and writes land, drawn as
//! Key Visualizer draws it (`heatmap.rs`), from the counters the store
//! keeps ([`crate::store::ActivityRecord`]).

mod heatmap;

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
