//! The SQL surface: a DataFusion session whose catalog is the store, plus
//! the DDL cellar adds (row-key schemas, families, GC policies).

mod access;
mod batch_params;
mod catalog;
mod context;
mod copy;
mod copy_to;
mod ddl;
mod ddl_terms;
mod describe;
mod error_text;
mod files;
mod functions;
mod ingest;
mod insert_select;
mod insert_values;
mod lexed;
mod limits;
mod options;
mod plans;
mod rebind;
mod relayout;
mod running;
mod shaped;
mod spill;
mod statements;
mod templates;
mod words;

pub use access::{Access, FileAccess, FileUse, FilesDir, Role};
#[cfg(feature = "ballista")]
use context::portable;
#[cfg(feature = "ballista")]
pub(crate) use context::worker_base_state;
use context::{bare_context, context_with_catalog, register_store};
pub use error_text::error_line;
pub use limits::MAX_EXPR_DEPTH;
pub use options::SessionOptions;
pub(crate) use plans::{Ready as KeptPlan, Seen as PlansSeen};
pub use spill::SpillDir;

pub use crate::store::parse_duration_micros;
pub use ddl::{CellarStatement, parse as parse_cellar_statement};
pub use ddl_terms::FamilyDecl;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, WriteOp};
use datafusion::prelude::DataFrame;

use crate::error::Error;
use crate::query::{KeyActivityFunction, ViewFunction};
use crate::schema::TableSchema;
use crate::store::{FamilyFormat, Store};
use catalog::SessionTables;

/// What a statement returns and takes, known before it runs.
#[derive(Debug, Clone)]
pub struct StatementShape {
    /// The result's schema.
    pub schema: datafusion::arrow::datatypes::SchemaRef,
    /// Its placeholders in order (`$1`, `$2`, ...), with their types where
    /// the statement determines them.
    pub parameters: Vec<(String, Option<DataType>)>,
}

/// A SQL session over a store.
#[derive(Clone)]
pub struct SqlSession {
    store: Store,
    family_format: FamilyFormat,
    ctx: SessionContext,
    running: running::Running,
    /// External tables and views of this session.
    session_tables: SessionTables,
    /// The COPY FROM running, if any: what a progress display shows.
    loading: Arc<std::sync::Mutex<Option<Loading>>>,
    /// Statements planned by DataFusion so far (`SHOW STATS`).
    planned: Arc<std::sync::atomic::AtomicU64>,
    /// Plans kept for statements run again.
    plans: plans::Plans,
    /// Plans kept for the shapes of statements, whatever their literals.
    shapes: templates::Shapes,
    /// What the session's user may do.
    access: Arc<Access>,
    /// A number for this session among the process's, which `SHOW
    /// QUERIES` shows and a query's owner is.
    id: u64,
}

/// A COPY FROM as it runs.
#[derive(Debug, Clone)]
pub struct Loading {
    /// What runs: `COPY` or `ALTER SERIES`.
    pub what: &'static str,
    /// The table written.
    pub table: String,
    /// When it started.
    pub started: std::time::Instant,
    /// Bytes of the files it reads.
    pub bytes: u64,
    /// Rows written and skipped so far.
    pub progress: Arc<crate::query::WriteProgress>,
}

impl SqlSession {
    /// Sets (or clears) the load under way that `loading` reports.
    pub(crate) fn set_loading(&self, loading: Option<Loading>) {
        *self
            .loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = loading;
    }

    /// A session whose default schema holds every table of `store`.
    pub fn new(store: Store) -> SqlSession {
        Self::with_options(store, SessionOptions::default())
    }

