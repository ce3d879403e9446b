//! One partition of a scan aggregate: its read, and its rows given to
//! the groups.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::common::Result as DfResult;
use datafusion::physical_plan::sorts::sort::sort_batch;

use super::groups::Groups;
use super::shape::{AggregateShape, Input, KeyReader, appender, is_number};
use crate::query::batch::{Appender, decode_error};
use crate::query::inline_read::PartRead;
use crate::store::{
    NumberRow, NumberRows, Numbers, QualifierFilter, ReadFilter, ReadRequest, RowRange, RowSet,
    RowStream,
};

/// What a scan aggregate read, for EXPLAIN ANALYZE (as a scan reports).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) rows: usize,
    /// Rows passed over: their key does not fit the schema.
    pub(super) misfits: usize,
    /// Values decoded.
    pub(super) values: usize,
    /// Groups sent (the partition's output rows).
    pub(super) groups: usize,
}

/// One partition's aggregate in the making: its read, its groups, and
/// what it has read so far. It reads a step of rows at a time
/// (`inline_read::PartRead`), and its stream yields between steps, so a
/// cancelled or timed-out query stops there rather than at the end of
/// the partition.
pub(super) struct PartAggregate {
    exec: Arc<AggregateShape>,
    groups: Groups,
    /// The partition's rows and how its measures are read from them;
    /// none when it has no ranges or has read them all.
    reading: Option<(RowStream, Read)>,
    /// The measures read, each once (declared column).
    measures: Vec<usize>,
    counts: Counts,
    /// The key values rows' groups take, key after key.
    keys: KeyReader,
    /// Per measure, its runs of one group (reused).
    runs: Vec<(usize, usize)>,
    /// Given the counts when the partition is done.
    report: Box<dyn Fn(&Counts) + Send>,
}

/// How a partition reads its measures.
enum Read {
    /// 8-byte numbers, as runs of numbers (a series' events are counted
    /// from its cells): the store's column of each measure, and the row
    /// they are read into.
    Numbers {
        wanted: Vec<(usize, Vec<u8>)>,
        row: NumberRow,
        /// A run of rows read at once.
        rows: NumberRows,
    },
    /// Cells, through a builder per measure reused from row to row; with
    /// the events counted when `count(*)` asks.
    Cells {
        appenders: Vec<Appender>,
        counts_events: bool,
        inputs: Vec<(usize, ArrayRef)>,
        times: Vec<i64>,
    },
}

impl PartAggregate {
    /// Opens the read of partition `ranges`.
    pub(super) fn open(
        exec: Arc<AggregateShape>,
        ranges: Vec<RowRange>,
        report: Box<dyn Fn(&Counts) + Send>,
    ) -> DfResult<Self> {
        let mut groups = Groups::new(Arc::clone(&exec))?;
        if exec.groups.is_empty() {
            // Without GROUP BY, one group, there even with no rows (as
            // DataFusion's partial aggregate has it).
            let all = groups.row(&[]);
            groups.group(all, None)?;
        }
        let mut measures: Vec<usize> = Vec::new();
        for input in &exec.inputs {
            if let Input::Measure(d, _) = input
                && !measures.contains(d)
            {
                measures.push(*d);
            }
        }
        let reading = if ranges.is_empty() {
            None
        } else {
            Some(open_read(&exec, ranges, &measures)?)
        };
        Ok(PartAggregate {
            exec,
            groups,
            reading,
            measures,
            counts: Counts::default(),
            keys: KeyReader::default(),
            runs: Vec::new(),
            report,
        })
    }
}

