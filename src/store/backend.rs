//! The storage trait: what the layers above the store (schema, query, sql,
//! shell, flight) need of a wide-column store, and [`Store`], the cheap
//! handle to a backend they hold.
//!
//! Two backends implement [`Backend`]: [`FjallStore`], the embedded store
//! on local disk (the default), and, with the `bigtable` feature, a Cloud
//! Bigtable instance. The vocabulary is the store's own ([`ReadRequest`],
//! [`RowMutation`], [`TableDef`], ...): a backend translates it into its
//! own terms and says plainly what it cannot do.
//!
//! A row is lent as a [`RowView`] from buffers the backend reuses, so the
//! trait costs one dynamic call per row, not per cell.

use super::activity::{ActivityRecord, ReadTally};
use super::bulk::{BadRows, CellBatch};
use super::definition::{AlterOp, TableDef, TableSpec};
use super::engine::{FjallStore, FormatChange, GcStats};
use super::format::FamilyFormat;
use super::gate::{Pinned, WriteGate};
use super::mutation::{Mutation, ReadModifyWrite, RowMutation};
use super::probe::RowProbe;
use super::request::{ReadFilter, ReadRequest, Row, RowSet};
use super::sizes::RangeSize;
use super::source::RowStream;
use super::time::now_micros;
use crate::codec::RowRange;
use crate::error::{Error, Result};
use std::any::Any;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

/// What [`Backend::update_rows`] asks of its caller per chunk of rows:
/// given the keys and the rows as read (`None`: no cells), the mutations
/// to apply per key.
pub type RowChange<'a> = dyn FnMut(&[Vec<u8>], &[Option<Row>]) -> Result<Vec<Vec<Mutation>>> + 'a;

/// What a backend can do beyond the [`Backend`] contract.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Reads come from local storage without waiting on a network, so a
    /// scan reads on the thread that polls it, a step at a time; otherwise
    /// on a blocking thread, ahead of the consumer.
    pub reads_in_place: bool,
    /// Families may be stored PACKED (one pair per row and family).
    pub packed_families: bool,
}

