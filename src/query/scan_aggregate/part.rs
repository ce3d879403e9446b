//! One partition of a scan aggregate: its read, and its rows given to
//! the groups.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result as DfResult;

use super::groups::Groups;
use super::{Group, Input, ScanAggregateExec};
use crate::query::batch::{Appender, decode_error};
use crate::query::to_df;
use crate::schema::KeyValue;
use crate::schema::{Encoding, ValueType};
use crate::store::{
    NumberRow, QualifierFilter, ReadFilter, ReadRequest, RowRange, RowSet, RowStream,
};

/// What a scan aggregate read, for EXPLAIN ANALYZE (as a scan reports).
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) rows: usize,
    /// Rows passed over: their key does not fit the schema.
    pub(super) misfits: usize,
    /// Values decoded.
    pub(super) values: usize,
}

/// Whether a declared column holds 8-byte numbers (BIGINT or DOUBLE,
/// binary): what a read as numbers gives.
pub(super) fn is_number(def: &crate::schema::ColumnDef) -> bool {
    matches!(def.value_type, ValueType::Int64 | ValueType::Float64)
        && def.encoding == Encoding::Binary
}

/// A builder of `data_type`, one of the view's.
pub(super) fn appender(data_type: &DataType) -> DfResult<Appender> {
    Appender::for_type(data_type).ok_or_else(|| {
        to_df(crate::Error::Internal(format!(
            "no appender for {data_type}"
        )))
    })
}

impl ScanAggregateExec {
    /// Reads partition `ranges` and aggregates its events.
    pub(super) fn run(
        &self,
        ranges: Vec<RowRange>,
        report: &dyn Fn(&Counts),
    ) -> DfResult<RecordBatch> {
        let spec = &self.spec;
        let layout = &spec.layout;
        let mut groups = Groups::new(self)?;
        if self.groups.is_empty() {
            // Without GROUP BY, one group, there even with no rows (as
            // DataFusion's partial aggregate has it).
            let all = groups.row(&[]);
            groups.group(all, 0)?;
        }
        if ranges.is_empty() {
            return groups.finish();
        }
        // The measures read, each once (declared column), with a builder
        // of its values reused from row to row.
        let mut measures: Vec<usize> = Vec::new();
        for input in &self.inputs {
            if let Input::Measure(d, _) = input
                && !measures.contains(d)
            {
                measures.push(*d);
            }
        }
        let mut appenders = measures
            .iter()
            .map(|&d| {
                appender(&crate::query::wide::value_type(
                    layout.columns[d].value_type,
                ))
            })
            .collect::<DfResult<Vec<_>>>()?;
        // Without count(*), only the aggregated measures' columns are
        // read (a packed row skips the others whole).
        let counts_events = self.inputs.iter().any(|i| matches!(i, Input::Events));
        let qualifiers = if counts_events || self.wide {
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
        if self.wide {
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
        }
        .map_err(to_df)?;
        // Measures of 8-byte numbers are read as runs of numbers (a
        // series' events are counted from its cells).
        let numbers = (self.wide || !counts_events)
            && measures.iter().all(|&d| is_number(&layout.columns[d]));
        let counts = if numbers {
            self.aggregate_numbers(&mut stream, &measures, &mut groups)?
        } else {
            self.aggregate_cells(
                &mut stream,
                &measures,
                &mut appenders,
                counts_events,
                &mut groups,
            )?
        };
        report(&counts);
        groups.finish()
    }

    /// The aggregates taking measure `d`.
    fn aggregates_of(&self, d: usize) -> impl Iterator<Item = usize> + '_ {
        self.inputs
            .iter()
            .enumerate()
            .filter(move |(_, i)| matches!(i, Input::Measure(m, _) if *m == d))
            .map(|(a, _)| a)
    }

    /// The key values (row key, key segments) a row's groups take, in
    /// the order of the groups; false when the row is to be passed over
    /// (its key does not fit the schema).
    fn segments(&self, key: &[u8], segments: &mut Vec<Option<KeyValue>>) -> bool {
        segments.clear();
        let wanted = self
            .groups
            .iter()
            .filter(|g| !matches!(g, Group::Time { .. }));
        let decode = self.groups.iter().any(|g| matches!(g, Group::Segment(_)));
        let decoded = if decode {
            self.spec.layout.key.as_ref().and_then(|k| k.decode(key))
        } else {
            None
        };
        if self.spec.drop_misfits {
            // Whether the key fits, without building its values when no
            // group needs them.
            let fits = match (&decoded, &self.spec.layout.key) {
                (Some(_), _) => true,
                (None, Some(k)) => !decode && k.fits(key),
                (None, None) => false,
            };
            if !fits {
                return false;
            }
        }
        for g in wanted {
            segments.push(match g {
                Group::Segment(s) => decoded.as_ref().and_then(|d| d.get(*s).cloned()),
                Group::Key => Some(KeyValue::Text(String::from_utf8_lossy(key).into_owned())),
                Group::Time { .. } => None,
            });
        }
        true
    }