/// The read of `ranges` for the aggregate's `measures`, and how they are
/// read from its rows.
fn open_read(
    exec: &AggregateShape,
    ranges: Vec<RowRange>,
    measures: &[usize],
) -> DfResult<(RowStream, Read)> {
    let spec = &exec.spec;
    let layout = &spec.layout;
    // Without count(*), only the aggregated measures' columns are read
    // (a packed row skips the others whole).
    let counts_events = exec.inputs.iter().any(|i| matches!(i, Input::Events));
    let qualifiers = if counts_events || exec.wide {
        spec.qualifiers.clone()
    } else {
        QualifierFilter::Set(
            measures
                .iter()
                .map(|&d| layout.columns[d].qualifier.clone().into_bytes())
                .collect(),
        )
    };
    let mut filter = ReadFilter::all()
        .families(spec.families.clone())
        .time_range(spec.time)
        .qualifiers(qualifiers);
    if exec.wide {
        // A wide row holds its columns' newest cells.
        filter = filter.cells_per_column(1);
    }
    for family in &spec.families {
        let used: Vec<Vec<u8>> = measures
            .iter()
            .filter(|&&d| layout.columns[d].family == *family)
            .map(|&d| layout.columns[d].qualifier.clone().into_bytes())
            .collect();
        filter = filter.values_only(family, used);
    }
    let request = ReadRequest::rows(RowSet { ranges }).filter(filter);
    let mut stream = match &layout.pinned {
        Some(pinned) => spec.store.read_pinned(pinned, request),
        None => spec.store.read_rows(&layout.table, request),
    }?;
    stream.pause_after(crate::query::inline_read::PASSED_ROWS_PER_CALL);
    // Measures of 8-byte numbers are read as runs of numbers (a series'
    // events are counted from its cells).
    let read = if (exec.wide || !counts_events)
        && measures.iter().all(|&d| is_number(&layout.columns[d]))
    {
        Read::Numbers {
            wanted: layout.numbers_wanted(&stream.family_names(), measures),
            row: NumberRow::default(),
            // Keys are not read where no group takes them.
            rows: if exec.reads_keys() {
                NumberRows::default()
            } else {
                NumberRows::without_keys()
            },
        }
    } else {
        Read::Cells {
            appenders: measures
                .iter()
                .map(|&d| {
                    appender(&crate::query::view::value_type(
                        layout.columns[d].value_type,
                    ))
                })
                .collect::<DfResult<Vec<_>>>()?,
            counts_events,
            inputs: Vec::new(),
            times: Vec::new(),
        }
    };
    Ok((stream, read))
}

/// What a numbers read's rows are given to: the groups, with the
/// partition's reused buffers.
struct Step<'a> {
    exec: &'a AggregateShape,
    groups: &'a mut Groups,
    measures: &'a [usize],
    keys: &'a mut KeyReader,
    runs: &'a mut Vec<(usize, usize)>,
    counts: &'a mut Counts,
}

