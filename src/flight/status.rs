//! The one mapping from a failed statement to a gRPC status.

use arrow_flight::error::FlightError;
use datafusion::error::DataFusionError;
use tonic::Status;

use crate::sql::error_line;

/// The one mapping from a failed statement to a gRPC status: bad SQL,
/// values and names are the client's to fix (INVALID_ARGUMENT, NOT_FOUND,
/// ALREADY_EXISTS); a failing disk or a bug of ours is the server's
/// (INTERNAL); limits have their own codes.
pub(super) fn status(e: &DataFusionError) -> Status {
    let text = error_line(e);
    let code = match e.find_root() {
        DataFusionError::External(inner) => match inner.downcast_ref::<crate::error::Error>() {
            Some(cellar) => cellar.grpc_code(),
            // Arrow and parser errors reached through other layers: values.
            None => tonic::Code::InvalidArgument,
        },
        // A file outside the directories a server allows, refused as it
        // was opened or listed (`sql/files.rs`).
        DataFusionError::ObjectStore(e)
            if matches!(
                e.as_ref(),
                datafusion::object_store::Error::PermissionDenied { .. }
            ) =>
        {
            tonic::Code::PermissionDenied
        }
        // DataFusion names a missing table or function only in its text.
        DataFusionError::Plan(m) if m.contains("not found") => tonic::Code::NotFound,
        DataFusionError::Plan(m) if m.contains("already exists") => tonic::Code::AlreadyExists,
        DataFusionError::SQL(..)
        | DataFusionError::Plan(_)
        | DataFusionError::SchemaError(..)
        | DataFusionError::Configuration(_)
        | DataFusionError::ArrowError(..)
        | DataFusionError::Execution(_) => tonic::Code::InvalidArgument,
        DataFusionError::ResourcesExhausted(_) => tonic::Code::ResourceExhausted,
        DataFusionError::NotImplemented(_) => tonic::Code::Unimplemented,
        _ => tonic::Code::Internal,
    };
    Status::new(code, text)
}

pub(super) fn flight_status(e: FlightError) -> Status {
    match e {
        FlightError::Tonic(status) => *status,
        other => Status::invalid_argument(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_are_the_servers_and_bad_input_the_clients() {
        let io = crate::error::Error::Io(std::io::Error::other("disk on fire"));
        let s = status(&DataFusionError::from(io));
        assert_eq!(s.code(), tonic::Code::Internal);
        assert!(s.message().contains("disk on fire"));
        let busy = crate::error::Error::StoreInUse { path: "/x".into() };
        assert_eq!(
            status(&DataFusionError::from(busy)).code(),
            tonic::Code::Unavailable
        );
        let bad = crate::error::Error::InvalidArgument("row key segment \"n\" value -1".into());
        assert_eq!(
            status(&DataFusionError::from(bad)).code(),
            tonic::Code::InvalidArgument
        );
    }
}
