//! One partition of a [`KeyScanExec`](super::KeyScanExec) as it reads:
//! rows from the store into view batches, re-checked, projected and cut
//! at the LIMIT. On the embedded store it reads where the stream is
//! polled, a batch a poll ([`super::inline_read`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder};

use super::batch::ViewBatchBuilder;
use super::inline_read::Reading;
use super::plan::ScanSpec;
use crate::store::{
    NumberRow, NumberRows, Numbers, ReadFilter, ReadRequest, RowRange, RowSet, RowStream, ScanStats,
};

/// A scan's counters for one partition (EXPLAIN ANALYZE).
struct Counters {
    rows_scanned: Count,
    cells_scanned: Count,
    misfits: Count,
    decoded: Count,
    output_rows: Count,
}

/// One partition's read under way.
struct PartitionRead {
    spec: Arc<ScanSpec>,
    /// The scan's output: the view's columns of `spec.projection`.
    schema: SchemaRef,
    stream: RowStream,
    wide: ViewBatchBuilder,
    /// When every column wanted of a row is a number: rows come as
    /// numbers, not cells.
    numbers: Option<NumbersRead>,
    row: NumberRow,
    /// A run of rows read as numbers at once.
    rows: NumberRows,
    counters: Counters,
    /// Rows sent so far.
    emitted: usize,
    /// With a LIMIT and a re-check: how much further than the limit the
    /// next batch reads (doubles each batch).
    widen: usize,
    /// Store counters already added to `counters`.
    reported: ScanStats,
}

/// The columns a partition reads as numbers: as asked of the store
/// (family among those read, qualifier), and their declaration indexes.
struct NumbersRead {
    wanted: Vec<(usize, Vec<u8>)>,
    declared: Vec<usize>,
}

/// The stream of one partition reading `ranges`.
pub(crate) fn execute(
    spec: Arc<ScanSpec>,
    ranges: Vec<RowRange>,
    schema: SchemaRef,
    metrics: &ExecutionPlanMetricsSet,
    partition: usize,
) -> SendableRecordBatchStream {
    let counters = Counters {
        rows_scanned: MetricBuilder::new(metrics).counter("rows_scanned", partition),
        cells_scanned: MetricBuilder::new(metrics).counter("cells_scanned", partition),
        misfits: MetricBuilder::new(metrics).counter("key_misfits", partition),
        decoded: MetricBuilder::new(metrics).counter("values_decoded", partition),
        output_rows: MetricBuilder::new(metrics).output_rows(partition),
    };
    let reading = if spec.store.capabilities().reads_in_place {
        Reading::Polled {
            step: spec.batch_size,
        }
    } else {
        Reading::Blocking
    };
    let read_schema = Arc::clone(&schema);
    super::inline_read::stream(schema, reading, move || {
        PartitionRead::open(spec, ranges, read_schema, counters)
    })
}

impl super::inline_read::PartRead for PartitionRead {
    fn read(&mut self, rows: usize, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool> {
        PartitionRead::read(self, rows, send)
    }
}

impl PartitionRead {
    /// Opens the read of `ranges`; `None` when there are none.
    fn open(
        spec: Arc<ScanSpec>,
        ranges: Vec<RowRange>,
        schema: SchemaRef,
        counters: Counters,
    ) -> DfResult<Option<Self>> {
        if ranges.is_empty() {
            return Ok(None);
        }
        let mut filter = ReadFilter::all()
            .families(spec.families.clone())
            .time_range(spec.time)
            .qualifiers(spec.qualifiers.clone());
        filter.cells_per_column = spec.cells_read();
        let mut wide = ViewBatchBuilder::new(
            Arc::clone(&spec.layout),
            spec.needed.clone(),
            &spec.proto_masks,
            &spec.map_keys,
            spec.capacity(),
        );
        wide.drop_misfits = spec.drop_misfits;
        wide.oldest_first = spec.events_oldest_first();
        // Values no output column uses need not be decoded.
        for (family, qualifiers) in wide.values_used() {
            filter = filter.values_only(family, qualifiers);
        }
        let mut request = ReadRequest::rows(RowSet { ranges }).filter(filter);
        request.reverse = spec.reverse;
        let mut stream = match &spec.layout.pinned {
            Some(pinned) => spec.store.read_pinned(pinned, request),
            None => spec.store.read_rows(&spec.layout.table, request),
        }?;
        stream.pause_after(super::inline_read::PASSED_ROWS_PER_CALL);
        let families = stream.family_names();
        wide.bind(&families);
        let numbers = wide.number_columns().map(|declared| NumbersRead {
            wanted: spec.layout.numbers_wanted(&families, &declared),
            declared,
        });
        Ok(Some(PartitionRead {
            spec,
            schema,
            stream,
            wide,
            numbers,
            row: NumberRow::default(),
            rows: NumberRows::default(),
            counters,
            emitted: 0,
            widen: 1,
            reported: ScanStats::default(),
        }))
    }

