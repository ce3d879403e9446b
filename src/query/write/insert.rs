//! INSERT's pipeline. Input batches gather into units of
//! [`WRITE_BATCH_ROWS`] (a file reader's batches are smaller, and a bulk
//! load needs units large enough for the store to ingest); each unit is
//! encoded (typed once, keys built, cells laid out) in turn, on a blocking
//! thread while the next unit is read, then the store makes its pairs or
//! blocks ahead (`Backend::prepare_batch`) on a
//! blocking thread of its own, beside the unit before's ([`UNITS_AHEAD`]),
//! while the unit before those is written. Units are written in order,
//! one at a time, so a bad row stops the insert with every unit before
//! its own written and nothing of its own.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::encode::{BadRow, BatchRows, Encoder, StatementClock};
use super::{WRITE_BATCH_ROWS, WriteOptions, conform, joined, series_gate, write_event_columns};
use crate::error::Error;
use crate::query::view::Layout;
use crate::store::{BadRows, CellBatch, Store, now_micros};

/// Inserts a stream of batches of the view's columns (or, with
/// `options.by_name`, columns matched by name); rows written.
pub(super) async fn insert(
    store: &Store,
    layout: &Arc<Layout>,
    mut data: SendableRecordBatchStream,
    options: &WriteOptions,
) -> DfResult<u64> {
    let mut encoding = Some(Encoding {
        clock: StatementClock::new(now_micros(), store.timestamp_granularity()),
        seen: 0,
        columns: None,
        spare: Vec::new(),
    });
    // The unit being encoded (while the next one is read), with the
    // encoding's state.
    let mut encoding_task: Option<JoinHandle<crate::error::Result<(Encoding, Encoded)>>> = None;
    let mut units = Units {
        preparing: VecDeque::new(),
        writing: None,
        spare: Vec::new(),
    };
    let mut written = 0;
    let schema = data.schema();
    let (mut pending, mut pending_rows) = (Vec::new(), 0);
    loop {
        let next = data.next().await.transpose()?;
        let end = next.is_none();
        if let Some(batch) = next {
            pending_rows += batch.num_rows();
            pending.push(batch);
        }
        if pending_rows == 0 || (!end && pending_rows < WRITE_BATCH_ROWS) {
            if end {
                break;
            }
            continue;
        }
        let batch = match pending.len() {
            1 => pending
                .pop()
                .unwrap_or_else(|| RecordBatch::new_empty(schema.clone())),
            _ => concat_batches(&schema, &std::mem::take(&mut pending))?,
        };
        pending.clear();
        pending_rows = 0;
        let mut at = 0;
        while at < batch.num_rows() {
            let len = batch.num_rows() - at;
            if len < WRITE_BATCH_ROWS && !end {
                // Held back to fill the next unit.
                pending.push(batch.slice(at, len));
                pending_rows = len;
                break;
            }
            let len = len.min(WRITE_BATCH_ROWS);
            let unit = batch.slice(at, len);
            at += len;
            let mut state = match encoding_task.take() {
                // The unit before, encoded while this one was read.
                Some(task) => {
                    let (state, encoded) = joined(task).await?;
                    written += units.accept(store, layout, options, encoded).await?;
                    state
                }
                None => encoding
                    .take()
                    .ok_or_else(|| Error::Internal("insert lost its state".into()))?,
            };
            state.spare.append(&mut units.spare);
            let (layout_, options_) = (Arc::clone(layout), options.clone());
            encoding_task = Some(tokio::task::spawn_blocking(move || {
                let encoded = state.encode(&layout_, &options_, &unit);
                Ok((state, encoded))
            }));
        }
        if end {
            break;
        }
    }
    if let Some(task) = encoding_task.take() {
        let (_, encoded) = joined(task).await?;
        written += units.accept(store, layout, options, encoded).await?;
    }
    Ok(written + units.drain(store, layout, options).await?)
}

/// A unit's encoding, or the error of its first bad row.
type Encoded = crate::error::Result<Prepared>;