    /// Aggregates measures of 8-byte numbers, read as runs: per row and
    /// measure one array of its values and one call per aggregate.
    /// Returns the rows read.
    fn aggregate_numbers(
        &self,
        stream: &mut RowStream,
        measures: &[usize],
        groups: &mut Groups<'_>,
    ) -> DfResult<Counts> {
        let layout = &self.spec.layout;
        let wanted = layout.numbers_wanted(&stream.family_names(), measures);
        let mut row = NumberRow::default();
        let mut segments: Vec<Option<KeyValue>> = Vec::new();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut counts = Counts::default();
        while stream.next_numbers(&wanted, &mut row).map_err(to_df)? {
            counts.rows += 1;
            if let Some((m, value)) = row.misfit() {
                let def = &layout.columns[measures[m]];
                let mut check = appender(&crate::query::wide::value_type(def.value_type))?;
                let why = check
                    .put_cell(def.encoding, value)
                    .err()
                    .unwrap_or("is not 8 bytes long");
                return Err(to_df(decode_error(&row.key, def.failure(why, value))));
            }
            if !self.segments(&row.key, &mut segments) {
                counts.misfits += 1;
                continue;
            }
            let key_values = groups.row(&segments);
            if self.wide {
                // A row of the wide view: counted once, each measure its
                // newest value (the read keeps one cell a column).
                let g = groups.group(key_values, 0)?;
                runs.clear();
                runs.push((g, 1));
                for (a, input) in self.inputs.iter().enumerate() {
                    if let Input::Events = input {
                        groups.push_runs(a, &runs, &[0])?;
                    }
                }
                for (m, &d) in measures.iter().enumerate() {
                    let (_, words) = row.column(m);
                    if let Some(first) = words.first() {
                        counts.values += 1;
                        for a in self.aggregates_of(d) {
                            groups.push_runs(a, &runs, std::slice::from_ref(first))?;
                        }
                    }
                }
                continue;
            }
            for (m, &d) in measures.iter().enumerate() {
                let (times, words) = row.column(m);
                if times.is_empty() {
                    continue;
                }
                groups.runs_of(key_values, times, &mut runs)?;
                counts.values += words.len();
                for a in self.aggregates_of(d) {
                    groups.push_runs(a, &runs, words)?;
                }
            }
        }
        Ok(counts)
    }

    /// Aggregates measures read as cells, and counts events. Returns the
    /// rows read.
    fn aggregate_cells(
        &self,
        stream: &mut RowStream,
        measures: &[usize],
        appenders: &mut [Appender],
        counts_events: bool,
        groups: &mut Groups<'_>,
    ) -> DfResult<Counts> {
        let layout = &self.spec.layout;
        let families = stream.family_names();
        let mut segments: Vec<Option<KeyValue>> = Vec::new();
        let mut inputs: Vec<(usize, ArrayRef)> = Vec::new();
        let mut times: Vec<i64> = Vec::new();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut counts = Counts::default();
        while let Some(row) = stream.next_view().map_err(to_df)? {
            counts.rows += 1;
            let key = row.key();
            if !self.segments(key, &mut segments) {
                counts.misfits += 1;
                continue;
            }
            let key_values = groups.row(&segments);
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
                        return Err(to_df(decode_error(key, e)));
                    }
                }
                let values = appender.finish();
                // Each aggregate of this measure: its values, cast once.
                inputs.clear();
                for (a, input) in self.inputs.iter().enumerate() {
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
                groups.runs_of(key_values, &times, &mut runs)?;
                let mut at = 0;
                for &(g, until) in &runs {
                    for (a, values) in &inputs {
                        groups.update(*a, g, Some(values.slice(at, until - at)), until - at)?;
                    }
                    at = until;
                }
            }
            if counts_events {
                // An event is a time any measure has a cell at.
                times.clear();
                times.extend((0..row.len()).map(|i| row.timestamp(i)));
                times.sort_unstable_by(|a, b| b.cmp(a));
                times.dedup();
                groups.runs_of(key_values, &times, &mut runs)?;
                let mut at = 0;
                for &(g, until) in &runs {
                    for (a, input) in self.inputs.iter().enumerate() {
                        if let Input::Events = input {
                            groups.update(a, g, None, until - at)?;
                        }
                    }
                    at = until;
                }
            }
        }
        Ok(counts)
    }
}
