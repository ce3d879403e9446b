//! A session attached to a Ballista cluster: the states the client, the
//! scheduler and the executors plan with, and the planner that sends
//! queries reading tables to the cluster.

use std::sync::Arc;

use async_trait::async_trait;
use ballista_core::extension::{SessionConfigExt, SessionStateExt};
use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use super::codec::{CellarLogicalCodec, CellarPhysicalCodec, Stores};
use crate::sql::SqlSession;

/// The session's state with cellar's codecs, as the client plans with
/// it.
fn client_state(session: &SqlSession) -> SessionState {
    with_codecs(session.portable_state(), Stores::with(session.store()))
}

/// `state` with cellar's codecs, which open stores through `stores`.
pub(super) fn with_codecs(state: SessionState, stores: Stores) -> SessionState {
    let config = state
        .config()
        .clone()
        .with_ballista_logical_extension_codec(Arc::new(CellarLogicalCodec::new(stores.clone())))
        .with_ballista_physical_extension_codec(Arc::new(CellarPhysicalCodec::new(stores)));
    SessionStateBuilder::new_from_existing(state)
        .with_config(config)
        .build()
}

/// The state the scheduler plans with and the executors decode with: the
/// client's, with key scans made splittable among tasks at the end. The
/// static planner, which plans with this state's rules (the adaptive one
/// brings its own, without that step). Ballista's settings for
/// DataFusion apply, as they would to a session the scheduler made: among
/// them no dynamic filters, which cannot cross a stage boundary; but hash
/// joins, as a local session plans them (Ballista would take sort-merge
/// joins, which spill).
fn worker_state(session: &SqlSession) -> SessionState {
    for_workers(client_state(session))
}

/// `state` as the scheduler and the executors use it (see `worker_state`).
pub(super) fn for_workers(state: SessionState) -> SessionState {
    let mut rules = state.physical_optimizers().to_vec();
    rules.push(Arc::new(super::split::SplitScans));
    let config = state
        .config()
        .clone()
        .upgrade_for_ballista()
        .with_ballista_adaptive_query_planner(false)
        .set_bool("datafusion.optimizer.prefer_hash_join", true);
    SessionStateBuilder::new_from_existing(state)
        .with_config(config)
        .with_physical_optimizer_rules(rules)
        .build()
}

pub(super) fn ballista_error(what: &str, e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("Ballista {what}: {e}"))
}

/// Starts a Ballista scheduler and `executors` executors of `slots` task
/// slots each in this process, on loopback ports of their own, sharing
/// `session`'s store; returns the scheduler's URL for
/// [`SqlSession::distributed`].
pub async fn start_cluster(
    session: &SqlSession,
    executors: usize,
    slots: usize,
) -> DfResult<String> {
    let state = worker_state(session);
    let addr = ballista_scheduler::standalone::new_standalone_scheduler_from_state(&state)
        .await
        .map_err(|e| ballista_error("scheduler did not start", e))?;
    let url = format!("http://127.0.0.1:{}", addr.port());
    for _ in 0..executors.max(1) {
        let scheduler = connect(&url).await?;
        ballista_executor::new_standalone_executor_from_state(scheduler, slots.max(1), &state)
            .await
            .map_err(|e| ballista_error("executor did not start", e))?;
    }
    Ok(url)
}

/// See [`SqlSession::with_ballista`].
pub(super) async fn attach(session: &SqlSession, target: &str) -> DfResult<(SqlSession, String)> {
    let target = target.trim();
    let executors = match target.strip_prefix("standalone") {
        Some("") => Some(2),
        Some(n) => Some(
            n.strip_prefix(':')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| {
                    DataFusionError::Configuration(format!(
                        "--ballista {target:?}: write standalone, standalone:N (1 to 64 \
                         executors) or the scheduler's HOST:PORT"
                    ))
                })?,
        ),
        None => None,
    };
    match executors {
        Some(n) => {
            let cores = std::thread::available_parallelism().map_or(2, usize::from);
            let slots = (cores / n).max(1);
            let url = start_cluster(session, n, slots).await?;
            let session = session.distributed(&url)?;
            Ok((
                session,
                format!(
                    "queries run on Ballista: a scheduler at {url} and {n} executors of {slots} \
                     task slots in this process"
                ),
            ))
        }
        None => {
            let session = session.distributed(target)?;
            // Fail now, not at the first query, when nothing answers.
            let url = session_url(target);
            connect(&url).await?;
            Ok((
                session,
                format!("queries run on the Ballista scheduler at {url}"),
            ))
        }
    }
}

/// A scheduler address as a URL: `http://` unless it names a scheme
/// (`df://` is Ballista's own spelling).
fn session_url(scheduler: &str) -> String {
    match scheduler.strip_prefix("df://") {
        Some(rest) => format!("http://{rest}"),
        None if scheduler.contains("://") => scheduler.to_string(),
        None => format!("http://{scheduler}"),
    }
}

/// A client of the scheduler at `url`, waiting up to five seconds for it.
async fn connect(url: &str) -> DfResult<SchedulerGrpcClient<tonic::transport::Channel>> {
    let mut last = None;
    for _ in 0..50 {
        match SchedulerGrpcClient::connect(url.to_string()).await {
            Ok(client) => return Ok(client),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(ballista_error(
        &format!("scheduler at {url} is not answering"),
        last.map_or_else(String::new, |e| e.to_string()),
    ))
}

impl SqlSession {
    /// This session with its queries run by the Ballista scheduler at
    /// `scheduler` (`http://host:port`, or `df://host:port`). Queries
    /// that read tables run on the cluster; writes, DDL and statements
    /// that read no table run here.
    pub fn distributed(&self, scheduler: &str) -> DfResult<SqlSession> {
        let url = session_url(scheduler);
        let state = client_state(self);
        let local = Arc::clone(state.query_planner());
        let upgraded = state.upgrade_for_ballista(url)?;
        let remote = Arc::clone(upgraded.query_planner());
        let state = SessionStateBuilder::new_from_existing(upgraded)
            .with_query_planner(Arc::new(SplitPlanner { local, remote }))
            .build();
        Ok(self.with_context(SessionContext::new_with_state(state)))
    }
}

/// Sends queries to the cluster and keeps the rest here.
#[derive(Debug)]
struct SplitPlanner {
    local: Arc<dyn QueryPlanner + Send + Sync>,
    remote: Arc<dyn QueryPlanner + Send + Sync>,
}

/// Whether a plan reads tables and writes nothing, and every table it
/// reads can travel (a cellar table or a file): what the cluster runs.
/// The results of cellar's own statements (in-memory tables) stay here.
fn is_distributed_query(plan: &LogicalPlan) -> bool {
    let (mut reads, mut local) = (false, false);
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => {
                reads = true;
                let travels =
                    datafusion::datasource::source_as_provider(&scan.source).is_ok_and(|p| {
                        p.is::<crate::query::CellarTable>()
                            || p.is::<datafusion::datasource::listing::ListingTable>()
                    });
                local |= !travels;
            }
            LogicalPlan::Dml(_) | LogicalPlan::Ddl(_) | LogicalPlan::Copy(_) => local = true,
            _ => {}
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    });
    reads && !local
}

#[async_trait]
impl QueryPlanner for SplitPlanner {
    async fn create_physical_plan(
        &self,
        plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let planner = if is_distributed_query(plan) {
            &self.remote
        } else {
            &self.local
        };
        planner.create_physical_plan(plan, session).await
    }
}
