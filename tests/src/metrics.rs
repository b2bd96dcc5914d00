//! The process-wide Prometheus recorder of a test binary, and the requests it counted.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The buckets of `idempotency_replay_age_seconds`, in seconds: the ones
/// docs/observability.md suggests (1 s to 1 day; the default TTL is 24 h).
pub const REPLAY_AGE_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 21_600.0, 86_400.0,
];

/// A Prometheus recorder's builder set up as docs/observability.md says: the replay age as a
/// histogram with [`REPLAY_AGE_BUCKETS`] (without buckets the exporter renders a summary).
pub fn builder() -> PrometheusBuilder {
    let age = Matcher::Full("idempotency_replay_age_seconds".to_owned());
    PrometheusBuilder::new()
        .set_buckets_for_metric(age, REPLAY_AGE_BUCKETS)
        .expect("the buckets are not empty")
}

/// The process-wide recorder ([`builder`]), installed by the first caller in the test binary.
///
/// # Panics
/// When something else installed a global recorder first.
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = builder().build_recorder();
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

/// The value of the series `name{endpoint="..."}` (no other label) in `text`; `None` when it
/// is absent: a gauge, or a histogram's `_sum` or `_count`.
pub fn sample(text: &str, name: &str, endpoint: &str) -> Option<f64> {
    let series = format!("{name}{{endpoint=\"{endpoint}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|value| value.trim().parse().expect("a sample's value is a number"))
}
