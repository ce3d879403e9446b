//! cellar's own statements, the ones DataFusion does not plan: CREATE
//! TABLE and SERIES (with AS SELECT), ALTER TABLE (families, GC, format,
//! series layout), DROP, COMPACT, COPY FROM, protobuf files, DESCRIBE and
//! SHOW. [`SqlSession::run_cellar`] takes each statement to the one method
//! that runs it; a statement that moves or reads every row runs off the
//! async threads.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::error::Result as DfResult;
use datafusion::prelude::DataFrame;

use super::catalog;
use super::ddl::{CellarStatement, ProtoSource};
use super::ddl_terms::FamilyDecl;
use super::{Loading, SqlSession, affected_rows, copy, describe, message, relayout};
use crate::error::Error;
use crate::keys::Finding;
use crate::proto::{PROTO_SETTING_PREFIX, ProtoRegistry};
use crate::schema::{
    ColumnDef, FamilyTypes, KeySchema, SCHEMA_METADATA_KEY, SeriesDef, TableSchema,
};
use crate::store::{
    AlterOp, FamilyFormat, FamilyKind, FamilySpec, GcPolicy, Store, TableSpec, now_micros,
    parse_since,
};

/// Most fields (at every level) the protobuf columns of one table may
/// have together (each at most [`crate::proto::MAX_SCHEMA_FIELDS`]).
const MAX_TABLE_PROTO_FIELDS: usize = 16 * 1024;

/// A CREATE TABLE or CREATE SERIES without its query.
struct NewTable {
    name: String,
    if_not_exists: bool,
    key: Option<KeySchema>,
    families: Vec<FamilyDecl>,
    columns: Vec<ColumnDef>,
    series: Option<Box<SeriesDef>>,
    proto: Option<(String, String)>,
}

impl SqlSession {
    /// Runs one of cellar's own statements; what it did, as a one-row
    /// `result` (or the rows DESCRIBE and SHOW return).
    pub(super) async fn run_cellar(&self, statement: CellarStatement) -> DfResult<DataFrame> {
        let store = &self.store;
        let batch = match statement {
            CellarStatement::CreateTable {
                name,
                if_not_exists,
                key,
                families,
                columns,
                query,
                series,
                proto,
            } => {
                let table = NewTable {
                    name,
                    if_not_exists,
                    key,
                    families,
                    columns,
                    series,
                    proto,
                };
                match query {
                    Some(select) => self.create_table_as(table, &select).await?,
                    None => message(self.create_table(table)?)?,
                }
            }
            CellarStatement::AddFamily { table, family } => {
                message(self.add_family(&table, &family)?)?
            }
            CellarStatement::SetRowKey { table, key } => message(set_row_key(store, &table, key)?)?,
            CellarStatement::AddColumn {
                table,
                column,
                family,
            } => message(add_column(store, &table, column, family)?)?,
            CellarStatement::DropFamily { table, family } => {
                message(drop_family(store, &table, &family)?)?
            }
            CellarStatement::SetGc { table, family, gc } => {
                message(set_gc(store, &table, &family, gc)?)?
            }
            CellarStatement::SetFormat {
                table,
                family,
                format,
            } => message(self.set_format(table, family, format).await?)?,
            CellarStatement::SetSeriesLayout {
                name,
                layout,
                format,
                gc,
            } => relayout::set_layout(self, &name, layout, format, gc).await?,
            CellarStatement::Compact { name } => message(self.compact(name).await?)?,
            CellarStatement::Advise { name, since } => self.advise(name, since).await?,
            CellarStatement::CopyFrom {
                table,
                path,
                options,
            } => {
                let progress = Arc::new(crate::query::WriteProgress::default());
                let bytes = copy::size_of(&path);
                self.set_loading(Some(Loading {
                    what: "COPY",
                    table: table.clone(),
                    started: std::time::Instant::now(),
                    bytes,
                    progress: Arc::clone(&progress),
                }));
                let result = copy::copy_from(self, &table, &path, &options, progress).await;
                self.set_loading(None);
                result?
            }
            CellarStatement::DropTable { name, if_exists } => {
                message(self.drop_table(&name, if_exists)?)?
            }
            CellarStatement::Describe { name } => {
                describe::describe(store, &self.session_tables, &name)?
            }
            CellarStatement::CreateProto {
                name,
                source,
                replace,
            } => message(create_proto(store, &name, source, replace)?)?,
            CellarStatement::DropProto { name } => message(drop_proto(store, &name)?)?,
            CellarStatement::ShowProtos => show_protos(store)?,
            CellarStatement::ShowQueries => self.running.show(&self.owner())?,
            CellarStatement::ShowStats => self.show_stats()?,
            CellarStatement::CancelQuery { id } => {
                if !self.running.cancel(&self.owner(), id) {
                    return Err(Error::InvalidArgument(format!(
                        "no query {id} is running that this session may cancel; SHOW QUERIES lists those it may"
                    )).into());
                }
                message(format!("cancelled query {id}"))?
            }
        };
        self.ctx.read_batch(batch)
    }

