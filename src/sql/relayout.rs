//! `ALTER SERIES s SET LAYOUT ...`: a series' events rewritten into a new
//! layout while it stays readable, switching at once at the end.
//!
//! The series' write gate closes first (writers in the middle of a batch
//! finish; later ones wait). The events are copied, through the series
//! view, into a table of the new layout, then that table takes the
//! series' name in one catalog write. Queries planned before the switch
//! read the old table to their end (they pinned it); those planned after
//! read the new one. Writers that waited find the table changed and fail
//! without writing, saying to run again. Should the copy fail, the new
//! table goes and the series is as it was.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result as DfResult};

use super::{Loading, SqlSession, message};
use crate::proto::ProtoRegistry;
use crate::query::{CellarTable, WriteOptions, WriteProgress};
use crate::schema::{Encoding, SeriesDecl, SeriesLayout, TableSchema, ValueType};
use crate::store::{FamilyFormat, FamilySpec, GcPolicy, TableSpec};
use crate::{error::Error, schema::SCHEMA_METADATA_KEY};
use datafusion::arrow::datatypes::DataType;

/// The table a change of layout copies into, under a name of its own.
pub(crate) fn relayout_table(series: &str) -> String {
    format!("{series}__relayout")
}

/// Rewrites series `name` into `layout`; the family keeps its format and
/// retention unless given.
pub(crate) async fn set_layout(
    session: &SqlSession,
    name: &str,
    layout: SeriesLayout,
    format: Option<FamilyFormat>,
    gc: Option<GcPolicy>,
) -> DfResult<RecordBatch> {
    let store = session.store().clone();
    let def = store.table(name)?;
    let schema = TableSchema::of(&def)?;
    let Some(series) = schema.series.clone() else {
        return Err(Error::InvalidArgument(format!(
            "{name} is a table, not a series: ALTER SERIES changes the layout of a series \
             (CREATE SERIES declares one)"
        ))
        .into());
    };
    let broken = |what: &str| {
        DataFusionError::from(Error::Corrupt {
            reason: format!("series {name}: {what}"),
        })
    };
    let key_schema = schema.key.as_ref().ok_or_else(|| broken("no row key"))?;
    let key = series
        .key
        .iter()
        .map(|k| {
            key_schema
                .fields()
                .find(|(_, n, _)| n == k)
                .map(|(_, n, kind)| (n.to_string(), kind.clone()))
                .ok_or_else(|| broken(&format!("no key segment {k}")))
        })
        .collect::<DfResult<Vec<_>>>()?;
    // The measures' types: their columns', or in serialized events their
    // fields' (read back from the view, which typed them).
    let view = CellarTable::new(store.clone(), name)?;
    let view_schema = datafusion::catalog::TableProvider::schema(&view);
    let measures = series
        .measures
        .iter()
        .map(|m| {
            if let Some(c) = schema.columns.iter().find(|c| c.name == *m) {
                return Ok((c.name.clone(), c.value_type, c.encoding));
            }
            let field = view_schema
                .field_with_name(m)
                .map_err(|_| broken(&format!("no measure {m}")))?;
            let value_type = match field.data_type() {
                DataType::Int64 => ValueType::Int64,
                DataType::Float64 => ValueType::Float64,
                DataType::Boolean => ValueType::Boolean,
                DataType::Utf8 => ValueType::Text,
                DataType::Binary => ValueType::Bytes,
                other => return Err(broken(&format!("measure {m} reads as {other}"))),
            };
            Ok((m.clone(), value_type, Encoding::Binary))
        })
        .collect::<DfResult<Vec<_>>>()?;
    let described = layout.describe();
    let decl = SeriesDecl {
        key,
        time: series.time.clone(),
        measures,
        layout,
    };
    let (key, columns, new_series) = decl.physical(name)?;
    if decl.layout.serialized {
        let (file, source) = decl.proto_file(name);
        ProtoRegistry::register(&store, &file, &source)?;
    }
    let family = def.family(&series.family)?;
    let format = format.unwrap_or(family.format);
    let gc = gc.unwrap_or_else(|| family.gc.clone());

    // One change at a time, and no write between the copy and the switch.
    let gate = store.write_gate(name);
    let closed = tokio::task::spawn_blocking(move || gate.close())
        .await
        .map_err(|e| Error::Internal(format!("closing the write gate: {e}")))?;
    let tmp = relayout_table(name);
    if store.table(&tmp).is_ok() {
        // What an interrupted change left.
        store.drop_table(&tmp)?;
    }
    let new_schema = TableSchema {
        key: Some(key),
        columns,
        family_types: Default::default(),
        series: Some(new_series),
    };
    store.create_table(
        TableSpec::new(&tmp)
            .metadata(SCHEMA_METADATA_KEY, new_schema.to_json()?)
            .family(FamilySpec::new(&series.family).gc(gc).format(format)),
    )?;
    let progress = Arc::new(WriteProgress::default());
    session.set_loading(Some(Loading {
        what: "ALTER SERIES",
        table: name.to_string(),
        started: std::time::Instant::now(),
        bytes: 0,
        progress: Arc::clone(&progress),
    }));
    let copied = async {
        let events = session
            .context()
            .sql(&format!("SELECT * FROM \"{}\"", name.replace('"', "\"\"")))
            .await?
            .execute_stream()
            .await?;
        let target = CellarTable::new(store.clone(), &tmp)?;
        let options = WriteOptions {
            progress,
            ..WriteOptions::default()
        };
        let written = target.load(events, &options).await?;
        store.replace_table(name, &tmp)?;
        Ok::<u64, datafusion::error::DataFusionError>(written)
    }
    .await;
    session.set_loading(None);
    drop(closed);
    match copied {
        Ok(written) => message(format!(
            "series {name}: {written} events rewritten, now LAYOUT {described}"
        )),
        Err(e) => {
            let _ = store.drop_table(&tmp);
            Err(e)
        }
    }
}