/// The units past their encoding: being prepared by the store (oldest
/// first), being written, and the cell batches written, for reuse.
struct Units {
    preparing: VecDeque<JoinHandle<crate::error::Result<Prepared>>>,
    writing: Option<JoinHandle<crate::error::Result<Written>>>,
    spare: Vec<CellBatch>,
}

impl Units {
    /// Takes the next unit encoded: the store prepares it, beside the
    /// units before, and the oldest of those goes to be written; the rows
    /// written meanwhile. An encoding that failed (a bad row stopping the
    /// insert) fails the insert once every unit before is written.
    async fn accept(
        &mut self,
        store: &Store,
        layout: &Arc<Layout>,
        options: &WriteOptions,
        encoded: Encoded,
    ) -> DfResult<u64> {
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                self.drain(store, layout, options).await?;
                return Err(e.into());
            }
        };
        // The store's own encoding of the unit, beside the unit before's.
        let (store_, layout_) = (store.clone(), Arc::clone(layout));
        self.preparing
            .push_back(tokio::task::spawn_blocking(move || {
                ahead(&store_, &layout_, encoded)
            }));
        let mut written = 0;
        while self.preparing.len() > UNITS_AHEAD
            && let Some(task) = self.preparing.pop_front()
        {
            written += self.hand_over(store, layout, options, task).await?;
        }
        Ok(written)
    }

    /// Hands every unit being prepared over in turn and waits for the
    /// last write; the rows written meanwhile.
    async fn drain(
        &mut self,
        store: &Store,
        layout: &Arc<Layout>,
        options: &WriteOptions,
    ) -> DfResult<u64> {
        let mut written = 0;
        while let Some(task) = self.preparing.pop_front() {
            written += self.hand_over(store, layout, options, task).await?;
        }
        if let Some(task) = self.writing.take() {
            written += joined(task).await?.rows;
        }
        Ok(written)
    }

    /// Takes the oldest unit being prepared once it is, waits for the
    /// unit before it to be written (its rows come first; a bad row of
    /// this unit then stops the insert with every unit before written),
    /// and starts its write; the rows the unit before wrote.
    async fn hand_over(
        &mut self,
        store: &Store,
        layout: &Arc<Layout>,
        options: &WriteOptions,
        preparing: JoinHandle<crate::error::Result<Prepared>>,
    ) -> DfResult<u64> {
        // (An error preparing it waits for the unit before to be written.)
        let prepared = joined(preparing).await;
        let mut written = 0;
        if let Some(task) = self.writing.take() {
            let done = joined(task).await?;
            written = done.rows;
            self.spare.extend(done.cells);
        }
        let prepared = prepared?;
        let (store, layout, options) = (store.clone(), Arc::clone(layout), options.clone());
        self.writing = Some(tokio::task::spawn_blocking(move || {
            write(&store, &layout, &options, prepared)
        }));
        Ok(written)
    }
}

/// Units the store prepares at once, each on a core of its own, while
/// the one before them is written.
const UNITS_AHEAD: usize = 2;

/// The store's own encoding of a unit's rows, made ahead of its write
/// (`Backend::prepare_batch`).
fn ahead(store: &Store, layout: &Layout, mut prepared: Prepared) -> crate::error::Result<Prepared> {
    if let Prepared::Cells { cells, .. } = &mut prepared {
        store.prepare_batch(&layout.table, cells)?;
    }
    Ok(prepared)
}

/// What encoding carries from one unit to the next.
struct Encoding {
    clock: StatementClock,
    /// Input rows before the next unit.
    seen: u64,
    /// For input matched by name: its schema and where each view column
    /// comes from in it.
    columns: Option<(datafusion::arrow::datatypes::SchemaRef, Vec<Option<usize>>)>,
    /// Cell batches written and handed back, for reuse.
    spare: Vec<CellBatch>,
}

/// A unit ready for the store.
enum Prepared {
    /// Cells of rows (`rows`: each one's input rows in the unit).
    Cells {
        cells: Box<CellBatch>,
        rows: BatchRows,
        bad: Vec<BadRow>,
        seen: u64,
        input_rows: usize,
    },
    /// A series kept a column per event, written event by event.
    Events {
        batch: RecordBatch,
        bad: Vec<BadRow>,
        seen: u64,
    },
}

