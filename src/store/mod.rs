//! The wide-column store: tables of rows of timestamped cells on fjall.
//!
//! One fjall database per store directory; one keyspace for the catalog and
//! one per (table, column family), so a read of one family never touches
//! the others. A row mutation is one fjall batch across the row's family
//! keyspaces, applied under the row's lock so that conditional and
//! read-modify-write operations are linearizable per row. Reads walk one
//! snapshot.
//!
//! Every file below imports only files beneath it (a test reads the
//! imports): the vocabulary first (`time.rs`, `policy.rs`, `request.rs`,
//! `definition.rs`, `mutation.rs`, `format/`), then the engine's state
//! (`engine.rs`) and what works on it (`open.rs`, `catalog.rs`, `read.rs`,
//! `write.rs`, `gc.rs`, `bulk/`, ...), and [`Backend`] last. This file only
//! names them.

mod activity;
mod age_filter;
mod aggregate;
mod apply;
mod backend;
mod block_index;
mod bulk;
mod catalog;
mod check;
pub mod clean_close;
mod commit;
mod compactor;
mod convert;
mod cursor;
mod definition;
mod engine;
mod format;
mod gate;
mod gc;
pub mod journal;
mod keyspaces;
mod merge;
mod mutation;
mod open;
mod overlay;
mod parallel;
mod policy;
mod probe;
mod read;
mod replace;
mod request;
mod sample;
pub mod segments;
mod sizes;
mod source;
mod time;
mod worker;
mod write;

pub use crate::codec::RowRange;
pub use activity::{
    ActivityRecord, COUNTERS, Counters as ActivityCounters, METRICS, MINUTE_MICROS, metric_names,
    parse_since,
};
pub use aggregate::hll_estimate;
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use aggregate::merge as merge_aggregate;
pub use backend::{Backend, Capabilities, RowChange, Store};
pub use bulk::{BadRows, BatchColumn, BatchFamily, CellBatch, INGEST_MIN_ROWS};
pub use check::{CheckReport, FamilyCheck};
pub use commit::Durability;
pub use definition::{
    AlterOp, BIGTABLE_TABLE_METADATA, Conversion, FamilyDef, FamilyKind, FamilySpec, MAX_FAMILIES,
    TableDef, TableSpec,
};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use definition::{check_families, validate_table_name};
pub use engine::{
    DEFAULT_ACTIVITY_RETENTION, FjallStore, FormatChange, GcStats, StoreOptions, machine_memory,
};
pub use format::{
    CellRef, FamilyFormat, MAX_PACKED_LEN, NumberColumns, NumberRow, NumberRows, RowView,
};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use format::{RowBuf, select};
pub use gate::{Entered, Pinned, WriteGate};
pub use mutation::{
    MAX_KEY_LEN, MAX_QUALIFIER_LEN, MAX_VALUE_LEN, Mutation, ReadModifyWrite, RowMutation,
};
#[cfg_attr(
    not(feature = "bigtable"),
    allow(unused_imports, reason = "used by the Bigtable backend")
)]
pub(crate) use mutation::{check_key, column_name, validate as validate_mutation};
pub use open::repair_version_marker;
pub use policy::{GcPolicy, MAX_GC_DEPTH, MAX_GC_RULES};
pub use probe::RowProbe;
pub use request::{
    Cell, QualifierFilter, ReadFilter, ReadRequest, Row, RowSet, ScanStats, TimeRange,
};
pub use sizes::RangeSize;
pub use source::{Numbers, RowSource, RowStream};
pub(crate) use time::{align_down, align_up};
pub use time::{now_micros, parse_duration_micros};
