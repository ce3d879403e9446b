//! The one write path of cellar tables: [`TableSink`], a DataFusion
//! `DataSink` that `DataSinkExec` drives for INSERT, UPDATE and DELETE,
//! and that COPY FROM and Flight ingest feed directly.
//!
//! An insert types each Arrow batch once ([`encode::Encoder`]) and hands
//! the store one bulk write per batch of at most [`WRITE_BATCH_ROWS`]
//! rows (`Store::write_batch`), atomic per row. The store works on one
//! batch on the blocking pool while the next is read, so decoding a file
//! and writing overlap. A bad row either stops the write before anything
//! of its batch is written ([`BadRows::Stop`], the default) or is skipped
//! and counted ([`BadRows::Skip`]); its error says where it is.

pub(crate) mod conform;
pub(crate) mod encode;
mod insert;
pub(crate) mod update;
mod values;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimestampMicrosecondType};
use datafusion::common::Result as DfResult;
use datafusion::datasource::sink::DataSink;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, SendableRecordBatchStream};
use futures::StreamExt;

use self::encode::Encoder;
use self::update::RowUpdate;
use super::view::Layout;
use crate::error::Error;
use crate::store::{BadRows, Entered, Mutation, RowMutation, Store, TimeRange};

/// Rows per store write: the unit that a bad row stops. Large enough for
/// the store to write a bulk load's batches by ingestion (see
/// `INGEST_MIN_ROWS`), and for each ingestion's syncs (a table file, the
/// keyspace's version) to weigh little: a load's writes come one after
/// another, and at 65 536 rows they were the longest stage.
pub(crate) const WRITE_BATCH_ROWS: usize = 131_072;

/// How a write names the rows of its input in errors.
#[derive(Debug, Clone)]
pub(crate) enum RowNames {
    /// `row N` of a statement's input (1-based).
    Rows,
    /// `line N of 'file'` (a text file, one line per record): the first
    /// row is on line `first_line`.
    Lines { file: String, first_line: u64 },
    /// `row N of 'file'`.
    FileRows { file: String },
}

impl RowNames {
    /// The name of input row `row` (0-based).
    fn name(&self, row: u64) -> String {
        match self {
            RowNames::Rows => format!("row {}", row + 1),
            RowNames::Lines { file, first_line } => {
                format!("line {} of {file:?}", row + first_line)
            }
            RowNames::FileRows { file } => format!("row {} of {file:?}", row + 1),
        }
    }
}

/// Counters of a write as it runs: for progress, and for the report of
/// rows skipped.
#[derive(Debug, Default)]
pub struct WriteProgress {
    /// Input rows handled (written or skipped).
    pub rows: AtomicU64,
    /// Rows written.
    pub written: AtomicU64,
    /// Rows skipped ([`BadRows::Skip`]).
    pub skipped: AtomicU64,
    /// The first few skipped rows' errors.
    pub first_skipped: Mutex<Vec<String>>,
}

/// Skipped rows whose errors a write keeps to report.
pub(crate) const SKIPPED_SHOWN: usize = 5;

impl WriteProgress {
    /// Counts a skipped row and keeps its error if it is one of the first.
    pub(crate) fn skipped_row(&self, error: &Error) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.len() < SKIPPED_SHOWN {
            first.push(error.to_string());
        }
    }
}

/// How an insert treats its input.
#[derive(Debug, Clone)]
pub(crate) struct WriteOptions {
    pub bad: BadRows,
    pub names: RowNames,
    pub progress: Arc<WriteProgress>,
    /// The input's columns are matched to the view's by name and
    /// converted ([`conform`]); the text names the input in errors.
    /// `None`: the input has the view's columns and types already.
    pub by_name: Option<String>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            bad: BadRows::Stop,
            names: RowNames::Rows,
            progress: Arc::default(),
            by_name: None,
        }
    }
}

/// What a sink does with its input.
#[derive(Debug)]
pub(crate) enum Action {
    /// Writes rows of the view's columns, in its order and types.
    Insert(WriteOptions),
    /// Deletes the rows whose `_key` the input (a scan) produces.
    Delete,
    /// Deletes a series' events: cells at the `_key` and `_timestamp` of
    /// each input row.
    DeleteEvents(EventCells),
    /// Updates the rows whose `_key` the input produces, each atomically.
    Update(Arc<RowUpdate>),
}

/// Which cells at a row and time hold a series' event.
#[derive(Debug)]
pub(crate) enum EventCells {
    /// These columns (family, qualifier).
    Columns(Vec<(String, Vec<u8>)>),
    /// The cell of this family whose qualifier the input's third column
    /// names (a column per event).
    Qualified(String),
}

/// Writes its input into a table; the rows written.
pub(crate) struct TableSink {
    store: Store,
    layout: Arc<Layout>,
    action: Action,
    schema: SchemaRef,
}

impl fmt::Debug for TableSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableSink({})", self.layout.table)
    }
}

