//! Every integration test of cellar, in one binary: one build and one link
//! instead of one per file, and the tests of all files share the machine's
//! cores. Each file is a module (`cargo test --test it shell::` runs one);
//! the sqllogictest harness is its own binary (`tests/sqllogictest.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on purpose"
)]

#[path = "../common/mod.rs"]
mod common;
#[cfg(feature = "bigtable")]
#[path = "../common/emulator.rs"]
mod emulator;
mod numbers_read;
mod rows;
#[path = "../common/skip.rs"]
mod skip;

mod advise;
mod auto_format;
#[cfg(feature = "ballista")]
mod ballista;
#[cfg(feature = "bigtable")]
mod bigtable;
#[cfg(feature = "bigtable")]
mod bigtable_backend;
#[cfg(feature = "bigtable")]
mod bigtable_clients;
#[cfg(feature = "bigtable")]
mod bigtable_differential;
#[cfg(feature = "bigtable")]
mod bigtable_face;
mod crash;
mod flight;
mod flight_kill;
mod flight_python;
mod floor_plan;
mod fuzz;
mod hostile;
mod key_activity;
mod key_groups;
mod key_queries;
mod limits;
mod model;
mod plans;
mod scaling;
mod series;
mod shapes;
mod shell;
mod sql_api;
mod store;
