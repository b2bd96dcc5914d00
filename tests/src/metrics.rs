//! The process-wide Prometheus recorder of a test binary, and the requests it counted.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process-wide recorder, installed by the first caller in the test binary.
///
/// # Panics
/// When something else installed a global recorder first.
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).unwrap();
        handle
    })
}

/// `idempotency_requests_total{endpoint, outcome}` in `text`, a rendering of the recorder; 0
/// when that series is absent.
pub fn requests(text: &str, endpoint: &str, outcome: &str) -> u64 {
    let endpoint = format!("endpoint=\"{endpoint}\"");
    let outcome = format!("outcome=\"{outcome}\"");
    text.lines()
        .filter(|l| l.starts_with("idempotency_requests_total{"))
        .filter(|l| l.contains(&endpoint) && l.contains(&outcome))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