impl TableSink {
    /// A sink whose input has `schema` (the view's for an insert, the key
    /// scan's otherwise).
    pub fn new(store: Store, layout: Arc<Layout>, action: Action, schema: SchemaRef) -> Self {
        TableSink {
            store,
            layout,
            action,
            schema,
        }
    }

    /// Inserts a stream of batches of the view's columns; rows written.
    pub async fn insert(
        &self,
        data: SendableRecordBatchStream,
        options: &WriteOptions,
    ) -> DfResult<u64> {
        insert::insert(&self.store, &self.layout, data, options).await
    }

    async fn delete(&self, mut data: SendableRecordBatchStream) -> DfResult<u64> {
        let mut deleted = 0;
        while let Some(batch) = data.next().await {
            let rows: Vec<RowMutation> = keys_of(&batch?)?
                .into_iter()
                .map(|key| RowMutation::new(key, vec![Mutation::DeleteRow]))
                .collect();
            let (store, table) = (self.store.clone(), self.layout.table.clone());
            deleted += blocking(move || {
                let mut deleted = 0u64;
                for r in store.mutate_rows(&table, rows)? {
                    r?;
                    deleted += 1;
                }
                Ok(deleted)
            })
            .await?;
        }
        Ok(deleted)
    }

    /// Deletes each input row's event: its cells at its time, all of a
    /// row's events in one atomic mutation. The count is of events: input
    /// rows, or with a qualifier column (a cell each, an event's cells in
    /// several rows) the distinct (series key, time) of the columns after it.
    async fn delete_events(
        &self,
        cells: &EventCells,
        mut data: SendableRecordBatchStream,
    ) -> DfResult<u64> {
        let mut deleted = 0;
        let mut events = std::collections::HashSet::new();
        let hasher = datafusion::common::hash_utils::RandomState::with_seed(1);
        while let Some(batch) = data.next().await {
            let batch = batch?;
            if let EventCells::Qualified(_) = cells {
                let mut hashes = vec![0u64; batch.num_rows()];
                let mut columns = batch.columns()[3..].to_vec();
                columns.push(Arc::clone(batch.column(1)));
                datafusion::common::hash_utils::create_hashes(&columns, &hasher, &mut hashes)?;
                events.extend(hashes);
            }
            let keys = keys_of(&batch)?;
            let times = batch
                .column(1)
                .as_primitive_opt::<TimestampMicrosecondType>()
                .ok_or_else(|| Error::Internal("event times are not timestamps".into()))?;
            let qualifiers = match cells {
                EventCells::Columns(_) => None,
                EventCells::Qualified(_) => Some(
                    cast(batch.column(2), &DataType::Binary)?
                        .as_binary::<i32>()
                        .clone(),
                ),
            };
            let mut rows: Vec<RowMutation> = Vec::new();
            for (i, key) in keys.into_iter().enumerate() {
                let at = times.value(i);
                let range = TimeRange {
                    start: at,
                    end: Some(at.saturating_add(1)),
                };
                let mutations: Vec<Mutation> = match (cells, &qualifiers) {
                    (EventCells::Qualified(family), Some(q)) => vec![Mutation::DeleteCells {
                        family: family.clone(),
                        qualifier: q.value(i).to_vec(),
                        time_range: range,
                    }],
                    (EventCells::Columns(columns), _) => columns
                        .iter()
                        .map(|(family, qualifier)| Mutation::DeleteCells {
                            family: family.clone(),
                            qualifier: qualifier.clone(),
                            time_range: range,
                        })
                        .collect(),
                    (EventCells::Qualified(_), None) => Vec::new(),
                };
                match rows.last_mut() {
                    Some(last) if last.key == key => last.mutations.extend(mutations),
                    _ => rows.push(RowMutation::new(key, mutations)),
                }
                deleted += 1;
            }
            let (store, layout) = (self.store.clone(), Arc::clone(&self.layout));
            blocking(move || {
                let _entered = series_gate(&store, &layout)?;
                for r in store.mutate_rows(&layout.table, rows)? {
                    r?;
                }
                Ok(())
            })
            .await?;
        }
        if let EventCells::Qualified(_) = cells {
            deleted = events.len() as u64;
        }
        Ok(deleted)
    }

    async fn update(
        &self,
        plan: &Arc<RowUpdate>,
        mut data: SendableRecordBatchStream,
    ) -> DfResult<u64> {
        let mut updated = 0;
        while let Some(batch) = data.next().await {
            let keys = keys_of(&batch?)?;
            let plan = Arc::clone(plan);
            updated += blocking(move || plan.apply(&keys)).await?;
        }
        Ok(updated)
    }
}

/// The row keys a key scan's batch holds (its first column, `_key`).
fn keys_of(batch: &RecordBatch) -> DfResult<Vec<Vec<u8>>> {
    let keys = cast(batch.column(0), &DataType::Utf8)?;
    Ok(keys
        .as_string::<i32>()
        .iter()
        .flatten()
        .map(|k| k.as_bytes().to_vec())
        .collect())
}

