//! HyperLogLog families on Bigtable. Bigtable's own HLL families keep
//! HyperLogLog++ sketches in a format of their own, which `hll_count`
//! cannot read (and Google's emulator takes no input for them), so on the
//! Bigtable backend an HLL family is a family of plain bytes that holds
//! cellar's sketches, and cellar merges what is added to them itself:
//! it reads the cells a row adds to, merges the input into them, and
//! writes the sketches back with `CheckAndMutateRow` conditioned on those
//! cells being as it read them; when another writer came in between, it
//! reads and merges again, as UPDATE does. A row's other mutations go in
//! the same conditional write, so the row stays atomic, and rows of one
//! key are applied in the order they came.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::conditional::{Condition, UPDATE_ATTEMPTS, backoff, conditional_writes};
use super::translate::translate;
use super::{BigtableStore, data, read};
use crate::error::{Error, Result};
use crate::store::{
    FamilyKind, Mutation, RowMutation, TableDef, column_name, merge_aggregate, now_micros,
};
use data::row_filter::{Chain, Filter, Interleave};

/// Most HLL cells one conditional write adds to: its condition carries
/// each cell's sketch (4 KiB) twice, as the bounds of the values that
/// are not it.
const MAX_CELLS: usize = 32;
/// Keys whose writes go in one round (one read, then their conditional
/// writes).
const KEYS_PER_ROUND: usize = 1000;
/// Most distinct cells a read of the cells to merge names one by one;
/// with more it reads the families' cells at those times and picks.
const MAX_NAMED_CELLS: usize = 64;

/// A cell added to: family, qualifier, timestamp.
type Target = (Arc<str>, Vec<u8>, i64);
/// Values of cells read, by row key and cell.
type Found = BTreeMap<(Vec<u8>, Target), Vec<u8>>;

fn is_hll(def: &TableDef, family: &str) -> bool {
    def.family(family)
        .is_ok_and(|f| f.kind == FamilyKind::HyperLogLog)
}

/// Whether `mutations` add to a cell of an HLL family, so that it cannot go
/// to Bigtable as it is.
pub(super) fn adds_to_sketch(def: &TableDef, mutations: &[Mutation]) -> bool {
    mutations
        .iter()
        .any(|m| matches!(m, Mutation::AddToCell { family, .. } if is_hll(def, family)))
}

/// The keys of `rows` that some row adds to a sketch in: every row of
/// such a key goes through [`write`], so the rows of a key keep their
/// order.
pub(super) fn keys_merged<'a>(
    def: &TableDef,
    rows: impl IntoIterator<Item = &'a RowMutation>,
) -> HashSet<Vec<u8>> {
    rows.into_iter()
        .filter(|r| adds_to_sketch(def, &r.mutations))
        .map(|r| r.key.clone())
        .collect()
}

/// The time of a sketch cell added to: as given, or now in whole
/// milliseconds (Bigtable's grain).
fn sketch_time(timestamp: Option<i64>, now: i64) -> i64 {
    timestamp.unwrap_or(now)
}

/// The sketch cells `mutations` add to.
fn targets(def: &TableDef, mutations: &[Mutation], now: i64) -> BTreeSet<Target> {
    mutations
        .iter()
        .filter_map(|m| match m {
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                ..
            } if is_hll(def, family) => Some((
                Arc::from(family.as_str()),
                qualifier.clone(),
                sketch_time(*timestamp, now),
            )),
            _ => None,
        })
        .collect()
}

/// Rows of one key written by one conditional write, in their order.
struct Write {
    key: Vec<u8>,
    /// Each row's place among those given, and its mutations.
    rows: Vec<(usize, Vec<Mutation>)>,
    targets: BTreeSet<Target>,
}

