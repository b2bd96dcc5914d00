//! The answers the engine gives itself, instead of running (or replaying) an operation: what
//! each means, whether a retry can succeed, and the HTTP status and stable code every face
//! reports it with (an HTTP face as the status of a problem document, the gRPC face as the
//! reason of its status). A face renders them at its edge, after reading the engine's answer
//! the one way every face reads it ([`settle`]), so the faces cannot drift.

use std::panic::resume_unwind;
use std::time::Duration;

use http::{HeaderValue, StatusCode};

use crate::engine::{Answer, RolledBack};
use crate::error::{KeyError, StoreError};
use crate::settings::scope::ScopeError;

/// Why the engine answered a request itself instead of running (or replaying) the handler.
///
/// On HTTP every variant becomes an `application/problem+json` response (RFC 9457) whose `code`
/// member is stable and documented on the variant; the gRPC face sends the code, in upper case,
/// as the reason of its status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// `400 idempotency_key_missing`: the endpoint requires a key and none was sent.
    #[error("this endpoint requires an `{header}` header")]
    KeyMissing {
        /// The header the engine reads.
        header: http::HeaderName,
    },
    /// `400 idempotency_key_invalid`: the key is malformed or the header was sent twice.
    #[error("the `{header}` header is invalid: {reason}")]
    KeyInvalid {
        /// The header the engine reads.
        header: http::HeaderName,
        /// What is wrong with it.
        #[source]
        reason: KeyError,
    },
    /// `409 idempotency_key_in_progress`: a request with this key is still running.
    #[error(
        "Request is being processed: a request with this idempotency key has not finished yet; retry later"
    )]
    InProgress {
        /// Sent as `Retry-After`.
        retry_after: Duration,
    },
    /// `422 idempotency_key_reused`: this key was used for a different request.
    #[error("this idempotency key was already used with a different request")]
    KeyReused,
    /// `401 idempotency_scope_unresolved`: the request carries no principal for the scope.
    #[error(
        "cannot tell whose idempotency key this is (scope \"{scope}\"): the request is not authenticated"
    )]
    ScopeUnresolved {
        /// The endpoint's scope.
        scope: &'static str,
    },
    /// `413 payload_too_large`: the body is over the limit set by axum's `DefaultBodyLimit`.
    #[error("the request body is larger than the limit")]
    PayloadTooLarge,
    /// `503 idempotency_store_unavailable`: the store failed; the handler did not run.
    #[error("the idempotency store is unavailable; the request was not processed")]
    StoreUnavailable {
        /// Sent as `Retry-After`.
        retry_after: Duration,
    },
    /// `503 idempotency_store_full`: the store has no room for another record now (for this
    /// tenant, or at all); nothing failed, and the handler did not run. `Retry-After` says when
    /// the earliest record holding room expires (room may free sooner, when a request fails).
    #[error("the idempotency store is full for now; the request was not processed")]
    StoreFull {
        /// Sent as `Retry-After`.
        retry_after: Duration,
    },
    /// `400 request_body_unreadable`: the request body could not be read (the client went
    /// away or sent a malformed chunked body); the handler did not run.
    #[error("the request body could not be read")]
    BodyUnreadable,
    /// `409 idempotency_response_too_large`: a request with this key completed, but its
    /// response was over the replay limit and was not kept; the operation did not run again.
    #[error(
        "a request with this idempotency key already completed with status {original_status}, \
         but its response exceeded the replay limit and was not kept; the operation was not run \
         again"
    )]
    ResponseTooLarge {
        /// The status of the response the first request got (a member of the document).
        original_status: u16,
    },
    /// `500 response_body_failed`: the handler's response body failed while it was read; the
    /// record was released, so a retry runs again.
    #[error("the response body failed while it was being read; nothing was stored")]
    ResponseFailed,
    /// `500 idempotency_scope_unknown`: the endpoint names a scope the engine has no resolver
    /// for (only for an endpoint the engine was not told it
    /// [serves](crate::idempotency::Builder::serves): those are checked when it is built).
    #[error("this endpoint's idempotency scope \"{scope}\" has no resolver on the engine")]
    ScopeUnknown {
        /// The endpoint's scope.
        scope: &'static str,
    },
    /// `500 idempotency_misconfigured`: the endpoint needs something the engine cannot give
    /// (a transaction from a store that offers none); the handler did not run.
    #[error("this endpoint is misconfigured: {reason}")]
    Misconfigured {
        /// What is missing.
        reason: &'static str,
    },
}

