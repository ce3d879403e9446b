//! Where a session's queries run: here, or on a Ballista cluster.

use datafusion::error::Result as DfResult;

use crate::sql::SqlSession;

impl SqlSession {
    /// This session with its queries run on Ballista (needs the `ballista`
    /// feature): `standalone` starts a scheduler and two executors in this
    /// process (`standalone:N` for N executors), anything else is the
    /// address of a Ballista scheduler started with cellar's codecs.
    /// Queries that read tables run on the cluster; writes, DDL and
    /// statements that read no table run here. Returns the session and a
    /// line saying where its queries run.
    pub async fn with_ballista(&self, target: &str) -> DfResult<(SqlSession, String)> {
        #[cfg(feature = "ballista")]
        {
            super::cluster::attach(self, target).await
        }
        #[cfg(not(feature = "ballista"))]
        {
            Err(crate::error::Error::InvalidArgument(format!(
                "cannot run on Ballista ({target}): this cellar was built without it; build \
                     it with `cargo build --release --features ballista`"
            ))
            .into())
        }
    }
}
