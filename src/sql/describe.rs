//! DESCRIBE: a row per column of a table, series or session table,
//! with its type, what it is and where it lives.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::TableProvider;
use datafusion::error::Result as DfResult;

use super::catalog::{self, SessionTables};
use crate::query::CellarTable;
use crate::schema::{Segment, SegmentKind, SeriesDef, TableSchema, TimeFormat};
use crate::store::{Store, TableDef};

pub(super) fn describe(
    store: &Store,
    session_tables: &SessionTables,
    name: &str,
) -> DfResult<RecordBatch> {
    if store.table(name).is_err()
        && let Some(table) = session_tables.get(name)
    {
        return describe_session_table(table.as_ref());
    }
    let table = CellarTable::new(store.clone(), name)?;
    let def = store.table(name)?;
    let schema = TableSchema::of(&def)?;
    let arrow = table.schema();
    if let Some(series) = &schema.series {
        return describe_series(&def, &schema, series, &arrow);
    }
    let (mut names, mut types, mut kinds, mut details) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut push = |n: &str, t: String, k: &str, d: String| {
        names.push(n.to_string());
        types.push(t);
        kinds.push(k.to_string());
        details.push(d);
    };
    let key_text = schema.key.as_ref().map(describe_key);
    push(
        "_key",
        "Utf8".into(),
        "row key",
        key_text.clone().unwrap_or_else(|| "bytes as text".into()),
    );
    if let Some(key) = &schema.key {
        for (_, n, kind) in key.fields() {
            let t = arrow
                .field_with_name(n)
                .map(|f| f.data_type().to_string())
                .unwrap_or_default();
            push(n, t, "key segment", describe_segment(kind));
        }
    }
    push(
        "_timestamp",
        "Timestamp(µs)".into(),
        "cell time",
        "newest cell of the row; sets the time of cells written".into(),
    );
    for c in &schema.columns {
        let t = arrow
            .field_with_name(&c.name)
            .map(|f| f.data_type().to_string())
            .unwrap_or_default();
        let encoding = match (&c.proto, c.encoding) {
            (Some(p), _) if p.null_on_error => format!("protobuf {}, NULL on error", p.message),
            (Some(p), _) => format!("protobuf {}", p.message),
            (None, crate::schema::Encoding::Binary) => "binary".into(),
            (None, crate::schema::Encoding::Text) => "as text".into(),
        };
        push(
            &c.name,
            t,
            "column",
            format!("{}:{} ({encoding})", c.family, c.qualifier),
        );
    }
    for f in &def.families {
        let kind = format!("{:?}", f.kind).to_lowercase();
        let types = schema.family_types(&f.name);
        let value_type = match types.value.value_type {
            crate::schema::ValueType::Int64 => "Int64",
            crate::schema::ValueType::Float64 => "Float64",
            crate::schema::ValueType::Boolean => "Boolean",
            crate::schema::ValueType::Decimal { .. } => "Decimal128",
            crate::schema::ValueType::Text => "Utf8",
            crate::schema::ValueType::Bytes => "Binary",
        };
        let mut detail = format!("{kind}, gc {}, format {}", f.gc, f.format);
        if let Some(c) = &f.converting {
            detail.push_str(&format!(
                " (being changed to {}: ALTER TABLE {name} ALTER FAMILY {} SET FORMAT {} finishes it)",
                c.format, f.name, c.format
            ));
        }
        if schema.family_types.contains_key(&f.name) {
            detail.push_str(&format!(
                ", qualifiers {:?}, values {:?}{}",
                types.qualifier.value_type,
                types.value.value_type,
                if types.value.encoding == crate::schema::Encoding::Text {
                    " as text"
                } else {
                    ""
                }
            ));
        }
        if schema.map_column(&f.name) != f.name {
            detail.push_str(&format!("; family {}, whose name a column has", f.name));
        }
        push(
            &schema.map_column(&f.name),
            format!("Map(Utf8, {value_type})"),
            "family",
            detail,
        );
    }
    describe_batch(names, types, kinds, details)
}