/// Writes `rows` (each validated already), applying the rows of a key in
/// their order; the outcome of each row, by its place in `rows`.
pub(super) fn write(
    store: &BigtableStore,
    def: &TableDef,
    rows: Vec<RowMutation>,
) -> Result<Vec<Result<()>>> {
    let now = {
        let now = now_micros();
        now - now.rem_euclid(1000)
    };
    let mut outcomes: Vec<Option<Result<()>>> = (0..rows.len()).map(|_| None).collect();
    // Per key, its writes in order: a row joins the key's last write
    // while their cells together stay within MAX_CELLS.
    let mut queues: BTreeMap<Vec<u8>, Vec<Write>> = BTreeMap::new();
    for (i, row) in rows.into_iter().enumerate() {
        let targets = targets(def, &row.mutations, now);
        if targets.len() > MAX_CELLS {
            outcomes[i] = Some(Err(Error::InvalidArgument(format!(
                "row {} of table {} adds to {} HyperLogLog cells at once; on the Bigtable \
                 backend a row adds to at most {MAX_CELLS} (cellar merges each sketch itself \
                 and writes it back conditioned on it): split the row's columns over several \
                 statements",
                crate::codec::show_bytes(&row.key),
                def.name,
                targets.len()
            ))));
            continue;
        }
        let queue = queues.entry(row.key.clone()).or_default();
        match queue.last_mut() {
            Some(last) if last.targets.union(&targets).count() <= MAX_CELLS => {
                last.targets.extend(targets);
                last.rows.push((i, row.mutations));
            }
            _ => queue.push(Write {
                key: row.key,
                rows: vec![(i, row.mutations)],
                targets,
            }),
        }
    }
    // Round r takes the r-th write of every key.
    let mut queues: Vec<std::vec::IntoIter<Write>> =
        queues.into_values().map(Vec::into_iter).collect();
    loop {
        let round: Vec<Write> = queues.iter_mut().filter_map(Iterator::next).collect();
        if round.is_empty() {
            break;
        }
        for chunk in round.chunks(KEYS_PER_ROUND) {
            for (i, outcome) in write_round(store, def, chunk, now)? {
                outcomes[i] = Some(outcome);
            }
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(Error::Internal("a sketch write left no outcome".into()))))
        .collect())
}

/// A write's rows that go in with it, and its rows whose merge failed.
type Carried = (Vec<usize>, Vec<(usize, Error)>);

/// Writes of distinct keys, each tried until it goes in unchanged, up
/// to [`UPDATE_ATTEMPTS`] times; the outcome of each of their rows.
fn write_round(
    store: &BigtableStore,
    def: &TableDef,
    writes: &[Write],
    now: i64,
) -> Result<Vec<(usize, Result<()>)>> {
    let table = def.name.as_str();
    let keys: Vec<Vec<u8>> = writes.iter().map(|w| w.key.clone()).collect();
    let mut outcomes = Vec::new();
    let mut pending: Vec<usize> = (0..writes.len()).collect();
    for attempt in 0..UPDATE_ATTEMPTS {
        if pending.is_empty() {
            break;
        }
        if attempt > 0 {
            std::thread::sleep(backoff(attempt));
        }
        let mut found = read_targets(store, def, writes, &pending)?;
        let mut calls = Vec::new();
        // Per write sent, its rows that go in with it and those whose
        // merge failed (their outcome once the write is decided: tried
        // again, they are merged again).
        let mut carried: BTreeMap<usize, Carried> = BTreeMap::new();
        for &w in &pending {
            let write = &writes[w];
            let read: BTreeMap<Target, Option<Vec<u8>>> = write
                .targets
                .iter()
                .map(|t| (t.clone(), found.remove(&(write.key.clone(), t.clone()))))
                .collect();
            let mut cells = read.clone();
            let mut mutations = Vec::new();
            let (mut rows, mut failed) = (Vec::new(), Vec::new());
            for (i, row) in &write.rows {
                match merged(def, row, &mut cells, now) {
                    Ok(row_mutations) => {
                        mutations.extend(row_mutations);
                        rows.push(*i);
                    }
                    // A row that fails leaves the cells as they were, as
                    // the embedded store's rows do; the key's other rows
                    // still go.
                    Err(e) => failed.push((*i, e)),
                }
            }
            if rows.is_empty() {
                outcomes.extend(failed.into_iter().map(|(i, e)| (i, Err(e))));
                continue;
            }
            carried.insert(w, (rows, failed));
            calls.push((
                w,
                Condition {
                    filter: changed(&read),
                    write_on_match: false,
                },
                mutations,
            ));
        }
        let written = conditional_writes(store, table, &keys, calls)?;
        pending.clear();
        for (w, outcome) in written {
            let (rows, failed) = carried.remove(&w).unwrap_or_default();
            match outcome {
                Ok(false) => {
                    pending.push(w);
                    continue;
                }
                Ok(true) => outcomes.extend(rows.into_iter().map(|i| (i, Ok(())))),
                Err(e) => outcomes.extend(rows.into_iter().map(|i| (i, Err(copy(&e))))),
            }
            outcomes.extend(failed.into_iter().map(|(i, e)| (i, Err(e))));
        }
    }
    for w in pending {
        for (i, _) in &writes[w].rows {
            outcomes.push((
                *i,
                Err(Error::WriteConflict {
                    table: table.to_string(),
                    key: crate::codec::show_bytes(&writes[w].key),
                    attempts: UPDATE_ATTEMPTS,
                }),
            ));
        }
    }
    Ok(outcomes)
}

