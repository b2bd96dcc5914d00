//! How each idempotent request ended, counted and traced.

use std::borrow::Cow;

/// The outcome label of `idempotency_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
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
    /// The operation failed, and releasing its record failed too: the engine keeps trying in
    /// the background until the store answers (or the record expires).
    ReleaseFailed,
    /// The request was dropped (the client went away, a timeout layer fired) after its claim
    /// was made and before it was answered.
    Cancelled,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InProgress => "in_progress",
            Self::Reused => "reused",
            Self::Invalid => "invalid",
            Self::Released => "released",
            Self::StoreError => "store_error",
            Self::ReleaseFailed => "release_failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// An operation's name: `module::function` for the attribute, `POST /path` for the layer, the
/// caller's name for the programmatic API.
pub(crate) type OpName = Cow<'static, str>;

/// Counts [`Outcome::Cancelled`] for a request dropped while this guard is armed.
pub(crate) struct CancelGuard<'a> {
    operation: &'a OpName,
    armed: bool,
}

impl<'a> CancelGuard<'a> {
    pub(crate) fn new(operation: &'a OpName) -> Self {
        Self {
            operation,
            armed: true,
        }
    }

    /// The request settled: count nothing on drop.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            record(self.operation, Outcome::Cancelled);
        }
    }
}

/// Counts `outcome` for `operation` and records it on the current span.
pub(crate) fn record(operation: &OpName, outcome: Outcome) {
    metrics::counter!(
        "idempotency_requests_total",
        "endpoint" => operation.clone(),
        "outcome" => outcome.as_str()
    )
    .increment(1);
    tracing::Span::current().record("outcome", outcome.as_str());
    tracing::debug!(
        endpoint = &**operation,
        outcome = outcome.as_str(),
        "idempotent request"
    );
}
