//! cellar: SQL over a Bigtable-style wide-column store.
//!
//! Rows are sorted by a row key; each row holds cells in column families;
//! a cell is (family, qualifier, timestamp, value). Data lives in an
//! embedded fjall LSM keyspace on local disk.
//!
//! ```
//! use cellar::{FamilySpec, GcPolicy, Mutation, ReadFilter, RowMutation, Store, TableSpec};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path())?;
//! store.create_table(
//!     TableSpec::new("metrics").family(FamilySpec::new("m").gc(GcPolicy::MaxVersions(3))),
//! )?;
//! store.mutate_row(
//!     "metrics",
//!     RowMutation::new("host1#20240301", vec![Mutation::set_at("m", "cpu", 1_000, "0.93")]),
//! )?;
//! let row = store.read_row("metrics", b"host1#20240301", ReadFilter::latest())?;
//! assert_eq!(row.unwrap().latest("m", b"cpu"), Some(&b"0.93"[..]));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

mod address;
#[cfg(feature = "bigtable")]
mod bigtable;
#[cfg(feature = "bigtable")]
pub mod bigtable_server;
mod codec;
mod distributed;
mod error;
pub mod flight;
pub mod keys;
pub mod proto;
mod query;
mod schema;
pub mod shell;
mod sql;
mod store;

#[cfg(feature = "bigtable")]
pub use bigtable::{BigtableStore, CATALOG_TABLE};
pub use codec::{CellKey, EncodedRange, escape, row_prefix_range, row_range, show_bytes};
#[cfg(feature = "ballista")]
pub use distributed::{run_executor, run_scheduler, start_cluster};
pub use error::{Error, Result};
pub use query::{CellarTable, KeyPlan, View, ViewFunction, WriteProgress, plan_key_ranges};
pub use schema::SCHEMA_METADATA_KEY;
pub use schema::{
    ColumnDef, Constraint, Encoding, FamilyTypes, KeySchema, KeyValue, ProtoColumn, Segment,
    SegmentKind, TableSchema, TimeFormat, Value, ValueType,
};
pub use sql::{
    Access, CellarStatement, FamilyDecl, FileAccess, FileUse, FilesDir, Loading, MAX_EXPR_DEPTH,
    Role, SessionOptions, SpillDir, SqlSession, StatementShape, error_line, parse_cellar_statement,
    parse_duration_micros,
};
pub use store::journal;
pub use store::{
    ActivityCounters, ActivityRecord, AlterOp, Backend, BadRows, BatchColumn, BatchFamily,
    Capabilities, Cell, CellBatch, CellRef, CheckReport, Conversion, DEFAULT_ACTIVITY_RETENTION,
    Durability, Entered, FamilyCheck, FamilyDef, FamilyFormat, FamilyKind, FamilySpec, FjallStore,
    FormatChange, GcPolicy, GcStats, INGEST_MIN_ROWS, MAX_FAMILIES, MAX_GC_DEPTH, MAX_GC_RULES,
    MAX_KEY_LEN, MAX_PACKED_LEN, MAX_QUALIFIER_LEN, MAX_VALUE_LEN, METRICS as ACTIVITY_METRICS,
    MINUTE_MICROS, Mutation, NumberColumns, NumberRow, NumberRows, Numbers, Pinned,
    QualifierFilter, RangeSize, ReadFilter, ReadModifyWrite, ReadRequest, Row, RowChange,
    RowMutation, RowProbe, RowRange, RowSet, RowSource, RowStream, RowView, ScanStats, Store,
    StoreOptions, TableDef, TableSpec, TimeRange, WriteGate, hll_estimate, machine_memory,
    now_micros,
};
