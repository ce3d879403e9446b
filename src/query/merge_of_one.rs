//! A physical optimizer rule: a sort-preserving merge of one partition is
//! that partition.
//!
//! DataFusion places the merge while a scan still has several partitions;
//! when the sort then goes into the scan (`ORDER BY ts DESC LIMIT 1` of
//! one series becomes one reverse read), the scan has one partition and
//! the merge (with the prefetch buffer below it, a task of its own) only
//! hands one batch between tasks. It goes; its LIMIT stays as a limit.

use std::sync::Arc;

use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::buffer::BufferExec;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};

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
            let Some(merge) = node.downcast_ref::<SortPreservingMergeExec>() else {
                return Ok(Transformed::no(node));
            };
            let mut input = Arc::clone(merge.input());
            if input.output_partitioning().partition_count() != 1 {
                return Ok(Transformed::no(node));
            }
            if let Some(buffer) = input.downcast_ref::<BufferExec>() {
                input = Arc::clone(buffer.input());
            }
            Ok(Transformed::yes(match merge.fetch() {
                Some(fetch) => Arc::new(GlobalLimitExec::new(input, 0, Some(fetch))),
                None => input,
            }))
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
