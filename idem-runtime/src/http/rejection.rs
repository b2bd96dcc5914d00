//! What clients see when the engine answers itself: `application/problem+json` (RFC 9457).

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

use idem_core::error::KeyError;
use idem_core::settings::scope::ScopeError;

/// Why the engine answered a request itself instead of running (or replaying) the handler.
///
/// Every variant becomes an `application/problem+json` response (RFC 9457) whose `code` member is
/// stable and documented on the variant.
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
    /// for (only when the start-up checks skipped the endpoint).
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
    pub(crate) fn of_scope(scope: &'static str, error: ScopeError) -> Self {
        match error {
            ScopeError::Unresolved => Self::ScopeUnresolved { scope },
            ScopeError::Unknown => Self::ScopeUnknown { scope },
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
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InProgress { retry_after }
            | Self::StoreUnavailable { retry_after }
            | Self::StoreFull { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

impl Rejection {
    /// The problem document's parts: status, content type, body.
    pub(crate) fn to_parts(&self) -> (StatusCode, [(header::HeaderName, HeaderValue); 1], Bytes) {
        let extra: &[(&str, serde_json::Value)] = match self {
            Self::ResponseTooLarge { original_status } => {
                &[("original_status", serde_json::Value::from(*original_status))]
            }
            _ => &[],
        };
        problem(self.status(), self.code(), &self.to_string(), extra)
    }
}

impl Rejection {
    /// `Retry-After` in whole seconds, rounded up, at least 1, for the answers that carry one.
    pub(crate) fn retry_after_header(&self) -> Option<HeaderValue> {
        let after = self.retry_after()?;
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        Some(HeaderValue::from(secs.max(1)))
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut response = self.to_parts().into_response();
        if let Some(value) = self.retry_after_header() {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// Builds an RFC 9457 problem document. `extra` members are written as JSON values.
fn problem(
    status: StatusCode,
    code: &str,
    detail: &str,
    extra: &[(&str, serde_json::Value)],
) -> (StatusCode, [(header::HeaderName, HeaderValue); 1], Bytes) {
    let mut doc = serde_json::Map::new();
    doc.insert("type".into(), "about:blank".into());
    doc.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    doc.insert("status".into(), status.as_u16().into());
    doc.insert("detail".into(), detail.into());
    doc.insert("code".into(), code.into());
    for (name, value) in extra {
        doc.insert((*name).into(), value.clone());
    }
    let body = serde_json::to_vec(&serde_json::Value::Object(doc)).unwrap_or_default();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        )],
        Bytes::from(body),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body_json(response: Response) -> serde_json::Value {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn rejections_are_problem_json_with_stable_codes() {
        let cases = [
            (Rejection::KeyReused, 422, "idempotency_key_reused"),
            (Rejection::PayloadTooLarge, 413, "payload_too_large"),
            (Rejection::BodyUnreadable, 400, "request_body_unreadable"),
            (Rejection::ResponseFailed, 500, "response_body_failed"),
            (
                Rejection::ResponseTooLarge {
                    original_status: 201,
                },
                409,
                "idempotency_response_too_large",
            ),
            (
                Rejection::ScopeUnknown { scope: "org" },
                500,
                "idempotency_scope_unknown",
            ),
            (
                Rejection::Misconfigured {
                    reason: "no transactions",
                },
                500,
                "idempotency_misconfigured",
            ),
            (
                Rejection::ScopeUnresolved { scope: "org" },
                401,
                "idempotency_scope_unresolved",
            ),
            (
                Rejection::KeyMissing {
                    header: http::HeaderName::from_static("idempotency-key"),
                },
                400,
                "idempotency_key_missing",
            ),
        ];
        for (rejection, status, code) in cases {
            let response = rejection.into_response();
            assert_eq!(response.status().as_u16(), status);
            assert_eq!(
                response.headers()[header::CONTENT_TYPE],
                "application/problem+json"
            );
            let doc = body_json(response).await;
            assert_eq!(doc["code"], code);
            assert_eq!(doc["status"], status);
            assert!(doc["detail"].as_str().is_some_and(|d| !d.is_empty()));
        }
    }

    #[tokio::test]
    async fn an_in_flight_duplicate_is_told_the_request_is_being_processed() {
        let response = Rejection::InProgress {
            retry_after: Duration::from_secs(1),
        }
        .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let doc = body_json(response).await;
        assert_eq!(doc["code"], "idempotency_key_in_progress");
        let detail = doc["detail"].as_str().unwrap();
        assert!(detail.starts_with("Request is being processed"), "{detail}");
    }

    #[tokio::test]
    async fn retry_after_is_rounded_up_to_whole_seconds() {
        let response = Rejection::InProgress {
            retry_after: Duration::from_millis(1500),
        }
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let response = Rejection::StoreUnavailable {
            retry_after: Duration::ZERO,
        }
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
