//! The server side of Bigtable's Data and Table Admin services, generated
//! by `build.rs` (tonic-build's manual builder over the googleapis-tonic
//! message types).

#![allow(
    missing_docs,
    clippy::all,
    clippy::allow_attributes_without_reason,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "generated code: tonic-build's output, documented by the services it serves"
)]

include!(concat!(env!("OUT_DIR"), "/google.bigtable.v2.Bigtable.rs"));
include!(concat!(
    env!("OUT_DIR"),
    "/google.bigtable.admin.v2.BigtableTableAdmin.rs"
));

/// `google.protobuf.Empty`, as prost maps it.
pub type Empty = ();
