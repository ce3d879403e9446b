//! The DataFusion layer: table providers and scan operators over the store,
//! and the predicate analysis that turns SQL filters into key ranges.

mod activity;
mod batch;
mod checked;
mod checked_sum;
mod functions;
mod inline_read;
mod interrupt;
mod kept_projection;
mod merge_of_one;
mod partition_read;
mod plan;
mod pushdown;
mod scan;
mod scan_aggregate;
mod series;
mod split;
mod table;
mod view;
mod write;

pub use activity::KeyActivityFunction;
pub use checked::CheckedArithmetic;
#[cfg(feature = "ballista")]
pub(crate) use checked::{checked_sum_from_wire, checked_sum_wire, checked_udf};
pub use functions::ViewFunction;
pub(crate) use interrupt::{StopOnDrop, interruptible};
pub use kept_projection::{KeptProjectionExec, keep_projections};
pub use merge_of_one::MergeOfOne;
pub use pushdown::{KeyPlan, plan as plan_key_ranges};
pub(crate) use scan::{BOUNDED_ROWS, KeyScanExec};
pub(crate) use scan_aggregate::{ScanAggregate, ScanAggregateExec};
#[cfg(feature = "ballista")]
pub(crate) use series::gather::GatherPlan;
pub(crate) use series::gather_exec::GatherExec;
#[cfg(feature = "ballista")]
pub(crate) use series::gather_exec::GatherParts;
pub use table::CellarTable;
pub use view::View;
pub use write::WriteProgress;
pub(crate) use write::{RowNames, WriteOptions};
#[cfg(feature = "ballista")]
pub(crate) use {
    plan::{Projection, ScanSpec},
    scan::describe_range,
    view::Layout,
};