/// The same error again, for each row of a write that failed.
fn copy(e: &Error) -> Error {
    match e {
        Error::Remote {
            call,
            code,
            message,
        } => Error::Remote {
            call: call.clone(),
            code: code.clone(),
            message: message.clone(),
        },
        Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
        other => Error::Internal(other.to_string()),
    }
}

/// The values of the cells `writes[pending]` add to, as Bigtable holds
/// them (GC not applied): by key and cell; a cell not there is missing.
fn read_targets(
    store: &BigtableStore,
    def: &TableDef,
    writes: &[Write],
    pending: &[usize],
) -> Result<Found> {
    let all: BTreeSet<&Target> = pending.iter().flat_map(|&w| &writes[w].targets).collect();
    let families: Vec<Arc<str>> = all
        .iter()
        .map(|(f, _, _)| f.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let filter = if all.len() <= MAX_NAMED_CELLS {
        any_of(all.iter().map(|t| cell(t, Vec::new())).collect())
    } else {
        let start = all.iter().map(|t| t.2).min().unwrap_or(0);
        let end = all.iter().map(|t| t.2).max().unwrap_or(0);
        chain(vec![
            Filter::FamilyNameRegexFilter(format!(
                "^(?:{})$",
                families
                    .iter()
                    .map(|f| regex::escape(f))
                    .collect::<Vec<_>>()
                    .join("|")
            )),
            Filter::TimestampRangeFilter(data::TimestampRange {
                start_timestamp_micros: start,
                end_timestamp_micros: end.saturating_add(1000),
            }),
        ])
    };
    let keys = pending.iter().map(|&w| writes[w].key.clone()).collect();
    let mut found = BTreeMap::new();
    for row in read::raw_rows(store, &def.name, families, keys, filter)? {
        for c in row.cells {
            found.insert(
                (row.key.clone(), (c.family, c.qualifier, c.timestamp)),
                c.value,
            );
        }
    }
    Ok(found)
}

/// `mutations` as Bigtable's, each sketch added to written whole (merged
/// into `cells`, which follow the row's deletes too).
fn merged(
    def: &TableDef,
    mutations: &[Mutation],
    cells: &mut BTreeMap<Target, Option<Vec<u8>>>,
    now: i64,
) -> Result<Vec<data::Mutation>> {
    let mut after = cells.clone();
    let mut out = Vec::with_capacity(mutations.len());
    for m in mutations {
        let m = match m {
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } if is_hll(def, family) => {
                let at = sketch_time(*timestamp, now);
                let target = (Arc::from(family.as_str()), qualifier.clone(), at);
                let existing = after.get(&target).cloned().flatten();
                let sketch = merge_aggregate(
                    FamilyKind::HyperLogLog,
                    &column_name(family, qualifier),
                    existing.as_deref(),
                    input,
                )?;
                after.insert(target, Some(sketch.clone()));
                Mutation::SetCell {
                    family: family.clone(),
                    qualifier: qualifier.clone(),
                    timestamp: Some(at),
                    value: sketch,
                }
            }
            other => {
                for ((f, q, t), value) in after.iter_mut() {
                    match other {
                        Mutation::SetCell {
                            family,
                            qualifier,
                            timestamp: Some(ts),
                            value: new,
                        } if **f == **family && q == qualifier && t == ts => {
                            *value = Some(new.clone());
                        }
                        Mutation::DeleteCells {
                            family,
                            qualifier,
                            time_range,
                        } if **f == **family && q == qualifier && time_range.contains(*t) => {
                            *value = None;
                        }
                        Mutation::DeleteFamily { family } if **f == **family => *value = None,
                        Mutation::DeleteRow => *value = None,
                        _ => {}
                    }
                }
                other.clone()
            }
        };
        translate(def, m, &mut out)?;
    }
    *cells = after;
    Ok(out)
}

