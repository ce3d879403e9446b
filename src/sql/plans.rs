//! Plans kept for statements that run again.
//!
//! Parsing and planning a query costs DataFusion and cellar's pushdown
//! more than half a millisecond, where reading one series' latest value
//! costs a few microseconds. A session keeps the physical plan of each
//! query it ran (by its exact text) and runs the same text again from that
//! plan, its operators' state reset, without parsing or planning. This is
//! what SQLite's and most drivers' statement caches do for repeated text.
//!
//! A plan is kept only while it is certain to give the answer planning
//! again would give:
//! - it only reads: no DDL, DML, COPY, EXPLAIN or SET;
//! - it reads only cellar tables (and views over them): an external
//!   table's plan lists its files when planned, an in-memory table's holds
//!   its batches;
//! - every function in it is immutable: `now()` and the like are folded
//!   into the plan when it is made, so a plan using them is made again;
//! - no table was created, altered, dropped, replaced or converted since it
//!   was made (the store's catalog generation), and the session ran no
//!   statement that changes what planning sees (DDL, SET, cellar's own
//!   statements);
//! - it was made less than [`KEEP_FOR`] ago: a scan's partitions are cut
//!   from the data when planned, so a table that grew gets new ones.
//!
//! Rows are always read when the plan runs, never when it is made: a kept
//! plan sees every write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::error::Result as DfResult;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;

use crate::query::{CellarTable, KeptProjectionExec, keep_projections};

/// Statements whose plans a session keeps at most.
const CAPACITY: usize = 256;
/// Statements longer than this are planned each time (a long VALUES list
/// or IN list makes a large plan).
pub(crate) const MAX_TEXT: usize = 8 * 1024;
/// Runs of a kept plan after which its operators are made afresh
/// (their metrics sets grow with each run).
const RENEW_EVERY: u32 = 64;
/// How long a plan is kept.
pub(crate) const KEEP_FOR: Duration = Duration::from_secs(30);

/// A kept plan ready to run, and the task context it was planned with.
pub(crate) type Ready = (Arc<dyn ExecutionPlan>, Arc<TaskContext>);

/// What planning a statement saw: the store's catalog generation and the
/// session's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    store: u64,
    session: u64,
}

/// A plan kept for its statement's text.
struct Kept {
    plan: Arc<dyn ExecutionPlan>,
    task: Arc<TaskContext>,
    seen: Seen,
    made: Instant,
    used: u64,
    /// Runs since the plan was made or renewed.
    runs: u32,
    /// Some operator of the plan keeps state from a run.
    reset: bool,
}

#[derive(Default)]
struct Entries {
    by_text: HashMap<String, Kept>,
    /// Counts lookups: the least recently used entry goes first.
    clock: u64,
}

/// The plans a session (and its clones) keeps.
#[derive(Clone, Default)]
pub(crate) struct Plans {
    entries: Arc<Mutex<Entries>>,
    /// Moves on with each statement of the session that changes what
    /// planning sees.
    generation: Arc<AtomicU64>,
    /// Statements run from a kept plan (`SHOW STATS`).
    reused: Arc<AtomicU64>,
}

impl Plans {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What planning sees now; `None` when nothing may be kept (a backend
    /// whose catalog other processes change). Read before planning, so a
    /// change during planning makes the plan stale rather than kept.
    pub fn seen(&self, store_generation: Option<u64>) -> Option<Seen> {
        Some(Seen {
            store: store_generation?,
            session: self.generation.load(Ordering::Acquire),
        })
    }

    /// Forgets every kept plan: the session ran a statement that changes
    /// what planning sees.
    pub fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.lock().by_text.clear();
    }

    /// The plan kept for `sql`, ready to run again, if it still holds.
    pub fn get(&self, sql: &str, store_generation: Option<u64>) -> DfResult<Option<Ready>> {
        let Some(now) = self.seen(store_generation) else {
            return Ok(None);
        };
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        let Some(kept) = entries.by_text.get_mut(sql) else {
            return Ok(None);
        };
        if kept.seen != now || kept.made.elapsed() > KEEP_FOR {
            entries.by_text.remove(sql);
            return Ok(None);
        }
        kept.used = clock;
        // Each run adds its operators' metrics to the plan's sets; the kept
        // plan is renewed now and then so that they do not pile up.
        kept.runs += 1;
        if kept.runs >= RENEW_EVERY {
            kept.plan = reset_plan_states(Arc::clone(&kept.plan))?;
            kept.runs = 0;
        }
        let (plan, task, reset) = (Arc::clone(&kept.plan), Arc::clone(&kept.task), kept.reset);
        drop(entries);
        self.reused.fetch_add(1, Ordering::Relaxed);
        // Operators that hold state from a run (a repartition's channels,
        // a join's built side, a top-k's heap) get fresh state.
        let plan = if reset {
            reset_plan_states(plan)?
        } else {
            plan
        };
        Ok(Some((plan, task)))
    }