/// A wide-column store as the layers above see it. Every operation is
/// atomic per row; reads see one consistent view per call where the
/// backend offers one (fjall: a snapshot; Bigtable: per row).
pub trait Backend: Send + Sync + 'static {
    /// Where the data lives, for people: a directory or an instance.
    fn locator(&self) -> String;

    /// Where the data lives, for another process of this machine or
    /// cluster to open it again ([`Store::open_address`]):
    /// `fjall:<directory>` or `bigtable:<instance>@<endpoint>`.
    fn address(&self) -> String;

    /// The microseconds between two timestamps the backend can store:
    /// 1 for the embedded store, 1000 for Bigtable (milliseconds). Clocks
    /// that stamp cells step by it.
    fn timestamp_granularity(&self) -> i64 {
        1
    }

    /// What the backend can do beyond this trait's contract: the layers
    /// above choose by it, never by which backend it is.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// The backend as `Any`, for embedding code that needs what only one
    /// backend offers ([`Store::local`]); cellar's own layers ask
    /// [`Backend::capabilities`] instead.
    fn as_any(&self) -> &dyn Any;

    /// What opening the store found and dropped or set aside, in words
    /// (a torn journal tail, a damaged keyspace): the shell shows them.
    fn recovery_notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Rows written by ingestion since the store opened (`SHOW STATS`).
    fn rows_ingested(&self) -> u64 {
        0
    }

    /// A number that moves with every change to the catalog, when only
    /// this process changes it: a plan kept for a statement's text stays
    /// valid while it does not move. `None` on a backend whose catalog
    /// other processes change (Cloud Bigtable), where nothing planned may
    /// be kept.
    fn catalog_generation(&self) -> Option<u64> {
        None
    }

    // ---- catalog ----------------------------------------------------

    /// The names of all tables, sorted.
    fn list_tables(&self) -> Vec<String>;
    /// A table's definition.
    fn table(&self, name: &str) -> Result<TableDef>;
    /// Creates a table.
    fn create_table(&self, spec: TableSpec) -> Result<TableDef>;
    /// Changes a table's definition: all operations or none.
    fn alter_table(&self, name: &str, ops: Vec<AlterOp>) -> Result<TableDef>;
    /// Drops a table and all its cells.
    fn drop_table(&self, name: &str) -> Result<()>;
    /// Puts table `source` in the place of `target` (see
    /// [`FjallStore::replace_table`]); the new definition of `target`.
    fn replace_table(&self, target: &str, source: &str) -> Result<TableDef>;
    /// Tables whose definitions could not be read, with why.
    fn damaged_tables(&self) -> Vec<(String, String)>;
    /// Sets (`Some`) or removes (`None`) a store-wide setting of the
    /// layers above, such as a registered `.proto` source.
    fn put_setting(&self, key: &str, value: Option<&str>) -> Result<()>;
    /// The settings whose names start with `prefix`, sorted by name.
    fn settings(&self, prefix: &str) -> Result<Vec<(String, String)>>;

    // ---- reads ------------------------------------------------------

    /// Reads rows, lazily.
    fn read_rows(&self, table: &str, request: ReadRequest) -> Result<RowStream>;
    /// Pins a table as it is now.
    fn pin(&self, table: &str) -> Result<Pinned>;
    /// Reads rows of a pinned table (see [`Pinned`]).
    fn read_pinned(&self, pinned: &Pinned, request: ReadRequest) -> Result<RowStream>;
    /// Row keys that split a table into pieces of about equal size, each
    /// with the bytes before it (Bigtable's `SampleRowKeys`): the end of
    /// each piece, in key order; the last is the empty key (the end).
    fn sample_row_keys(&self, table: &str) -> Result<Vec<(Vec<u8>, u64)>>;
    /// About how many cells a table holds: for planning, never answers.
    fn approximate_cells(&self, table: &str) -> Result<u64>;
    /// Bytes a table occupies in the backend's storage.
    fn table_disk_space(&self, table: &str) -> Result<u64>;
    /// The first and last row keys of `range` in `family` and its rows
    /// counted up to `limit`, reading a few pairs a row: how a planner
    /// splits a range by what it holds. `None` when the backend cannot do
    /// it cheaply (a network round trip per probe): split by
    /// [`Backend::sample_row_keys`] instead.
    fn probe_rows(
        &self,
        _table: &str,
        _family: &str,
        _range: &RowRange,
        _limit: usize,
    ) -> Result<Option<RowProbe>> {
        Ok(None)
    }
    /// How large `range` of `table` is in the families `families` (all
    /// when `None`) and where to cut it into `n` pieces of about equal
    /// size, from what the backend knows without reading rows (the
    /// embedded store: its tables' block indexes and memtable sizes).
    /// `None` when it cannot say: split by key space or
    /// [`Backend::sample_row_keys`] instead.
    fn range_size(
        &self,
        _table: &str,
        _families: Option<&[String]>,
        _range: &RowRange,
        _n: usize,
    ) -> Result<Option<RangeSize>> {
        Ok(None)
    }

    /// The reads and writes counted in `table` per key range and minute,
    /// from minute `since` (microseconds since the epoch) on, ordered by
    /// minute and key; `None` when the backend counts none (Cloud
    /// Bigtable has its own Key Visualizer) or counting is off.
    fn key_activity(&self, table: &str, _since: i64) -> Result<Option<Vec<ActivityRecord>>> {
        self.table(table)?;
        Ok(None)
    }

    // ---- writes -----------------------------------------------------

    /// Applies one row's mutations atomically.
    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()>;
    /// Applies many rows' mutations, each atomically; a result per row.
    fn mutate_rows(&self, table: &str, rows: Vec<RowMutation>) -> Result<Vec<Result<()>>>;
    /// Writes a batch of cells, atomically per row; the rows that could
    /// not be written (see [`FjallStore::write_batch`]).
    fn write_batch(
        &self,
        table: &str,
        batch: &CellBatch,
        bad: BadRows,
    ) -> Result<Vec<(usize, Error)>>;
    /// Does ahead, outside any lock, what of writing `batch` needs no
    /// look at the store (the embedded store: encoding its new rows into
    /// pairs, as if nothing were stored for them), so that a pipeline can
    /// do it while the batch before is written. [`Backend::write_batch`]
    /// then uses it where it still holds (the table unchanged, nothing
    /// stored in the batch's key span) and does the work again where not;
    /// the result is the same either way. Nothing by default.
    fn prepare_batch(&self, _table: &str, _batch: &mut CellBatch) -> Result<()> {
        Ok(())
    }
    /// Reads rows and writes what `change` makes of them, each row
    /// atomically from its read to its write (see
    /// [`FjallStore::update_rows`]).
    fn update_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        filter: &ReadFilter,
        change: &mut RowChange<'_>,
    ) -> Result<Vec<Result<()>>>;
    /// Applies `on_match` if the row has a cell through `predicate`, else
    /// `on_no_match`; whether it matched.
    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        predicate: ReadFilter,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool>;
    /// Applies append and increment rules to a row's latest cells,
    /// atomically; the cells written.
    fn read_modify_write(
        &self,
        table: &str,
        key: &[u8],
        rules: Vec<ReadModifyWrite>,
    ) -> Result<Row>;
    /// The gate a table's writers pass while it may be replaced.
    fn write_gate(&self, table: &str) -> Arc<WriteGate>;

    // ---- maintenance ------------------------------------------------

    /// Changes a family's physical format online, calling `progress`
    /// after every step (false stops it, resumable).
    fn set_family_format(
        &self,
        table: &str,
        family: &str,
        format: FamilyFormat,
        progress: &mut dyn FnMut(FormatChange) -> bool,
    ) -> Result<FormatChange>;
    /// Format changes under way: table, family, target and progress.
    fn format_changes(&self) -> Vec<(String, String, FamilyFormat, FormatChange)>;
    /// Deletes a table's cells that its families' GC policies select.
    fn collect_garbage(&self, table: &str) -> Result<GcStats>;
    /// [`Backend::collect_garbage`] for one family.
    fn collect_family_garbage(&self, table: &str, family: &str) -> Result<GcStats>;
    /// Compacts a table's storage, reclaiming deleted and expired cells.
    fn compact(&self, table: &str) -> Result<()>;
    /// [`Backend::collect_garbage`], then every family compacted (what
    /// `COMPACT TABLE` runs). A backend may merge each family once.
    fn collect_and_compact(&self, table: &str) -> Result<GcStats> {
        let stats = self.collect_garbage(table)?;
        self.compact(table)?;
        Ok(stats)
    }
    /// Makes every committed write durable.
    fn flush(&self) -> Result<()>;
    /// Leaves storage so that the next open is quick (called at close).
    fn checkpoint(&self) -> Result<()>;
}