/// A filter that passes a cell exactly: its column and millisecond,
/// and `more`.
fn cell((family, qualifier, at): &Target, more: Vec<Filter>) -> data::RowFilter {
    let mut filters = vec![
        Filter::ColumnRangeFilter(data::ColumnRange {
            family_name: family.to_string(),
            start_qualifier: Some(data::column_range::StartQualifier::StartQualifierClosed(
                qualifier.clone(),
            )),
            end_qualifier: Some(data::column_range::EndQualifier::EndQualifierClosed(
                qualifier.clone(),
            )),
        }),
        Filter::TimestampRangeFilter(data::TimestampRange {
            start_timestamp_micros: *at,
            end_timestamp_micros: at.saturating_add(1000),
        }),
    ];
    filters.extend(more);
    chain(filters)
}

fn chain(filters: Vec<Filter>) -> data::RowFilter {
    data::RowFilter {
        filter: Some(Filter::Chain(Chain {
            filters: filters
                .into_iter()
                .map(|f| data::RowFilter { filter: Some(f) })
                .collect(),
        })),
    }
}

/// A filter that passes what any of `filters` passes (Bigtable wants
/// two or more in an interleave).
fn any_of(mut filters: Vec<data::RowFilter>) -> data::RowFilter {
    if filters.len() == 1
        && let Some(only) = filters.pop()
    {
        return only;
    }
    data::RowFilter {
        filter: Some(Filter::Interleave(Interleave { filters })),
    }
}

/// A predicate that matches when a cell is not as `read` has it: one
/// read missing is there, or one read has another value (below it or
/// above it, byte-wise).
fn changed(read: &BTreeMap<Target, Option<Vec<u8>>>) -> data::RowFilter {
    use data::value_range::{EndValue, StartValue};
    let mut tests = Vec::new();
    for (target, value) in read {
        match value {
            None => tests.push(cell(target, Vec::new())),
            Some(value) => {
                tests.push(cell(
                    target,
                    vec![Filter::ValueRangeFilter(data::ValueRange {
                        start_value: None,
                        end_value: Some(EndValue::EndValueOpen(value.clone())),
                    })],
                ));
                tests.push(cell(
                    target,
                    vec![Filter::ValueRangeFilter(data::ValueRange {
                        start_value: Some(StartValue::StartValueOpen(value.clone())),
                        end_value: None,
                    })],
                ));
            }
        }
    }
    any_of(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_cell_is_tested_both_ways_and_a_missing_one_for_being_there() {
        let t = |q: &str| (Arc::from("h"), q.as_bytes().to_vec(), 0);
        let one: BTreeMap<Target, Option<Vec<u8>>> = [(t("a"), None)].into();
        // A single test is not wrapped in an interleave (Bigtable wants two).
        assert!(matches!(one_filter(&changed(&one)), Filter::Chain(_)));
        let two: BTreeMap<Target, Option<Vec<u8>>> =
            [(t("a"), Some(b"s".to_vec())), (t("b"), None)].into();
        match one_filter(&changed(&two)) {
            Filter::Interleave(i) => assert_eq!(i.filters.len(), 3),
            other => panic!("not an interleave: {other:?}"),
        }
    }

    fn one_filter(f: &data::RowFilter) -> &Filter {
        f.filter.as_ref().unwrap()
    }
}
