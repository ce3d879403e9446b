//! What a session may use: memory, time, files, and how many heavy
//! queries run at once.

use std::time::Duration;

use super::access::FileAccess;
use crate::store::FamilyFormat;

/// What a session may use: memory, time, and how many heavy queries run
/// at once.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Memory the session's queries may hold at once (sorts, aggregates,
    /// joins); over it, operators that can spill to disk do, and a query
    /// that still needs more fails with a clear error. `None`: no limit.
    pub memory_limit: Option<usize>,
    /// A query running longer is stopped with an error. `None`: no limit.
    pub query_timeout: Option<Duration>,
    /// Heavy queries (anything but bounded key lookups) running at once;
    /// more wait their turn.
    pub heavy_queries: usize,
    /// The on-disk format of families created without a FORMAT clause.
    pub family_format: FamilyFormat,
    /// Where queries over the memory limit spill (see [`super::SpillDir`]);
    /// `None`: a directory of DataFusion's in the OS's temporary one.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Where the session may read and write files. A Flight server's
    /// clients never get more than the directories named here (full
    /// access becomes none for them).
    pub files: FileAccess,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            memory_limit: None,
            query_timeout: None,
            heavy_queries: std::thread::available_parallelism().map_or(2, usize::from),
            family_format: FamilyFormat::default(),
            files: FileAccess::Full,
            spill_dir: None,
        }
    }
}
