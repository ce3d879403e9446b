//! The view vocabulary every part of query/ speaks: which shape of a
//! table a provider shows ([`View`]), what each of its columns is
//! ([`ColumnSource`]), the table's SQL shape in that view ([`Layout`]),
//! its families by name ([`FamilyIndex`]), a series' events
//! ([`SeriesView`]) and the Arrow types of columns. It imports nothing
//! else of query/.
//!
//! A view's columns: `_key`, the row-key segments, the declared
//! qualifier columns (latest cell, decoded by type), and per family a map
//! of its undeclared qualifiers to their latest values, so dynamic
//! qualifiers show up in `SELECT *`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, MapBuilder, StringBuilder, make_builder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::logical_expr::Expr;
use prost_reflect::MessageDescriptor;

use crate::schema::{
    ColumnDef, FamilyTypes, KeySchema, SegmentKind, SeriesDef, TableSchema, ValueType,
};
use crate::store::{FamilyKind, Store, TableDef};

/// Which shape of a table a provider shows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum View {
    /// One row per row key with the latest cells, as of a time (inclusive,
    /// microseconds) when given.
    Wide {
        /// Only cells written at or before this time.
        as_of: Option<i64>,
    },
    /// One row per (row key, cell timestamp); the latest N cells per column
    /// when given.
    Versions {
        /// Cells per column.
        latest: Option<usize>,
    },
    /// One row per cell, of one family when given.
    Cells {
        /// The family.
        family: Option<String>,
    },
}

/// What a column of a view is.
#[derive(Debug, Clone)]
pub(crate) enum ColumnSource {
    Key,
    Segment(usize),
    Timestamp,
    Declared(usize),
    /// Field `.1` of the message in declared column `.0`, which is not a
    /// column of the view itself (a serialized series' measures).
    ProtoField(usize, usize),
    /// Measure `.0` of a series kept a column per event: the qualifiers
    /// of its rows, which are not columns of the table's other views.
    Metric(usize),
    FamilyMap(usize),
    Family,
    Qualifier,
    Value,
}

/// A protobuf column's message type.
#[derive(Debug, Clone)]
pub(crate) struct ProtoDecl {
    pub message: MessageDescriptor,
    pub null_on_error: bool,
}

/// A table's SQL shape in one view, shared by its scans and writers.
#[derive(Debug)]
pub(crate) struct Layout {
    pub table: String,
    pub def: TableDef,
    pub view: View,
    pub key: Option<KeySchema>,
    pub columns: Vec<ColumnDef>,
    /// Per family (declaration order): how its map values decode.
    pub map_values: Vec<ColumnDef>,
    /// The cells view: how qualifiers and values decode.
    pub cell_types: FamilyTypes,
    /// Per declared column: its message type when it holds protobuf.
    pub protos: Vec<Option<ProtoDecl>>,
    pub sources: Vec<ColumnSource>,
    pub arrow: SchemaRef,
    /// Families by name and their declared qualifiers: what every batch
    /// builder and writer of this layout looks up, made once.
    pub(crate) families: Arc<FamilyIndex>,
    /// Set when the view is a time series' events (the table's default
    /// view when it holds one).
    pub series: Option<SeriesView>,
    /// A series' table as planned against: its scans read it even if a
    /// change of layout replaces it before they run.
    pub pinned: Option<crate::store::Pinned>,
}

/// The family a table function names: exactly, or folded as the DDL folds
/// unquoted names (`cells('quote', 'MD')` is family `md`) when that is
/// unambiguous. Otherwise an error listing the table's families.
fn family_named(def: &TableDef, name: &str) -> crate::error::Result<String> {
    if def.families.iter().any(|f| f.name == name) {
        return Ok(name.to_string());
    }
    let folded: Vec<&str> = def
        .families
        .iter()
        .filter(|f| f.name.eq_ignore_ascii_case(name))
        .map(|f| f.name.as_str())
        .collect();
    if let [only] = folded.as_slice() {
        return Ok((*only).to_string());
    }
    let names: Vec<&str> = def.families.iter().map(|f| f.name.as_str()).collect();
    Err(crate::error::Error::InvalidArgument(format!(
        "table {} has no family {name:?}; its families are {}",
        def.name,
        names.join(", ")
    )))
}

pub(crate) fn map_type(values: &DataType) -> DataType {
    let mut builder = MapBuilder::new(None, StringBuilder::new(), make_builder(values, 0));
    builder.finish().data_type().clone()
}