    /// Reads up to `rows` more rows, sending each batch as it fills; true
    /// when the partition is done (read to its end, its LIMIT reached, or
    /// the consumer gone).
    fn read(&mut self, rows: usize, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool> {
        let mut read = 0;
        while read < rows {
            // With a LIMIT, stop reading as soon as enough rows may be in.
            let due = match self.spec.limit {
                None => self.spec.batch_size,
                Some(limit) => {
                    let remaining = limit.saturating_sub(self.emitted).max(1);
                    self.spec
                        .batch_size
                        .min(remaining.saturating_mul(self.widen))
                }
            };
            let room = due.saturating_sub(self.wide.len()).clamp(1, rows - read);
            let n = self.next_rows(room)?;
            if n == 0 {
                if self.stream.paused() {
                    // A long stretch of rows with nothing selected: the
                    // step ends here, the read goes on at the next.
                    return Ok(false);
                }
                self.finish(send)?;
                return Ok(true);
            }
            read += n;
            if self.wide.len() >= due {
                let go_on = self.flush(send)?;
                self.widen = self.widen.saturating_mul(2);
                if !go_on {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Reads the next rows, at most `max`, into the batch: how many (a
    /// run of a column-wise block's rows read as numbers comes at once);
    /// 0 at the end.
    fn next_rows(&mut self, max: usize) -> DfResult<usize> {
        let damage = |e: crate::error::Error| match e {
            // Name what the damage is in, and what to do.
            crate::error::Error::Storage(inner) => {
                DataFusionError::from(crate::error::Error::DamagedData {
                    table: self.spec.layout.table.clone(),
                    reason: crate::error::engine_words(&inner),
                })
            }
            other => DataFusionError::from(other),
        };
        if let Some(numbers) = &self.numbers {
            let read = self
                .stream
                .next_number_rows(&numbers.wanted, max, &mut self.row, &mut self.rows)
                .map_err(damage)?;
            return Ok(match read {
                Numbers::End => 0,
                Numbers::Row => {
                    self.wide.push_numbers(&self.row, &numbers.declared);
                    1
                }
                Numbers::Rows => {
                    self.wide
                        .push_number_rows(&self.rows, &numbers.declared)
                        .map_err(damage)?;
                    self.rows.len()
                }
            });
        }
        match self.stream.next_view().map_err(damage)? {
            Some(row) => {
                self.wide.push_view(row)?;
                Ok(1)
            }
            None => Ok(0),
        }
    }

    /// Sends what is left and counts what the store read.
    fn finish(&mut self, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<()> {
        if self.wide.len() > 0 {
            self.flush(send)?;
        }
        self.report();
        Ok(())
    }

    /// Adds the store's and the batch builder's counters since the last
    /// report.
    fn report(&mut self) {
        self.counters
            .misfits
            .add(std::mem::take(&mut self.wide.misfits));
        self.counters
            .decoded
            .add(std::mem::take(&mut self.wide.values_decoded));
        let stats = self.stream.stats();
        let reported = std::mem::replace(&mut self.reported, stats);
        self.counters
            .rows_scanned
            .add((stats.rows_returned - reported.rows_returned) as usize);
        self.counters
            .cells_scanned
            .add((stats.cells_scanned - reported.cells_scanned) as usize);
    }

    /// Sends the rows built so far (re-checked, projected, cut at the
    /// LIMIT); false when no more are wanted.
    fn flush(&mut self, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool> {
        let errors = std::mem::take(&mut self.wide.errors);
        let mut batch = match &self.spec.residual {
            // Nothing to re-check: only the projected columns are built.
            None => {
                if let Some((_, e)) = errors.into_iter().next() {
                    return Err(e.into());
                }
                self.wide
                    .finish_projected(self.spec.projection.columns(), &self.schema)?
            }
            Some(predicate) => {
                let batch = self.wide.finish()?;
                let mask = mask_of(predicate, &batch)?;
                // A cell that did not decode fails the query only if its
                // row is wanted.
                if let Some((_, e)) = errors
                    .into_iter()
                    .find(|(row, _)| mask.is_valid(*row) && mask.value(*row))
                {
                    return Err(e.into());
                }
                filter_record_batch(&batch, &mask)?.project(self.spec.projection.columns())?
            }
        };
        if let Some(limit) = self.spec.limit {
            batch = batch.slice(0, batch.num_rows().min(limit.saturating_sub(self.emitted)));
        }
        self.emitted += batch.num_rows();
        self.counters.output_rows.add(batch.num_rows());
        // Counted before the batch goes: a consumer with rows enough may
        // end the query, and EXPLAIN ANALYZE read the counters, before
        // this partition gets another turn.
        self.report();
        if batch.num_rows() > 0 && !send(batch) {
            return Ok(false); // the consumer went away (LIMIT, cancel)
        }
        Ok(self.spec.limit.is_none_or(|l| self.emitted < l))
    }
}

/// Which rows of `batch` the re-checked `predicate` keeps. A predicate
/// that gives anything but booleans is a planning bug, and an error: it
/// must never read as "no row matches".
fn mask_of(predicate: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> DfResult<BooleanArray> {
    let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
    mask.as_any()
        .downcast_ref::<BooleanArray>()
        .cloned()
        .ok_or_else(|| {
            DataFusionError::Internal(format!(
                "the predicate a scan re-checks ({predicate}) gave {} values, not booleans",
                mask.data_type()
            ))
        })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "tests fail loudly on purpose"
    )]

    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::ScalarValue;
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_expr::expressions::{Column, Literal};

    use super::mask_of;

    #[test]
    fn a_predicate_that_is_not_boolean_is_an_error_not_an_empty_result() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
        let number: Arc<dyn PhysicalExpr> = Arc::new(Column::new("n", 0));
        let e = mask_of(&number, &batch).unwrap_err().to_string();
        assert!(e.contains("gave Int64 values, not booleans"), "{e}");
        let yes: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Boolean(Some(true))));
        assert_eq!(mask_of(&yes, &batch).unwrap().true_count(), 3);
    }
}
