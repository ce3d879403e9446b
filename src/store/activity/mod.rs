//! Key activity: light counters of reads and writes per key range and per
//! minute, for every table (what Cloud Bigtable's Key Visualizer shows),
//! kept in bounded memory and, for as long as a retention says, in the
//! store's catalog keyspace.
//!
//! From the bottom up: `record.rs` (the counters, a range's minute, their
//! bytes), `sketch.rs` (a range's distinct keys, estimated and sampled),
//! `buckets.rs` (one table's ranges, cut and joined as keys arrive),
//! `since.rs` (how far back a question looks), `log.rs` (the minutes
//! kept), `tally.rs` (what a read counts as it goes), `tracker.rs`
//! ([`KeyActivity`], the store's).

mod buckets;
mod log;
mod record;
mod since;
mod sketch;
mod tally;
mod tracker;

pub use log::ActivityLog;
pub use record::{ActivityRecord, COUNTERS, Counters, METRICS, MINUTE_MICROS, metric_names};
pub use since::parse_since;
pub use tally::ReadTally;
pub use tracker::{KeyActivity, MAX_RANGES};
