//! Writes: cellar's mutations as Bigtable's, checked first by the same
//! rules as the embedded store's (limits, families, aggregates), so a row
//! is refused before anything is sent.
//!
//! Bigtable makes each row's mutations atomic, as cellar does. What it
//! cannot do is hold a row between a read and a write, so `update_rows`
//! (SQL UPDATE) writes each row conditioned on it being as read
//! (`CheckAndMutateRow`) and reads and computes again the rows another
//! client changed in between, as the embedded store's row locks make
//! its UPDATE.

use std::sync::Arc;

use super::conditional::{Condition, UPDATE_ATTEMPTS, backoff, conditional_writes};
use super::hll;
use super::read::{self, pushed_filter};
use super::translate::translate;
use super::{BigtableStore, data, remote};
use crate::error::{Error, Result};
use crate::store::{
    BadRows, Cell, CellBatch, FamilyKind, GcPolicy, Mutation, ReadFilter, ReadModifyWrite,
    ReadRequest, Row, RowChange, RowMutation, RowSet, TableDef, TimeRange, align_down, align_up,
    validate_mutation,
};
use data::read_modify_write_rule::Rule;

/// Rows per `MutateRows` call (Bigtable allows 100 000 mutations a call).
const ROWS_PER_CALL: usize = 1000;

/// A row's mutations, validated and translated.
fn entry(def: &TableDef, row: RowMutation) -> Result<data::mutate_rows_request::Entry> {
    validate_mutation(def, &row)?;
    let mut mutations = Vec::with_capacity(row.mutations.len());
    for m in row.mutations {
        translate(def, m, &mut mutations)?;
    }
    Ok(data::mutate_rows_request::Entry {
        row_key: row.key,
        mutations,
        idempotency: None,
    })
}

