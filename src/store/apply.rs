//! Applying a validated row mutation to a write overlay: all or nothing,
//! reading what the row holds where a mutation depends on it (deletes,
//! aggregates, increments).

use super::aggregate;
use super::engine::TableHandle;
use super::mutation::{Mutation, RowMutation, column_name, resolve_timestamp};
use super::overlay::{CellWrite, Overlay};
use super::request::TimeRange;
use crate::error::{Error, Result};
use fjall::Snapshot;

/// Applies one validated row mutation to `base` (the call's overlay), all
/// or nothing: on an error `base` is as it was.
pub(crate) fn apply(
    snapshot: &Snapshot,
    table: &TableHandle,
    base: &mut Overlay,
    row: &RowMutation,
    now: i64,
) -> Result<()> {
    if let Some(cells) = plain_sets(table, row, now)? {
        // The bulk-load case: checked whole before anything is written.
        return base.put_cells(snapshot, table, &row.key, &cells);
    }
    // Reads see base then the row's own earlier writes: work on the
    // base's entries for this row, keeping them to put back on an error.
    let mut pending = base.take_row(table.keyspaces.len(), &row.key);
    let before = pending.clone();
    match apply_each(snapshot, table, &mut pending, row, now) {
        Ok(()) => {
            base.absorb(pending);
            Ok(())
        }
        Err(e) => {
            base.absorb(before);
            Err(e)
        }
    }
}

/// The cells of a row mutation made only of cell writes, as
/// `(family index, qualifier, timestamp, value)`; `None` for any other.
fn plain_sets<'r>(
    table: &TableHandle,
    row: &'r RowMutation,
    now: i64,
) -> Result<Option<Vec<CellWrite<'r>>>> {
    let mut cells = Vec::with_capacity(row.mutations.len());
    for m in &row.mutations {
        let Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } = m
        else {
            return Ok(None);
        };
        let f = family_index(table, family)?;
        cells.push((
            f,
            qualifier.as_slice(),
            resolve_timestamp(*timestamp, now)?,
            value.as_slice(),
        ));
    }
    Ok(Some(cells))
}

fn family_index(table: &TableHandle, name: &str) -> Result<usize> {
    table
        .def
        .families
        .iter()
        .position(|f| f.name == name)
        .ok_or_else(|| Error::FamilyNotFound {
            table: table.def.name.clone(),
            family: name.to_string(),
        })
}

fn apply_each(
    snapshot: &Snapshot,
    table: &TableHandle,
    pending: &mut Overlay,
    row: &RowMutation,
    now: i64,
) -> Result<()> {
    let family_index = |name: &str| family_index(table, name);
    for m in &row.mutations {
        match m {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                let f = family_index(family)?;
                let ts = resolve_timestamp(*timestamp, now)?;
                pending.put_cell(snapshot, table, f, &row.key, qualifier, ts, value.clone())?;
            }
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } => {
                let f = family_index(family)?;
                let ts = resolve_timestamp(*timestamp, now)?;
                let existing = pending.cell(snapshot, table, f, &row.key, qualifier, ts)?;
                let kind = table.def.families[f].kind;
                let merged = aggregate::merge(
                    kind,
                    &column_name(family, qualifier),
                    existing.as_deref(),
                    input,
                )?;
                pending.put_cell(snapshot, table, f, &row.key, qualifier, ts, merged)?;
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                time_range,
            } => {
                let f = family_index(family)?;
                pending.delete_cells(snapshot, table, f, &row.key, Some(qualifier), *time_range)?;
            }
            Mutation::DeleteFamily { family } => {
                let f = family_index(family)?;
                pending.delete_cells(snapshot, table, f, &row.key, None, TimeRange::ALL)?;
            }
            Mutation::DeleteRow => {
                for f in 0..table.def.families.len() {
                    pending.delete_cells(snapshot, table, f, &row.key, None, TimeRange::ALL)?;
                }
            }
        }
    }
    pending.check_sizes(table)
}
