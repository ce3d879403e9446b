//! A shape's physical plan kept and run again with other values (see
//! [`super::templates`]): where a template's placeholders all lie in the
//! filters of its one scan, nothing in the physical plan but that scan
//! depends on the values, so the plan made for the shape's first
//! statement serves the next ones with only its scan made anew. The new
//! scan must declare what the first did (its partitioning and orderings,
//! what the operators above were planned for) and then shares its
//! properties, so that the operators above are copied, not planned:
//! DataFusion's physical planning (building each operator's equivalences,
//! the optimizer's passes) is most of what planning a point lookup costs.
//! A statement whose scan declares something else is planned from the
//! logical template instead.

use std::sync::Arc;

use datafusion::catalog::Session;
use datafusion::common::ParamValues;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::source_as_provider;
use datafusion::logical_expr::expr::Placeholder;
use datafusion::logical_expr::expr_rewriter::unnormalize_cols;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;

use crate::query::CellarTable;
use crate::query::{KeyScanExec, ScanAggregateExec};

/// The one scan of a template's logical plan, when every placeholder of
/// the plan is in that scan's filters.
pub(crate) struct TemplateScan {
    table: Arc<dyn datafusion::datasource::TableProvider>,
    projection: Option<Vec<usize>>,
    /// With placeholders.
    filters: Vec<Expr>,
    fetch: Option<usize>,
}

/// A template's physical plan, as kept to run again.
pub(crate) struct KeptPhysical {
    scan: TemplateScan,
    plan: Arc<dyn ExecutionPlan>,
    /// The plan's scan (a [`KeyScanExec`], or a [`ScanAggregateExec`]
    /// over one), made anew for each statement.
    leaf: Arc<dyn ExecutionPlan>,
    /// Whether operators of the plan hold state from a run (see
    /// `plans::keeps_state`).
    reset: bool,
}

/// Operators whose work depends on their inputs and their own
/// expressions only (no copy of a scan's ranges): what a kept plan may
/// hold above its scan.
const PLAIN: [&str; 12] = [
    "ProjectionExec",
    "KeptProjectionExec",
    "FilterExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "SortExec",
    "SortPreservingMergeExec",
    "AggregateExec",
    "RepartitionExec",
];

/// The scan of `plan` (a template, optimized) if it is the plan's only
/// one, reads a cellar table directly (not through a view) and holds
/// every placeholder of the plan in its filters.
pub(crate) fn template_scan(plan: &LogicalPlan) -> Option<TemplateScan> {
    let mut scans = Vec::new();
    let mut outside = false;
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(scan) => scans.push(scan.clone()),
            _ => {
                let _ = node.apply_expressions(|e| {
                    outside |= has_placeholder(e);
                    Ok(stop_if(outside))
                });
            }
        }
        Ok(stop_if(outside || scans.len() > 1))
    });
    let [scan] = <[_; 1]>::try_from(scans).ok()?;
    if outside {
        return None;
    }
    let table = source_as_provider(&scan.source).ok()?;
    table.downcast_ref::<CellarTable>()?;
    Some(TemplateScan {
        table,
        projection: scan.projection,
        // (As DataFusion's planner hands them to a scan.)
        filters: unnormalize_cols(scan.filters),
        fetch: scan.fetch,
    })
}

fn stop_if(stop: bool) -> TreeNodeRecursion {
    match stop {
        true => TreeNodeRecursion::Stop,
        false => TreeNodeRecursion::Continue,
    }
}

fn has_placeholder(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|e| {
        found |= matches!(e, Expr::Placeholder(_));
        Ok(stop_if(found))
    });
    found
}

impl TemplateScan {
    /// `plan` (the physical plan of a statement of the template, as it is
    /// kept: see `plans::reusable`) kept to run again, if it may be: one
    /// [`KeyScanExec`] (or a scan-side aggregate over one), and only
    /// [`PLAIN`] operators above it.
    pub(crate) fn keep(self, plan: Arc<dyn ExecutionPlan>, reset: bool) -> Option<KeptPhysical> {
        let mut leaves = Vec::new();
        let mut plain = true;
        let _ = plan.apply(|node| {
            if node.downcast_ref::<KeyScanExec>().is_some()
                || node.downcast_ref::<ScanAggregateExec>().is_some()
            {
                leaves.push(Arc::clone(node));
            } else {
                plain &= PLAIN.contains(&node.name());
            }
            Ok(stop_if(!plain))
        });
        let [leaf] = <[_; 1]>::try_from(leaves).ok()?;
        plain.then_some(KeptPhysical {
            scan: self,
            plan,
            leaf,
            reset,
        })
    }
}

impl KeptPhysical {
    /// The plan for the statement of the template whose values are
    /// `values`: the kept plan with its scan made for them, if that scan
    /// declares what the kept one does.
    pub(crate) fn plan_for(
        &self,
        state: &dyn Session,
        values: &ParamValues,
    ) -> Option<Arc<dyn ExecutionPlan>> {
        let TemplateScan {
            table,
            projection,
            filters,
            fetch,
        } = &self.scan;
        let filters = filters
            .iter()
            .map(|f| bind(f, values))
            .collect::<Option<Vec<_>>>()?;
        let table = table.downcast_ref::<CellarTable>()?;
        let rebind = |leaf: &KeyScanExec| {
            table
                .rebind(state, leaf, projection.as_ref(), &filters, *fetch)
                .map(|scan| Arc::new(scan) as Arc<dyn ExecutionPlan>)
        };
        let scan: Arc<dyn ExecutionPlan> = match self.leaf.downcast_ref::<ScanAggregateExec>() {
            // The aggregate made again over the new scan: what it
            // answers depends on the scan's ranges and rows.
            Some(aggregate) => {
                let scan = rebind(aggregate.scan().downcast_ref::<KeyScanExec>()?)?;
                Arc::new(aggregate.rebound(scan)?)
            }
            None => rebind(self.leaf.downcast_ref::<KeyScanExec>()?)?,
        };
        let plan = Arc::clone(&self.plan)
            .transform_up(|node| {
                Ok(match Arc::ptr_eq(&node, &self.leaf) {
                    true => Transformed::yes(Arc::clone(&scan)),
                    false => Transformed::no(node),
                })
            })
            .ok()?
            .data;
        match self.reset {
            true => reset_plan_states(plan).ok(),
            false => Some(plan),
        }
    }
}

/// `filter` with its placeholders replaced by their `values`.
fn bind(filter: &Expr, values: &ParamValues) -> Option<Expr> {
    filter
        .clone()
        .transform_up(|e| match e {
            Expr::Placeholder(Placeholder { id, .. }) => {
                let (value, metadata) = values.get_placeholders_with_values(&id)?.into_inner();
                Ok(Transformed::yes(Expr::Literal(value, metadata)))
            }
            e => Ok(Transformed::no(e)),
        })
        .ok()
        .map(|t| t.data)
}