    /// A session with limits.
    pub fn with_options(store: Store, options: SessionOptions) -> SqlSession {
        let access = Arc::new(Access {
            files: options.files.clone(),
            ..Access::default()
        });
        let ctx = bare_context(&options, &access);
        let session_tables = register_store(&ctx, &store);
        ctx.register_udtf("versions", ViewFunction::versions(store.clone()));
        ctx.register_udtf("cells", ViewFunction::cells(store.clone()));
        ctx.register_udtf("as_of", ViewFunction::as_of(store.clone()));
        ctx.register_udtf("key_activity", KeyActivityFunction::new(store.clone()));
        let running = running::Running::new(options.heavy_queries, options.query_timeout);
        SqlSession {
            store,
            family_format: options.family_format,
            ctx,
            running,
            session_tables,
            loading: Arc::default(),
            planned: Arc::default(),
            plans: plans::Plans::default(),
            shapes: templates::Shapes::default(),
            access,
            id: next_session_id(),
        }
    }

    /// A session of its own for one client of a server: the same store,
    /// functions, rules and limits (memory pool, heavy-query turns, query
    /// registry), with its own settings, external tables, views and kept
    /// plans, starting from this session's settings. `access` says what
    /// its user may do; `runtime` is where its files come from (a
    /// server's confined file system).
    pub fn for_client(
        &self,
        access: Access,
        runtime: Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    ) -> SqlSession {
        let access = Arc::new(access);
        let id = next_session_id();
        let builder =
            datafusion::execution::SessionStateBuilder::new_from_existing(self.ctx.state())
                .with_session_id(format!("cellar-session-{id}"))
                .with_runtime_env(runtime);
        let ctx = context_with_catalog(builder, &access);
        let session_tables = register_store(&ctx, &self.store);
        SqlSession {
            store: self.store.clone(),
            family_format: self.family_format,
            ctx,
            running: self.running.clone(),
            session_tables,
            loading: Arc::default(),
            planned: Arc::default(),
            plans: plans::Plans::default(),
            shapes: templates::Shapes::default(),
            access,
            id,
        }
    }

    /// Whose this session's queries are.
    fn owner(&self) -> running::Owner {
        running::Owner {
            session: self.id,
            user: self.access.user.clone(),
            admin: self.access.role == Role::Admin,
        }
    }

    /// What this session's user may do.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The runtime of a server's client sessions (see
    /// [`SqlSession::for_client`]): this session's memory pool, spill
    /// space and caches, with files only where
    /// [`FileAccess::over_network`] of its access allows.
    pub fn client_runtime(&self) -> DfResult<Arc<datafusion::execution::runtime_env::RuntimeEnv>> {
        let files = self.access.files.over_network();
        datafusion::execution::runtime_env::RuntimeEnvBuilder::from_runtime_env(
            &self.ctx.runtime_env(),
        )
        .with_object_store_registry(files::registry(&files))
        .build_arc()
    }

    /// Plans a statement for DataFusion, counted in `SHOW STATS`.
    async fn plan(&self, sql: &str) -> DfResult<LogicalPlan> {
        self.planned
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = self.ctx.state();
        let dialect = state.config().options().sql_parser.dialect;
        let rewritten = copy_to::rewrite(sql)?;
        let sql = rewritten.as_deref().unwrap_or(sql);
        let mut statement = state.sql_to_statement(sql, &dialect)?;
        self.fill_insert_columns(&mut statement)?;
        if let datafusion::sql::parser::Statement::Statement(inner) = &mut statement {
            limits::balance_chains(inner);
        }
        let target = insert_target(&statement);
        let planned = match insert_select::split(statement) {
            insert_select::Split::Nested(insert, query) => {
                insert_select::plan(&state, insert, query).await
            }
            insert_select::Split::Other(statement) => state.statement_to_plan(*statement).await,
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(e) => {
                let schema = target.as_ref().and_then(|t| {
                    use datafusion::catalog::TableProvider;
                    crate::query::CellarTable::new(self.store.clone(), t)
                        .ok()
                        .map(|p| p.schema())
                });
                return Err(match (target, schema) {
                    (Some(t), Some(schema)) => insert_values::name_mismatch(&t, &schema, e),
                    _ => e,
                });
            }
        };
        // Before anything runs: DDL runs as it is handed over.
        let plan = self.access.check_plan(plan)?;
        insert_values::exact(plan)
    }

