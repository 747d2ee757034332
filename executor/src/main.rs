//! `hindsight-executor`: Apache DataFusion Ballista 55's executor, as its
//! own `ballista-executor` binary is, with one difference: it can run every
//! function a DataFusion session has by default.
//!
//! The stock executor decodes a plan's functions against a registry of
//! DataFusion's core functions only, without the nested ones (`range`,
//! `unnest`'s companions, `array_*`), so a stage of `hindsight report
//! timeline` fails there with "PhysicalExtensionCodec is not provided for
//! scalar function range". This binary hands the library the registry of a
//! default session instead. Flags, S3 access (the AWS_* variables), health
//! probes and logs are the stock executor's: `hindsight-executor --help`.
//!
//! It holds no hindsight code: the scheduler stays Ballista's own, and
//! tables reach the executors as plain Parquet scans.

use std::net::SocketAddr;
use std::sync::Arc;

use ballista_core::error::BallistaError;
use ballista_core::object_store::{runtime_env_with_s3_support, session_config_with_s3_support};
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_executor::config::Config;
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_executor::health::spawn_health_server;
use clap::Parser;
use datafusion::execution::SessionStateBuilder;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ballista_core::error::Result<()> {
    let opt = Config::parse();
    let health_addr: SocketAddr = format!("{}:{}", opt.bind_host, opt.bind_health_port)
        .parse()
        .map_err(|e| BallistaError::General(format!("invalid --bind-health-port address: {e}")))?;

    let mut config: ExecutorProcessConfig = opt.try_into()?;
    config.override_config_producer = Some(Arc::new(session_config_with_s3_support));
    config.override_runtime_producer = Some(Arc::new(runtime_env_with_s3_support));
    let session = SessionStateBuilder::new().with_default_features().build();
    config.override_function_registry = Some(Arc::new(BallistaFunctionRegistry::from(&session)));

    let filter = std::env::var(EnvFilter::DEFAULT_ENV)
        .unwrap_or_else(|_| config.special_mod_log_level.clone());
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(EnvFilter::new(filter))
        .init();

    let (stop_health, health_stopped) = tokio::sync::oneshot::channel();
    let health = spawn_health_server(health_addr, config.health.clone(), health_stopped);
    let result = start_executor_process(Arc::new(config)).await;
    let _ = stop_health.send(());
    if let Err(e) = health.await {
        log::warn!("health server task join error: {e}");
    }
    result
}
