//! A logical time series over one of the guides' physical layouts.
//!
//! A series is (series key, time, measures). Its table is an ordinary
//! cellar table whose row key, family, qualifiers and cell timestamps
//! are the layout's, exactly as the time-series guide draws them; the
//! series definition kept with the table's schema says how SQL's one
//! tall shape maps onto it. In every layout a measure is a cell whose
//! timestamp is the event's time, so a family's `MAX_AGE` is retention
//! by event age and writing one (key, time) again replaces the measures
//! it gives.

use serde::{Deserialize, Serialize};

use super::column::{ColumnDef, Encoding, ProtoColumn, ValueType};
use super::key::{KeySchema, Segment, SegmentKind, TimeFormat};
use crate::error::{Error, Result};

/// How events are laid out in rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(
    clippy::enum_variant_names,
    reason = "the guides' names for the layouts, kept in stored schemas"
)]
pub enum Shape {
    /// A row per event, its time the last key segment (tall and narrow).
    RowPerEvent,
    /// A row per series and time bucket; each event adds a timestamped
    /// cell to every measure's column.
    CellPerEvent,
    /// A row per series, measure and time bucket; each event adds a
    /// column whose qualifier is the measure's value (as text) and whose
    /// cell, stamped with the event's time, is empty.
    ColumnPerEvent,
}

/// The physical layout of a series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesLayout {
    /// Rows per event or per bucket.
    pub shape: Shape,
    /// The bucket's length in microseconds (bucket shapes only).
    pub bucket: Option<i64>,
    /// A salt segment of this many buckets leads the key, hashed from the
    /// series key.
    pub salt: Option<u32>,
    /// The time (or bucket) segment is written newest first.
    pub reversed: bool,
    /// An event's measures are one protobuf message in one cell.
    #[serde(default)]
    pub serialized: bool,
}

/// A series as stored with its table's schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesDef {
    /// The series key's columns, each a key segment of the same name.
    pub key: Vec<String>,
    /// The time column's name.
    pub time: String,
    /// The measures: the table's declared columns, in this order.
    pub measures: Vec<String>,
    /// The key segment holding the time (a row per event) or the bucket's
    /// start (bucket shapes); not a column of the series.
    pub time_segment: String,
    /// The family holding the measures.
    pub family: String,
    /// When serialized: the column holding each event's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// How it is laid out.
    pub layout: SeriesLayout,
    /// A column per event: the key segment naming the measure a row holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// A column per event: the measures' types (no declared column holds
    /// them; their values are qualifiers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measure_types: Vec<ValueType>,
}

/// The family the guides' weather example keeps its measures in.
pub const SERIES_FAMILY: &str = "measurements";

/// Weeks start on a Monday: 1970-01-05, four days after the epoch.
pub(crate) const WEEK_ORIGIN: i64 = 4 * 86_400_000_000;
const MINUTE: i64 = 60_000_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;
/// An event's time in a row key, to the microsecond.
const EVENT_TIME_PATTERN: &str = "%Y-%m-%dT%H:%M:%S%.6f";
/// Events from 10000-01-01 on do not fit the key's four-digit years.
const TIME_LIMIT: i64 = 253_402_300_800_000_000;

impl SeriesLayout {
    /// The layout as DDL spells it.
    pub fn describe(&self) -> String {
        let mut out = match (self.serialized, self.shape, self.bucket) {
            (true, _, None) => "SERIALIZED".to_string(),
            (true, _, Some(b)) => format!("SERIALIZED BUCKET '{}'", interval_text(b)),
            (false, Shape::RowPerEvent, _) => "ROW PER EVENT".to_string(),
            (false, Shape::CellPerEvent, Some(b)) => {
                format!("BUCKET '{}' CELL PER EVENT", interval_text(b))
            }
            (false, Shape::CellPerEvent, None) => "CELL PER EVENT".to_string(),
            (_, Shape::ColumnPerEvent, Some(b)) => {
                format!("BUCKET '{}' COLUMN PER EVENT", interval_text(b))
            }
            (_, Shape::ColumnPerEvent, None) => "COLUMN PER EVENT".to_string(),
        };
        if let Some(n) = self.salt {
            out.push_str(&format!(" SALT {n}"));
        }
        if self.reversed {
            out.push_str(" REVERSED");
        }
        out
    }