impl Rejection {
    /// The answer to a request whose scope value could not be found.
    pub fn of_scope(scope: &'static str, error: ScopeError) -> Self {
        match error {
            ScopeError::Unresolved => Self::ScopeUnresolved { scope },
            ScopeError::Unknown => {
                if !first_report(scope) {
                    return Self::ScopeUnknown { scope };
                }
                tracing::error!(
                    scope,
                    "an idempotent endpoint names scope \"{scope}\", which has no resolver on \
                     its engine: answered 500 without running it; give the engine \
                     `.scope(\"{scope}\", ...)`, and pass the endpoint to `Builder::serves` to \
                     have such mistakes refuse the build instead"
                );
                Self::ScopeUnknown { scope }
            }
        }
    }

    /// The stable `code` member of the problem document.
    pub fn code(&self) -> &'static str {
        match self {
            Self::KeyMissing { .. } => "idempotency_key_missing",
            Self::KeyInvalid { .. } => "idempotency_key_invalid",
            Self::InProgress { .. } => "idempotency_key_in_progress",
            Self::KeyReused => "idempotency_key_reused",
            Self::ScopeUnresolved { .. } => "idempotency_scope_unresolved",
            Self::PayloadTooLarge => "payload_too_large",
            Self::StoreUnavailable { .. } => "idempotency_store_unavailable",
            Self::StoreFull { .. } => "idempotency_store_full",
            Self::BodyUnreadable => "request_body_unreadable",
            Self::ResponseTooLarge { .. } => "idempotency_response_too_large",
            Self::ResponseFailed => "response_body_failed",
            Self::ScopeUnknown { .. } => "idempotency_scope_unknown",
            Self::Misconfigured { .. } => "idempotency_misconfigured",
        }
    }

    /// The HTTP status of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::KeyMissing { .. } | Self::KeyInvalid { .. } | Self::BodyUnreadable => {
                StatusCode::BAD_REQUEST
            }
            Self::InProgress { .. } | Self::ResponseTooLarge { .. } => StatusCode::CONFLICT,
            Self::ScopeUnknown { .. } | Self::Misconfigured { .. } | Self::ResponseFailed => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ScopeUnresolved { .. } => StatusCode::UNAUTHORIZED,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::StoreUnavailable { .. } | Self::StoreFull { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }

    /// When to retry, for the answers where retrying the same request can succeed.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InProgress { retry_after }
            | Self::StoreUnavailable { retry_after }
            | Self::StoreFull { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Whether `what` (a misconfigured scope's or handler's name) is reported for the first time
/// in this process. A misconfiguration is answered 500 on every request, but logged once: each
/// request is the client's to send, and a flood of them must not flood the log.
pub fn first_report(what: &'static str) -> bool {
    static REPORTED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut reported = REPORTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if reported.contains(&what) {
        return false;
    }
    reported.push(what);
    true
}

impl Rejection {
    /// `Retry-After` in whole seconds, rounded up, at least 1, for the answers that carry one.
    pub fn retry_after_header(&self) -> Option<HeaderValue> {
        let after = self.retry_after()?;
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        Some(HeaderValue::from(secs.max(1)))
    }
}

/// What a face sends back for an attempt, before it is put in the face's own terms.
pub enum Settled<R, P> {
    /// The work's own reply (it ran in this attempt).
    Ran(R),
    /// A stored result, decoded.
    Replay(P),
    /// The engine's own answer.
    Refused(Rejection),
}

/// `answer` for a face; `retry_after` is the engine's, for answers that carry none of their
/// own. A panic of the work resumes here, on the caller's task.
pub fn settle<R, P, E>(answer: Answer<R, P, E>, retry_after: Duration) -> Settled<R, P> {
    let rejection = match answer {
        Answer::Ran(reply, _) => return Settled::Ran(reply),
        Answer::Replay(stored) => return Settled::Replay(stored),
        Answer::Panicked(panic) => resume_unwind(panic),
        Answer::RolledBack(RolledBack::LeaseLost) => Rejection::InProgress { retry_after },
        Answer::RolledBack(RolledBack::Failed(_) | RolledBack::Deadline(_))
        | Answer::Corrupt(_) => Rejection::StoreUnavailable { retry_after },
        Answer::Reused => Rejection::KeyReused,
        Answer::InFlight { retry_after } => Rejection::InProgress { retry_after },
        Answer::Unavailable {
            error: StoreError::Full { .. },
            retry_after,
        } => Rejection::StoreFull { retry_after },
        Answer::Unavailable { retry_after, .. } => Rejection::StoreUnavailable { retry_after },
    };
    Settled::Refused(rejection)
}