impl Step<'_> {
    /// One row keyed `key`, its measures' cells by `column` (measure
    /// `m`'s timestamps, newest first, and values as words).
    fn row<'r>(
        &mut self,
        key: &[u8],
        column: impl Fn(usize) -> (&'r [i64], &'r [u64]),
    ) -> DfResult<()> {
        let (exec, groups, runs) = (self.exec, &mut *self.groups, &mut *self.runs);
        self.counts.rows += 1;
        if !exec.read_key(key, self.keys) {
            self.counts.misfits += 1;
            return Ok(());
        }
        let key_values = groups.row(&self.keys.segments);
        if exec.wide {
            // A row of the wide view: counted once, each measure its
            // newest value (the read keeps one cell a column).
            let g = groups.group(key_values, self.keys.time)?;
            runs.clear();
            runs.push((g, 1));
            for (a, input) in exec.inputs.iter().enumerate() {
                if let Input::Events = input {
                    groups.push_runs(a, runs, &[0])?;
                }
            }
            for (m, &d) in self.measures.iter().enumerate() {
                let (_, words) = column(m);
                if let Some(first) = words.first() {
                    self.counts.values += 1;
                    for a in exec.aggregates_of(d) {
                        groups.push_runs(a, runs, std::slice::from_ref(first))?;
                    }
                }
            }
            return Ok(());
        }
        for (m, &d) in self.measures.iter().enumerate() {
            let (times, words) = column(m);
            if times.is_empty() {
                continue;
            }
            groups.runs_of(key_values, times, runs)?;
            self.counts.values += words.len();
            for a in exec.aggregates_of(d) {
                groups.push_runs(a, runs, words)?;
            }
        }
        Ok(())
    }

    /// A run of rows read at once, each with at most one cell of each
    /// measure: in the wide view, the runs of rows that share a group
    /// take each measure's values in one call per aggregate; otherwise
    /// (or when a key does not fit) row by row.
    fn rows(&mut self, rows: &NumberRows) -> DfResult<()> {
        let n = rows.len();
        let one = |m: usize, i: usize| match rows.column(m) {
            Some((times, words)) => (&times[i..i + 1], &words[i..i + 1]),
            None => (&[][..], &[][..]),
        };
        let by_row = |step: &mut Self| {
            (0..n).try_for_each(|i| {
                let key = match rows.wants_keys() {
                    true => rows.key(i)?,
                    false => std::borrow::Cow::Borrowed(&[][..]),
                };
                step.row(&key, |m| one(m, i))
            })
        };
        if !self.exec.wide {
            return by_row(self);
        }
        let (exec, groups, runs) = (self.exec, &mut *self.groups, &mut *self.runs);
        runs.clear();
        if exec.reads_keys() {
            // The key values of the row before, when this one's are theirs.
            let mut row = None;
            for i in 0..n {
                let key = rows.key(i)?;
                if !exec.read_key(&key, self.keys) {
                    return by_row(self);
                }
                let key_values = match row {
                    Some(r) if !self.keys.changed => r,
                    _ => groups.row(&self.keys.segments),
                };
                row = Some(key_values);
                let g = groups.group(key_values, self.keys.time)?;
                match runs.last_mut() {
                    Some((last, end)) if *last == g => *end += 1,
                    _ => runs.push((g, i + 1)),
                }
            }
        } else {
            // Every row in the one group of rows with no key values.
            let key_values = groups.row(&[]);
            runs.push((groups.group(key_values, None)?, n));
        }
        self.counts.rows += n;
        for (a, input) in exec.inputs.iter().enumerate() {
            if let Input::Events = input {
                groups.push_runs(a, runs, &vec![0; n])?;
            }
        }
        for (m, &d) in self.measures.iter().enumerate() {
            if let Some((_, words)) = rows.column(m) {
                self.counts.values += n;
                for a in exec.aggregates_of(d) {
                    groups.push_runs(a, runs, words)?;
                }
            }
        }
        Ok(())
    }
}

impl PartRead for PartAggregate {
    /// Reads up to `rows` more rows into the groups; at the end, sends
    /// the groups' batch (sorted as the plan says its output is).
    fn read(&mut self, rows: usize, send: &mut dyn FnMut(RecordBatch) -> bool) -> DfResult<bool> {
        // Counted in a local, which the loop may keep in registers.
        let mut counts = std::mem::take(&mut self.counts);
        let more = match &self.reading {
            Some((_, Read::Numbers { .. })) => self.aggregate_numbers(rows, &mut counts),
            Some((_, Read::Cells { .. })) => self.aggregate_cells(rows, &mut counts),
            None => Ok(false),
        };
        self.counts = counts;
        if more? {
            return Ok(false);
        }
        self.reading = None;
        let mut batch = self.groups.finish()?;
        if let Some(ordering) = &self.exec.ordering {
            batch = sort_batch(&batch, ordering, None)?;
        }
        self.counts.groups = batch.num_rows();
        (self.report)(&self.counts);
        send(batch);
        Ok(true)
    }
}

impl PartAggregate {
    /// Aggregates up to `rows` rows of measures of 8-byte numbers, read as
    /// runs: per row and measure one array of its values and one call per
    /// aggregate, or a column-wise block's rows a measure at a time. True
    /// while rows remain.
    fn aggregate_numbers(&mut self, rows: usize, counts: &mut Counts) -> DfResult<bool> {
        let PartAggregate {
            exec,
            groups,
            reading:
                Some((
                    stream,
                    Read::Numbers {
                        wanted,
                        row,
                        rows: block,
                    },
                )),
            measures,
            keys,
            runs,
            ..
        } = self
        else {
            return Ok(false);
        };
        let exec = &**exec;
        let layout = &exec.spec.layout;
        let mut read = 0;
        while read < rows {
            let next = stream.next_number_rows(wanted, rows - read, row, block)?;
            let mut step = Step {
                exec,
                groups,
                measures,
                keys,
                runs,
                counts,
            };
            match next {
                // (A pause: rows remain.)
                Numbers::End => return Ok(stream.paused()),
                Numbers::Rows => {
                    read += block.len();
                    step.rows(block)?;
                    continue;
                }
                Numbers::Row => read += 1,
            }
            if let Some((m, value)) = row.misfit() {
                let def = &layout.columns[measures[m]];
                let mut check = appender(&crate::query::view::value_type(def.value_type))?;
                let why = check
                    .put_cell(def.encoding, value)
                    .err()
                    .unwrap_or("is not 8 bytes long");
                return Err(decode_error(&row.key, def.failure(why, value)).into());
            }
            step.row(&row.key, |m| row.column(m))?;
        }
        Ok(true)
    }

