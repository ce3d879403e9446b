//! The DataFusion side of a session: a context with cellar's settings,
//! optimizer rules, functions and runtime (memory limit, spilling), and
//! the store's tables registered as `cellar.public`.

use std::sync::Arc;

use datafusion::execution::context::{SessionConfig, SessionContext};

use super::access::{Access, FileAccess};
use super::catalog::{self, SessionTables, StoreSchema};
use super::options::SessionOptions;
use super::{files, functions};
use crate::query::CheckedArithmetic;
use crate::store::Store;

/// A DataFusion context with cellar's settings, rules and functions, and
/// no tables yet.
pub(super) fn bare_context(options: &SessionOptions, access: &Arc<Access>) -> SessionContext {
    // Scans that know they read few rows say so (an estimate), and stay
    // in one partition.
    let config = SessionConfig::new()
        .set_bool(
            "datafusion.execution.use_row_number_estimates_to_optimize_partitioning",
            true,
        )
        .with_information_schema(true)
        .with_default_catalog_and_schema("cellar", "public")
        // Made in `context_with_catalog`: a flag left on would make every
        // state built from this one (COPY's, a client's) replace the
        // catalog with an empty one.
        .with_create_default_catalog_and_schema(false);
    let builder = datafusion::execution::SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime(options))
        .with_default_features()
        .with_expr_planners(expr_planners())
        .with_physical_optimizer_rules(physical_rules());
    let ctx = context_with_catalog(builder, access);
    ctx.register_udf(functions::reverse_domain_udf());
    ctx.register_udf(functions::hll_count_udf());
    ctx.register_udf(functions::to_json_udf());
    ctx.register_udf(functions::substr_udf());
    ctx.add_analyzer_rule(Arc::new(CheckedArithmetic));
    ctx
}

/// A context built from `builder` over a catalog list of its own, in
/// which a quoted path is a table too (`SELECT * FROM 'file.parquet'`)
/// where `access` allows the file, and an empty catalog `cellar` whose
/// schema `public` [`register_store`] fills.
pub(super) fn context_with_catalog(
    builder: datafusion::execution::SessionStateBuilder,
    access: &Arc<Access>,
) -> SessionContext {
    let paths = Arc::new(catalog::PathTables::new(Arc::clone(access)));
    let list = Arc::new(datafusion::catalog::DynamicFileCatalog::new(
        Arc::new(datafusion::catalog::MemoryCatalogProviderList::new()),
        Arc::clone(&paths) as Arc<dyn datafusion::catalog::UrlTableFactory>,
    ));
    let ctx = SessionContext::new_with_state(builder.with_catalog_list(list).build());
    if ctx.catalog("cellar").is_none() {
        ctx.register_catalog(
            "cellar",
            Arc::new(datafusion::catalog::MemoryCatalogProvider::new()),
        );
    }
    paths.bind(&ctx);
    ctx
}

/// Registers `store`'s tables as the schema `cellar.public` of `ctx`,
/// with a new set of session tables, which it returns.
pub(super) fn register_store(ctx: &SessionContext, store: &Store) -> SessionTables {
    let session_tables = SessionTables::default();
    if let Some(catalog) = ctx.catalog("cellar") {
        // Replaces the empty in-memory schema created with the catalog.
        let _ = catalog.register_schema(
            "public",
            Arc::new(StoreSchema {
                store: store.clone(),
                session: session_tables.clone(),
            }),
        );
    }
    session_tables
}

/// DataFusion's planners of SQL syntax, cellar's `SUBSTR` first.
pub(super) fn expr_planners() -> Vec<Arc<dyn datafusion::logical_expr::planner::ExprPlanner>> {
    let mut planners: Vec<Arc<dyn datafusion::logical_expr::planner::ExprPlanner>> =
        vec![Arc::new(functions::SubstrPlanner)];
    planners.extend(datafusion::execution::SessionStateDefaults::default_expr_planners());
    planners
}