    /// CREATE TABLE ... AS SELECT: the query's columns fill the table's
    /// columns of the same names; the table goes again if the rows fail.
    async fn create_table_as(&self, table: NewTable, select: &str) -> DfResult<RecordBatch> {
        let name = table.name.clone();
        if table.if_not_exists && self.store.table(&name).is_ok() {
            return message(format!("table {name} exists"));
        }
        let planned = self.ctx.sql(select).await?;
        let names: Vec<String> = planned
            .schema()
            .fields()
            .iter()
            .map(|f| format!("\"{}\"", f.name().replace('"', "\"\"")))
            .collect();
        let what = if table.series.is_some() {
            "series"
        } else {
            "table"
        };
        self.create_table(table)?;
        let insert = format!("INSERT INTO \"{name}\" ({}) {select}", names.join(", "));
        match Box::pin(self.query(&insert)).await {
            Ok(batches) => {
                let rows = affected_rows(&batches);
                message(format!("created {what} {name} ({rows} rows)"))
            }
            Err(e) => {
                let _ = self.store.drop_table(&name);
                Err(e)
            }
        }
    }

    /// CREATE TABLE or SERIES.
    fn create_table(&self, table: NewTable) -> DfResult<String> {
        let store = &self.store;
        let NewTable {
            name,
            if_not_exists,
            key,
            families,
            columns,
            series,
            proto,
        } = table;
        if if_not_exists && store.table(&name).is_ok() {
            return Ok(format!("table {name} exists"));
        }
        if let Some(table) = self.session_tables.get(&name) {
            return Err(Error::InvalidArgument(format!(
                "{name} is this session's {}; DROP {} {name} first, or name the table differently",
                catalog::kind(table.as_ref()),
                catalog::drop_word(table.as_ref()),
            ))
            .into());
        }
        let family_types = families
            .iter()
            .filter(|f| f.qualifiers.is_some() || f.values.is_some())
            .map(|f| (f.name.clone(), family_types(f)))
            .collect();
        let what = if series.is_some() { "series" } else { "table" };
        if let Some((file, source)) = &proto {
            ProtoRegistry::register(store, file, source)?;
        }
        let schema = TableSchema {
            key,
            columns,
            family_types,
            series: series.map(|s| *s),
        };
        let names: Vec<(String, FamilyKind)> =
            families.iter().map(|f| (f.name.clone(), f.kind)).collect();
        schema.validate(&names)?;
        check_proto_columns(store, &name, &schema)?;
        let mut spec = TableSpec::new(&name).metadata(SCHEMA_METADATA_KEY, schema.to_json()?);
        for f in families {
            spec = spec.family(
                FamilySpec::new(f.name)
                    .gc(f.gc)
                    .kind(f.kind)
                    .format(f.format.unwrap_or(self.family_format)),
            );
        }
        store.create_table(spec)?;
        Ok(format!("created {what} {name}"))
    }

    /// ALTER TABLE ... ADD FAMILY.
    fn add_family(&self, table: &str, family: &FamilyDecl) -> DfResult<String> {
        let store = &self.store;
        let def = store.table(table)?;
        let mut names: Vec<(String, FamilyKind)> = def
            .families
            .iter()
            .map(|f| (f.name.clone(), f.kind))
            .collect();
        names.push((family.name.clone(), family.kind));
        let mut schema = TableSchema::of(&def)?;
        let typed = family.qualifiers.is_some() || family.values.is_some();
        if typed {
            schema
                .family_types
                .insert(family.name.clone(), family_types(family));
        }
        schema.validate(&names)?;
        let mut ops = vec![AlterOp::AddFamily(
            FamilySpec::new(&family.name)
                .gc(family.gc.clone())
                .kind(family.kind)
                .format(family.format.unwrap_or(self.family_format)),
        )];
        if typed {
            ops.push(schema_op(&schema)?);
        }
        store.alter_table(table, ops)?;
        Ok(format!("added family {} to {table}", family.name))
    }

