//! Writes: cellar's mutations as Bigtable's, checked first by the same
//! rules as the embedded store's (limits, families, aggregates), so a row
//! is refused before anything is sent.
//!
//! Bigtable makes each row's mutations atomic, as cellar does. What it
//! cannot do is hold a row between a read and a write: `update_rows` (SQL
//! UPDATE) reads and then writes each chunk of rows, and a write by
//! another client in between is overwritten (the embedded store locks the
//! rows; documented in docs/bigtable.md).

use std::sync::Arc;

use super::read::{self, pushed_filter};
use super::{BigtableStore, data, remote};
use crate::error::{Error, Result};
use crate::store::{
    BadRows, Cell, CellBatch, GcPolicy, Mutation, ReadFilter, ReadModifyWrite, ReadRequest, Row,
    RowChange, RowMutation, RowSet, TableDef, TimeRange, align_up, validate_mutation,
};
use data::mutation::{DeleteFromColumn, DeleteFromFamily, DeleteFromRow, SetCell};
use data::read_modify_write_rule::Rule;

/// Rows per `MutateRows` call (Bigtable allows 100 000 mutations a call).
const ROWS_PER_CALL: usize = 1000;

/// Refuses a timestamp Bigtable cannot keep.
fn whole_millis(timestamp: i64) -> Result<i64> {
    if timestamp % 1000 == 0 {
        Ok(timestamp)
    } else {
        Err(Error::InvalidArgument(format!(
            "cell timestamp {timestamp} is not a whole millisecond; Bigtable keeps timestamps in \
             milliseconds (the embedded store keeps microseconds): round it, for example with \
             date_trunc('millisecond', ...)"
        )))
    }
}

/// Bigtable's mutation for one of cellar's (validated already).
fn mutation(m: Mutation) -> Result<data::Mutation> {
    let m = match m {
        Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } => data::mutation::Mutation::SetCell(SetCell {
            family_name: family,
            column_qualifier: qualifier,
            // -1: the server's clock.
            timestamp_micros: timestamp.map_or(Ok(-1), whole_millis)?,
            value,
        }),
        Mutation::DeleteCells {
            family,
            qualifier,
            time_range,
        } => data::mutation::Mutation::DeleteFromColumn(DeleteFromColumn {
            family_name: family,
            column_qualifier: qualifier,
            // Cells stand on whole milliseconds, so rounding both ends up
            // keeps exactly the cells the range holds.
            time_range: (time_range != TimeRange::ALL).then(|| data::TimestampRange {
                start_timestamp_micros: align_up(time_range.start.max(0), 1000),
                end_timestamp_micros: time_range.end.map_or(0, |e| align_up(e.max(1), 1000)),
            }),
        }),
        Mutation::DeleteFamily { family } => {
            data::mutation::Mutation::DeleteFromFamily(DeleteFromFamily {
                family_name: family,
            })
        }
        Mutation::DeleteRow => data::mutation::Mutation::DeleteFromRow(DeleteFromRow {}),
        Mutation::AddToCell { family, .. } => {
            return Err(Error::InvalidArgument(format!(
                "family {family}: aggregate families are not supported on the Bigtable backend yet"
            )));
        }
    };
    Ok(data::Mutation { mutation: Some(m) })
}

/// A row's mutations, validated and translated.
fn entry(def: &TableDef, row: RowMutation) -> Result<data::mutate_rows_request::Entry> {
    validate_mutation(def, &row)?;
    Ok(data::mutate_rows_request::Entry {
        row_key: row.key,
        mutations: row
            .mutations
            .into_iter()
            .map(mutation)
            .collect::<Result<_>>()?,
        idempotency: None,
    })
}

pub(crate) fn mutate_row(store: &BigtableStore, def: &TableDef, row: RowMutation) -> Result<()> {
    let table = def.name.as_str();
    let entry = entry(def, row)?;
    if entry.mutations.is_empty() {
        return Ok(());
    }
    let mut client = store.data.clone();
    let request = data::MutateRowRequest {
        table_name: store.table_path(table),
        row_key: entry.row_key,
        mutations: entry.mutations,
        ..Default::default()
    };
    let call = format!("MutateRow on table {table}");
    store.run(async move {
        client
            .mutate_row(request)
            .await
            .map(drop)
            .map_err(|s| remote(call, &s))
    })
}