    /// `INSERT INTO t VALUES (...)` without a column list into a cellar
    /// table: rows as wide as the table's declared columns (its key
    /// segments, or `_key`, then its declared columns) go to those; rows
    /// as wide as all of its columns to all; others are refused naming
    /// both lists (DataFusion would count the hidden `_timestamp` and
    /// family maps too, and say only how many it expected).
    fn fill_insert_columns(
        &self,
        statement: &mut datafusion::sql::parser::Statement,
    ) -> DfResult<()> {
        use datafusion::sql::sqlparser::ast::{
            Ident, ObjectName, ObjectNamePart, SetExpr, Statement, TableObject,
        };
        let datafusion::sql::parser::Statement::Statement(inner) = statement else {
            return Ok(());
        };
        let Statement::Insert(insert) = inner.as_mut() else {
            return Ok(());
        };
        if !insert.columns.is_empty() {
            return Ok(());
        }
        let TableObject::TableName(name) = &insert.table else {
            return Ok(());
        };
        let Some(ObjectNamePart::Identifier(ident)) = name.0.last() else {
            return Ok(());
        };
        let table = ident.value.clone();
        let Some(SetExpr::Values(values)) = insert.source.as_ref().map(|q| q.body.as_ref()) else {
            return Ok(());
        };
        let Some(width) = values.rows.first().map(|r| r.content.len()) else {
            return Ok(());
        };
        let Ok(def) = self.store.table(&table) else {
            return Ok(());
        };
        let schema = TableSchema::of(&def)?;
        if schema.series.is_some() {
            // A series' view holds only what its events are.
            return Ok(());
        }
        let mut declared: Vec<String> = match &schema.key {
            Some(key) => key.fields().map(|(_, n, _)| n.to_string()).collect(),
            None => vec!["_key".to_string()],
        };
        declared.extend(schema.columns.iter().map(|c| c.name.clone()));
        let all: Vec<String> = {
            use datafusion::catalog::TableProvider;
            crate::query::CellarTable::new(self.store.clone(), &table)?
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect()
        };
        if width == declared.len() && width != all.len() {
            insert.columns = declared
                .iter()
                .map(|c| ObjectName::from(Ident::with_quote('"', c)))
                .collect();
        } else if width != all.len() {
            return Err(Error::InvalidArgument(format!(
                "INSERT INTO {table} without a column list takes its declared columns ({}) or all of its columns ({}); the VALUES rows have {width} values: name the columns, as in INSERT INTO {table} ({}) VALUES (...)",
                declared.join(", "),
                all.join(", "),
                declared.join(", ")
            )).into());
        }
        Ok(())
    }

    /// Runs a statement once for each row of a batch of parameter values
    /// (`$1` is the batch's first column) and returns the rows it
    /// affected in all. `INSERT ... VALUES ($1, ...)` is planned once and
    /// its rows written in batches; any other statement runs once per
    /// row.
    pub async fn execute_batch(&self, sql: &str, params: &RecordBatch) -> DfResult<u64> {
        let plan = self.plan_with_placeholders(sql).await?;
        if let Some(batched) = batch_params::insert_from_batch(&plan, params)? {
            let df = self.run_plan(batched).await?;
            return Ok(affected_rows(&self.run_write(sql, df).await?));
        }
        let mut count = 0;
        for row in 0..params.num_rows() {
            let values = row_parameters(params, row).map_err(Error::InvalidArgument)?;
            let df = self
                .run_plan(plan.clone().with_param_values(values)?)
                .await?;
            count += affected_rows(&self.run_write(sql, df).await?);
        }
        Ok(count)
    }