    /// ALTER TABLE ... SET FORMAT: moves every row of the family, off the
    /// async threads. Dropping this future (Ctrl-C, a cancelled request)
    /// stops the change after its current step; the same statement
    /// resumes it.
    async fn set_format(
        &self,
        table: String,
        family: String,
        format: FamilyFormat,
    ) -> DfResult<String> {
        let store = self.store.clone();
        let stop = StopOnDrop(Arc::new(std::sync::atomic::AtomicBool::new(false)));
        let stopped = Arc::clone(&stop.0);
        Ok(tokio::task::spawn_blocking(move || {
            change_format(&store, &table, &family, format, &stopped)
        })
        .await
        .map_err(|e| Error::Internal(format!("SET FORMAT failed: {e}")))??)
    }

    /// COMPACT TABLE: reads and rewrites every family, off the async
    /// threads.
    async fn compact(&self, name: String) -> DfResult<String> {
        let store = self.store.clone();
        Ok(tokio::task::spawn_blocking(move || {
            store.collect_and_compact(&name).map(|stats| {
                format!(
                    "compacted table {name} ({})",
                    reclaimed(stats.cells_removed)
                )
            })
        })
        .await
        .map_err(|e| Error::Internal(format!("COMPACT failed: {e}")))??)
    }

    /// ADVISE TABLE: the advisor's findings, one row each (severity,
    /// rule, subject, evidence, advice), off the async threads (it reads
    /// a sample of the table).
    async fn advise(&self, name: String, since: Option<String>) -> DfResult<RecordBatch> {
        let since = parse_since(since.as_deref().unwrap_or("all"), now_micros())?;
        let store = self.store.clone();
        let findings =
            tokio::task::spawn_blocking(move || crate::keys::advise(&store, &name, since))
                .await
                .map_err(|e| Error::Internal(format!("ADVISE failed: {e}")))??;
        let column = |f: fn(&Finding) -> &str| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(findings.iter().map(f)))
        };
        let schema = Schema::new(
            ["severity", "rule", "subject", "evidence", "advice"]
                .map(|n| Field::new(n, DataType::Utf8, false))
                .to_vec(),
        );
        Ok(RecordBatch::try_new(
            Arc::new(schema),
            vec![
                column(|f| f.severity.name()),
                column(|f| f.rule),
                column(|f| &f.subject),
                column(|f| &f.evidence),
                column(|f| &f.advice),
            ],
        )?)
    }

    /// DROP TABLE: a table of the store, or else an external table or
    /// view of this session.
    fn drop_table(&self, name: &str, if_exists: bool) -> DfResult<String> {
        if self.store.table(name).is_err()
            && let Some(table) = self.session_tables.remove(name)
        {
            return Ok(match catalog::kind(table.as_ref()) {
                "view" => format!("dropped view {name}"),
                kind => format!("dropped {kind} {name}; its files stay"),
            });
        }
        match self.store.drop_table(name) {
            Ok(()) => Ok(format!("dropped table {name}")),
            Err(Error::TableNotFound { .. }) if if_exists => {
                Ok(format!("table {name} does not exist"))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// SHOW STATS: what this session planned and kept, what the store
    /// ingested.
    fn show_stats(&self) -> DfResult<RecordBatch> {
        let planned = self.planned.load(std::sync::atomic::Ordering::Relaxed);
        let reused = self.plans.reused();
        let (shaped, rebound, by_tokens) = self.shapes.used();
        let ingested = self.store.rows_ingested();
        let schema = Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("value", DataType::UInt64, false),
        ]);
        Ok(RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(StringArray::from(vec![
                    "statements_planned",
                    "plans_reused",
                    "plans_by_shape",
                    "plans_rebound",
                    "plans_by_tokens",
                    "rows_ingested",
                ])),
                Arc::new(UInt64Array::from(vec![
                    planned, reused, shaped, rebound, by_tokens, ingested,
                ])),
            ],
        )?)
    }
}