    /// The start of the bucket holding `micros`: buckets are whole
    /// multiples of their length from the epoch, whole weeks from a
    /// Monday.
    pub fn bucket_start(&self, micros: i64) -> i64 {
        let Some(len) = self.bucket else {
            return micros;
        };
        let origin = if len % WEEK == 0 { WEEK_ORIGIN } else { 0 };
        origin + (micros - origin).div_euclid(len) * len
    }
}

/// `3600000000` as `1 hour`, `900000000` as `15 minutes`.
pub fn interval_text(micros: i64) -> String {
    for (unit, name) in [
        (WEEK, "week"),
        (DAY, "day"),
        (HOUR, "hour"),
        (MINUTE, "minute"),
    ] {
        if micros % unit == 0 {
            let n = micros / unit;
            return format!("{n} {name}{}", if n == 1 { "" } else { "s" });
        }
    }
    format!("{} seconds", micros as f64 / 1e6)
}

/// A series as declared: what `CREATE SERIES` says.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesDecl {
    /// Series key segments (named fields only).
    pub key: Vec<(String, SegmentKind)>,
    /// The time column.
    pub time: String,
    /// Measures: name, type, encoding.
    pub measures: Vec<(String, ValueType, Encoding)>,
    /// The layout.
    pub layout: SeriesLayout,
}

impl SeriesDecl {
    /// The physical table: its row key, its measure columns (all in
    /// [`SERIES_FAMILY`]) and the series definition.
    pub fn physical(&self, table: &str) -> Result<(KeySchema, Vec<ColumnDef>, SeriesDef)> {
        let bad = |why: String| Error::InvalidArgument(format!("series {table}: {why}"));
        self.check_shape(table)?;
        let l = &self.layout;
        let declared: Vec<&String> = self
            .key
            .iter()
            .map(|(n, _)| n)
            .chain(self.measures.iter().map(|(n, _, _)| n))
            .chain([&self.time])
            .collect();
        let mut taken: Vec<String> = declared.iter().map(|n| n.to_ascii_lowercase()).collect();
        for (i, name) in declared.iter().enumerate() {
            if taken[..i].contains(&taken[i]) {
                return Err(bad(format!("column {name} is declared twice")));
            }
        }
        let mut free = |want: &str| {
            let mut name = want.to_string();
            while taken.contains(&name) {
                name.push('_');
            }
            taken.push(name.clone());
            name
        };
        let mut segments = Vec::new();
        if let Some(buckets) = l.salt {
            if !(1..=10_000).contains(&buckets) {
                return Err(bad(format!(
                    "SALT {buckets}: a salt has 1 to 10000 buckets"
                )));
            }
            segments.push(Segment::Field {
                name: free("salt"),
                kind: SegmentKind::Salt {
                    buckets,
                    of: self.key.iter().map(|(n, _)| n.clone()).collect(),
                },
            });
        }
        for (name, kind) in &self.key {
            segments.push(Segment::Field {
                name: name.clone(),
                kind: kind.clone(),
            });
        }
        // A column per event: each row holds one measure, named before the
        // bucket (the guide's `location#balloon#pressure#week`), so one
        // measure of one series over time is one key range.
        let metric = (l.shape == Shape::ColumnPerEvent).then(|| {
            let name = free("metric");
            segments.push(Segment::Field {
                name: name.clone(),
                kind: SegmentKind::Text,
            });
            name
        });
        if metric.is_some() {
            self.check_qualifier_values(table)?;
        }
        // A row per event ends its key with the event's time; a bucket
        // row with the bucket's start.
        let (time_segment, format) = match l.bucket {
            None => (self.time.clone(), EVENT_TIME_PATTERN),
            Some(len) => (free("bucket"), bucket_pattern(len)),
        };
        let format = TimeFormat::Pattern(format.into());
        let kind = if l.reversed {
            SegmentKind::Time {
                format: TimeFormat::Micros,
                reversed: true,
            }
        } else {
            SegmentKind::Time {
                format,
                reversed: false,
            }
        };
        segments.push(Segment::Field {
            name: time_segment.clone(),
            kind,
        });
        let key = KeySchema {
            delimiter: '#',
            segments,
        };
        let (columns, event) = if metric.is_some() {
            (Vec::new(), None)
        } else if l.serialized {
            self.check_serializable(table)?;
            let event = free("event");
            let column = ColumnDef {
                name: event.clone(),
                family: SERIES_FAMILY.into(),
                qualifier: "event".into(),
                value_type: ValueType::Bytes,
                encoding: Encoding::Binary,
                proto: Some(ProtoColumn {
                    message: event_message(table),
                    null_on_error: false,
                }),
            };
            (vec![column], Some(event))
        } else {
            let columns = self
                .measures
                .iter()
                .map(|(name, value_type, encoding)| ColumnDef {
                    name: name.clone(),
                    family: SERIES_FAMILY.into(),
                    qualifier: name.clone(),
                    value_type: *value_type,
                    encoding: *encoding,
                    proto: None,
                })
                .collect();
            (columns, None)
        };
        let def = SeriesDef {
            key: self.key.iter().map(|(n, _)| n.clone()).collect(),
            time: self.time.clone(),
            measures: self.measures.iter().map(|(n, _, _)| n.clone()).collect(),
            time_segment,
            family: SERIES_FAMILY.into(),
            event,
            layout: self.layout.clone(),
            measure_types: if metric.is_some() {
                self.measures.iter().map(|(_, t, _)| *t).collect()
            } else {
                Vec::new()
            },
            metric,
        };
        Ok((key, columns, def))
    }