/// An open store: a cheap handle to a [`Backend`], shared by every layer
/// above. `Store::open` opens the embedded store in a directory.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("at", &self.backend.locator())
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl From<FjallStore> for Store {
    fn from(store: FjallStore) -> Self {
        Store::new(Arc::new(store))
    }
}

impl Store {
    /// A handle to `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Store { backend }
    }

    /// Opens (or creates) the embedded store in directory `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        FjallStore::open(path).map(Store::from)
    }

    /// The embedded store, if that is the backend.
    pub fn local(&self) -> Option<&FjallStore> {
        self.backend.as_any().downcast_ref()
    }

    /// [`Backend::key_activity`], or an error saying that this store
    /// counts none.
    pub fn activity_records(&self, table: &str, since: i64) -> Result<Vec<ActivityRecord>> {
        self.backend.key_activity(table, since)?.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "this store counts no key activity for table '{table}' (counting is off, or the \
                 backend is Cloud Bigtable, whose Key Visualizer shows it)"
            ))
        })
    }

    /// [`Backend::update_rows`] with a closure.
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
        self.backend.update_rows(table, keys, filter, &mut change)
    }

    /// Reads one row.
    pub fn read_row(&self, table: &str, key: &[u8], filter: ReadFilter) -> Result<Option<Row>> {
        let request = ReadRequest::rows(RowSet::keys([key])).filter(filter);
        self.backend.read_rows(table, request)?.next().transpose()
    }
}

