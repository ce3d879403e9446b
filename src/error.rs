//! The one error type of cellar.

use std::fmt;

/// Everything that can go wrong in cellar, with the offending value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process (or another `Store` in this one) holds the store directory.
    #[error(
        "store {path} is in use by another process; close it there or open a different directory"
    )]
    StoreInUse {
        /// The store directory.
        path: String,
    },
    /// The storage engine could not open the store's files.
    #[error("store {path} cannot be opened: {reason}")]
    StoreDamaged {
        /// The store directory.
        path: String,
        /// Which file is damaged and what can be done, in words.
        reason: String,
    },
    /// The store's journal holds a complete write that is wrong (a damaged
    /// disk or file): the storage engine refuses to replay it.
    #[error(
        "store {path} cannot be opened: {reason}. `cellar check --repair --store {path}` keeps the intact writes before the damage and sets the rest aside"
    )]
    JournalDamaged {
        /// The store directory.
        path: String,
        /// Which journal, where, and what the storage engine said.
        reason: String,
    },
    /// A stored block of a table could not be read.
    #[error(
        "table {table:?}: stored data is damaged ({reason}); `cellar check` reports which families, the other tables are unaffected"
    )]
    DamagedData {
        /// The table.
        table: String,
        /// What the storage engine said.
        reason: String,
    },
    /// The store was written by a newer cellar than this one.
    #[error(
        "store format version {found} is newer than this build supports ({supported}); upgrade cellar"
    )]
    UnsupportedFormat {
        /// Version found on disk.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// A table of that name does not exist.
    #[error("table {table:?} does not exist")]
    TableNotFound {
        /// The name asked for.
        table: String,
    },
    /// A table that could not be opened when the store opened (its
    /// definition does not parse, or a keyspace of it was set aside as
    /// damaged); the reason says what to do.
    #[error("table {table:?} cannot be opened: {reason}; the other tables are unaffected")]
    TableDamaged {
        /// The table.
        table: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A table of that name already exists.
    #[error("table {table:?} already exists")]
    TableExists {
        /// The name asked for.
        table: String,
    },
    /// A family of that name does not exist in the table.
    #[error("column family {family:?} does not exist in table {table:?}")]
    FamilyNotFound {
        /// The table.
        table: String,
        /// The family asked for.
        family: String,
    },
    /// A family of that name already exists in the table.
    #[error("column family {family:?} already exists in table {table:?}")]
    FamilyExists {
        /// The table.
        table: String,
        /// The family asked for.
        family: String,
    },
    /// A table or family name breaks the naming rules.
    #[error("invalid {what} name {}: {reason}", Shown(name))]
    InvalidName {
        /// "table" or "column family".
        what: &'static str,
        /// The offending name.
        name: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A row key is empty.
    #[error("row key is empty; a row key needs 1 to {max} bytes")]
    EmptyKey {
        /// The limit.
        max: usize,
    },
    /// A row key is longer than the limit.
    #[error("row key is {len} bytes; the limit is {max}")]
    KeyTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A column qualifier is longer than the limit.
    #[error("column qualifier is {len} bytes; the limit is {max}")]
    QualifierTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A cell value is longer than the limit.
    #[error("cell value is {len} bytes; the limit is {max}")]
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A table would have more families than allowed.
    #[error("table {table:?} would have {count} column families; the limit is {max}")]
    TooManyFamilies {
        /// The table.
        table: String,
        /// How many it would have.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A timestamp outside 0..=i64::MAX microseconds.
    #[error(
        "cell timestamp {timestamp} is out of range; timestamps are microseconds since the Unix epoch, 0 or more"
    )]
    InvalidTimestamp {
        /// The offending value.
        timestamp: i64,
    },
    /// A value that must be an 8-byte big-endian int64 is not.
    #[error(
        "cannot {op} column {column}: its value is {len} bytes, not an 8-byte big-endian int64"
    )]
    NotAnInt64 {
        /// The operation ("increment", "add to").
        op: &'static str,
        /// family:qualifier.
        column: String,
        /// Length of the value found.
        len: usize,
    },
    /// Integer overflow in an increment or a sum.
    #[error("{op} of column {column} overflows int64")]
    Overflow {
        /// The operation.
        op: &'static str,
        /// family:qualifier.
        column: String,
    },
    /// A mutation does not fit the kind of family it targets.
    #[error("{reason}")]
    InvalidMutation {
        /// What is wrong, naming the family and value.
        reason: String,
    },
    /// A stored key or value that cannot be decoded: the store is damaged or foreign.
    #[error("corrupt store data: {reason}")]
    Corrupt {
        /// What could not be decoded.
        reason: String,
    },
    /// An invalid argument to an API call (a bad regex, an empty range, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A query was cancelled with `CANCEL QUERY`.
    #[error("query {id} was cancelled (CANCEL QUERY {id})")]
    QueryCancelled {
        /// The query's id.
        id: u64,
    },
    /// A query ran past the session's query timeout.
    #[error("query {id} ran past the query timeout of {limit:?} and was stopped")]
    QueryTimedOut {
        /// The query's id.
        id: u64,
        /// The timeout.
        limit: std::time::Duration,
    },
    /// An error of one row of a write's input, with where the row is.
    #[error("{at}: {error}")]
    AtRow {
        /// Where the row is: `row 3`, `line 12 of "w.csv"`.
        at: String,
        /// What is wrong with it.
        error: Box<Error>,
    },
    /// A call to a remote backend (Cloud Bigtable) failed.
    #[error("Bigtable {call} failed: {message} ({code})")]
    Remote {
        /// What was called: `ReadRows on table t`.
        call: String,
        /// The gRPC status code.
        code: String,
        /// What the service said.
        message: String,
    },
    /// A row changed under an UPDATE each time it was read and written
    /// (a backend without row locks: Cloud Bigtable).
    #[error(
        "UPDATE of row {key} in table {table:?}: another client changed the row between the read and the write each of {attempts} times; nothing of this row was written, run the statement again"
    )]
    WriteConflict {
        /// The table.
        table: String,
        /// The row key, shown.
        key: String,
        /// Tries made.
        attempts: u32,
    },
    /// The session's user may not do this (its role, or file access the
    /// server does not allow).
    #[error("permission denied: {reason}")]
    PermissionDenied {
        /// What was refused, why, and what would allow it.
        reason: String,
    },
    /// A bug in cellar, not something the caller did.
    #[error("internal error (a bug in cellar; please report it): {0}")]
    Internal(String),
    /// The underlying storage engine failed.
    #[error("storage engine error: {}", engine_words(.0))]
    Storage(#[from] fjall::Error),
    /// An I/O error outside the storage engine.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// cellar's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Displays a user-supplied name safely: escaped, and cut short when long.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 40;
        let s = self.0;
        if s.chars().count() <= MAX {
            write!(f, "{s:?}")
        } else {
            let head: String = s.chars().take(MAX).collect();
            write!(f, "{head:?}... ({} bytes)", s.len())
        }
    }
}

