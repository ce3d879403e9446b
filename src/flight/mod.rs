//! Arrow Flight SQL over a store: `cellar serve`.
//!
//! - statement queries: GetFlightInfo plans the SQL (running DDL and DML
//!   at once, so a write happens exactly once whether or not its result is
//!   fetched) and keeps the plan under a one-shot ticket owned by the
//!   caller's session; DoGet streams its batches as they are produced;
//! - prepared statements (create, bind parameters with DoPut, execute,
//!   close), with `?` placeholders numbered for DataFusion;
//! - statement updates and bulk ingest with affected-row counts;
//! - metadata: catalogs, schemas, tables (with schemas), table types,
//!   primary keys (the row key), SqlInfo, XDBC type info;
//! - authentication (`auth`): Basic handshake answered with a bearer
//!   token, or a configured token; optional TLS (`serve`).
//!
//! A query stops when its client goes away or its deadline (the
//! `grpc-timeout` header) passes.

mod auth;
mod conn;
mod guard;
mod handles;
mod ingest;
mod metadata;
mod params;
mod request;
mod service;
mod sessions;
mod status;

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;

pub use auth::{Authenticator, Credentials, Principal, TokenEntry, UserEntry};
pub use conn::ConnLimits;
pub use guard::GuardedFlight;
pub use ingest::{FAMILY_OPTION, ROW_KEY_OPTION};
#[cfg(feature = "bigtable")]
pub(crate) use request::{admitted, authenticated};
pub use service::CellarFlightSql;

use crate::sql::SqlSession;

/// How `cellar serve` listens: credentials and TLS.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Credentials required of clients (none: anonymous).
    pub credentials: Credentials,
    /// A PEM certificate (chain) and private key file for TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// How many connections, and how long before they authenticate.
    pub limits: ConnLimits,
    /// How long a client's session lives without a call (default: as
    /// long as a token, 24 hours).
    pub session_idle: Option<Duration>,
}

/// Serves `session` on an already bound listener until the process ends
/// (tests bind 127.0.0.1:0).
pub async fn serve(
    session: SqlSession,
    listener: tokio::net::TcpListener,
    options: ServeOptions,
) -> Result<(), String> {
    serve_until(session, listener, options, std::future::pending()).await
}

/// Serves until `shutdown` completes, then lets running calls finish.
pub async fn serve_until(
    session: SqlSession,
    listener: tokio::net::TcpListener,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let mut service = CellarFlightSql::with_credentials(session, options.credentials.clone());
    if let Some(idle) = options.session_idle {
        service = service.with_session_idle(idle);
    }
    serve_service_until(service, listener, &options, shutdown).await
}

/// Serves an already made service (tests keep a clone to look inside).
pub async fn serve_service(
    service: CellarFlightSql,
    listener: tokio::net::TcpListener,
    options: &ServeOptions,
) -> Result<(), String> {
    serve_service_until(service, listener, options, std::future::pending()).await
}

/// The largest HTTP/2 frame the server accepts.
const MAX_FRAME_BYTES: u32 = 1 << 20;

async fn serve_service_until(
    service: CellarFlightSql,
    listener: tokio::net::TcpListener,
    options: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    serve_grpc(listener, options, shutdown, |server| {
        server.add_service(service.into_server())
    })
    .await
}

/// Serves gRPC services on a bound listener with the options' TLS and
/// connection limits until `shutdown` completes: the Flight face's
/// server, and the Bigtable face's (`services` adds them).
pub(crate) async fn serve_grpc(
    listener: tokio::net::TcpListener,
    options: &ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
    services: impl FnOnce(&mut tonic::transport::Server) -> tonic::transport::server::Router,
) -> Result<(), String> {
    options.credentials.validate()?;
    let mut builder = tonic::transport::Server::builder();
    if let Some((cert, key)) = &options.tls {
        let read = |p: &PathBuf, what: &str| {
            std::fs::read(p).map_err(|e| format!("reading the TLS {what} {}: {e}", p.display()))
        };
        let identity = tonic::transport::Identity::from_pem(
            read(cert, "certificate")?,
            read(key, "private key")?,
        );
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| {
                format!(
                    "TLS certificate {} or key {} is not usable: {e}",
                    cert.display(),
                    key.display()
                )
            })?;
    }
    let incoming = conn::incoming(listener, options.limits).boxed();
    let mut server = builder
        // Pings find connections whose peer has gone away.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        // HTTP/2 frames of up to 1 MiB from clients (the protocol's
        // default is 16 KiB): a bulk ingest's batches arrive in a few large
        // reads and writes, not one per 16 KiB (which cost half of an
        // ingest's HTTP/2 and socket time). The windows stay at their
        // defaults, so what a connection may send ahead of the server is
        // unchanged.
        .max_frame_size(Some(MAX_FRAME_BYTES));
    services(&mut server)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| e.to_string())
}
