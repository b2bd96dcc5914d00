//! How each idempotent request ended, counted and traced: the one place outcomes are recorded.

use std::borrow::Cow;

use crate::core::key::RecordKey;

/// The `outcome` label of `idempotency_requests_total`: how one request with a key ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutcomeLabel {
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
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) type OpName = Cow<'static, str>;

/// Counts `outcome` for `operation` and records it on the current span.
pub(crate) fn count(operation: &OpName, outcome: OutcomeLabel) {
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

/// A record's tracing span: the operation and a prefix of the record key, never the client's
/// key.
pub(crate) fn span(operation: &OpName, key: &RecordKey) -> tracing::Span {
    tracing::info_span!(
        "idempotency",
        endpoint = &**operation,
        key = %key.short(),
        outcome = tracing::field::Empty,
    )
}