/// Every listing and description of a table builds its protobuf columns'
/// types: bounded per column and per table.
fn check_proto_columns(store: &Store, name: &str, schema: &TableSchema) -> DfResult<()> {
    if !schema.columns.iter().any(|c| c.proto.is_some()) {
        return Ok(());
    }
    let registry = ProtoRegistry::load(store)?;
    let mut fields = 0usize;
    for c in &schema.columns {
        if let Some(p) = &c.proto {
            let message = registry.message(&p.message)?;
            crate::proto::check_schema_size(&message)?;
            fields = fields.saturating_add(crate::proto::type_fields(&message));
        }
    }
    if fields > MAX_TABLE_PROTO_FIELDS {
        return Err(Error::InvalidArgument(format!(
            "the protobuf columns of {name} would have {fields} fields in all; a table's hold at most {MAX_TABLE_PROTO_FIELDS}: declare fewer protobuf columns, or smaller messages"
        )).into());
    }
    Ok(())
}

/// ALTER TABLE ... DROP FAMILY, with the declared columns of the family.
fn drop_family(store: &Store, table: &str, family: &str) -> DfResult<String> {
    let def = store.table(table)?;
    let mut schema = TableSchema::of(&def)?;
    let dropped = schema.columns.iter().any(|c| c.family == family);
    schema.columns.retain(|c| c.family != family);
    let typed = schema.family_types.remove(family).is_some();
    let mut ops = vec![AlterOp::DropFamily(family.to_string())];
    if dropped || typed {
        ops.push(schema_op(&schema)?);
    }
    store.alter_table(table, ops)?;
    Ok(format!("dropped family {family} from {table}"))
}

/// ALTER TABLE ... SET GC. Cells the old policy discards (written since
/// it was set) and cells the new one discards are reclaimed now, so a
/// looser policy never brings back what a stricter one hid.
fn set_gc(store: &Store, table: &str, family: &str, gc: GcPolicy) -> DfResult<String> {
    let text = gc.to_string();
    let before = store.collect_family_garbage(table, family)?;
    store.alter_table(
        table,
        vec![AlterOp::SetGc {
            family: family.to_string(),
            gc,
        }],
    )?;
    let after = store.collect_family_garbage(table, family)?;
    Ok(format!(
        "family {family} of {table}: gc {text} ({})",
        reclaimed(before.cells_removed + after.cells_removed)
    ))
}

/// CREATE [OR REPLACE] PROTO.
fn create_proto(store: &Store, name: &str, source: ProtoSource, replace: bool) -> DfResult<String> {
    let exists = store
        .settings(&format!("{PROTO_SETTING_PREFIX}{name}"))?
        .iter()
        .any(|(k, _)| k[PROTO_SETTING_PREFIX.len()..] == *name);
    if exists && !replace {
        return Err(Error::InvalidArgument(format!(
            "proto file {name:?} is already registered; CREATE OR REPLACE PROTO replaces it"
        ))
        .into());
    }
    let text = match source {
        ProtoSource::Text(t) => t,
        ProtoSource::File(path) => std::fs::read_to_string(&path)
            .map_err(|e| Error::InvalidArgument(format!("cannot read {path}: {e}")))?,
    };
    let registry = ProtoRegistry::register(store, name, &text)?;
    Ok(format!(
        "registered {name}; message types: {}",
        registry.messages().join(", ")
    ))
}

/// DROP PROTO: refused while a table's column uses one of its messages.
fn drop_proto(store: &Store, name: &str) -> DfResult<String> {
    let mut files: std::collections::BTreeMap<String, String> = store
        .settings(PROTO_SETTING_PREFIX)?
        .into_iter()
        .map(|(k, v)| (k[PROTO_SETTING_PREFIX.len()..].to_string(), v))
        .collect();
    files.remove(name);
    let remaining = ProtoRegistry::compile(files)?;
    for table in store.list_tables() {
        let def = store.table(&table)?;
        let schema = TableSchema::of(&def)?;
        for c in &schema.columns {
            if let Some(p) = &c.proto
                && remaining.message(&p.message).is_err()
            {
                return Err(Error::InvalidArgument(format!(
                    "column {} of table {table} uses {} from {name}; drop the table first",
                    c.name, p.message
                ))
                .into());
            }
        }
    }
    ProtoRegistry::unregister(store, name)?;
    Ok(format!("dropped proto file {name}"))
}

/// SHOW PROTOS: the registered files and their message types.
fn show_protos(store: &Store) -> DfResult<RecordBatch> {
    let registry = ProtoRegistry::load(store)?;
    let files: Vec<String> = registry.files().map(str::to_string).collect();
    let messages = registry.messages();
    let schema = Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]);
    let kinds: Vec<&str> = files
        .iter()
        .map(|_| "file")
        .chain(messages.iter().map(|_| "message"))
        .collect();
    let names: Vec<String> = files.into_iter().chain(messages).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(kinds)),
        Arc::new(StringArray::from(names)),
    ];
    Ok(RecordBatch::try_new(Arc::new(schema), columns)?)
}

