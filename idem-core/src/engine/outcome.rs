//! How each idempotent request ended, counted and traced, what runs now, and how old what is
//! replayed was: the one place outcomes are recorded, and the one place the engine's metrics are
//! named (docs/observability.md lists them; `tests/tests/dashboard.rs` checks the docs and the
//! dashboard against what this exports).

use std::borrow::Cow;

use crate::clock::Timestamp;
use crate::key::RecordKey;

/// Counter: requests with a key, by `endpoint` and `outcome`.
const REQUESTS: &str = "idempotency_requests_total";
/// Gauge: operations running now in this process, by `endpoint`.
const IN_FLIGHT: &str = "idempotency_in_flight";
/// Histogram: the age of each replayed result, in seconds, by `endpoint`.
const REPLAY_AGE: &str = "idempotency_replay_age_seconds";
/// Counter: results not stored because their record was lost, by `endpoint`.
const RESULTS_LOST: &str = "idempotency_results_lost_total";
/// The label of every metric: the operation's name.
const ENDPOINT: &str = "endpoint";
/// The label of [`REQUESTS`]: an [`OutcomeLabel`].
const OUTCOME: &str = "outcome";

/// The `outcome` label of `idempotency_requests_total`: how one request with a key ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeLabel {
    /// The operation ran and its result was stored (or committed with it in atomic mode).
    Executed,
    /// A stored result was replayed; the operation did not run.
    Replayed,
    /// A duplicate found the first request still running.
    InProgress,
    /// The key was used for a different request.
    Reused,
    /// The key, the scope or the body was refused before the store was asked.
    Invalid,
    /// The operation failed (5xx, error, panic) and the record was released for a retry.
    Released,
    /// The store failed; the request was refused (fail closed).
    StoreError,
    /// The store is full (for this tenant, or for everyone): the request was refused, and
    /// nothing failed.
    StoreFull,
    /// The operation failed, and releasing its record failed too: the engine keeps trying in
    /// the background until the store answers (or the record expires).
    ReleaseFailed,
    /// The caller went away (the client hung up, a timeout layer fired) before its claim
    /// settled; a claim it made is released at once.
    Cancelled,
}

impl OutcomeLabel {
    /// The label as metrics and logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InProgress => "in_progress",
            Self::Reused => "reused",
            Self::Invalid => "invalid",
            Self::Released => "released",
            Self::StoreError => "store_error",
            Self::StoreFull => "store_full",
            Self::ReleaseFailed => "release_failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// An operation's name, its identity in record keys: `charges.create` or `POST /v1/charges`
/// for an HTTP operation, the caller's name for a programmatic one.
pub type OpName = Cow<'static, str>;

/// Counts `outcome` for `operation` and records it on the current span.
pub(crate) fn count(operation: &OpName, outcome: OutcomeLabel) {
    metrics::counter!(
        REQUESTS,
        ENDPOINT => operation.clone(),
        OUTCOME => outcome.as_str()
    )
    .increment(1);
    tracing::Span::current().record("outcome", outcome.as_str());
    tracing::debug!(
        endpoint = &**operation,
        outcome = outcome.as_str(),
        "idempotent request"
    );
}

/// Counts a replay of a result completed at `completed_at`, and observes its age at `now`
/// (zero when the clock that completed it ran ahead of this one); no age when the store does
/// not know when it completed (a record written before it kept that time).
pub(crate) fn replayed(operation: &OpName, completed_at: Option<Timestamp>, now: Timestamp) {
    count(operation, OutcomeLabel::Replayed);
    if let Some(completed_at) = completed_at {
        let age = completed_at.until(now);
        metrics::histogram!(REPLAY_AGE, ENDPOINT => operation.clone()).record(age.as_secs_f64());
    }
}

/// The words every path logs a lost result with: [`result_lost`].
pub(crate) const RESULT_LOST: &str = "the result was not stored: its idempotency record was lost \
    (another attempt took it over, or it is gone from the store); a retry runs the operation again";

/// A result the operation ran to that could not be stored because its record was lost: another
/// attempt took the record over (this one was cut off from the store longer than its lease), or
/// the record is gone from the store (a table deleted or restored, Redis restarted without
/// persistence, a bucket's lifecycle rule). A retry runs the operation again, so its effects may
/// happen twice. The one place this is logged (WARN, [`RESULT_LOST`], whether the completion
/// failed inline or in the background) and counted (`idempotency_results_lost_total`).
pub(crate) fn result_lost(operation: &OpName, key: &RecordKey) {
    metrics::counter!(RESULTS_LOST, ENDPOINT => operation.clone()).increment(1);
    tracing::warn!(endpoint = &**operation, key = %key.prefix(), "{RESULT_LOST}");
}

/// One operation running in this process: counted in `idempotency_in_flight` from
/// [`start`](Running::start) until it is dropped, so exactly once however its work ends (a
/// result, an error, a panic caught, the work stopped at its transaction's deadline, the task
/// dropped when the runtime shuts down).
pub(crate) struct Running(metrics::Gauge);

impl Running {
    /// Counts one more operation of `operation` running.
    pub(crate) fn start(operation: &OpName) -> Self {
        let gauge = metrics::gauge!(IN_FLIGHT, ENDPOINT => operation.clone());
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// A record's tracing span: the operation and a prefix of the record key, never the client's
/// key.
pub fn span(operation: &OpName, key: &RecordKey) -> tracing::Span {
    tracing::info_span!(
        "idempotency",
        endpoint = &**operation,
        key = %key.prefix(),
        outcome = tracing::field::Empty,
    )
}