/// Sends valid entries in calls of [`ROWS_PER_CALL`]; the outcome of each,
/// by its place in `entries`.
fn send(
    store: &BigtableStore,
    table: &str,
    entries: Vec<data::mutate_rows_request::Entry>,
) -> Result<Vec<Result<()>>> {
    let mut outcomes: Vec<Result<()>> = Vec::with_capacity(entries.len());
    let mut entries = entries.into_iter().peekable();
    while entries.peek().is_some() {
        let chunk: Vec<_> = entries.by_ref().take(ROWS_PER_CALL).collect();
        let count = chunk.len();
        let mut client = store.data.clone();
        let request = data::MutateRowsRequest {
            table_name: store.table_path(table),
            entries: chunk,
            ..Default::default()
        };
        let call = format!("MutateRows on table {table}");
        let statuses = store.run(async move {
            let mut stream = client
                .mutate_rows(request)
                .await
                .map_err(|s| remote(call.clone(), &s))?
                .into_inner();
            let mut statuses: Vec<Option<(i32, String)>> = vec![None; count];
            while let Some(response) = stream
                .message()
                .await
                .map_err(|s| remote(call.clone(), &s))?
            {
                for e in response.entries {
                    let status = e.status.unwrap_or_default();
                    if let Some(slot) = usize::try_from(e.index)
                        .ok()
                        .and_then(|i| statuses.get_mut(i))
                    {
                        *slot = Some((status.code, status.message));
                    }
                }
            }
            Ok(statuses)
        })?;
        outcomes.extend(statuses.into_iter().map(|status| match status {
            Some((0, _)) => Ok(()),
            Some((code, message)) => Err(remote(
                format!("MutateRows on table {table}"),
                &tonic::Status::new(tonic::Code::from(code), message),
            )),
            None => Err(Error::Remote {
                call: format!("MutateRows on table {table}"),
                code: "Unknown".into(),
                message: "no outcome came back for the row".into(),
            }),
        }));
    }
    Ok(outcomes)
}

pub(crate) fn mutate_rows(
    store: &BigtableStore,
    def: &TableDef,
    rows: Vec<RowMutation>,
) -> Result<Vec<Result<()>>> {
    let table = def.name.as_str();
    let mut results: Vec<Option<Result<()>>> = Vec::with_capacity(rows.len());
    let mut entries = Vec::new();
    let mut places = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        match entry(def, row) {
            Ok(e) if e.mutations.is_empty() => results.push(Some(Ok(()))),
            Ok(e) => {
                results.push(None);
                places.push(i);
                entries.push(e);
            }
            Err(e) => results.push(Some(Err(e))),
        }
    }
    for (place, outcome) in places.into_iter().zip(send(store, table, entries)?) {
        results[place] = Some(outcome);
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect())
}

pub(crate) fn write_batch(
    store: &BigtableStore,
    def: &TableDef,
    batch: &CellBatch,
    bad: BadRows,
) -> Result<Vec<(usize, Error)>> {
    let table = def.name.as_str();
    let mut failed = Vec::new();
    let mut entries = Vec::with_capacity(batch.len());
    let mut rows = Vec::with_capacity(batch.len());
    for row in 0..batch.len() {
        match entry(def, batch.row_mutation(row)) {
            Ok(e) => {
                entries.push(e);
                rows.push(row);
            }
            Err(e) if bad == BadRows::Stop => return Ok(vec![(row, e)]),
            Err(e) => failed.push((row, e)),
        }
    }
    for (row, outcome) in rows.into_iter().zip(send(store, table, entries)?) {
        if let Err(e) = outcome {
            failed.push((row, e));
        }
    }
    Ok(failed)
}

pub(crate) fn update_rows(
    store: &BigtableStore,
    def: &TableDef,
    keys: &[Vec<u8>],
    filter: &ReadFilter,
    change: &mut RowChange<'_>,
) -> Result<Vec<Result<()>>> {
    let table = def.name.as_str();
    let mut results = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(ROWS_PER_CALL) {
        let request = ReadRequest::rows(RowSet::keys(chunk.iter().cloned())).filter(filter.clone());
        let mut found: std::collections::BTreeMap<Vec<u8>, Row> =
            read::collect(store, def, request)?
                .into_iter()
                .map(|r| (r.key.clone(), r))
                .collect();
        let rows: Vec<Option<Row>> = chunk.iter().map(|k| found.remove(k)).collect();
        let changes = change(chunk, &rows)?;
        if changes.len() != chunk.len() {
            return Err(Error::Internal(format!(
                "an update of {table} returned changes for {} rows, not {}",
                changes.len(),
                chunk.len()
            )));
        }
        let rows: Vec<RowMutation> = chunk
            .iter()
            .zip(changes)
            .map(|(key, mutations)| RowMutation::new(key.clone(), mutations))
            .collect();
        results.extend(mutate_rows(store, def, rows)?);
    }
    Ok(results)
}

