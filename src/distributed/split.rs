//! Key scans in a shape Ballista can split among tasks.
//!
//! Ballista hands each task of a stage some of the stage's partitions by
//! rewriting the plan's leaves, and it knows how to do that only for its
//! own readers and for file scans (`DataSourceExec` over a
//! `FileScanConfig`, whose file groups it slices); any other leaf is left
//! whole, and every task would read all of it. So on the scheduler, once
//! a plan is optimized, each `KeyScanExec` becomes a file scan whose file
//! groups are its partitions and whose "files" are its key ranges. The
//! codec turns what a task keeps back into a `KeyScanExec` of those
//! ranges; the file scan itself can also run (each range read as a scan of
//! its own), should anything execute it where it was planned.

use std::fmt;
use std::sync::Arc;

use datafusion::common::Result as DfResult;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{
    FileGroup, FileOpenFuture, FileOpener, FileScanConfig, FileScanConfigBuilder, FileSource,
};
use datafusion::datasource::source::DataSourceExec;
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::TaskContext;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::object_store::ObjectStore;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan};
use futures::StreamExt;

use crate::query::{KeyScanExec, ScanSpec, describe_range};
use crate::store::RowRange;

/// The key range a "file" of a split scan stands for.
#[derive(Debug, Clone)]
struct KeyRange(RowRange);

/// A `KeyScanExec` as the file source of a file scan.
#[derive(Clone)]
pub(crate) struct SplitScan {
    spec: ScanSpec,
    schema: TableSchema,
    metrics: ExecutionPlanMetricsSet,
}

impl SplitScan {
    /// What the scan reads, as planned.
    pub(crate) fn spec(&self) -> &ScanSpec {
        &self.spec
    }
}

/// The key ranges of each partition of a split scan.
pub(crate) fn partitions(config: &FileScanConfig) -> DfResult<Vec<Vec<RowRange>>> {
    config
        .file_groups
        .iter()
        .map(|group| {
            group
                .iter()
                .map(|file| range_of(file).cloned())
                .collect::<DfResult<Vec<_>>>()
        })
        .collect()
}

fn range_of(file: &PartitionedFile) -> DfResult<&RowRange> {
    file.extensions
        .get::<KeyRange>()
        .map(|r| &r.0)
        .ok_or_else(|| {
            datafusion::error::DataFusionError::Internal(format!(
                "a split cellar scan holds {}, which is no key range",
                file.object_meta.location
            ))
        })
}

/// `scan` as a file scan with one file group per partition.
fn split(scan: &KeyScanExec) -> Arc<dyn ExecutionPlan> {
    let spec = scan.spec().clone();
    let table = spec.layout.table.clone();
    let groups: Vec<FileGroup> = scan
        .partition_ranges()
        .iter()
        .map(|ranges| {
            FileGroup::new(
                ranges
                    .iter()
                    .map(|r| {
                        let mut file =
                            PartitionedFile::new(format!("{table}/{}", show_range(r)), 0);
                        file.extensions.insert(KeyRange(r.clone()));
                        file
                    })
                    .collect(),
            )
        })
        .collect();
    let source = SplitScan {
        spec,
        schema: TableSchema::from(scan.schema()),
        metrics: ExecutionPlanMetricsSet::new(),
    };
    let config = FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
        .with_file_groups(groups)
        .build();
    DataSourceExec::from_data_source(config)
}

/// A key range as a file name: its bounds as the user wrote keys.
fn show_range(r: &RowRange) -> String {
    describe_range(r)
        .split(" bytes ")
        .next()
        .unwrap_or_default()
        .replace('/', "%2F")
}

impl FileSource for SplitScan {
    fn create_file_opener(
        &self,
        _object_store: Arc<dyn ObjectStore>,
        _base_config: &FileScanConfig,
        _partition: usize,
    ) -> DfResult<Arc<dyn FileOpener>> {
        Ok(Arc::new(RangeOpener {
            spec: self.spec.clone(),
        }))
    }

    fn table_schema(&self) -> &TableSchema {
        &self.schema
    }

    fn with_batch_size(&self, batch_size: usize) -> Arc<dyn FileSource> {
        let mut source = self.clone();
        source.spec.batch_size = batch_size;
        Arc::new(source)
    }

    fn metrics(&self) -> &ExecutionPlanMetricsSet {
        &self.metrics
    }

    fn file_type(&self) -> &str {
        "cellar"
    }

    fn fmt_extra(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        // What the scan reads, as a KeyScanExec shows it.
        let scan = KeyScanExec::new(self.spec.clone());
        write!(f, ", scan=")?;
        scan.fmt_as(t, f)
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.spec.apply_residual(f)
    }

    /// More partitions than the scan has: its ranges spread over more
    /// groups, in key order, and empty groups after them (which read
    /// nothing). Otherwise DataFusion would put a round-robin exchange
    /// over the scan, and Ballista gives such a stage's tasks partitions
    /// of the scan that do not exist.
    fn repartitioned(
        &self,
        target_partitions: usize,
        _repartition_file_min_size: usize,
        _output_ordering: Option<datafusion::physical_expr::LexOrdering>,
        config: &FileScanConfig,
    ) -> DfResult<Option<FileScanConfig>> {
        if config.file_groups.len() >= target_partitions {
            return Ok(None);
        }
        let files: Vec<PartitionedFile> = config
            .file_groups
            .iter()
            .flat_map(|g| g.iter().cloned())
            .collect();
        let per = files.len().div_ceil(target_partitions).max(1);
        let mut groups: Vec<FileGroup> = files
            .chunks(per)
            .map(|chunk| FileGroup::new(chunk.to_vec()))
            .collect();
        groups.resize_with(target_partitions, || FileGroup::new(Vec::new()));
        let mut config = config.clone();
        config.file_groups = groups;
        Ok(Some(config))
    }
}

/// Reads one key range of a split scan.
struct RangeOpener {
    spec: ScanSpec,
}

impl FileOpener for RangeOpener {
    fn open(&self, file: PartitionedFile) -> DfResult<FileOpenFuture> {
        let range = range_of(&file)?.clone();
        let scan = KeyScanExec::from_parts(self.spec.clone(), vec![vec![range]]);
        let stream = scan.execute(0, Arc::new(TaskContext::default()))?;
        Ok(Box::pin(async move { Ok(stream.boxed()) }))
    }
}

/// The scheduler's last physical optimizer rule: key scans made
/// splittable (see the module's documentation).
#[derive(Debug)]
pub(crate) struct SplitScans;

impl PhysicalOptimizerRule for SplitScans {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match node.downcast_ref::<KeyScanExec>() {
                Some(scan) => Transformed::yes(split(scan)),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "cellar_split_scans"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