pub(crate) fn value_type(t: ValueType) -> DataType {
    match t {
        ValueType::Int64 => DataType::Int64,
        ValueType::Float64 => DataType::Float64,
        ValueType::Boolean => DataType::Boolean,
        ValueType::Decimal { precision, scale } => {
            DataType::Decimal128(precision, i8::try_from(scale).unwrap_or(i8::MAX))
        }
        ValueType::Text => DataType::Utf8,
        ValueType::Bytes => DataType::Binary,
    }
}

pub(crate) fn segment_type(kind: &SegmentKind) -> DataType {
    match kind {
        SegmentKind::Text | SegmentKind::Padded { .. } => DataType::Utf8,
        SegmentKind::Int { .. } | SegmentKind::Salt { .. } => DataType::Int64,
        SegmentKind::Time { .. } => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}

pub(crate) fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

impl Layout {
    /// What a read of numbers asks the store for declared columns
    /// `declared`: each as (its family's place among the `families` read,
    /// or one no family has when its family is not read; its qualifier).
    pub(crate) fn numbers_wanted(
        &self,
        families: &[Arc<str>],
        declared: &[usize],
    ) -> Vec<(usize, Vec<u8>)> {
        declared
            .iter()
            .map(|&d| {
                let def = &self.columns[d];
                let family = families.iter().position(|f| **f == *def.family);
                (
                    family.unwrap_or(usize::MAX),
                    def.qualifier.clone().into_bytes(),
                )
            })
            .collect()
    }

    pub fn new(store: &Store, def: TableDef, mut view: View) -> crate::error::Result<Layout> {
        let schema = TableSchema::of(&def)?;
        if view == (View::Wide { as_of: None })
            && let Some(series) = &schema.series
        {
            let series = series.clone();
            return Self::series(store, def, schema, series);
        }
        if let View::Cells { family: Some(f) } = &mut view {
            *f = family_named(&def, f)?;
        }
        // Nullable only so INSERT may leave it out and build it from the segments;
        // a scan never produces a NULL key.
        let mut fields = vec![Field::new("_key", DataType::Utf8, true)];
        let mut sources = vec![ColumnSource::Key];
        if let Some(key) = &schema.key {
            for (i, name, kind) in key.fields() {
                fields.push(Field::new(name, segment_type(kind), true));
                sources.push(ColumnSource::Segment(i));
            }
        }
        let map_values: Vec<ColumnDef> = def
            .families
            .iter()
            .map(|f| schema.family_types(&f.name).value)
            .collect();
        let cell_types = match &view {
            View::Cells { family: Some(f) } => schema.family_types(f),
            _ => FamilyTypes::untyped(""),
        };
        let protos: Vec<Option<ProtoDecl>> = if schema.columns.iter().any(|c| c.proto.is_some()) {
            let registry = crate::proto::ProtoRegistry::load(store)?;
            schema
                .columns
                .iter()
                .map(|c| {
                    c.proto
                        .as_ref()
                        .map(|p| {
                            registry.message(&p.message).map(|message| ProtoDecl {
                                message,
                                null_on_error: p.null_on_error,
                            })
                        })
                        .transpose()
                })
                .collect::<crate::error::Result<_>>()?
        } else {
            vec![None; schema.columns.len()]
        };
        let timestamp = Field::new("_timestamp", timestamp_type(), true);
        if let View::Cells { .. } = &view {
            fields.push(Field::new("family", DataType::Utf8, true));
            sources.push(ColumnSource::Family);
            fields.push(Field::new(
                "qualifier",
                value_type(cell_types.qualifier.value_type),
                true,
            ));
            sources.push(ColumnSource::Qualifier);
            fields.push(timestamp);
            sources.push(ColumnSource::Timestamp);
            fields.push(Field::new(
                "value",
                value_type(cell_types.value.value_type),
                true,
            ));
            sources.push(ColumnSource::Value);
        } else {
            fields.push(timestamp);
            sources.push(ColumnSource::Timestamp);
            for (i, c) in schema.columns.iter().enumerate() {
                let data_type = match &protos[i] {
                    Some(p) => crate::proto::message_type(&p.message),
                    None => value_type(c.value_type),
                };
                fields.push(Field::new(&c.name, data_type, true));
                sources.push(ColumnSource::Declared(i));
            }
            for (i, f) in def.families.iter().enumerate() {
                let values = value_type(map_values[i].value_type);
                fields.push(Field::new(
                    schema.map_column(&f.name),
                    map_type(&values),
                    true,
                ));
                sources.push(ColumnSource::FamilyMap(i));
            }
        }
        Ok(Layout {
            families: FamilyIndex::of(&def, &schema.columns),
            table: def.name.clone(),
            view,
            key: schema.key,
            columns: schema.columns,
            map_values,
            cell_types,
            protos,
            sources,
            arrow: Arc::new(Schema::new(fields)),
            def,
            series: None,
            pinned: None,
        })
    }

    /// The declared column holding `qualifier` of `family`, if any.
    pub fn declared_at(&self, family: &str, qualifier: &[u8]) -> Option<usize> {
        let declared = &self.families.declared[*self.families.by_name.get(family)?];
        let at = declared
            .binary_search_by(|(q, _)| q.as_slice().cmp(qualifier))
            .ok()?;
        Some(declared[at].1)
    }

    /// The kind of a family (normal when there is no such family).
    pub fn family_kind(&self, family: &str) -> FamilyKind {
        self.def
            .families
            .iter()
            .find(|f| f.name == family)
            .map_or(FamilyKind::Normal, |f| f.kind)
    }

    /// Whether a column is (or is in) an aggregate family.
    pub fn is_aggregate(&self, source: &ColumnSource) -> bool {
        match source {
            ColumnSource::Declared(d) => self.family_kind(&self.columns[*d].family).is_aggregate(),
            ColumnSource::FamilyMap(f) => self.def.families[*f].kind.is_aggregate(),
            _ => false,
        }
    }

    /// The families a set of columns needs; all of them (or the view's
    /// family) when the columns need none in particular.
    pub fn families_for(&self, columns: &[usize]) -> Vec<String> {
        if let View::Cells { family } = &self.view {
            return match family {
                Some(f) => vec![f.clone()],
                None => self.def.families.iter().map(|f| f.name.clone()).collect(),
            };
        }
        let mut out: Vec<String> = Vec::new();
        for &c in columns {
            let family = match &self.sources[c] {
                ColumnSource::Declared(i) => self.columns[*i].family.clone(),
                ColumnSource::FamilyMap(i) => self.def.families[*i].name.clone(),
                _ => continue,
            };
            if !out.contains(&family) {
                out.push(family);
            }
        }
        if out.is_empty() {
            out = self.def.families.iter().map(|f| f.name.clone()).collect();
        }
        out
    }

    /// Whether the scan answers `filter` itself: a deterministic predicate
    /// over columns every scanned row carries without decoding cell values
    /// (key, segments, timestamp, family, qualifier).
    pub fn answers(&self, filter: &Expr) -> bool {
        let refs = filter.column_refs();
        !refs.is_empty()
            && !filter.is_volatile()
            && refs.iter().all(|c| {
                self.arrow.index_of(&c.name).ok().is_some_and(|i| {
                    matches!(
                        self.sources[i],
                        ColumnSource::Key
                            | ColumnSource::Segment(_)
                            | ColumnSource::Timestamp
                            | ColumnSource::Family
                            | ColumnSource::Qualifier
                    )
                })
            })
    }
}

/// A table's families by name, and per family its declared qualifiers.
#[derive(Debug, Default)]
pub(crate) struct FamilyIndex {
    /// Family name -> declaration index.
    pub by_name: HashMap<String, usize>,
    /// Per family (declaration order): its declared qualifiers, sorted,
    /// with their declared column.
    pub declared: Vec<Vec<(Vec<u8>, usize)>>,
}

impl FamilyIndex {
    pub fn of(def: &TableDef, columns: &[ColumnDef]) -> Arc<FamilyIndex> {
        let by_name = def
            .families
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        let mut declared: Vec<Vec<(Vec<u8>, usize)>> = vec![Vec::new(); def.families.len()];
        for (d, c) in columns.iter().enumerate() {
            if let Some(f) = def.families.iter().position(|f| f.name == c.family) {
                declared[f].push((c.qualifier.clone().into_bytes(), d));
            }
        }
        for qualifiers in &mut declared {
            qualifiers.sort();
        }
        Arc::new(FamilyIndex { by_name, declared })
    }
}

/// How a series' events sit in its table, for the view that shows them.
#[derive(Debug, Clone)]
pub(crate) struct SeriesView {
    pub def: SeriesDef,
    /// The key field holding the event's time (a row per event) or its
    /// bucket's start.
    pub time_segment: usize,
    /// The view's column holding the event's time.
    pub time_column: usize,
    /// A column per event: the key field naming a row's measure.
    pub metric_segment: Option<usize>,
}

impl SeriesView {
    /// Whether events are cells of bucket rows (their time the cell's).
    pub fn bucketed(&self) -> bool {
        self.def.layout.bucket.is_some()
    }

    /// Whether each event is a column (a qualifier) of a row per measure.
    pub fn column_per_event(&self) -> bool {
        self.metric_segment.is_some()
    }
}