/// Writes a batch of events into a series kept a column per event; the
/// events written. An event is a row per measure, each written atomically
/// under its lock: a value written at a stored (series, time) replaces
/// the stored one (its cell, whose qualifier is the old value, goes), as
/// in every layout.
fn write_event_columns(
    store: &Store,
    layout: &Layout,
    options: &WriteOptions,
    batch: &RecordBatch,
    bad: Vec<encode::BadRow>,
    at: &dyn Fn(usize, Error) -> Error,
) -> crate::error::Result<u64> {
    use std::collections::BTreeMap;
    let (cells, mut bad) = Encoder::new(layout).event_columns(batch, bad)?;
    if options.bad == BadRows::Stop
        && let Some((row, e)) = bad.drain(..).next()
    {
        return Err(at(row, e));
    }
    for (row, e) in bad {
        options.progress.skipped_row(&at(row, e));
    }
    let family = layout
        .series
        .as_ref()
        .map(|s| s.def.family.clone())
        .unwrap_or_default();
    // Per row: its events' times and values, the last given for a time
    // taking it.
    let mut rows: BTreeMap<&[u8], BTreeMap<i64, &[u8]>> = BTreeMap::new();
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut events = std::collections::HashSet::new();
    for c in &cells {
        rows.entry(&c.key).or_default().insert(c.time, &c.qualifier);
        first = first.min(c.time);
        last = last.max(c.time);
        events.insert(c.row);
    }
    if rows.is_empty() {
        return Ok(0);
    }
    let keys: Vec<Vec<u8>> = rows.keys().map(|k| k.to_vec()).collect();
    let filter = crate::store::ReadFilter {
        families: Some(vec![family.clone()]),
        time_range: TimeRange {
            start: first,
            end: Some(last.saturating_add(1)),
        },
        ..Default::default()
    };
    let _entered = series_gate(store, layout)?;
    let results = store.update_rows(&layout.table, &keys, &filter, |chunk, stored| {
        Ok(chunk
            .iter()
            .zip(stored)
            .map(|(key, stored)| {
                let Some(given) = rows.get(key.as_slice()) else {
                    return Vec::new();
                };
                let mut mutations = Vec::with_capacity(given.len());
                for cell in stored.iter().flat_map(|r| &r.cells) {
                    if given
                        .get(&cell.timestamp)
                        .is_some_and(|q| *q != cell.qualifier.as_slice())
                    {
                        mutations.push(Mutation::DeleteCells {
                            family: family.clone(),
                            qualifier: cell.qualifier.clone(),
                            time_range: TimeRange {
                                start: cell.timestamp,
                                end: Some(cell.timestamp.saturating_add(1)),
                            },
                        });
                    }
                }
                for (&time, qualifier) in given {
                    mutations.push(Mutation::SetCell {
                        family: family.clone(),
                        qualifier: qualifier.to_vec(),
                        timestamp: Some(time),
                        value: Vec::new(),
                    });
                }
                mutations
            })
            .collect())
    })?;
    for (key, result) in keys.iter().zip(results) {
        if let Err(e) = result {
            let row = cells.iter().find(|c| c.key == *key).map_or(0, |c| c.row);
            return Err(at(row, e));
        }
    }
    Ok(events.len() as u64)
}

/// A series' writer passes its table's write gate (waiting while a
/// change of layout copies the events) and checks that the table is still
/// the one its rows were encoded for.
fn series_gate(store: &Store, layout: &Layout) -> crate::error::Result<Option<Entered>> {
    if layout.series.is_none() {
        return Ok(None);
    }
    let entered = store.write_gate(&layout.table).enter();
    if store.pin(&layout.table)?.def().id != layout.def.id {
        return Err(Error::InvalidArgument(format!(
            "series {} changed layout (ALTER SERIES ... SET LAYOUT) while this write waited; \
             nothing of it was written: run it again",
            layout.table
        )));
    }
    Ok(Some(entered))
}

async fn joined<T>(task: tokio::task::JoinHandle<crate::error::Result<T>>) -> DfResult<T> {
    task.await
        .map_err(|e| Error::Internal(format!("write task failed: {e}")))?
        .map_err(datafusion::error::DataFusionError::from)
}

/// Runs store work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> DfResult<T> {
    joined(tokio::task::spawn_blocking(work)).await
}

impl DisplayAs for TableSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.action {
            Action::Insert(_) => write!(f, "insert into {}", self.layout.table),
            Action::Delete => write!(f, "delete from {}", self.layout.table),
            Action::DeleteEvents(_) => write!(f, "delete events from {}", self.layout.table),
            Action::Update(plan) => write!(
                f,
                "update {}, set=[{}], atomic per row",
                self.layout.table,
                plan.shown()
            ),
        }
    }
}

#[async_trait]
impl DataSink for TableSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        _context: &Arc<TaskContext>,
    ) -> DfResult<u64> {
        match &self.action {
            Action::Insert(options) => self.insert(data, options).await,
            Action::Delete => self.delete(data).await,
            Action::DeleteEvents(cells) => self.delete_events(cells, data).await,
            Action::Update(plan) => self.update(plan, data).await,
        }
    }
}