pub(crate) fn check_and_mutate(
    store: &BigtableStore,
    def: &TableDef,
    key: &[u8],
    predicate: ReadFilter,
    on_match: Vec<Mutation>,
    on_no_match: Vec<Mutation>,
) -> Result<bool> {
    let table = def.name.as_str();
    let matched = entry(def, RowMutation::new(key.to_vec(), on_match))?;
    let unmatched = entry(def, RowMutation::new(key.to_vec(), on_no_match))?;
    let families = read::families_read(def, &predicate)?;
    let pushed = pushed_filter(&families, &predicate, read::Families::Named);
    // Whether a row has a cell through the predicate is the same with or
    // without uncollected garbage when GC never takes a column's newest
    // cell and the predicate looks at every time.
    let garbage_blind =
        predicate.time_range == TimeRange::ALL && families.iter().all(|(_, gc)| keeps_newest(gc));
    if !pushed.whole || !(pushed.no_gc || garbage_blind) {
        return Err(Error::InvalidArgument(format!(
            "a check-and-mutate predicate on table {table} must be one Bigtable can evaluate \
             exactly: families, a set of qualifiers, a time range in whole milliseconds (none \
             over a family whose GC policy has an age) and cells per column"
        )));
    }
    let mut client = store.data.clone();
    let request = data::CheckAndMutateRowRequest {
        table_name: store.table_path(table),
        row_key: key.to_vec(),
        predicate_filter: pushed.filter,
        true_mutations: matched.mutations,
        false_mutations: unmatched.mutations,
        ..Default::default()
    };
    let call = format!("CheckAndMutateRow on table {table}");
    store.run(async move {
        client
            .check_and_mutate_row(request)
            .await
            .map(|r| r.into_inner().predicate_matched)
            .map_err(|s| remote(call, &s))
    })
}

/// Whether `gc` never discards the newest cell of a column.
fn keeps_newest(gc: &GcPolicy) -> bool {
    match gc {
        GcPolicy::KeepAll | GcPolicy::MaxVersions(_) => true,
        GcPolicy::MaxAge(_) => false,
        GcPolicy::Union(rules) => rules.iter().all(keeps_newest),
        GcPolicy::Intersection(rules) => rules.iter().any(keeps_newest),
    }
}

pub(crate) fn read_modify_write(
    store: &BigtableStore,
    def: &TableDef,
    key: &[u8],
    rules: Vec<ReadModifyWrite>,
) -> Result<Row> {
    let table = def.name.as_str();
    crate::store::check_key(key)?;
    let mut out = Vec::with_capacity(rules.len());
    for rule in rules {
        let (family, qualifier, rule) = match rule {
            ReadModifyWrite::Append {
                family,
                qualifier,
                suffix,
            } => (family, qualifier, Rule::AppendValue(suffix)),
            ReadModifyWrite::Increment {
                family,
                qualifier,
                delta,
            } => (family, qualifier, Rule::IncrementAmount(delta)),
        };
        def.family(&family)?;
        out.push(data::ReadModifyWriteRule {
            family_name: family,
            column_qualifier: qualifier,
            rule: Some(rule),
        });
    }
    let mut client = store.data.clone();
    let request = data::ReadModifyWriteRowRequest {
        table_name: store.table_path(table),
        row_key: key.to_vec(),
        rules: out,
        ..Default::default()
    };
    let call = format!("ReadModifyWriteRow on table {table}");
    let row = store.run(async move {
        client
            .read_modify_write_row(request)
            .await
            .map(|r| r.into_inner().row.unwrap_or_default())
            .map_err(|s| remote(call, &s))
    })?;
    let mut cells = Vec::new();
    for family in row.families {
        let name: Arc<str> = Arc::from(family.name.as_str());
        for column in family.columns {
            for cell in column.cells {
                cells.push(Cell {
                    family: name.clone(),
                    qualifier: column.qualifier.clone(),
                    timestamp: cell.timestamp_micros,
                    value: cell.value,
                });
            }
        }
    }
    Ok(Row {
        key: key.to_vec(),
        cells,
    })
}