    /// The COPY FROM this session is running, if any.
    pub fn loading(&self) -> Option<Loading> {
        self.loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Runs a planned statement as a query of this session: registered
    /// (`SHOW QUERIES`), cancellable (`CANCEL QUERY n`), stopped at the
    /// query timeout, and queued while too many heavy queries run.
    pub async fn execute_stream(
        &self,
        sql: &str,
        df: DataFrame,
    ) -> DfResult<datafusion::physical_plan::SendableRecordBatchStream> {
        self.execute_stream_keeping(sql, df, None).await
    }

    /// What planning sees now, read before a statement without
    /// parameters is planned, for [`SqlSession::execute_stream_keeping`].
    pub(crate) fn plans_seen(&self) -> Option<PlansSeen> {
        self.plans.seen(self.store.catalog_generation())
    }

    /// The plan kept for `sql` if one holds (a read without parameters
    /// run before), ready for [`SqlSession::run_kept`].
    pub(crate) fn kept_plan(&self, sql: &str) -> DfResult<Option<KeptPlan>> {
        self.plans.get(sql, self.store.catalog_generation())
    }

    /// Runs a kept plan as query `sql`.
    pub(crate) async fn run_kept(
        &self,
        sql: &str,
        (plan, task): KeptPlan,
    ) -> DfResult<datafusion::physical_plan::SendableRecordBatchStream> {
        self.running.execute(&self.owner(), sql, plan, task).await
    }

    /// Runs `sql`, from the plan kept for it if one holds, else planned
    /// (and kept when it may be, see [`plans`]).
    async fn stream_text(
        &self,
        sql: &str,
    ) -> DfResult<datafusion::physical_plan::SendableRecordBatchStream> {
        let generation = self.store.catalog_generation();
        if let Some(kept) = self.plans.get(sql, generation)? {
            return self.run_kept(sql, kept).await;
        }
        if let Some(shaped) = self.shaped_plan(sql).await {
            return self.run_kept(sql, shaped).await;
        }
        let seen = self.plans.seen(generation);
        let df = self.sql(sql).await?;
        self.execute_stream_keeping(sql, df, seen).await
    }

    /// [`SqlSession::execute_stream`] of a statement planned having seen
    /// `seen` (`None`: with parameters, or not known): its plan is kept
    /// for its text when it may be.
    pub(crate) async fn execute_stream_keeping(
        &self,
        sql: &str,
        df: DataFrame,
        seen: Option<PlansSeen>,
    ) -> DfResult<datafusion::physical_plan::SendableRecordBatchStream> {
        let keep = seen.filter(|_| plans::keepable(df.logical_plan()));
        let context = Arc::new(df.task_ctx());
        let insert =
            matches!(df.logical_plan(), LogicalPlan::Dml(d) if matches!(d.op, WriteOp::Insert(_)))
                .then(|| df.logical_plan().clone());
        let plan = match df.create_physical_plan().await {
            Ok(plan) => plan,
            Err(e) => {
                return Err(match insert {
                    Some(plan) => name_cast_failure(&plan, e),
                    None => e,
                });
            }
        };
        if let Some(seen) = keep {
            self.plans.keep(sql, seen, &plan, &context);
        }
        self.running
            .execute(&self.owner(), sql, plan, context)
            .await
    }

    /// The session's DataFusion state as a plan leaving this process is
    /// planned (see [`portable`]).
    #[cfg(feature = "ballista")]
    pub(crate) fn portable_state(&self) -> datafusion::execution::SessionState {
        portable(self.ctx.state())
    }

    /// This session over another DataFusion context: the same store,
    /// session tables and query registry.
    #[cfg(feature = "ballista")]
    pub(crate) fn with_context(&self, ctx: SessionContext) -> SqlSession {
        SqlSession {
            ctx,
            // Its planning state is the other context's.
            shapes: templates::Shapes::default(),
            ..self.clone()
        }
    }

    /// The DataFusion context, for registering more sources or functions
    /// (then [`SqlSession::forget_plans`]).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// Forgets the plans kept for statements run again: after a function
    /// is registered or replaced on [`SqlSession::context`] directly,
    /// which the session does not see.
    pub fn forget_plans(&self) {
        self.plans.forget();
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Plans one statement. cellar's own statements run at once and return
    /// their result as a DataFrame.
    pub async fn sql(&self, sql: &str) -> DfResult<DataFrame> {
        limits::check_statement(sql)?;
        // A query is none of cellar's own statements: not tokenized twice.
        let own = if templates::starts_a_query(sql) {
            Ok(None)
        } else {
            ddl::parse(sql)
        };
        match own {
            Ok(Some(mut statement)) => {
                self.access.check_statement(&mut statement)?;
                let reads = matches!(
                    statement,
                    CellarStatement::Describe { .. }
                        | CellarStatement::Advise { .. }
                        | CellarStatement::ShowProtos
                        | CellarStatement::ShowQueries
                        | CellarStatement::ShowStats
                        | CellarStatement::CancelQuery { .. }
                        | CellarStatement::CopyFrom { .. }
                );
                let result = self.run_cellar(statement).await;
                if !reads {
                    // Whatever it did, plans made before may not hold.
                    self.plans.forget();
                }
                result
            }
            Ok(None) => {
                let plan = self.plan(sql).await?;
                self.run_plan(plan).await
            }
            Err(e) => Err(DataFusionError::SQL(Box::new(e), None)),
        }
    }

    /// Runs one of cellar's own statements.
    /// What a statement would return and which parameters (`$1`, `$2`,
    /// ...) it takes, planned without running anything: nothing is
    /// created, written or dropped. cellar's own statements (its DDL)
    /// answer `None`; they say what they did only once run.
    pub async fn statement_shape(&self, sql: &str) -> DfResult<Option<StatementShape>> {
        limits::check_statement(sql)?;
        match ddl::parse(sql) {
            Ok(Some(_)) => Ok(None),
            Err(e) => Err(DataFusionError::SQL(Box::new(e), None)),
            Ok(None) => {
                let plan = self.plan(sql).await?;
                let mut parameters: Vec<(String, Option<DataType>)> =
                    plan.get_parameter_types()?.into_iter().collect();
                // `$2` after `$1`, `$10` after `$9`.
                parameters.sort_by_key(|(id, _)| {
                    (
                        id.trim_start_matches('$')
                            .parse::<usize>()
                            .unwrap_or(usize::MAX),
                        id.clone(),
                    )
                });
                Ok(Some(StatementShape {
                    schema: Arc::new(plan.schema().as_arrow().clone()),
                    parameters,
                }))
            }
        }
    }

    /// Plans one statement with parameter values for its placeholders.
    /// Like [`SqlSession::sql`], cellar's own statements and DataFusion's
    /// DDL run at once; queries and DML run when the frame is executed.
    pub async fn sql_with_params(
        &self,
        sql: &str,
        params: datafusion::common::ParamValues,
    ) -> DfResult<DataFrame> {
        let empty = match &params {
            datafusion::common::ParamValues::List(v) => v.is_empty(),
            datafusion::common::ParamValues::Map(m) => m.is_empty(),
        };
        if empty {
            return self.sql(sql).await;
        }
        // Placeholders are replaced before DDL would run, so a parameter
        // reaches `CREATE VIEW ... AS SELECT $1` as a value.
        let plan = self.plan_with_placeholders(sql).await?;
        self.run_plan(plan.with_param_values(params)?).await
    }

    /// Plans a statement that takes parameter values (none of cellar's
    /// own statements do), its placeholders still open.
    async fn plan_with_placeholders(&self, sql: &str) -> DfResult<LogicalPlan> {
        limits::check_statement(sql)?;
        if let Ok(Some(_)) = ddl::parse(sql) {
            return Err(DataFusionError::Plan(
                "cellar's own statements (CREATE TABLE, ALTER ..., PROTO ...) take no parameters"
                    .into(),
            ));
        }
        self.plan(sql).await
    }

    /// Hands a DataFusion plan to the context (which runs DDL at once),
    /// after what cellar adds: an external table may not take a cellar
    /// table's name (DataFusion would say only "already exists"), and
    /// COPY to CSV writes nested columns as JSON.
    async fn run_plan(&self, plan: LogicalPlan) -> DfResult<DataFrame> {
        if let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(create)) = &plan {
            let name = create.name.table();
            if create.name.schema().is_none_or(|s| s == "public")
                && self.store.table(name).is_ok()
                && !create.if_not_exists
            {
                return Err(catalog::cellar_name_taken(name, "external table").into());
            }
        }
        let changes = matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Statement(_));
        let result = self
            .ctx
            .execute_logical_plan(plan)
            .await
            .and_then(nested_as_json);
        if changes {
            // DDL and SET run here, now: plans made before may not hold.
            self.plans.forget();
        }
        result
    }

