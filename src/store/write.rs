//! Writes: row locks, commits, atomic row mutations, bulk mutations,
//! read-modify-write and check-and-mutate. Every write of a row happens
//! under the row's lock, so conditional and read-modify-write operations
//! are linearizable per row.

use super::apply::apply;
use super::commit::{Durability, lock};
use super::engine::{BULK_CHUNK_ROWS, FjallStore, LOCK_STRIPES, TableHandle};
use super::mutation::{
    MAX_QUALIFIER_LEN, MAX_VALUE_LEN, Mutation, ReadModifyWrite, RowMutation, check_key,
};
use super::overlay::Overlay;
use super::read::FjallRows;
use super::request::{Cell, ReadFilter, ReadRequest, Row, RowSet};
use super::time::now_micros;
use super::{aggregate, mutation};
use crate::error::{Error, Result};
use fjall::PersistMode;
use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

impl FjallStore {
    fn stripe(&self, table: &TableHandle, key: &[u8]) -> usize {
        // xxh3 seeded per store and table: a bulk write hashes every key.
        let seed = self.inner.lock_seed ^ table.def.id;
        (xxhash_rust::xxh3::xxh3_64_with_seed(key, seed) as usize) % LOCK_STRIPES
    }

    pub(super) fn lock_rows<'a>(
        &'a self,
        table: &TableHandle,
        keys: impl Iterator<Item = &'a [u8]>,
    ) -> Vec<MutexGuard<'a, ()>> {
        let mut stripes: Vec<usize> = keys.map(|k| self.stripe(table, k)).collect();
        // A fixed order across callers rules out deadlock: ascending. Many
        // keys (a bulk write's) are marked in a map of the stripes rather
        // than sorted.
        if stripes.len() > LOCK_STRIPES / 8 {
            let mut marked = vec![false; LOCK_STRIPES];
            for &s in &stripes {
                marked[s] = true;
            }
            stripes.clear();
            stripes.extend((0..LOCK_STRIPES).filter(|&s| marked[s]));
        } else {
            stripes.sort_unstable();
            stripes.dedup();
        }
        stripes
            .into_iter()
            .map(|s| lock(&self.inner.row_locks[s]))
            .collect()
    }

    pub(super) fn commit(&self, table: &TableHandle, overlay: Overlay) -> Result<()> {
        self.commit_pairs(table, overlay, Vec::new())
    }

    /// Commits an overlay and pairs written beside it, (slot, key, value),
    /// which touch no row the overlay does, in one batch.
    pub(super) fn commit_pairs(
        &self,
        table: &TableHandle,
        mut overlay: Overlay,
        pairs: Vec<(usize, Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        overlay.seal(table)?;
        if overlay.writes.is_empty() && pairs.is_empty() {
            return Ok(());
        }
        let mut batch = self.inner.db.batch().durability(Some(PersistMode::Buffer));
        for ((family, key), value) in overlay.writes {
            let ks = &table.keyspaces[family];
            match value {
                Some(value) => batch.insert(ks, key, value),
                None => batch.remove(ks, key),
            }
        }
        for (slot, key, value) in pairs {
            batch.insert(&table.keyspaces[slot], key, value);
        }
        batch.commit()?;
        if self.inner.durability == Durability::Synced {
            self.inner.sync.wait_durable(&self.inner.db)?;
        }
        Ok(())
    }

    /// Writes pairs of one slot whose keys strictly ascend as new sorted
    /// tables of its LSM (fjall's ingestion): no journal, no memtable, no
    /// flush. The tables become visible at once, at a sequence number above
    /// every write before, and are on disk (fsynced) when this returns; a
    /// crash before leaves none of them. The caller holds the locks of
    /// every row written and has made sure that no pair of these rows is
    /// stored, so the new pairs hide nothing.
    pub(super) fn ingest_pairs(
        &self,
        table: &TableHandle,
        slot: usize,
        pairs: Vec<(usize, Vec<u8>, Vec<u8>)>,
        rows: usize,
    ) -> Result<()> {
        let mut ingestion = table.keyspaces[slot].start_ingestion()?;
        for (_, key, value) in pairs {
            ingestion.write(key, value)?;
        }
        ingestion.finish()?;
        self.inner
            .ingested
            .fetch_add(rows as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Applies one row mutation atomically.
    pub fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        let mut results = self.mutate_rows(table, vec![row])?;
        results.pop().unwrap_or(Ok(()))
    }

    /// Applies many row mutations, each atomically, in order, and reports
    /// each row's outcome; a row that fails changes nothing. Rows are
    /// committed in batches; an `Err` from the call itself is a storage
    /// failure, after which rows of earlier batches stay committed.
    pub fn mutate_rows(&self, table: &str, rows: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        let handle = self.handle(table)?;
        let mut results = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(BULK_CHUNK_ROWS) {
            let checked: Vec<Result<()>> = chunk
                .iter()
                .map(|row| mutation::validate(&handle.def, row))
                .collect();
            let valid = chunk
                .iter()
                .zip(&checked)
                .filter(|(_, c)| c.is_ok())
                .map(|(r, _)| r.key.as_slice());
            let _guards = self.lock_rows(&handle, valid);
            let (locked, snapshot) = self.locked_view(table, &handle)?;
            let now = now_micros();
            let mut overlay = Overlay::default();
            let mut outcomes = Vec::with_capacity(chunk.len());
            for (row, check) in chunk.iter().zip(checked) {
                let outcome =
                    check.and_then(|()| apply(&snapshot, &locked, &mut overlay, row, now));
                outcomes.push(outcome);
            }
            self.commit(&locked, overlay)?;
            results.extend(outcomes);
        }
        Ok(results)
    }

    /// Reads rows and writes what `change` makes of them, atomically per
    /// row: each row stays locked from its read to the commit, so no other
    /// write to it comes in between (an UPDATE computing `n = n * 2` or
    /// `t = t || 'x'` this way loses no concurrent update). Rows go in
    /// chunks; `change` gets a chunk's keys and its rows as read through
    /// `filter` (`None` for a row with no cells there) and returns, per
    /// key, the mutations to apply (none: leave the row as it is). A row
    /// whose mutations are invalid fails alone.
    pub fn update_rows<F>(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        filter: &ReadFilter,
        mut change: F,
    ) -> Result<Vec<Result<()>>>
    where
        F: FnMut(&[Vec<u8>], &[Option<Row>]) -> Result<Vec<Vec<Mutation>>>,
    {
        let first = self.handle(table)?;
        first.family_scans(filter.families.as_deref())?;
        let mut results = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BULK_CHUNK_ROWS) {
            for key in chunk {
                check_key(key)?;
            }
            let _guards = self.lock_rows(&first, chunk.iter().map(Vec::as_slice));
            let (handle, snapshot) = self.locked_view(table, &first)?;
            let families = handle.family_scans(filter.families.as_deref())?;
            let now = now_micros();
            let request =
                ReadRequest::rows(RowSet::keys(chunk.iter().cloned())).filter(filter.clone());
            let mut found: BTreeMap<Vec<u8>, Row> = BTreeMap::new();
            for row in FjallRows::new(snapshot.clone(), families, request, now) {
                let row = row?;
                found.insert(row.key.clone(), row);
            }
            let rows: Vec<Option<Row>> = chunk.iter().map(|k| found.remove(k)).collect();
            let changes = change(chunk, &rows)?;
            if changes.len() != chunk.len() {
                return Err(Error::Internal(format!(
                    "an update of {table} returned changes for {} rows, not {}",
                    changes.len(),
                    chunk.len()
                )));
            }
            let mut overlay = Overlay::default();
            for (key, mutations) in chunk.iter().zip(changes) {
                if mutations.is_empty() {
                    results.push(Ok(()));
                    continue;
                }
                let row = RowMutation::new(key.clone(), mutations);
                let outcome = mutation::validate(&handle.def, &row)
                    .and_then(|()| apply(&snapshot, &handle, &mut overlay, &row, now));
                results.push(outcome);
            }
            self.commit(&handle, overlay)?;
        }
        Ok(results)
    }

    /// Reads the row with `predicate`; applies `on_match` if that yields any
    /// cell, else `on_no_match`. Returns whether it matched. Atomic and
    /// linearizable with every other mutation of the row.
    pub fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        predicate: ReadFilter,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let handle = self.handle(table)?;
        let matched_row = RowMutation::new(key, on_match);
        let unmatched_row = RowMutation::new(key, on_no_match);
        mutation::validate(&handle.def, &matched_row)?;
        mutation::validate(&handle.def, &unmatched_row)?;
        handle.family_scans(predicate.families.as_deref())?;
        let _guard = self.lock_rows(&handle, std::iter::once(key));
        let (handle, snapshot) = self.locked_view(table, &handle)?;
        let families = handle.family_scans(predicate.families.as_deref())?;
        let now = now_micros();
        let request = ReadRequest::rows(RowSet::keys([key]))
            .filter(predicate)
            .limit(1);
        let matched = FjallRows::new(snapshot.clone(), families, request, now)
            .next()
            .transpose()?
            .is_some();
        let chosen = if matched {
            &matched_row
        } else {
            &unmatched_row
        };
        let mut pending = Overlay::default();
        apply(&snapshot, &handle, &mut pending, chosen, now)?;
        self.commit(&handle, pending)?;
        Ok(matched)
    }

    /// Applies append and increment rules to the latest cells of a row,
    /// atomically; returns the cells written. An increment wraps at
    /// int64's ends, as Bigtable's does.
    pub fn read_modify_write(
        &self,
        table: &str,
        key: &[u8],
        rules: Vec<ReadModifyWrite>,
    ) -> Result<Row> {
        let first = self.handle(table)?;
        check_key(key)?;
        let _guard = self.lock_rows(&first, std::iter::once(key));
        let (handle, snapshot) = self.locked_view(table, &first)?;
        let now = now_micros();
        let mut overlay = Overlay::default();
        let mut cells: Vec<Cell> = Vec::new();
        for rule in rules {
            let (family, qualifier) = match &rule {
                ReadModifyWrite::Append {
                    family, qualifier, ..
                }
                | ReadModifyWrite::Increment {
                    family, qualifier, ..
                } => (family, qualifier),
            };
            let index = handle
                .def
                .families
                .iter()
                .position(|f| &f.name == family)
                .ok_or_else(|| Error::FamilyNotFound {
                    table: table.to_string(),
                    family: family.clone(),
                })?;
            let def = &handle.def.families[index];
            let column = mutation::column_name(family, qualifier);
            if def.kind.is_aggregate() {
                return Err(Error::InvalidMutation {
                    reason: format!(
                        "cannot read-modify-write column {column}: family {family:?} is an aggregate family; add to it instead"
                    ),
                });
            }
            if qualifier.len() > MAX_QUALIFIER_LEN {
                return Err(Error::QualifierTooLarge {
                    len: qualifier.len(),
                    max: MAX_QUALIFIER_LEN,
                });
            }
            let latest = overlay
                .column(&snapshot, &handle, index, key, qualifier)?
                .into_iter()
                .next()
                .filter(|(ts, _)| !def.gc.is_garbage(0, *ts, now));
            let value = match &rule {
                ReadModifyWrite::Append { suffix, .. } => {
                    let mut value = latest.as_ref().map(|(_, v)| v.clone()).unwrap_or_default();
                    value.extend_from_slice(suffix);
                    if value.len() > MAX_VALUE_LEN {
                        return Err(Error::ValueTooLarge {
                            len: value.len(),
                            max: MAX_VALUE_LEN,
                        });
                    }
                    value
                }
                ReadModifyWrite::Increment { delta, .. } => {
                    let old = match &latest {
                        Some((_, v)) => aggregate::decode_i64("increment", &column, v)?,
                        None => 0,
                    };
                    // Bigtable's increment wraps at the ends of int64
                    // (its clients' tests assert it); so does ours.
                    old.wrapping_add(*delta).to_be_bytes().to_vec()
                }
            };
            // The new cell must be the column's latest even if a cell carries a future time.
            let ts = latest.as_ref().map_or(now, |(ts, _)| now.max(*ts));
            overlay.put_cell(&snapshot, &handle, index, key, qualifier, ts, value.clone())?;
            cells.retain(|c| !(&*c.family == family.as_str() && c.qualifier == *qualifier));
            cells.push(Cell {
                family: Arc::from(family.as_str()),
                qualifier: qualifier.clone(),
                timestamp: ts,
                value,
            });
        }
        self.commit(&handle, overlay)?;
        Ok(Row {
            key: key.to_vec(),
            cells,
        })
    }
}
