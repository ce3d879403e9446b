//! What a scan aggregate computes, decided at planning and shared by its
//! partitions: its groups, its aggregates and their inputs, and the
//! helpers every part of the scan-side aggregate uses.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::Result as DfResult;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr};

use crate::query::batch::Appender;
use crate::query::plan::ScanSpec;
use crate::schema::{Encoding, KeyCursor, KeyValue, ValueType};

/// The most time groups (`date_trunc` expressions) a scan computes.
pub(super) const MAX_TIMES: usize = 4;

/// What a scan aggregate computes, decided at planning: the scan's spec,
/// its groups and aggregates, and how it reads them.
pub(super) struct AggregateShape {
    pub(super) spec: ScanSpec,
    /// The scan's output schema: what the grouping expressions read.
    pub(super) input_schema: SchemaRef,
    /// The partial aggregate's.
    pub(super) schema: SchemaRef,
    pub(super) group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    pub(super) groups: Vec<Group>,
    pub(super) aggregates: Vec<Arc<AggregateFunctionExpr>>,
    pub(super) inputs: Vec<Input>,
    /// Per aggregate, the type of the measure it takes as stored.
    pub(super) input_types: Vec<Option<ValueType>>,
    /// Whether the scan reads a table's wide view (a row each).
    pub(super) wide: bool,
    /// Whether the scan gives the aggregates' values (the aggregate it
    /// replaces was whole) rather than their states.
    pub(super) finishes: bool,
    /// Per aggregate, whether the scan may hand it partial states of
    /// runs of values rather than the values.
    pub(super) presums: Vec<Option<Presum>>,
    /// The time column in `input_schema`, if the scan has one.
    pub(super) time_column: Option<usize>,
    /// In the wide view, the key field the time column is, whose value
    /// a row's time groups take.
    pub(super) time_segment: Option<usize>,
    /// Whether rows' keys are decoded: a group takes a segment or the
    /// time segment, or a key that does not fit is passed over.
    pub(super) decodes: bool,
    /// The order a partition's groups are sorted in before they go (the
    /// one the replaced aggregate promised), if any.
    pub(super) ordering: Option<LexOrdering>,
}

impl AggregateShape {
    /// The aggregates taking measure `d`.
    pub(super) fn aggregates_of(&self, d: usize) -> impl Iterator<Item = usize> + '_ {
        self.inputs
            .iter()
            .enumerate()
            .filter(move |(_, i)| matches!(i, Input::Measure(m, _) if *m == d))
            .map(|(a, _)| a)
    }

    /// Whether rows' keys matter to the groups: a group takes the key, a
    /// segment of it or its time segment, or a key that does not fit the
    /// schema is passed over (see [`AggregateShape::read_key`]).
    pub(super) fn reads_keys(&self) -> bool {
        self.spec.drop_misfits
            || self.time_segment.is_some()
            || self.groups.iter().any(|g| !matches!(g, Group::Time { .. }))
    }

    /// Reads the key values (row key, key segments; the time segment's
    /// value) `key`'s groups take into `keys`; false when the row is to be
    /// passed over (its key does not fit the schema and the scan's key
    /// ranges answered a segment filter). A key that does not fit gives
    /// NULL segments and no time, as the view shows it.
    pub(super) fn read_key(&self, key: &[u8], keys: &mut KeyReader) -> bool {
        let decodes = self.decodes;
        let schema = self.spec.layout.key.as_ref().filter(|_| decodes);
        let first = schema.and_then(|schema| schema.decode_next(&mut keys.cursor, key));
        let Some(first) = first else {
            if decodes && self.spec.drop_misfits {
                return false;
            }
            keys.segments.clear();
            keys.segments.extend(self.key_groups().map(|g| match g {
                Group::Key => Some(key_text(key)),
                _ => None,
            }));
            keys.current = false;
            keys.changed = true;
            keys.time = None;
            return true;
        };
        let fields = keys.cursor.values().unwrap_or_default();
        // The groups' values are read again when a field they take was.
        let stale = !keys.current
            || self.key_groups().any(|g| match g {
                Group::Segment(s) => *s >= first,
                _ => true,
            });
        keys.changed = stale;
        if stale {
            keys.segments.clear();
            keys.segments.extend(self.key_groups().map(|g| match g {
                Group::Segment(s) => fields.get(*s).cloned(),
                _ => Some(key_text(key)),
            }));
            keys.current = true;
        }
        keys.time = self.time_segment.and_then(|t| match fields.get(t) {
            Some(KeyValue::Time(micros)) => Some(*micros),
            _ => None,
        });
        true
    }

    /// The groups that take a row's key values (all but time groups).
    fn key_groups(&self) -> impl Iterator<Item = &Group> {
        self.groups
            .iter()
            .filter(|g| !matches!(g, Group::Time { .. }))
    }
}