/// A unit written: its rows written, and its cell batch for reuse.
struct Written {
    rows: u64,
    cells: Option<CellBatch>,
}

/// Names input row `row` of a unit whose first row is input row `seen`.
fn at(options: &WriteOptions, seen: u64, row: usize, error: Error) -> Error {
    Error::AtRow {
        at: options.names.name(seen + row as u64),
        error: Box::new(error),
    }
}

impl Encoding {
    /// Types and encodes one unit (at most [`WRITE_BATCH_ROWS`] rows). A
    /// bad row is an error here when bad rows stop the insert.
    fn encode(
        &mut self,
        layout: &Layout,
        options: &WriteOptions,
        unit: &RecordBatch,
    ) -> crate::error::Result<Prepared> {
        let seen = self.seen;
        self.seen += unit.num_rows() as u64;
        let (batch, bad) = match &options.by_name {
            None => (unit.clone(), Vec::new()),
            Some(source) => {
                let schema = unit.schema();
                if self.columns.as_ref().is_none_or(|(s, _)| *s != schema) {
                    let map = conform::column_map(layout, &schema, source)?;
                    self.columns = Some((schema, map));
                }
                let map = self.columns.as_ref().map_or(&[][..], |(_, m)| m.as_slice());
                conform::conform(layout, unit, map)?
            }
        };
        if layout.series.as_ref().is_some_and(|s| s.column_per_event()) {
            return Ok(Prepared::Events { batch, bad, seen });
        }
        let mut cells = self.spare.pop().unwrap_or_default();
        let (rows, mut bad) =
            Encoder::new(layout).encode(&batch, &mut self.clock, &mut cells, bad)?;
        if options.bad == BadRows::Stop
            && let Some((row, e)) = bad.drain(..).next()
        {
            return Err(at(options, seen, row, e));
        }
        Ok(Prepared::Cells {
            cells: Box::new(cells),
            rows,
            bad,
            seen,
            input_rows: batch.num_rows(),
        })
    }
}

/// Writes one prepared unit and counts it in the progress.
fn write(
    store: &Store,
    layout: &Layout,
    options: &WriteOptions,
    prepared: Prepared,
) -> crate::error::Result<Written> {
    let progress = &options.progress;
    let (written, input_rows, cells) = match prepared {
        Prepared::Events { batch, bad, seen } => {
            let name = |row: usize, e: Error| at(options, seen, row, e);
            let written = write_event_columns(store, layout, options, &batch, bad, &name)?;
            (written, batch.num_rows(), None)
        }
        Prepared::Cells {
            cells,
            rows,
            mut bad,
            seen,
            input_rows,
        } => {
            let entered = series_gate(store, layout)?;
            let mut failed = store.write_batch(&layout.table, &cells, options.bad)?;
            drop(entered);
            if options.bad == BadRows::Stop
                && let Some((i, e)) = failed.drain(..).next()
            {
                return Err(at(options, seen, rows.of(i)[0], e));
            }
            // A batch row failed fails each input row it holds.
            let lost: usize = failed.iter().map(|(i, _)| rows.of(*i).len()).sum();
            let written = (rows.inputs() - lost) as u64;
            for (i, e) in failed {
                let (first, rest) = rows.of(i).split_first().unwrap_or((&0, &[]));
                // (The events of a series' bucket row go with it.)
                bad.extend(rest.iter().map(|&r| {
                    let why = format!("its bucket row could not be written: {e}");
                    (r, Error::InvalidArgument(why))
                }));
                bad.push((*first, e));
            }
            bad.sort_by_key(|(row, _)| *row);
            for (row, e) in bad {
                progress.skipped_row(&at(options, seen, row, e));
            }
            (written, input_rows, Some(*cells))
        }
    };
    progress.written.fetch_add(written, Ordering::Relaxed);
    progress
        .rows
        .fetch_add(input_rows as u64, Ordering::Relaxed);
    Ok(Written {
        rows: written,
        cells,
    })
}