/// Converts a cellar error into DataFusion's, once, at this boundary.
impl From<Error> for datafusion::error::DataFusionError {
    fn from(e: Error) -> Self {
        datafusion::error::DataFusionError::External(Box::new(e))
    }
}

/// A storage engine error in words (never its debug text).
pub fn engine_words(e: &fjall::Error) -> String {
    use fjall::LsmError as L;
    match e {
        fjall::Error::Io(e) | fjall::Error::Storage(L::Io(e)) => {
            format!("a file could not be read or written ({e})")
        }
        fjall::Error::InvalidVersion(_) => {
            "the store is in a storage format this cellar does not read".to_string()
        }
        fjall::Error::Storage(L::InvalidVersion(v)) => {
            format!("a file is in a storage format this cellar does not read (format {v})")
        }
        fjall::Error::Storage(L::ChecksumMismatch { .. }) => {
            "a block fails its checksum (its bytes are damaged)".to_string()
        }
        fjall::Error::Decompress(_) | fjall::Error::Storage(L::Decompress(_)) => {
            "a block does not decompress (its bytes are damaged)".to_string()
        }
        fjall::Error::InvalidTrailer
        | fjall::Error::InvalidTag(_)
        | fjall::Error::Storage(L::InvalidTrailer | L::InvalidHeader(_) | L::InvalidTag(_)) => {
            "a block's header or trailer is damaged".to_string()
        }
        fjall::Error::Storage(L::Utf8(_)) => "a stored name is not valid UTF-8".to_string(),
        fjall::Error::Poisoned => {
            "an earlier write failed on this disk; restart to recover".to_string()
        }
        fjall::Error::Locked => "the store is in use by another process".to_string(),
        fjall::Error::KeyspaceDeleted => "the keyspace was deleted meanwhile".to_string(),
        _ => "the storage engine could not recover one of its files".to_string(),
    }
}

impl Error {
    /// The gRPC code of the error, for the servers' faces (Flight and
    /// Bigtable): bad values and names are the client's (INVALID_ARGUMENT,
    /// NOT_FOUND, ALREADY_EXISTS), a failing disk or a bug the server's
    /// (INTERNAL), limits and conflicts their own codes.
    pub fn grpc_code(&self) -> tonic::Code {
        use Error as E;
        use tonic::Code;
        match self {
            E::AtRow { error, .. } => error.grpc_code(),
            E::TableNotFound { .. } | E::FamilyNotFound { .. } => Code::NotFound,
            E::TableExists { .. } | E::FamilyExists { .. } => Code::AlreadyExists,
            E::StoreInUse { .. } => Code::Unavailable,
            E::QueryCancelled { .. } => Code::Cancelled,
            E::QueryTimedOut { .. } => Code::DeadlineExceeded,
            E::PermissionDenied { .. } => Code::PermissionDenied,
            E::WriteConflict { .. } => Code::Aborted,
            E::TableDamaged { .. } => Code::FailedPrecondition,
            E::Remote { .. } => Code::Unavailable,
            E::Storage(_)
            | E::StoreDamaged { .. }
            | E::JournalDamaged { .. }
            | E::DamagedData { .. }
            | E::Io(_)
            | E::Corrupt { .. }
            | E::UnsupportedFormat { .. }
            | E::Internal(_) => Code::Internal,
            _ => Code::InvalidArgument,
        }
    }
}