    /// Aggregates up to `rows` rows of measures read as cells, and counts
    /// events. True while rows remain.
    fn aggregate_cells(&mut self, rows: usize, counts: &mut Counts) -> DfResult<bool> {
        let PartAggregate {
            exec,
            groups,
            reading:
                Some((
                    stream,
                    Read::Cells {
                        appenders,
                        counts_events,
                        inputs,
                        times,
                    },
                )),
            measures,
            keys,
            runs,
            ..
        } = self
        else {
            return Ok(false);
        };
        let exec = &**exec;
        let layout = &exec.spec.layout;
        let families = stream.family_names();
        for _ in 0..rows {
            let Some(row) = stream.next_view()? else {
                // (A pause: rows remain.)
                return Ok(stream.paused());
            };
            counts.rows += 1;
            let key = row.key();
            if !exec.read_key(key, keys) {
                counts.misfits += 1;
                continue;
            }
            let key_values = groups.row(&keys.segments);
            // Each measure's cells: a run, newest first.
            for (&d, appender) in measures.iter().zip(appenders.iter_mut()) {
                let def = &layout.columns[d];
                let Some(family) = families.iter().position(|f| **f == *def.family) else {
                    continue;
                };
                // The measure's column: cells from one that is the first
                // of its column to the next such, each column compared once.
                let qualifier = def.qualifier.as_bytes();
                let mut column = None;
                let mut i = 0;
                while i < row.len() {
                    let mut next = i + 1;
                    while next < row.len() && !row.first(next) {
                        next += 1;
                    }
                    if row.family(i) == family && row.qualifier(i) == qualifier {
                        column = Some((i, next));
                        break;
                    }
                    i = next;
                }
                let Some((start, end)) = column else {
                    continue;
                };
                for i in start..end {
                    counts.values += 1;
                    if let Err(why) = appender.put_cell(def.encoding, row.value(i)) {
                        let e = def.failure(why, row.value(i));
                        return Err(decode_error(key, e).into());
                    }
                }
                let values = appender.finish();
                // Each aggregate of this measure: its values, cast once.
                inputs.clear();
                for (a, input) in exec.inputs.iter().enumerate() {
                    if let Input::Measure(m, cast_to) = input
                        && *m == d
                    {
                        let values = match cast_to {
                            Some(t) if t != values.data_type() => cast(&values, t)?,
                            _ => Arc::clone(&values),
                        };
                        inputs.push((a, values));
                    }
                }
                // Cells come newest first.
                times.clear();
                times.extend((start..end).map(|i| row.timestamp(i)));
                groups.runs_of(key_values, times, runs)?;
                let mut at = 0;
                for &(g, until) in runs.iter() {
                    for (a, values) in inputs.iter() {
                        groups.update(*a, g, Some(values.slice(at, until - at)), until - at)?;
                    }
                    at = until;
                }
            }
            if *counts_events {
                // An event is a time any measure has a cell at.
                times.clear();
                times.extend((0..row.len()).map(|i| row.timestamp(i)));
                times.sort_unstable_by(|a, b| b.cmp(a));
                times.dedup();
                groups.runs_of(key_values, times, runs)?;
                let mut at = 0;
                for &(g, until) in runs.iter() {
                    for (a, input) in exec.inputs.iter().enumerate() {
                        if let Input::Events = input {
                            groups.update(a, g, None, until - at)?;
                        }
                    }
                    at = until;
                }
            }
        }
        Ok(true)
    }
}
