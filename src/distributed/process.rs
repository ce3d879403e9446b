//! `cellar ballista scheduler` and `cellar ballista executor`: Ballista's
//! scheduler and executor as processes of their own, with cellar's codecs
//! and functions, for a cluster over Cloud Bigtable. They hold no store:
//! each plan names the store it reads (an embedded store stays with the
//! process that opened it, whose lock keeps other processes out).

use std::net::SocketAddr;
use std::sync::Arc;

use ballista_core::extension::SessionConfigExt;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::{create_scheduler, start_grpc_service_with_listener};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};

use super::cluster::{ballista_error, for_workers, with_codecs};
use super::codec::Stores;
use crate::sql::{SessionOptions, worker_base_state};

/// The state a scheduler or executor process plans and decodes with.
fn process_state(options: &SessionOptions) -> SessionState {
    for_workers(with_codecs(worker_base_state(options), Stores::default()))
}

/// Runs a Ballista scheduler listening on `addr` until the process ends;
/// `ready` is told the address it listens on (port 0 picks one).
pub async fn run_scheduler(
    addr: SocketAddr,
    options: SessionOptions,
    ready: impl FnOnce(SocketAddr),
) -> DfResult<()> {
    let state = process_state(&options);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ballista_error(&format!("scheduler cannot listen on {addr}"), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| ballista_error("scheduler", e))?;
    let session_config = state.config().clone();
    let session = state.clone();
    let config = SchedulerConfig {
        bind_host: bound.ip().to_string(),
        external_host: bound.ip().to_string(),
        bind_port: bound.port(),
        override_session_builder: Some(Arc::new(move |_| Ok(session.clone()))),
        override_config_producer: Some(Arc::new(move || session_config.clone())),
        override_logical_codec: Some(state.config().ballista_logical_extension_codec()),
        override_physical_codec: Some(state.config().ballista_physical_extension_codec()),
        ..SchedulerConfig::default()
    };
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(|e| ballista_error("scheduler", e))?;
    let scheduler =
        create_scheduler::<LogicalPlanNode, PhysicalPlanNode>(cluster, Arc::new(config))
            .await
            .map_err(|e| ballista_error("scheduler", e))?;
    ready(bound);
    start_grpc_service_with_listener(listener, scheduler)
        .await
        .map_err(|e| ballista_error("scheduler", e))
}

/// Runs a Ballista executor of `slots` task slots for the scheduler at
/// `scheduler` (`HOST:PORT`), serving its shuffle data on `addr` (port 0
/// picks a free one), until the process ends.
pub async fn run_executor(
    scheduler: &str,
    addr: SocketAddr,
    slots: usize,
    options: SessionOptions,
) -> DfResult<()> {
    let (host, port) = scheduler
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            DataFusionError::Configuration(format!(
                "--scheduler {scheduler:?}: write the scheduler's HOST:PORT"
            ))
        })?;
    let free_port = || -> DfResult<u16> {
        std::net::TcpListener::bind((addr.ip(), 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| ballista_error(&format!("executor cannot listen on {}", addr.ip()), e))
    };
    let port_flight = match addr.port() {
        0 => free_port()?,
        p => p,
    };
    let state = process_state(&options);
    let session_config = state.config().clone();
    let registry = BallistaFunctionRegistry::from(&state);
    let config = ExecutorProcessConfig {
        bind_host: addr.ip().to_string(),
        external_host: Some(addr.ip().to_string()),
        port: port_flight,
        grpc_port: free_port()?,
        scheduler_host: host,
        scheduler_port: port,
        scheduler_connect_timeout_seconds: 30,
        vcores: slots.max(1),
        print_thread_info: false,
        override_function_registry: Some(Arc::new(registry)),
        override_config_producer: Some(Arc::new(move || session_config.clone())),
        override_logical_codec: Some(state.config().ballista_logical_extension_codec()),
        override_physical_codec: Some(state.config().ballista_physical_extension_codec()),
        ..ExecutorProcessConfig::default()
    };
    start_executor_process(Arc::new(config))
        .await
        .map_err(|e| ballista_error("executor", e))
}