    /// The declaration's key, measures and layout make sense together.
    fn check_shape(&self, table: &str) -> Result<()> {
        let bad = |why: String| Error::InvalidArgument(format!("series {table}: {why}"));
        let l = &self.layout;
        if self.key.is_empty() {
            return Err(bad("KEY needs at least one column".into()));
        }
        if self.measures.is_empty() {
            return Err(bad("a series needs at least one measure".into()));
        }
        for (name, kind) in &self.key {
            if matches!(kind, SegmentKind::Salt { .. }) {
                return Err(bad(format!(
                    "key column {name} is a SALT; salt the series with LAYOUT ... SALT n"
                )));
            }
        }
        match (l.shape, l.bucket) {
            (Shape::RowPerEvent, Some(_)) => {
                return Err(bad("ROW PER EVENT has no BUCKET".into()));
            }
            (Shape::CellPerEvent, None) => {
                return Err(bad("CELL PER EVENT needs BUCKET '<interval>'".into()));
            }
            (Shape::ColumnPerEvent, None) => {
                return Err(bad("COLUMN PER EVENT needs BUCKET '<interval>'".into()));
            }
            (Shape::ColumnPerEvent, _) if l.serialized => {
                return Err(bad(
                    "COLUMN PER EVENT keeps values in qualifiers; it is not SERIALIZED".into(),
                ));
            }
            (_, Some(b)) if b % 1_000_000 != 0 => {
                return Err(bad(format!(
                    "BUCKET {}: a bucket is whole seconds long",
                    interval_text(b)
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether every measure reads back from its text, which a column per
    /// event keeps as the qualifier.
    fn check_qualifier_values(&self, table: &str) -> Result<()> {
        for (name, value_type, _) in &self.measures {
            if !matches!(
                value_type,
                ValueType::Int64 | ValueType::Float64 | ValueType::Boolean | ValueType::Text
            ) {
                return Err(Error::InvalidArgument(format!(
                    "series {table}: measure {name} is {}, which COLUMN PER EVENT cannot keep; \
                     its qualifiers hold BIGINT, DOUBLE, BOOLEAN and TEXT values as text",
                    value_type.sql_name()
                )));
            }
        }
        Ok(())
    }

    /// Whether every measure has a protobuf type and a field name.
    fn check_serializable(&self, table: &str) -> Result<()> {
        for (name, value_type, _) in &self.measures {
            if proto_type(*value_type).is_none() {
                return Err(Error::InvalidArgument(format!(
                    "series {table}: measure {name} is {}, which SERIALIZED cannot hold; \
                     its messages hold BIGINT, DOUBLE, BOOLEAN, TEXT and BYTES (a decimal \
                     as DOUBLE, or as TEXT)",
                    value_type.sql_name()
                )));
            }
            let mut chars = name.chars();
            let valid = chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(Error::InvalidArgument(format!(
                    "series {table}: measure {name:?} cannot name a protobuf field \
                     (letters, digits and _, not first a digit), which SERIALIZED needs"
                )));
            }
        }
        Ok(())
    }

    /// The `.proto` file a serialized series' events are messages of: its
    /// name in the store's registry and its source.
    pub fn proto_file(&self, table: &str) -> (String, String) {
        let mut source = format!(
            "syntax = \"proto3\";\npackage {PROTO_PACKAGE};\n\n// The events of series {table}.\nmessage {table} {{\n"
        );
        for (i, (name, value_type, _)) in self.measures.iter().enumerate() {
            let kind = proto_type(*value_type).unwrap_or("bytes");
            source.push_str(&format!("  optional {kind} {name} = {};\n", i + 1));
        }
        source.push_str("}\n");
        (format!("series/{table}.proto"), source)
    }
}

/// The package of series' event messages.
const PROTO_PACKAGE: &str = "cellar.series";

/// The message type of a serialized series' events.
fn event_message(table: &str) -> String {
    format!("{PROTO_PACKAGE}.{table}")
}

/// The protobuf type holding a measure of `value_type`.
fn proto_type(value_type: ValueType) -> Option<&'static str> {
    match value_type {
        ValueType::Int64 => Some("int64"),
        ValueType::Float64 => Some("double"),
        ValueType::Boolean => Some("bool"),
        ValueType::Text => Some("string"),
        ValueType::Bytes => Some("bytes"),
        ValueType::Decimal { .. } => None,
    }
}

/// How a bucket's start is written: as coarse as its length allows.
fn bucket_pattern(len: i64) -> &'static str {
    if len % DAY == 0 {
        "%Y-%m-%d"
    } else if len % HOUR == 0 {
        "%Y-%m-%dT%H"
    } else if len % MINUTE == 0 {
        "%Y-%m-%dT%H:%M"
    } else {
        "%Y-%m-%dT%H:%M:%S"
    }
}

impl SeriesDef {
    /// Checks an event's time: cell timestamps are not negative, and key
    /// years have four digits.
    pub fn check_time(&self, micros: i64) -> std::result::Result<(), String> {
        if !(0..TIME_LIMIT).contains(&micros) {
            return Err(format!(
                "{} {micros} µs is outside 1970-01-01 .. 9999-12-31, the times a series holds",
                self.time
            ));
        }
        if self.layout.reversed && self.layout.bucket_start(micros) < 0 {
            return Err(format!(
                "{} {micros} µs falls in a week that starts before 1970-01-01",
                self.time
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(bucket: Option<i64>) -> SeriesLayout {
        SeriesLayout {
            shape: Shape::CellPerEvent,
            bucket,
            salt: None,
            reversed: false,
            serialized: false,
        }
    }

    #[test]
    fn buckets_start_on_whole_multiples() {
        let hour = layout(Some(HOUR));
        assert_eq!(hour.bucket_start(HOUR + 5), HOUR);
        assert_eq!(hour.bucket_start(HOUR), HOUR);
        assert_eq!(hour.bucket_start(HOUR - 1), 0);
        let quarter = layout(Some(15 * MINUTE));
        assert_eq!(quarter.bucket_start(31 * MINUTE), 30 * MINUTE);
        // Weeks start on Mondays: 1970-01-12 is one.
        let week = layout(Some(WEEK));
        let monday = 11 * DAY;
        assert_eq!(week.bucket_start(monday + 3 * DAY), monday);
        assert_eq!(week.bucket_start(monday - 1), monday - WEEK);
    }

    #[test]
    fn intervals_read_back() {
        assert_eq!(interval_text(HOUR), "1 hour");
        assert_eq!(interval_text(15 * MINUTE), "15 minutes");
        assert_eq!(interval_text(WEEK), "1 week");
        assert_eq!(interval_text(2 * DAY), "2 days");
    }

    #[test]
    fn hidden_segments_take_free_names() {
        let decl = SeriesDecl {
            key: vec![("bucket".into(), SegmentKind::Text)],
            time: "ts".into(),
            measures: vec![("salt".into(), ValueType::Int64, Encoding::Binary)],
            layout: SeriesLayout {
                salt: Some(4),
                ..layout(Some(HOUR))
            },
        };
        let (key, _, def) = decl.physical("s").unwrap();
        let names: Vec<&str> = key.fields().map(|(_, n, _)| n).collect();
        assert_eq!(names, ["salt_", "bucket", "bucket_"]);
        assert_eq!(def.time_segment, "bucket_");
        key.validate().unwrap();
    }
}
