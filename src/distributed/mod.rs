//! Distributed execution on Ballista (feature `ballista`).
//!
//! A session's queries go to a Ballista scheduler, which plans them (a
//! cellar table's scan splits into key-range partitions, from
//! `SampleRowKeys` on Bigtable) and hands the stages' tasks to executors;
//! cellar's table and scan travel through the codecs of `codec.rs`. The
//! scheduler and executors run in this process ([`start_cluster`]) or as
//! `cellar ballista scheduler|executor` processes on other machines, all
//! reading the same Bigtable instance. Writes and statements that read no
//! table run where the session is.

#[cfg(feature = "ballista")]
mod cluster;
#[cfg(feature = "ballista")]
mod codec;
#[cfg(feature = "ballista")]
mod process;
mod session;
#[cfg(feature = "ballista")]
mod split;

#[cfg(feature = "ballista")]
pub use cluster::start_cluster;
#[cfg(feature = "ballista")]
pub use process::{run_executor, run_scheduler};