    /// Keeps the plan of `sql`, planned having seen `seen` from a
    /// [`keepable`] statement.
    pub fn keep(
        &self,
        sql: &str,
        seen: Seen,
        plan: &Arc<dyn ExecutionPlan>,
        task: &Arc<TaskContext>,
    ) {
        if sql.len() > MAX_TEXT {
            return;
        }
        // What is kept is a copy with fresh state, never the instance about
        // to run: a repartition's state holds the tasks it spawns, which
        // stop when the last holder of that state lets go, so a kept
        // running instance would keep a cancelled query's tasks reading
        // until their end (and its channels alive until the plan expires).
        let Some((plan, reset)) = reusable(plan) else {
            return;
        };
        let mut entries = self.lock();
        if entries.by_text.len() >= CAPACITY && !entries.by_text.contains_key(sql) {
            let oldest = entries
                .by_text
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(text, _)| text.clone());
            if let Some(oldest) = oldest {
                entries.by_text.remove(&oldest);
            }
        }
        entries.clock += 1;
        let used = entries.clock;
        entries.by_text.insert(
            sql.to_string(),
            Kept {
                plan,
                task: Arc::clone(task),
                seen,
                made: Instant::now(),
                used,
                runs: 0,
                reset,
            },
        );
    }

    /// Statements run from a kept plan so far.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }
}

/// `plan` as a plan is kept to run again: a copy with fresh state, whose
/// projections run without registering metrics (no one sees a kept
/// plan's); and whether each run needs fresh state ([`keeps_state`]).
pub(crate) fn reusable(plan: &Arc<dyn ExecutionPlan>) -> Option<(Arc<dyn ExecutionPlan>, bool)> {
    let plan = keep_projections(Arc::clone(plan)).ok()?;
    let reset = keeps_state(plan.as_ref());
    let plan = match reset {
        true => reset_plan_states(plan).ok()?,
        false => plan,
    };
    Some((plan, reset))
}

/// Whether some operator of `plan` may keep state from one run to the
/// next: any but those known to start afresh at each `execute` (what a
/// selective read's plan is made of).
fn keeps_state(plan: &dyn ExecutionPlan) -> bool {
    use datafusion::physical_plan::coop::CooperativeExec;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::filter::FilterExec;
    use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
    use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
    use datafusion::physical_plan::projection::ProjectionExec;
    let fresh = plan.is::<ProjectionExec>()
        || plan.is::<KeptProjectionExec>()
        || plan.is::<FilterExec>()
        || plan.is::<GlobalLimitExec>()
        || plan.is::<LocalLimitExec>()
        || plan.is::<CooperativeExec>()
        || plan.is::<EmptyExec>()
        || plan.is::<PlaceholderRowExec>()
        || plan.is::<crate::query::KeyScanExec>()
        || plan.is::<crate::query::GatherExec>();
    !fresh || plan.children().into_iter().any(|c| keeps_state(c.as_ref()))
}

/// Whether a statement's plan (as planned from its text, before
/// optimization) gives the same answer each time it runs: see the module
/// documentation.
pub(crate) fn keepable(plan: &LogicalPlan) -> bool {
    keeps(plan, false)
}

/// [`keepable`] for a template, whose placeholders stand for literals
/// (see [`super::templates`]).
pub(crate) fn keepable_template(plan: &LogicalPlan) -> bool {
    keeps(plan, true)
}