/// DESCRIBE of a series: its columns as SQL sees them, each with where
/// the layout keeps it, and a last row naming the layout.
fn describe_series(
    def: &TableDef,
    schema: &TableSchema,
    series: &SeriesDef,
    arrow: &Schema,
) -> DfResult<RecordBatch> {
    let (mut names, mut types, mut kinds, mut details) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let type_of = |n: &str| {
        arrow
            .field_with_name(n)
            .map(|f| f.data_type().to_string())
            .unwrap_or_default()
    };
    let segment = |n: &str| {
        schema
            .key
            .as_ref()
            .and_then(|k| k.fields().find(|(_, name, _)| *name == n))
            .map(|(_, _, kind)| describe_segment(kind))
            .unwrap_or_default()
    };
    let mut push = |n: &str, k: &str, d: String| {
        names.push(n.to_string());
        types.push(type_of(n));
        kinds.push(k.to_string());
        details.push(d);
    };
    for k in &series.key {
        push(k, "series key", format!("key segment {k}: {}", segment(k)));
    }
    let time = match series.layout.bucket {
        None => format!(
            "key segment {}: {}; the cells' timestamp too",
            series.time_segment,
            segment(&series.time_segment)
        ),
        Some(_) => format!(
            "cell timestamp; its bucket's start is key segment {}: {}",
            series.time_segment,
            segment(&series.time_segment)
        ),
    };
    push(&series.time, "time", time);
    let event = series
        .event
        .as_ref()
        .and_then(|e| schema.columns.iter().find(|c| c.name == *e));
    for m in &series.measures {
        if let Some(c) = event {
            let message = c.proto.as_ref().map_or("", |p| p.message.as_str());
            push(
                m,
                "measure",
                format!(
                    "field {m} of message {message}, column {}:{} (protobuf)",
                    c.family, c.qualifier
                ),
            );
            continue;
        }
        if let Some(metric) = &series.metric {
            push(
                m,
                "measure",
                format!(
                    "qualifiers (the values as text) of the rows whose key segment {metric} is {m}, \
                     family {}; empty cells",
                    series.family
                ),
            );
            continue;
        }
        let detail = schema
            .columns
            .iter()
            .find(|c| c.name == *m)
            .map(|c| {
                let encoding = match c.encoding {
                    crate::schema::Encoding::Binary => "binary",
                    crate::schema::Encoding::Text => "as text",
                };
                format!("column {}:{} ({encoding})", c.family, c.qualifier)
            })
            .unwrap_or_default();
        push(m, "measure", detail);
    }
    let family = def
        .families
        .iter()
        .find(|f| f.name == series.family)
        .map(|f| format!("family {}: gc {}, format {}", f.name, f.gc, f.format))
        .unwrap_or_default();
    let key = schema.key.as_ref().map(describe_key).unwrap_or_default();
    names.push("(layout)".into());
    types.push(String::new());
    kinds.push("layout".into());
    // On Bigtable after a change of layout: where `cbt` finds the rows.
    let bigtable = def
        .metadata
        .get(crate::store::BIGTABLE_TABLE_METADATA)
        .map(|id| format!("; rows in Bigtable table {id}"))
        .unwrap_or_default();
    details.push(format!(
        "LAYOUT {}; row key {key}; {family}{bigtable}",
        series.layout.describe()
    ));
    describe_batch(names, types, kinds, details)
}

/// DESCRIBE's result: a row per column with its type, kind and detail.
fn describe_batch(
    names: Vec<String>,
    types: Vec<String>,
    kinds: Vec<String>,
    details: Vec<String>,
) -> DfResult<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(names)),
        Arc::new(StringArray::from(types)),
        Arc::new(StringArray::from(kinds)),
        Arc::new(StringArray::from(details)),
    ];
    let schema = Schema::new(vec![
        Field::new("column_name", DataType::Utf8, false),
        Field::new("data_type", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, false),
    ]);
    Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
}

/// DESCRIBE of an external table or view of the session.
fn describe_session_table(table: &dyn TableProvider) -> DfResult<RecordBatch> {
    let schema = table.schema();
    let fields = schema.fields();
    let detail = format!("column of this session's {}", catalog::kind(table));
    describe_batch(
        fields.iter().map(|f| f.name().clone()).collect(),
        fields.iter().map(|f| f.data_type().to_string()).collect(),
        vec!["column".to_string(); fields.len()],
        vec![detail; fields.len()],
    )
}

fn describe_segment(kind: &SegmentKind) -> String {
    match kind {
        SegmentKind::Text => "text".into(),
        SegmentKind::Padded { width, pad } => {
            format!("text, padded to {width} characters with {pad:?}")
        }
        SegmentKind::Int { width: 0 } => "integer".into(),
        SegmentKind::Int { width } => format!("integer, zero-padded to {width} digits"),
        SegmentKind::Time { format, reversed } => {
            let f = match format {
                TimeFormat::Pattern(p) => format!("timestamp '{p}'"),
                TimeFormat::Seconds => "timestamp, epoch seconds".into(),
                TimeFormat::Millis => "timestamp, epoch millis".into(),
                TimeFormat::Micros => "timestamp, epoch micros".into(),
            };
            if *reversed {
                format!("{f}, reversed (newest first)")
            } else {
                f
            }
        }
        SegmentKind::Salt { buckets, of } => format!("salt: hash({}) mod {buckets}", of.join(", ")),
    }
}

fn describe_key(key: &crate::schema::KeySchema) -> String {
    let parts: Vec<String> = key
        .segments
        .iter()
        .map(|s| match s {
            Segment::Literal(t) => t.clone(),
            Segment::Field { name, .. } => format!("<{name}>"),
        })
        .collect();
    parts.join(&key.delimiter.to_string())
}
