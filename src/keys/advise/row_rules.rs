//! The rules about what rows hold, from the guides' size limits and
//! their advice on wide rows and families: a cell over 10 MB, a row over
//! 100 MB (256 MB is Bigtable's hard limit), rows so wide that reading
//! one costs more than the answer, families nothing writes.

use super::{Evidence, Finding, Severity, megabytes};
use crate::codec::show_bytes;

const MB: u64 = 1 << 20;
/// The guides' largest recommended cell.
const CELL_LIMIT: u64 = 10 * MB;
/// The guides' largest recommended row, and Bigtable's hard limit.
const ROW_LIMIT: u64 = 100 * MB;
const ROW_HARD_LIMIT: u64 = 256 * MB;
/// A size this share of a limit is "near" it.
const NEAR: f64 = 0.5;
/// Cells in a row from which reading it whole costs far more than a
/// point read should.
const WIDE_CELLS: u64 = 10_000;
/// Cells in a row from which it is worth a word even unread.
const VERY_WIDE_CELLS: u64 = 100_000;
/// Reads, at least, for their pattern to be evidence.
const MIN_READS: u64 = 10;
/// Rows per read, at most, for reads to be point reads.
const POINT_ROWS: u64 = 10;

/// Every finding of these rules.
pub(super) fn findings(e: &Evidence) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(cell_size(e));
    out.extend(row_size(e));
    out.extend(wide_rows(e));
    out.extend(unused_families(e));
    out
}

/// A finding's severity for `bytes` against `limit`: over, near, or none.
fn against(bytes: u64, limit: u64) -> Option<(Severity, &'static str)> {
    if bytes > limit {
        Some((Severity::Critical, "over"))
    } else if bytes as f64 >= NEAR * limit as f64 {
        Some((Severity::Warning, "near"))
    } else {
        None
    }
}

fn cell_size(e: &Evidence) -> Option<Finding> {
    let cell = &e.sample.largest_cell;
    let (severity, how) = against(cell.bytes, CELL_LIMIT)?;
    Some(Finding {
        severity,
        rule: "cell-size",
        subject: format!("row '{}' column {}", show_bytes(&cell.key), cell.column),
        evidence: format!(
            "a cell of {}, {how} the guides' limit of {} a cell (the largest of {} sampled rows)",
            megabytes(cell.bytes),
            megabytes(CELL_LIMIT),
            e.sample.rows()
        ),
        advice: "Keep cells under 10 MB: put a large object in a blob store and keep its \
                 address in the cell, or split the value over several columns or rows."
            .into(),
    })
}

fn row_size(e: &Evidence) -> Option<Finding> {
    let row = &e.sample.largest_row;
    let (severity, how) = against(row.bytes, ROW_LIMIT)?;
    let hard = if row.bytes > ROW_HARD_LIMIT {
        format!(
            " and over Bigtable's hard limit of {}",
            megabytes(ROW_HARD_LIMIT)
        )
    } else {
        String::new()
    };
    Some(Finding {
        severity,
        rule: "row-size",
        subject: format!("row '{}'", show_bytes(&row.key)),
        evidence: format!(
            "a row of {} in {} cells, {how} the guides' limit of {} a row{hard} (the largest of \
             {} sampled rows, every version counted)",
            megabytes(row.bytes),
            row.cells,
            megabytes(ROW_LIMIT),
            e.sample.rows()
        ),
        advice: "Keep rows under 100 MB: a row is read and written whole on one node. Make the \
                 time bucket in the key smaller (a day row into hour rows), keep fewer versions \
                 (a GC policy), or move what grows into rows of its own."
            .into(),
    })
}

fn wide_rows(e: &Evidence) -> Option<Finding> {
    let widest = &e.sample.widest_row;
    let family = e
        .sample
        .widest_family
        .iter()
        .max_by_key(|(_, s)| s.cells)
        .map(|(f, s)| {
            format!(
                "; family {f} has {} columns in row '{}'",
                s.cells,
                show_bytes(&s.key)
            )
        })
        .unwrap_or_default();
    let rows = e.sample.rows().max(1);
    let evidence = format!(
        "the widest of {} sampled rows, '{}', holds {} cells ({} on average){family}",
        e.sample.rows(),
        show_bytes(&widest.key),
        widest.cells,
        e.sample.cells / rows
    );
    let point_reads = e
        .load
        .as_ref()
        .filter(|l| l.total.reads >= MIN_READS && l.total.rows_read <= POINT_ROWS * l.total.reads);
    if let (Some(load), true) = (point_reads, widest.cells >= WIDE_CELLS) {
        return Some(Finding {
            severity: Severity::Warning,
            rule: "wide-rows",
            subject: format!("row '{}'", show_bytes(&widest.key)),
            evidence: format!(
                "{evidence}; the table's reads are point reads ({} rows in {} reads), each \
                 scanning {} cells a row on average",
                load.total.rows_read,
                load.total.reads,
                load.total.cells_scanned / load.total.rows_read.max(1)
            ),
            advice: "Point reads of rows this wide read far more than they return: read only the \
                     columns and time range needed (a qualifier or time filter), or make rows \
                     narrower (a smaller time bucket in the key, the guides' tall-versus-wide \
                     trade) so that one read is one answer."
                .into(),
        });
    }
    (widest.cells >= VERY_WIDE_CELLS).then(|| Finding {
        severity: Severity::Suggestion,
        rule: "wide-rows",
        subject: format!("row '{}'", show_bytes(&widest.key)),
        evidence,
        advice: "A row this wide is read and written on one node and grows toward the 100 MB \
                 limit: bound it (a time bucket in the key, a GC policy on its versions)."
            .into(),
    })
}

fn unused_families(e: &Evidence) -> Vec<Finding> {
    e.empty_families
        .iter()
        .map(|f| Finding {
            severity: Severity::Suggestion,
            rule: "unused-family",
            subject: format!("family {f}"),
            evidence: format!(
                "family {f} holds no cell, while the table holds rows ({} sampled)",
                e.sample.rows()
            ),
            advice: format!(
                "Drop a family nothing writes (ALTER TABLE {} DROP FAMILY {f}): each family is \
                 its own files to open, flush and compact, and the guides keep families few, \
                 one per way the data is read.",
                e.table
            ),
        })
        .collect()
}
