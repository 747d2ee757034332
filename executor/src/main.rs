//! `hindsight-executor`: Apache DataFusion Ballista 55's executor, as its
//! own `ballista-executor` binary is, with two differences that make
//! hindsight's reports run there:
//!
//! - It can run every function a DataFusion session has by default. The
//!   stock executor decodes a plan's functions against a registry of
//!   DataFusion's core functions only, without the nested ones (`range`,
//!   `array_*`), so a stage of `hindsight report timeline` fails there with
//!   "PhysicalExtensionCodec is not provided for scalar function range".
//! - Its tasks report no operator metrics. Two tasks of one stage over a
//!   `UNION ALL` can report different numbers of operators; the scheduler
//!   then refuses the second task's status ("task metrics array size … does
//!   not equal with the stage metrics array size") and the job never ends
//!   (`hindsight report numa`). With no metrics it takes the status. The
//!   metrics only feed the scheduler's own displays.
//!
//! Flags, S3 access (the AWS_* variables), health probes and logs are the
//! stock executor's: `hindsight-executor --help`.
//!
//! It holds no hindsight code: the scheduler stays Ballista's own, and
//! tables reach the executors as plain Parquet scans.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use ballista_core::error::BallistaError;
use ballista_core::object_store::{runtime_env_with_s3_support, session_config_with_s3_support};
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::serde::protobuf::{
    RuntimeStatsReport, ShuffleWritePartition, TaskColumnStats, WindowStateReport,
};
use ballista_core::JobId;
use ballista_executor::config::Config;
use ballista_executor::execution_engine::{
    DefaultExecutionEngine, ExecutionEngine, QueryStageExecutor,
};
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_executor::health::spawn_health_server;
use clap::Parser;
use datafusion::error::Result;
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
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
    // Without the library's pool of shuffle clients (private to it), as
    // with --client-ttl 0: each shuffle fetch opens its own connection.
    config.override_execution_engine =
        Some(Arc::new(WithoutMetrics(DefaultExecutionEngine::new())));

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

/// Ballista's engine, whose stages report no operator metrics.
struct WithoutMetrics(DefaultExecutionEngine);

impl ExecutionEngine for WithoutMetrics {
    fn create_query_stage_exec(
        &self,
        job_id: JobId,
        stage_id: usize,
        task_id: usize,
        global_output_partition_ids: Vec<usize>,
        plan: Arc<dyn ExecutionPlan>,
        work_dir: &str,
        config: &SessionConfig,
    ) -> Result<Arc<dyn QueryStageExecutor>> {
        let stage = self.0.create_query_stage_exec(
            job_id,
            stage_id,
            task_id,
            global_output_partition_ids,
            plan,
            work_dir,
            config,
        )?;
        Ok(Arc::new(StageWithoutMetrics(stage)))
    }
}

#[derive(Debug)]
struct StageWithoutMetrics(Arc<dyn QueryStageExecutor>);

impl fmt::Display for StageWithoutMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[async_trait::async_trait]
impl QueryStageExecutor for StageWithoutMetrics {
    async fn execute_query_stage(
        &self,
        task_id: usize,
        context: Arc<TaskContext>,
    ) -> Result<Vec<ShuffleWritePartition>> {
        self.0.execute_query_stage(task_id, context).await
    }

    fn collect_plan_metrics(&self) -> Vec<MetricsSet> {
        Vec::new()
    }

    fn collect_runtime_stats_reports(&self) -> Vec<RuntimeStatsReport> {
        self.0.collect_runtime_stats_reports()
    }

    fn collect_window_state_reports(&self) -> Result<Vec<WindowStateReport>> {
        self.0.collect_window_state_reports()
    }

    fn collect_column_stats(&self) -> Vec<TaskColumnStats> {
        self.0.collect_column_stats()
    }
}