pub(crate) fn mutate_row(store: &BigtableStore, def: &TableDef, row: RowMutation) -> Result<()> {
    let table = def.name.as_str();
    if hll::adds_to_sketch(def, &row.mutations) {
        validate_mutation(def, &row)?;
        return hll::write(store, def, vec![row])?
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("a sketch write left no outcome".into())));
    }
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
    let merged_keys = hll::keys_merged(def, &rows);
    let mut results: Vec<Option<Result<()>>> = Vec::with_capacity(rows.len());
    let mut entries = Vec::new();
    let mut places = Vec::new();
    let mut merges = Vec::new();
    let mut merge_places = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        if merged_keys.contains(&row.key) {
            match validate_mutation(def, &row) {
                Ok(()) => {
                    results.push(None);
                    merge_places.push(i);
                    merges.push(row);
                }
                Err(e) => results.push(Some(Err(e))),
            }
            continue;
        }
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
    if !merges.is_empty() {
        for (place, outcome) in merge_places
            .into_iter()
            .zip(hll::write(store, def, merges)?)
        {
            results[place] = Some(outcome);
        }
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
    let mut merges = Vec::new();
    let mut merge_rows = Vec::new();
    // With an HLL family, the rows are built once for both passes: which
    // keys add to a sketch, then where each row goes.
    let has_sketches = def
        .families
        .iter()
        .any(|f| f.kind == FamilyKind::HyperLogLog);
    let built: Vec<RowMutation> = if has_sketches {
        (0..batch.len()).map(|r| batch.row_mutation(r)).collect()
    } else {
        Vec::new()
    };
    let merged_keys = hll::keys_merged(def, &built);
    let mut built = built.into_iter();
    for row in 0..batch.len() {
        let mutation = match built.next() {
            Some(m) => m,
            None => batch.row_mutation(row),
        };
        if merged_keys.contains(&mutation.key) {
            match validate_mutation(def, &mutation) {
                Ok(()) => {
                    merges.push(mutation);
                    merge_rows.push(row);
                }
                Err(e) if bad == BadRows::Stop => return Ok(vec![(row, e)]),
                Err(e) => failed.push((row, e)),
            }
            continue;
        }
        match entry(def, mutation) {
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
    if !merges.is_empty() {
        for (row, outcome) in merge_rows.into_iter().zip(hll::write(store, def, merges)?) {
            if let Err(e) = outcome {
                failed.push((row, e));
            }
        }
        failed.sort_by_key(|(row, _)| *row);
    }
    Ok(failed)
}

/// UPDATE on Bigtable, which cannot hold a row between a read and a
/// write: each row's new cells are written with `CheckAndMutateRow`
/// conditioned on the row being as it was read ([`unchanged`]), and a row
/// that changed in between is read and computed again, up to
/// [`UPDATE_ATTEMPTS`] times, then fails with [`Error::WriteConflict`].
/// No update is lost silently.
pub(crate) fn update_rows(
    store: &BigtableStore,
    def: &TableDef,
    keys: &[Vec<u8>],
    filter: &ReadFilter,
    change: &mut RowChange<'_>,
) -> Result<Vec<Result<()>>> {
    let table = def.name.as_str();
    let families = read::families_read(def, filter)?;
    // What was read of each family: the qualifiers, when they are a set
    // Bigtable can name, and the time range (whole milliseconds, as
    // Bigtable keeps them). The row must be unchanged in that only: a
    // series' new events read and write their own times of a bucket, not
    // the bucket's other events.
    let mut scope: Vec<data::row_filter::Filter> = read::qualifier_set(&filter.qualifiers)
        .into_iter()
        .collect();
    let TimeRange { start, end } = filter.time_range;
    if start > 0 || end.is_some() {
        scope.push(data::row_filter::Filter::TimestampRangeFilter(
            data::TimestampRange {
                start_timestamp_micros: align_down(start.max(0), 1000),
                end_timestamp_micros: end.map_or(0, |e| align_up(e.max(1), 1000)),
            },
        ));
    }
    let mut results = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(ROWS_PER_CALL) {
        let mut outcomes: Vec<Option<Result<()>>> = (0..chunk.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..chunk.len()).collect();
        for attempt in 0..UPDATE_ATTEMPTS {
            if pending.is_empty() {
                break;
            }
            if attempt > 0 {
                // The writers that collided spread out before trying again.
                std::thread::sleep(backoff(attempt));
            }
            let wanted: Vec<Vec<u8>> = pending.iter().map(|&i| chunk[i].clone()).collect();
            let request =
                ReadRequest::rows(RowSet::keys(wanted.iter().cloned())).filter(filter.clone());
            let mut found: std::collections::BTreeMap<Vec<u8>, Row> =
                read::collect(store, def, request)?
                    .into_iter()
                    .map(|r| (r.key.clone(), r))
                    .collect();
            let rows: Vec<Option<Row>> = wanted.iter().map(|k| found.remove(k)).collect();
            let changes = change(&wanted, &rows)?;
            if changes.len() != wanted.len() {
                return Err(Error::Internal(format!(
                    "an update of {table} returned changes for {} rows, not {}",
                    changes.len(),
                    wanted.len()
                )));
            }
            let mut calls = Vec::new();
            for ((&i, row), mutations) in pending.iter().zip(&rows).zip(changes) {
                if mutations.is_empty() {
                    outcomes[i] = Some(Ok(()));
                    continue;
                }
                match entry(def, RowMutation::new(chunk[i].clone(), mutations)) {
                    Ok(e) => calls.push((
                        i,
                        unchanged(&families, scope.as_ref(), row.as_ref()),
                        e.mutations,
                    )),
                    Err(e) => outcomes[i] = Some(Err(e)),
                }
            }
            let written = conditional_writes(store, table, chunk, calls)?;
            pending.clear();
            for (i, outcome) in written {
                match outcome {
                    Ok(true) => outcomes[i] = Some(Ok(())),
                    Ok(false) => pending.push(i),
                    Err(e) => outcomes[i] = Some(Err(e)),
                }
            }
        }
        for i in pending {
            outcomes[i] = Some(Err(Error::WriteConflict {
                table: table.to_string(),
                key: crate::codec::show_bytes(&chunk[i]),
                attempts: UPDATE_ATTEMPTS,
            }));
        }
        results.extend(outcomes.into_iter().map(|o| {
            o.unwrap_or_else(|| Err(Error::Internal("an UPDATE row left no outcome".into())))
        }));
    }
    Ok(results)
}

/// The condition that a row is as an UPDATE read it: the newest cell of
/// each column read has the timestamp and value read, and the families
/// read hold no other column (counted when the family's GC never drops a
/// column's newest cell; otherwise no cell newer than the newest read).
/// A row read empty must still hold nothing in those families; that one
/// writes when its predicate ("something is there") does not match, as a
/// predicate over a missing row never does. All of it is within `scope`
/// (what the read took of each family: a set of qualifiers, a time
/// range): "a column's newest cell", "other columns" and "something".
fn unchanged(
    families: &[(Arc<str>, GcPolicy)],
    scope: &[data::row_filter::Filter],
    row: Option<&Row>,
) -> Condition {
    use data::row_filter::{Chain, Condition as Cond, Filter};
    let f = |filter: Filter| data::RowFilter {
        filter: Some(filter),
    };
    let chain = |filters: Vec<Filter>| {
        f(Filter::Chain(Chain {
            filters: filters.into_iter().map(f).collect(),
        }))
    };
    let family = |name: &str| Filter::FamilyNameRegexFilter(format!("^{}$", regex::escape(name)));
    let names: Vec<String> = families.iter().map(|(n, _)| regex::escape(n)).collect();
    // A family's cells within the scope.
    let scoped = |first: Filter, rest: Vec<Filter>| {
        let mut filters = vec![first];
        filters.extend(scope.iter().cloned());
        filters.extend(rest);
        chain(filters)
    };
    let Some(row) = row else {
        return Condition {
            filter: scoped(
                Filter::FamilyNameRegexFilter(format!("^(?:{})$", names.join("|"))),
                vec![Filter::CellsPerColumnLimitFilter(1)],
            ),
            write_on_match: false,
        };
    };
    // What must match, and what must not.
    let mut must = Vec::new();
    let mut must_not = Vec::new();
    let mut newest_of_column = row.cells.iter().peekable();
    let mut columns: std::collections::BTreeMap<&str, (usize, i64)> = Default::default();
    while let Some(cell) = newest_of_column.next() {
        // Cells of a column come newest first: the first is the one read.
        while newest_of_column
            .peek()
            .is_some_and(|c| c.family == cell.family && c.qualifier == cell.qualifier)
        {
            newest_of_column.next();
        }
        let entry = columns.entry(&cell.family).or_insert((0, i64::MIN));
        entry.0 += 1;
        entry.1 = entry.1.max(cell.timestamp);
        must.push(scoped(
            Filter::ColumnRangeFilter(data::ColumnRange {
                family_name: cell.family.to_string(),
                start_qualifier: Some(data::column_range::StartQualifier::StartQualifierClosed(
                    cell.qualifier.clone(),
                )),
                end_qualifier: Some(data::column_range::EndQualifier::EndQualifierClosed(
                    cell.qualifier.clone(),
                )),
            }),
            vec![
                Filter::CellsPerColumnLimitFilter(1),
                Filter::TimestampRangeFilter(data::TimestampRange {
                    start_timestamp_micros: cell.timestamp,
                    end_timestamp_micros: cell.timestamp.saturating_add(1000),
                }),
                Filter::ValueRangeFilter(data::ValueRange {
                    start_value: Some(data::value_range::StartValue::StartValueClosed(
                        cell.value.clone(),
                    )),
                    end_value: Some(data::value_range::EndValue::EndValueClosed(
                        cell.value.clone(),
                    )),
                }),
            ],
        ));
    }
    for (name, gc) in families {
        let (count, newest) = columns.get(name.as_ref()).copied().unwrap_or((0, i64::MIN));
        if keeps_newest(gc) {
            // More columns than were read.
            must_not.push(scoped(
                family(name),
                vec![
                    Filter::CellsPerColumnLimitFilter(1),
                    Filter::CellsPerRowOffsetFilter(i32::try_from(count).unwrap_or(i32::MAX)),
                ],
            ));
        } else if count > 0 {
            // A cell newer than the newest read.
            must_not.push(scoped(
                family(name),
                vec![Filter::TimestampRangeFilter(data::TimestampRange {
                    start_timestamp_micros: align_up(newest.saturating_add(1), 1000),
                    end_timestamp_micros: 0,
                })],
            ));
        }
    }
    // Nested conditions: each one's true branch the next test; the last
    // passes the row's cells, so a row that still exists matches.
    let mut inner = f(Filter::PassAllFilter(true));
    for test in must_not {
        inner = f(Filter::Condition(Box::new(Cond {
            predicate_filter: Some(Box::new(test)),
            true_filter: Some(Box::new(f(Filter::BlockAllFilter(true)))),
            false_filter: Some(Box::new(inner)),
        })));
    }
    for test in must {
        inner = f(Filter::Condition(Box::new(Cond {
            predicate_filter: Some(Box::new(test)),
            true_filter: Some(Box::new(inner)),
            false_filter: Some(Box::new(f(Filter::BlockAllFilter(true)))),
        })));
    }
    Condition {
        filter: inner,
        write_on_match: true,
    }
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
    for branch in [&on_match, &on_no_match] {
        if hll::adds_to_sketch(def, branch) {
            return Err(Error::InvalidArgument(format!(
                "a check-and-mutate on table {table} adds to an HLL family: on the Bigtable \
                 backend cellar merges sketches itself under a condition of its own, which \
                 cannot be joined with the predicate's; add to the sketch in a write of its own"
            )));
        }
    }
    let matched = entry(def, RowMutation::new(key.to_vec(), on_match))?;
    let unmatched = entry(def, RowMutation::new(key.to_vec(), on_no_match))?;
    if matched.mutations.is_empty() && unmatched.mutations.is_empty() {
        // Nothing to write either way (Bigtable refuses such a call): only
        // whether the predicate matches, read as any read is.
        let request = ReadRequest::rows(RowSet::keys([key.to_vec()])).filter(predicate);
        return Ok(!read::collect(store, def, request)?.is_empty());
    }
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