impl Backend for FjallStore {
    fn locator(&self) -> String {
        self.path().display().to_string()
    }

    fn address(&self) -> String {
        format!("fjall:{}", self.path().display())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            reads_in_place: true,
            packed_families: true,
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn recovery_notes(&self) -> Vec<String> {
        FjallStore::recovery_notes(self).to_vec()
    }

    fn rows_ingested(&self) -> u64 {
        FjallStore::rows_ingested(self)
    }

    fn catalog_generation(&self) -> Option<u64> {
        Some(FjallStore::catalog_generation(self))
    }

    fn probe_rows(
        &self,
        table: &str,
        family: &str,
        range: &RowRange,
        limit: usize,
    ) -> Result<Option<RowProbe>> {
        FjallStore::probe_rows(self, table, family, range, limit).map(Some)
    }

    fn range_size(
        &self,
        table: &str,
        families: Option<&[String]>,
        range: &RowRange,
        n: usize,
    ) -> Result<Option<RangeSize>> {
        FjallStore::range_size(self, table, families, range, n).map(Some)
    }

    fn list_tables(&self) -> Vec<String> {
        FjallStore::list_tables(self)
    }

    fn table(&self, name: &str) -> Result<TableDef> {
        FjallStore::table(self, name)
    }

    fn create_table(&self, spec: TableSpec) -> Result<TableDef> {
        FjallStore::create_table(self, spec)
    }

    fn alter_table(&self, name: &str, ops: Vec<AlterOp>) -> Result<TableDef> {
        FjallStore::alter_table(self, name, ops)
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        FjallStore::drop_table(self, name)?;
        self.forget_activity(name)
    }

    fn replace_table(&self, target: &str, source: &str) -> Result<TableDef> {
        let def = FjallStore::replace_table(self, target, source)?;
        // The table keeps its name and its activity; the name it was
        // built under is gone.
        self.forget_activity(source)?;
        Ok(def)
    }

    fn damaged_tables(&self) -> Vec<(String, String)> {
        FjallStore::damaged_tables(self)
    }

    fn put_setting(&self, key: &str, value: Option<&str>) -> Result<()> {
        FjallStore::put_setting(self, key, value)
    }

    fn settings(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        FjallStore::settings(self, prefix)
    }

    fn read_rows(&self, table: &str, request: ReadRequest) -> Result<RowStream> {
        // One clock reading: the age limits' and the read's start.
        let now = now_micros();
        let tally = self.read_tally(table, &request, now);
        let rows = FjallStore::read_rows(self, table, request, now)?.tallied(tally);
        Ok(RowStream::new(Box::new(rows)))
    }

    fn pin(&self, table: &str) -> Result<Pinned> {
        FjallStore::pin(self, table)
    }

    fn read_pinned(&self, pinned: &Pinned, request: ReadRequest) -> Result<RowStream> {
        let now = now_micros();
        let tally = self.read_tally(&pinned.def().name, &request, now);
        let rows = FjallStore::read_pinned(self, pinned, request, now)?.tallied(tally);
        Ok(RowStream::new(Box::new(rows)))
    }

    fn sample_row_keys(&self, table: &str) -> Result<Vec<(Vec<u8>, u64)>> {
        FjallStore::sample_row_keys(self, table)
    }

    fn approximate_cells(&self, table: &str) -> Result<u64> {
        FjallStore::approximate_cells(self, table)
    }

    fn table_disk_space(&self, table: &str) -> Result<u64> {
        FjallStore::table_disk_space(self, table)
    }

    fn key_activity(&self, table: &str, since: i64) -> Result<Option<Vec<ActivityRecord>>> {
        FjallStore::table(self, table)?;
        match &self.inner.activity {
            None => Ok(None),
            Some(activity) => activity.records(table, since).map(Some),
        }
    }

    fn mutate_row(&self, table: &str, row: RowMutation) -> Result<()> {
        let counted = self
            .write_began()
            .map(|began| (began, row.key.clone(), row.bytes()));
        FjallStore::mutate_row(self, table, row)?;
        if let Some((began, key, bytes)) = counted {
            self.count_writes(table, began, [(&key[..], bytes)]);
        }
        Ok(())
    }

    fn mutate_rows(&self, table: &str, rows: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        let counted = self.write_began().map(|began| {
            let rows: Vec<_> = rows.iter().map(|r| (r.key.clone(), r.bytes())).collect();
            (began, rows)
        });
        let results = FjallStore::mutate_rows(self, table, rows)?;
        if let Some((began, rows)) = counted {
            let written = rows.iter().zip(&results).filter(|(_, r)| r.is_ok());
            self.count_writes(table, began, written.map(|((k, b), _)| (&k[..], *b)));
        }
        Ok(results)
    }

    fn write_batch(
        &self,
        table: &str,
        batch: &CellBatch,
        bad: BadRows,
    ) -> Result<Vec<(usize, Error)>> {
        let began = self.write_began();
        let failed = FjallStore::write_batch(self, table, batch, bad)?;
        if let Some(began) = began {
            let mut failed_rows = failed.iter().map(|(i, _)| *i).peekable();
            let written = (0..batch.len()).filter(|i| {
                // The failures come in row order.
                while failed_rows.next_if(|f| f < i).is_some() {}
                failed_rows.next_if_eq(i).is_none()
            });
            self.count_writes(
                table,
                began,
                written.map(|i| (batch.key(i), batch.row_bytes(i))),
            );
        }
        Ok(failed)
    }

    fn prepare_batch(&self, table: &str, batch: &mut CellBatch) -> Result<()> {
        FjallStore::prepare_batch(self, table, batch)
    }

    fn update_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        filter: &ReadFilter,
        change: &mut RowChange<'_>,
    ) -> Result<Vec<Result<()>>> {
        let Some(began) = self.write_began() else {
            return FjallStore::update_rows(self, table, keys, filter, change);
        };
        // What each key's mutations write, as the change makes them.
        let mut bytes: std::collections::HashMap<Vec<u8>, u64> = Default::default();
        let mut counting = |keys: &[Vec<u8>], rows: &[Option<Row>]| {
            let made = change(keys, rows)?;
            for (key, mutations) in keys.iter().zip(&made) {
                let b = key.len() as u64 + mutations.iter().map(Mutation::bytes).sum::<u64>();
                bytes.insert(key.clone(), b);
            }
            Ok(made)
        };
        let results = FjallStore::update_rows(self, table, keys, filter, &mut counting)?;
        let written = keys
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .filter_map(|(k, _)| Some((&k[..], *bytes.get(k)?)));
        self.count_writes(table, began, written);
        Ok(results)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        predicate: ReadFilter,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let counted = self.write_began().map(|began| {
            let bytes =
                |m: &[Mutation]| key.len() as u64 + m.iter().map(Mutation::bytes).sum::<u64>();
            (began, bytes(&on_match), bytes(&on_no_match))
        });
        let matched =
            FjallStore::check_and_mutate(self, table, key, predicate, on_match, on_no_match)?;
        if let Some((began, on_match, on_no_match)) = counted {
            let bytes = if matched { on_match } else { on_no_match };
            self.count_writes(table, began, [(key, bytes)]);
        }
        Ok(matched)
    }