/// `_key` as the view shows it.
fn key_text(key: &[u8]) -> KeyValue {
    KeyValue::Text(String::from_utf8_lossy(key).into_owned())
}

/// What one partition's rows gave their groups, key after key: rows
/// read in key order share their leading segments, which are read once
/// (see [`crate::schema::KeySchema::decode_after`]).
#[derive(Default)]
pub(super) struct KeyReader {
    /// The last key read and its fields (when it fit).
    cursor: KeyCursor,
    /// The last key's values for the groups that take key values, in
    /// their order (see [`AggregateShape::key_groups`]).
    pub(super) segments: Vec<Option<KeyValue>>,
    /// Whether `segments` are the cursor's fields' (not those of a key
    /// that did not fit), and whether the last key changed them.
    current: bool,
    pub(super) changed: bool,
    /// The last key's time segment, when the groups take its time.
    pub(super) time: Option<i64>,
}

/// A grouping expression the scan computes.
#[derive(Debug, Clone)]
pub(super) enum Group {
    /// A table's row key (`_key`), as the view shows it.
    Key,
    /// A series key column: its key segment.
    Segment(usize),
    /// An expression of `date_trunc(unit, time)` or `date_bin(stride,
    /// time, origin)`: the bucket's length and origin (a group is a
    /// multiple of the length from the origin), and whether it is counted
    /// in nanoseconds (a time beyond them is in no bucket).
    Time {
        len: i64,
        origin: i64,
        in_nanos: bool,
    },
}

/// What an aggregate takes.
#[derive(Debug, Clone)]
pub(super) enum Input {
    /// `count(*)`: the events.
    Events,
    /// A measure's values (declared column `.0`), cast to `.1` if given.
    Measure(usize, Option<DataType>),
}

/// An aggregate whose partial state the scan computes for a run of
/// values of one group (their count, their total) and merges in, rather
/// than handing it each value: a run is a bucket row's slice of one
/// hour, and the accumulator's add per value is the scan's largest cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Presum {
    /// `avg` of DOUBLE values: state (count, total).
    Avg,
    /// `sum` of DOUBLE values: state (total).
    Sum,
    /// `count` of a measure: state (count); the runs hold no NULLs.
    Count,
}

impl Presum {
    /// The presum of aggregate `a` (of a measure, or `count(*)`), if its
    /// state is the one this computes.
    pub(super) fn of(a: &AggregateFunctionExpr, input_schema: &SchemaRef) -> Option<Self> {
        let takes = a.expressions()[0].data_type(input_schema).ok()?;
        let state: Vec<DataType> = a
            .state_fields()
            .ok()?
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let presum = match a.fun().name() {
            "avg" => Presum::Avg,
            "sum" => Presum::Sum,
            "count" => Presum::Count,
            _ => return None,
        };
        let fits = match presum {
            Presum::Avg => {
                takes == DataType::Float64 && state == [DataType::UInt64, DataType::Float64]
            }
            Presum::Sum => takes == DataType::Float64 && state == [DataType::Float64],
            Presum::Count => state == [DataType::Int64],
        };
        fits.then_some(presum)
    }
}

/// The total of `values`, added in four lanes.
pub(super) fn total(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let mut lanes = [0.0f64; 4];
    for (i, v) in values.enumerate() {
        lanes[i % 4] += v;
    }
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
}

/// Whether a declared column holds 8-byte numbers (BIGINT or DOUBLE,
/// binary): what a read as numbers gives.
pub(super) fn is_number(def: &crate::schema::ColumnDef) -> bool {
    matches!(def.value_type, ValueType::Int64 | ValueType::Float64)
        && def.encoding == Encoding::Binary
}

/// A builder of `data_type`, one of the view's.
pub(super) fn appender(data_type: &DataType) -> DfResult<Appender> {
    Appender::for_type(data_type)
        .ok_or_else(|| crate::error::Error::Internal(format!("no appender for {data_type}")).into())
}