/// `state` as a plan leaving this process is planned: without the scan
/// aggregate of series buckets, whose operator has no codec.
#[cfg(feature = "ballista")]
pub(super) fn portable(
    state: datafusion::execution::SessionState,
) -> datafusion::execution::SessionState {
    datafusion::execution::SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rules(portable_rules())
        .build()
}

/// cellar's DataFusion state with no store behind it, as a Ballista
/// scheduler or executor process plans and decodes with it: the tables
/// come with the plans.
#[cfg(feature = "ballista")]
pub(crate) fn worker_base_state(options: &SessionOptions) -> datafusion::execution::SessionState {
    portable(bare_context(options, &Arc::new(Access::default())).state())
}

type PhysicalRules =
    Vec<Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>>;

/// The physical optimizer rules of a plan that may run in another
/// process (every operator they make has a codec).
pub(super) fn portable_rules() -> PhysicalRules {
    use datafusion::physical_optimizer::limit_pushdown::LimitPushdown;
    use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
    use datafusion::physical_optimizer::projection_pushdown::ProjectionPushdown;
    let mut rules = PhysicalOptimizer::new().rules;
    let at = rules
        .iter()
        .position(|r| r.name() == "PushdownSort")
        .map_or(rules.len().saturating_sub(1), |i| i + 1);
    rules.insert(at, Arc::new(LimitPushdown::new()));
    rules.insert(at + 1, Arc::new(crate::query::MergeOfOne));
    // The projections a limit that went kept apart merge.
    rules.insert(at + 2, Arc::new(ProjectionPushdown::new()));
    rules
}

/// DataFusion's physical optimizer rules, with limits pushed down once more
/// after sorts are: a sort the key order answers (`ORDER BY ts DESC LIMIT
/// 3` of one device) leaves its LIMIT above a projection, and the scan
/// should stop after those rows rather than read the whole range. Then
/// cellar's own: partial aggregates of bucketed series into their scans.
pub(super) fn physical_rules() -> PhysicalRules {
    let mut rules = portable_rules();
    // Partial aggregates of series in buckets go into their scans once the
    // plan's shape is settled, before the final checks.
    let at = rules
        .iter()
        .position(|r| r.name() == "SanityCheckPlan")
        .unwrap_or(rules.len());
    rules.insert(at, Arc::new(crate::query::ScanAggregate));
    rules
}

/// The runtime of a session: with a memory limit, a fair spill pool (fair
/// shares between concurrent queries; its error names the largest
/// consumers) spilling to the OS temporary directory. Should no temporary
/// directory be usable, the limit still holds, without spilling.
/// Directory listings are not kept.
pub(super) fn runtime(
    options: &SessionOptions,
) -> Arc<datafusion::execution::runtime_env::RuntimeEnv> {
    let (memory_limit, files) = (options.memory_limit, &options.files);
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
    use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
    let builder = || {
        // Directory listings are not kept (DataFusion keeps them for
        // good): a file added to an external table's directory is read by
        // the next statement.
        let mut builder = RuntimeEnvBuilder::new().with_object_list_cache_limit(0);
        if *files != FileAccess::Full {
            builder = builder.with_object_store_registry(files::registry(files));
        }
        if let Some(dir) = &options.spill_dir {
            builder = builder.with_disk_manager_builder(
                DiskManagerBuilder::default()
                    .with_mode(DiskManagerMode::Directories(vec![dir.clone()])),
            );
        }
        match memory_limit {
            Some(limit) => builder.with_memory_pool(Arc::new(TrackConsumersPool::new(
                FairSpillPool::new(limit),
                std::num::NonZeroUsize::MIN.saturating_add(2),
            ))),
            None => builder,
        }
    };
    builder()
        .build_arc()
        .or_else(|_| {
            builder()
                .with_disk_manager_builder(
                    DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
                )
                .build_arc()
        })
        .unwrap_or_else(|_| Arc::new(RuntimeEnv::default()))
}
