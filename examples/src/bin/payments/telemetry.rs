//! Logs (tracing, filtered by `RUST_LOG`) and metrics (Prometheus text at `GET /metrics`).

use std::io::IsTerminal;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// What is logged when `RUST_LOG` is unset.
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// Logs to stdout; colours only on a terminal.
pub(crate) fn init_tracing() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
}

/// The process's metrics recorder. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Metrics(PrometheusHandle);

impl Metrics {
    /// Installs the global recorder that idem's metrics and the app's counters are written to,
    /// with buckets for the age of replays (docs/observability.md). No listener: `GET /metrics`
    /// on the app's own router renders it.
    pub(crate) fn install() -> Result<Self, BuildError> {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("idempotency_replay_age_seconds".into()),
                &[
                    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 21_600.0, 86_400.0,
                ],
            )?
            .install_recorder()?;
        metrics::describe_counter!(
            "payments_charges_total",
            "Charges recorded, by status (succeeded, failed)."
        );
        Ok(Self(handle))
    }

    /// Runs the recorder's periodic maintenance (draining histograms) until aborted.
    pub(crate) fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let handle = self.0.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                handle.run_upkeep();
            }
        })
    }
}

/// `GET /metrics`: Prometheus text exposition format.
pub(crate) async fn render(State(metrics): State<Metrics>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.0.render(),
    )
}
