//! A time series' events as one tall view of its table: the series key
//! columns (key segments), the time (the last key segment in a row per
//! event, the cell timestamp in bucket rows) and the measures (declared
//! columns). Scans are the table's own, so every predicate on the series
//! key and time becomes key ranges, and in bucket rows also bucket ranges
//! and a cell-time range. Inserts build the layout's keys and stamp cells
//! with the event's time ([`super::write::encode`]); DELETE removes an
//! event's cells. A column per event keeps each value in a qualifier of
//! a row per measure: [`columns`] reads it back as events.

pub(crate) mod columns;
pub(crate) mod gather;
pub(crate) mod gather_exec;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::ScalarValue;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, Result as DfResult};
use datafusion::logical_expr::{Expr, col, lit};

use super::view::{
    ColumnSource, FamilyIndex, Layout, ProtoDecl, SeriesView, View, segment_type, timestamp_type,
    value_type,
};
use crate::schema::{FamilyTypes, SeriesDef, Shape, TableSchema};
use crate::store::{Store, TableDef, TimeRange};

impl Layout {
    /// The events of a series: its key columns (segments), its time (a
    /// segment, or the cell timestamp in bucket rows) and its measures.
    pub(super) fn series(
        store: &Store,
        def: TableDef,
        schema: TableSchema,
        series: SeriesDef,
    ) -> crate::error::Result<Layout> {
        let broken = |what: String| crate::error::Error::Corrupt {
            reason: format!("series {}: {what}", def.name),
        };
        let key = schema
            .key
            .clone()
            .ok_or_else(|| broken("its table has no row-key schema".into()))?;
        let segment = |name: &str| {
            key.fields()
                .find(|(_, n, _)| *n == name)
                .map(|(i, _, kind)| (i, segment_type(kind)))
                .ok_or_else(|| broken(format!("its row key has no segment {name}")))
        };
        let mut fields = Vec::new();
        let mut sources = Vec::new();
        for name in &series.key {
            let (i, data_type) = segment(name)?;
            fields.push(Field::new(name, data_type, true));
            sources.push(ColumnSource::Segment(i));
        }
        let (time_segment, _) = segment(&series.time_segment)?;
        let time_column = fields.len();
        fields.push(Field::new(&series.time, timestamp_type(), true));
        let view = match series.layout.shape {
            Shape::RowPerEvent => {
                sources.push(ColumnSource::Segment(time_segment));
                View::Wide { as_of: None }
            }
            Shape::CellPerEvent => {
                sources.push(ColumnSource::Timestamp);
                View::Versions { latest: None }
            }
            Shape::ColumnPerEvent => {
                sources.push(ColumnSource::Timestamp);
                View::Cells {
                    family: Some(series.family.clone()),
                }
            }
        };
        let metric_segment = series
            .metric
            .as_deref()
            .map(|m| segment(m).map(|(i, _)| i))
            .transpose()?;
        let mut protos = vec![None; schema.columns.len()];
        if let Some(event) = &series.event {
            // Serialized: each measure a field of the event's message.
            let (d, c) = schema
                .columns
                .iter()
                .enumerate()
                .find(|(_, c)| c.name == *event)
                .ok_or_else(|| broken(format!("its table has no column {event}")))?;
            let name = c.proto.as_ref().map_or("", |p| p.message.as_str());
            let message = crate::proto::ProtoRegistry::load(store)?.message(name)?;
            let DataType::Struct(children) = crate::proto::message_type(&message) else {
                return Err(broken(format!("{name} is not a message")));
            };
            for measure in &series.measures {
                let (f, child) = children.find(measure).ok_or_else(|| {
                    broken(format!("its event message {name} has no field {measure}"))
                })?;
                fields.push(Field::new(measure, child.data_type().clone(), true));
                sources.push(ColumnSource::ProtoField(d, f));
            }
            protos[d] = Some(ProtoDecl {
                message,
                null_on_error: false,
            });
        } else if metric_segment.is_some() {
            // A column per event: each measure's values are the qualifiers
            // of its rows.
            if series.measure_types.len() != series.measures.len() {
                return Err(broken(format!(
                    "{} measures but {} measure types",
                    series.measures.len(),
                    series.measure_types.len()
                )));
            }
            for (m, name) in series.measures.iter().enumerate() {
                fields.push(Field::new(name, value_type(series.measure_types[m]), true));
                sources.push(ColumnSource::Metric(m));
            }
        } else {
            for name in &series.measures {
                let (i, c) = schema
                    .columns
                    .iter()
                    .enumerate()
                    .find(|(_, c)| c.name == *name)
                    .ok_or_else(|| broken(format!("its table has no column {name}")))?;
                fields.push(Field::new(name, value_type(c.value_type), true));
                sources.push(ColumnSource::Declared(i));
            }
        }
        Ok(Layout {
            families: FamilyIndex::of(&def, &schema.columns),
            table: def.name.clone(),
            view,
            key: Some(key),
            map_values: def
                .families
                .iter()
                .map(|f| schema.family_types(&f.name).value)
                .collect(),
            cell_types: FamilyTypes::untyped(""),
            protos,
            columns: schema.columns,
            sources,
            arrow: Arc::new(Schema::new(fields)),
            def,
            series: Some(SeriesView {
                def: series,
                time_segment,
                time_column,
                metric_segment,
            }),
            pinned: None,
        })
    }
}

/// The bucket-segment predicates a series' cell time range implies: the
/// buckets from the one holding its start to the one holding its end.
pub(crate) fn bucket_filters(series: &SeriesView, range: TimeRange) -> Vec<Expr> {
    let bucket = |micros: i64| {
        lit(ScalarValue::TimestampMicrosecond(
            Some(series.def.layout.bucket_start(micros)),
            None,
        ))
    };
    let column = || col(Column::new_unqualified(&series.def.time_segment));
    let mut out = Vec::new();
    if range.start > 0 {
        out.push(column().gt_eq(bucket(range.start)));
    }
    if let Some(end) = range.end {
        out.push(column().lt_eq(bucket(end.saturating_sub(1))));
    }
    out
}

/// A DELETE's filters on a series as filters on its table's versions
/// view: the time of bucket rows is `_timestamp` (and the buckets it
/// falls in narrow the keys), a serialized measure a field of the event.
pub(crate) fn physical_filters(series: &SeriesView, filters: &[Expr]) -> DfResult<Vec<Expr>> {
    let def = &series.def;
    let bucketed = series.bucketed();
    let mut out = Vec::with_capacity(filters.len() + 2);
    for f in filters {
        let renamed = f.clone().transform(|e| {
            Ok(match e {
                Expr::Column(c) if bucketed && c.name == def.time => {
                    Transformed::yes(col(Column::new_unqualified("_timestamp")))
                }
                Expr::Column(c) if def.event.is_some() && def.measures.contains(&c.name) => {
                    let event = def.event.as_deref().unwrap_or_default();
                    Transformed::yes(datafusion::functions::core::expr_fn::get_field(
                        col(Column::new_unqualified(event)),
                        c.name.as_str(),
                    ))
                }
                other => Transformed::no(other),
            })
        })?;
        out.push(renamed.data);
    }
    if bucketed {
        let (range, _) = super::pushdown::time_range(&out, "_timestamp");
        out.extend(bucket_filters(series, range));
    }
    Ok(out)
}