fn keeps(plan: &LogicalPlan, placeholders: bool) -> bool {
    let mut keep = true;
    let _ = plan.apply_with_subqueries(|node| {
        keep &= match node {
            LogicalPlan::Projection(_)
            | LogicalPlan::Filter(_)
            | LogicalPlan::Window(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Sort(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Repartition(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::EmptyRelation(_)
            | LogicalPlan::Subquery(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Limit(_)
            | LogicalPlan::Distinct(_)
            | LogicalPlan::Values(_)
            | LogicalPlan::Unnest(_) => true,
            LogicalPlan::TableScan(scan) => match source_as_provider(&scan.source) {
                Ok(provider) => match provider.get_logical_plan() {
                    // A view: what it reads decides.
                    Some(view) => keeps(&view, placeholders),
                    None => provider.downcast_ref::<CellarTable>().is_some(),
                },
                Err(_) => false,
            },
            _ => false,
        };
        if keep {
            let _ = node.apply_expressions(|e| {
                keep &= immutable(e, placeholders);
                Ok(go_on(keep))
            });
        }
        Ok(go_on(keep))
    });
    keep
}

/// Whether an expression gives the same value whenever it is planned: no
/// variables, functions that are not immutable, or placeholders (unless
/// `placeholders` allows them).
fn immutable(expr: &Expr, placeholders: bool) -> bool {
    let mut immutable = true;
    let _ = expr.apply(|e| {
        immutable &= match e {
            Expr::ScalarFunction(f) => f.func.signature().volatility == Volatility::Immutable,
            Expr::AggregateFunction(f) => f.func.signature().volatility == Volatility::Immutable,
            Expr::Placeholder(_) => placeholders,
            Expr::ScalarVariable(..) => false,
            _ => true,
        };
        Ok(go_on(immutable))
    });
    immutable
}

/// A walk goes on while what it checks still holds.
fn go_on(holds: bool) -> TreeNodeRecursion {
    if holds {
        TreeNodeRecursion::Continue
    } else {
        TreeNodeRecursion::Stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    /// Metrics of every operator of `plan`.
    fn metrics(plan: &Arc<dyn ExecutionPlan>) -> usize {
        let own = plan.metrics().map_or(0, |m| m.iter().count());
        own + plan.children().into_iter().map(metrics).sum::<usize>()
    }

    #[tokio::test]
    async fn a_kept_plan_run_again_and_again_keeps_its_metrics_bounded() {
        let ctx = SessionContext::new();
        // Operators that start afresh at each run: the kept plan itself
        // runs. (The filter counts its runs; a kept projection does not.)
        let sql = "SELECT b FROM (SELECT 1 + 1 AS b) WHERE b > random()";
        let df = ctx.sql(sql).await.unwrap();
        let plan = df.create_physical_plan().await.unwrap();
        let task = Arc::new(ctx.task_ctx());
        let plans = Plans::default();
        let seen = plans.seen(Some(0)).unwrap();
        plans.keep(sql, seen, &plan, &task);
        assert!(!keeps_state(plan.as_ref()), "{plan:?}");
        let mut most = 0;
        for _ in 0..5 * RENEW_EVERY {
            let (plan, task) = plans.get(sql, Some(0)).unwrap().unwrap();
            let batches = collect(Arc::clone(&plan), task).await.unwrap();
            assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
            most = most.max(metrics(&plan));
        }
        // One run's metrics, times the runs between renewals, at most.
        let (plan, task) = plans.get(sql, Some(0)).unwrap().unwrap();
        let before = metrics(&plan);
        collect(Arc::clone(&plan), task).await.unwrap();
        let per_run = metrics(&plan) - before;
        assert!(per_run > 0, "the operators count their runs");
        assert!(
            most <= per_run * RENEW_EVERY as usize,
            "{most} metrics kept, {per_run} a run"
        );
    }

    /// A plan whose operators keep state (a repartition's spawned tasks)
    /// is kept as a fresh copy, never as the instance that runs: dropping
    /// a cancelled run's instance is what stops its tasks.
    #[tokio::test]
    async fn a_plan_with_state_is_kept_as_a_fresh_copy() {
        let config = datafusion::prelude::SessionConfig::new().with_target_partitions(2);
        let ctx = SessionContext::new_with_config(config);
        let sql = "SELECT a % 3 AS k, count(*) FROM generate_series(1, 1000) AS t(a) GROUP BY 1";
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        assert!(keeps_state(plan.as_ref()));
        let task = ctx.task_ctx();
        let plans = Plans::default();
        let seen = plans.seen(Some(0)).unwrap();
        plans.keep(sql, seen, &plan, &task);
        let kept = Arc::clone(&plans.lock().by_text[sql].plan);
        assert!(!Arc::ptr_eq(&kept, &plan));
        // The running instance is held by its run alone.
        assert_eq!(Arc::strong_count(&plan), 1);
        let batches = collect(plan, task).await.unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 3);
    }
}