    fn read_modify_write(
        &self,
        table: &str,
        key: &[u8],
        rules: Vec<ReadModifyWrite>,
    ) -> Result<Row> {
        let began = self.write_began();
        let row = FjallStore::read_modify_write(self, table, key, rules)?;
        if let Some(began) = began {
            let cells = row.cells.iter();
            let bytes = cells
                .map(|c| (c.qualifier.len() + c.value.len() + 8) as u64)
                .sum::<u64>();
            self.count_writes(table, began, [(key, key.len() as u64 + bytes)]);
        }
        Ok(row)
    }

    fn write_gate(&self, table: &str) -> Arc<WriteGate> {
        FjallStore::write_gate(self, table)
    }

    fn set_family_format(
        &self,
        table: &str,
        family: &str,
        format: FamilyFormat,
        progress: &mut dyn FnMut(FormatChange) -> bool,
    ) -> Result<FormatChange> {
        FjallStore::set_family_format(self, table, family, format, progress)
    }

    fn format_changes(&self) -> Vec<(String, String, FamilyFormat, FormatChange)> {
        FjallStore::format_changes(self)
    }

    fn collect_garbage(&self, table: &str) -> Result<GcStats> {
        FjallStore::collect_garbage(self, table)
    }

    fn collect_family_garbage(&self, table: &str, family: &str) -> Result<GcStats> {
        FjallStore::collect_family_garbage(self, table, family)
    }