    /// Plans one statement and runs it now if it writes (DDL, INSERT,
    /// UPDATE, DELETE, COPY), so it happens exactly once whatever the
    /// caller then does with the result: what comes back only reads. A
    /// write runs to its end on its own task even if the caller stops
    /// waiting. This is how a server runs what a client executes; a query
    /// stays lazy and streams when executed.
    pub async fn execute(
        &self,
        sql: &str,
        params: datafusion::common::ParamValues,
    ) -> DfResult<DataFrame> {
        let df = self.sql_with_params(sql, params).await?;
        if !writes(df.logical_plan()) {
            return Ok(df);
        }
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = self.run_write(sql, df).await?;
        let table = datafusion::datasource::MemTable::try_new(schema, vec![batches])?;
        self.ctx.read_table(Arc::new(table))
    }

    /// Runs a planned write to its end on its own task, even if the
    /// caller stops waiting, and collects what it returns.
    async fn run_write(&self, sql: &str, df: DataFrame) -> DfResult<Vec<RecordBatch>> {
        let session = self.clone();
        let text = sql.to_string();
        tokio::spawn(async move {
            let stream = session.execute_stream(&text, df).await?;
            datafusion::physical_plan::common::collect(stream).await
        })
        .await
        .map_err(|e| Error::Internal(format!("the task running {sql:?} failed: {e}")))?
    }