fn family_types(f: &FamilyDecl) -> FamilyTypes {
    let mut types = FamilyTypes::untyped(&f.name);
    if let Some((t, e)) = f.qualifiers {
        types.qualifier.value_type = t;
        types.qualifier.encoding = e;
    }
    if let Some((t, e)) = f.values {
        types.value.value_type = t;
        types.value.encoding = e;
    }
    types
}

/// Changes a family's format (see [`Store::set_family_format`]); what it
/// did, in words.
fn change_format(
    store: &Store,
    table: &str,
    family: &str,
    format: FamilyFormat,
    stop: &std::sync::atomic::AtomicBool,
) -> crate::error::Result<String> {
    use std::sync::atomic::Ordering;
    let started = std::time::Instant::now();
    let moved = store.set_family_format(table, family, format, &mut |_| {
        !stop.load(Ordering::Relaxed)
    })?;
    if !moved.finished {
        return Err(Error::InvalidArgument(format!(
            "the change of family {family} of {table} to FORMAT {format} was stopped after {} rows; the family reads and writes correctly meanwhile, and the same statement resumes it",
            moved.rows
        )));
    }
    Ok(format!(
        "family {family} of {table}: format {format} ({} rows moved in {:.1} s)",
        moved.rows,
        started.elapsed().as_secs_f64()
    ))
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// "N cells reclaimed", as GC statements report it.
fn reclaimed(cells: u64) -> String {
    match cells {
        1 => "1 cell reclaimed".to_string(),
        n => format!("{n} cells reclaimed"),
    }
}

/// The change that stores a table's SQL schema (its metadata entry).
fn schema_op(schema: &TableSchema) -> DfResult<AlterOp> {
    Ok(AlterOp::SetMetadata(
        SCHEMA_METADATA_KEY.into(),
        Some(schema.to_json()?),
    ))
}

/// The families of a table as `TableSchema::validate` takes them.
fn family_kinds(def: &crate::store::TableDef) -> Vec<(String, FamilyKind)> {
    def.families
        .iter()
        .map(|f| (f.name.clone(), f.kind))
        .collect()
}

/// ALTER TABLE ... SET ROW KEY: declares how the stored keys read. Only
/// for a table with no key declared: a declared key is what its rows
/// were written by, and reading them by another would misread them.
fn set_row_key(store: &Store, table: &str, key: KeySchema) -> DfResult<String> {
    let def = store.table(table)?;
    let mut schema = TableSchema::of(&def)?;
    if schema.series.is_some() {
        return Err(Error::InvalidArgument(format!(
            "{table} is a series: its row key is the series' own (ALTER SERIES ... SET LAYOUT)"
        ))
        .into());
    }
    if schema.key.is_some() {
        return Err(Error::InvalidArgument(format!(
            "table {table} has a row key declared already; it is declared once, as its rows \
             were written by it (make a new table with CREATE TABLE ... AS SELECT to change it)"
        ))
        .into());
    }
    schema.key = Some(key);
    schema.validate(&family_kinds(&def))?;
    store.alter_table(table, vec![schema_op(&schema)?])?;
    Ok(format!(
        "declared the row key of {table}: keys that do not fit it read as NULL segments"
    ))
}

/// ALTER TABLE ... ADD COLUMN: a typed column over a qualifier.
fn add_column(
    store: &Store,
    table: &str,
    mut column: ColumnDef,
    family: Option<String>,
) -> DfResult<String> {
    let def = store.table(table)?;
    let mut schema = TableSchema::of(&def)?;
    column.family = match family {
        Some(f) => f,
        None if def.families.len() == 1 => def.families[0].name.clone(),
        None => {
            return Err(Error::InvalidArgument(format!(
                "column {} needs IN <family>: table {table} has {} families",
                column.name,
                def.families.len()
            ))
            .into());
        }
    };
    let name = column.name.clone();
    schema.columns.push(column);
    schema.validate(&family_kinds(&def))?;
    check_proto_columns(store, table, &schema)?;
    store.alter_table(table, vec![schema_op(&schema)?])?;
    Ok(format!("added column {name} to {table}"))
}