    fn compact(&self, table: &str) -> Result<()> {
        FjallStore::compact(self, table)
    }

    fn collect_and_compact(&self, table: &str) -> Result<GcStats> {
        FjallStore::collect_and_compact(self, table)
    }

    fn flush(&self) -> Result<()> {
        FjallStore::flush(self)
    }

    fn checkpoint(&self) -> Result<()> {
        if let Some(activity) = &self.inner.activity {
            activity.keep()?;
        }
        FjallStore::checkpoint(self).map(|_| ())
    }
}

/// Key activity: what the trait's calls count (the store's own reads and
/// writes, for GC, compaction or a format change, count nothing).
impl FjallStore {
    /// When a write counted in the key activity begins; `None` when
    /// nothing is counted.
    fn write_began(&self) -> Option<i64> {
        let activity = self.inner.activity.as_ref()?;
        activity.counting().then(|| activity.now())
    }

    /// Counts a write request that began at `began` and wrote `rows`
    /// (keys and bytes).
    fn count_writes<'a>(
        &self,
        table: &str,
        began: i64,
        rows: impl IntoIterator<Item = (&'a [u8], u64)>,
    ) {
        if let Some(activity) = &self.inner.activity {
            activity.write(table, began, rows);
        }
    }

    /// A tally of `request` of `table`, begun at `now` (by the store's
    /// clock, which is the activity's), in the key activity, if it is
    /// counted (and the request is not [`ReadRequest::unmetered`]).
    fn read_tally(&self, table: &str, request: &ReadRequest, now: i64) -> Option<ReadTally> {
        if request.unmetered {
            return None;
        }
        let activity = self.inner.activity.as_ref().filter(|a| a.counting())?;
        let start = request
            .rows
            .ranges
            .first()
            .map_or(&[][..], |r| match &r.start {
                Bound::Included(k) | Bound::Excluded(k) => &k[..],
                Bound::Unbounded => &[][..],
            });
        Some(activity.read_from(table, start, request.reverse, now))
    }

    /// Counts reads and writes per key range from now on, or stops
    /// (what is counted stays): for measuring what the counting costs. A
    /// store opened without key activity ([`StoreOptions::key_activity`]
    /// `None`) counts nothing either way.
    ///
    /// [`StoreOptions::key_activity`]: super::StoreOptions::key_activity
    pub fn count_key_activity(&self, on: bool) {
        if let Some(activity) = &self.inner.activity {
            activity.set_counting(on);
        }
    }

    /// Forgets what was counted of `table`.
    fn forget_activity(&self, table: &str) -> Result<()> {
        match &self.inner.activity {
            Some(activity) => activity.forget_table(table),
            None => Ok(()),
        }
    }
}
