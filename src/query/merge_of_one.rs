//! A physical optimizer rule: a sort-preserving merge of one partition is
//! that partition, a limit over a read that stops at the limit itself is
//! nothing, and the rows a LIMIT keeps of one partition, or a bounded
//! gather of a column-per-event series gives, are not spread over others
//! first.
//!
//! DataFusion spreads one partition's rows round-robin over the cores
//! when an expression is computed over them (`CAST(ts AS BIGINT)`), and
//! its limit then stops above the spreading: `ORDER BY ts DESC LIMIT 1`
//! of a series with more rows than a batch read the whole series. A local
//! limit over a round-robin spread of one partition goes into that
//! partition (the scan stops at the limit) and the spread goes.
//!
//! DataFusion places the merge while a scan still has several partitions;
//! when the sort then goes into the scan (`ORDER BY ts DESC LIMIT 1` of
//! one series becomes one reverse read), the scan has one partition and
//! the merge (with the prefetch buffer below it, a task of its own) only
//! hands one batch between tasks. It goes; its LIMIT stays as a limit,
//! unless the one partition below it already returns no more rows than
//! that (a scan with the LIMIT pushed into it, under projections). Then
//! the limit goes too, and the projections it kept apart can merge
//! (`ProjectionPushdown` runs again after this rule): a point read is two
//! operators fewer, each of which costs its metrics and a stream per run.

use std::sync::Arc;

use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::buffer::BufferExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties, Partitioning};

use super::GatherExec;

/// The rule (see the module documentation).
#[derive(Debug, Default)]
pub struct MergeOfOne;

impl PhysicalOptimizerRule for MergeOfOne {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            if let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() {
                let mut input = Arc::clone(merge.input());
                if input.output_partitioning().partition_count() != 1 {
                    return Ok(Transformed::no(node));
                }
                if let Some(buffer) = input.downcast_ref::<BufferExec>() {
                    input = Arc::clone(buffer.input());
                }
                return Ok(Transformed::yes(match merge.fetch() {
                    Some(fetch) => limited(input, fetch),
                    None => input,
                }));
            }
            if let Some(limit) = node.downcast_ref::<LocalLimitExec>()
                && let Some(repartition) = limit.input().downcast_ref::<RepartitionExec>()
                && matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
                && repartition.input().output_partitioning().partition_count() == 1
            {
                let input = Arc::clone(repartition.input());
                let fetch = limit.fetch();
                return Ok(Transformed::yes(
                    input
                        .with_fetch(Some(fetch))
                        .unwrap_or_else(|| Arc::new(LocalLimitExec::new(input, fetch))),
                ));
            }
            if let Some(repartition) = node.downcast_ref::<RepartitionExec>()
                && matches!(repartition.partitioning(), Partitioning::RoundRobinBatch(_))
                && repartition.input().output_partitioning().partition_count() == 1
                && bounded_gather(repartition.input().as_ref())
            {
                return Ok(Transformed::yes(Arc::clone(repartition.input())));
            }
            if let Some(limit) = node.downcast_ref::<GlobalLimitExec>()
                && limit.skip() == 0
                && let Some(fetch) = limit.fetch()
                && returns_at_most(limit.input().as_ref()).is_some_and(|n| n <= fetch)
            {
                return Ok(Transformed::yes(Arc::clone(limit.input())));
            }
            Ok(Transformed::no(node))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "cellar_merge_of_one"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `plan` is a column-per-event gather that reads few rows (under
/// operators that keep its partition), which DataFusion, not knowing how
/// many events it gives, would spread over threads.
fn bounded_gather(plan: &dyn ExecutionPlan) -> bool {
    if let Some(gather) = plan.downcast_ref::<GatherExec>() {
        return gather.is_bounded();
    }
    if plan.is::<ProjectionExec>() || plan.is::<CooperativeExec>() {
        let [child] = plan.children()[..] else {
            return false;
        };
        return bounded_gather(child.as_ref());
    }
    false
}

/// `input` cut at `fetch` rows, unless it returns no more than that.
fn limited(input: Arc<dyn ExecutionPlan>, fetch: usize) -> Arc<dyn ExecutionPlan> {
    if returns_at_most(input.as_ref()).is_some_and(|n| n <= fetch) {
        input
    } else {
        Arc::new(GlobalLimitExec::new(input, 0, Some(fetch)))
    }
}

/// The most rows `plan` returns, when a limit of its own (or of the one
/// partition under operators that keep every row as one row) bounds it.
fn returns_at_most(plan: &dyn ExecutionPlan) -> Option<usize> {
    if plan.output_partitioning().partition_count() != 1 {
        return None;
    }
    if let Some(fetch) = plan.fetch() {
        return Some(fetch);
    }
    if plan.is::<ProjectionExec>() || plan.is::<CooperativeExec>() {
        let [child] = plan.children()[..] else {
            return None;
        };
        return returns_at_most(child.as_ref());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::expressions::col;

    fn scan() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        Arc::new(EmptyExec::new(schema))
    }

    fn project(input: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        let a = col("a", &input.schema()).unwrap();
        Arc::new(ProjectionExec::try_new(vec![(a, "a".to_string())], input).unwrap())
    }

    fn optimize(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        MergeOfOne
            .optimize(plan, &ConfigOptions::default())
            .unwrap()
    }

    #[test]
    fn a_limit_over_a_read_limited_as_much_goes() {
        // LIMIT 1 over a projection of a one-partition read of 1 row.
        let read: Arc<dyn ExecutionPlan> = Arc::new(LocalLimitExec::new(scan(), 1));
        let plan = Arc::new(GlobalLimitExec::new(project(read), 0, Some(1)));
        let out = optimize(plan);
        assert!(out.is::<ProjectionExec>(), "{out:?}");
    }

    #[test]
    fn a_limit_that_cuts_or_skips_stays() {
        // The read stops at 5 rows; LIMIT 2 still cuts.
        let read: Arc<dyn ExecutionPlan> = Arc::new(LocalLimitExec::new(scan(), 5));
        let plan = Arc::new(GlobalLimitExec::new(project(read), 0, Some(2)));
        assert!(optimize(plan).is::<GlobalLimitExec>());
        // OFFSET is the limit's to apply.
        let read: Arc<dyn ExecutionPlan> = Arc::new(LocalLimitExec::new(scan(), 1));
        let plan = Arc::new(GlobalLimitExec::new(project(read), 1, Some(1)));
        assert!(optimize(plan).is::<GlobalLimitExec>());
        // No limit below: it stays.
        let plan = Arc::new(GlobalLimitExec::new(project(scan()), 0, Some(1)));
        assert!(optimize(plan).is::<GlobalLimitExec>());
    }
}