    /// Runs one statement and collects its result.
    pub async fn query(&self, sql: &str) -> DfResult<Vec<RecordBatch>> {
        let stream = self.stream_text(sql).await?;
        let schema = stream.schema();
        let batches = datafusion::physical_plan::common::collect(stream).await?;
        if batches.is_empty() {
            // No rows still has columns: an empty batch carries them.
            return Ok(vec![RecordBatch::new_empty(schema)]);
        }
        Ok(batches)
    }

    /// The external tables and views of this session, with what each is
    /// ("external table", "view"), by name.
    pub fn session_tables(&self) -> Vec<(String, &'static str)> {
        self.session_tables.list()
    }
}

/// `COPY ... TO 'file.csv'` of a query with nested columns (family maps,
/// lists, structs), which CSV cannot hold: each such column is written as
/// its JSON text (`to_json`), so whole tables export. Other plans pass.
fn nested_as_json(df: DataFrame) -> DfResult<DataFrame> {
    let LogicalPlan::Copy(copy) = df.logical_plan() else {
        return Ok(df);
    };
    let nested = |t: &DataType| {
        matches!(
            t,
            DataType::Map(..)
                | DataType::List(_)
                | DataType::LargeList(_)
                | DataType::FixedSizeList(..)
                | DataType::Struct(_)
        )
    };
    let schema = copy.input.schema();
    if !copy.file_type.get_ext().eq_ignore_ascii_case("csv")
        || !schema.fields().iter().any(|f| nested(f.data_type()))
    {
        return Ok(df);
    }
    let columns = schema.columns().into_iter().zip(schema.fields().iter());
    let exprs: Vec<datafusion::prelude::Expr> = columns
        .map(|(column, field)| {
            let expr = datafusion::prelude::Expr::Column(column);
            if nested(field.data_type()) {
                functions::to_json_udf()
                    .call(vec![expr])
                    .alias(field.name())
            } else {
                expr
            }
        })
        .collect();
    let input = datafusion::logical_expr::LogicalPlanBuilder::from(copy.input.as_ref().clone())
        .project(exprs)?
        .build()?;
    let plan = LogicalPlan::Copy(datafusion::logical_expr::dml::CopyTo::new(
        Arc::new(input),
        copy.output_url.clone(),
        copy.partition_by.clone(),
        Arc::clone(&copy.file_type),
        copy.options.clone(),
    ));
    let (state, _) = df.into_parts();
    Ok(DataFrame::new(state, plan))
}

fn next_session_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The table an INSERT writes, by its last name part.
fn insert_target(statement: &datafusion::sql::parser::Statement) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{ObjectNamePart, Statement, TableObject};
    let datafusion::sql::parser::Statement::Statement(inner) = statement else {
        return None;
    };
    let Statement::Insert(insert) = inner.as_ref() else {
        return None;
    };
    let TableObject::TableName(name) = &insert.table else {
        return None;
    };
    match name.0.last()? {
        ObjectNamePart::Identifier(ident) => Some(ident.value.clone()),
        _ => None,
    }
}

/// An INSERT whose VALUES do not cast to their columns fails, in
/// DataFusion, with the value but not the column: find the column.
fn name_cast_failure(plan: &LogicalPlan, e: DataFusionError) -> DataFusionError {
    use datafusion::logical_expr::{Expr, Projection, Values};
    let text = e.to_string();
    let LogicalPlan::Dml(dml) = plan else {
        return e;
    };
    let LogicalPlan::Projection(Projection { expr, input, .. }) = dml.input.as_ref() else {
        return e;
    };
    let LogicalPlan::Values(Values { values, .. }) = input.as_ref() else {
        return e;
    };
    for projected in expr {
        let Expr::Alias(alias) = projected else {
            continue;
        };
        let Expr::Column(source) = alias.expr.as_ref() else {
            continue;
        };
        let Some(index) = source
            .name
            .strip_prefix("column")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
        else {
            continue;
        };
        for (row, cells) in values.iter().enumerate() {
            let Some(Expr::Cast(cast)) = cells.get(index) else {
                continue;
            };
            let Expr::Literal(value, _) = cast.expr.as_ref() else {
                continue;
            };
            let shown = format!("'{value}'");
            if text.contains(&shown) {
                return Error::InvalidArgument(format!(
                    "INSERT INTO {}: column {} ({}) cannot take {shown} (row {} of VALUES)",
                    dml.table_name,
                    alias.name,
                    cast.field.data_type(),
                    row + 1
                ))
                .into();
            }
        }
    }
    e
}

/// Whether running `plan` changes stored data (DataFusion's own DDL has
/// already run when the plan exists).
fn writes(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNode;
    plan.exists(|p| Ok(matches!(p, LogicalPlan::Dml(_) | LogicalPlan::Copy(_))))
        .unwrap_or(true)
}

/// The parameter values of row `row` of a batch of them (`$1` is its
/// first column); the error names the parameter and the row.
pub(crate) fn row_parameters(
    batch: &RecordBatch,
    row: usize,
) -> Result<datafusion::common::ParamValues, String> {
    batch
        .columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            datafusion::common::ScalarValue::try_from_array(column, row)
                .map_err(|e| format!("parameter {} of row {row}: {e}", i + 1))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(datafusion::common::ParamValues::from)
}

/// A statement's one-row, one-column answer: what it did.
pub(crate) fn message(text: String) -> DfResult<RecordBatch> {
    use datafusion::arrow::array::{ArrayRef, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let schema = Schema::new(vec![Field::new("result", DataType::Utf8, false)]);
    let column: ArrayRef = Arc::new(StringArray::from(vec![text]));
    Ok(RecordBatch::try_new(Arc::new(schema), vec![column])?)
}

/// The rows a write reports (its `count` column).
pub(crate) fn affected_rows(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| b.column_by_name("count"))
        .filter_map(|c| {
            c.as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        })
        .flat_map(|c| c.iter().flatten())
        .sum()
}
