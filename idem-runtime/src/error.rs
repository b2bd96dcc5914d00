//! Error types: what clients see (problem+json), what stores report, what the builder rejects.

use std::borrow::Cow;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

/// Why a client's idempotency key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is present but empty.
    #[error("the key is empty")]
    Empty,
    /// More than [`MAX_KEY_LEN`](crate::key::MAX_KEY_LEN) characters.
    #[error("the key is {len} characters long; the limit is 255")]
    TooLong {
        /// Length of the key that was sent.
        len: usize,
    },
    /// A character outside visible ASCII (`!` ..= `~`).
    #[error("the key has a character outside visible ASCII at position {position}")]
    InvalidCharacter {
        /// Zero-based byte offset of the first offending character.
        position: usize,
    },
    /// A quoted key with a bad escape or a missing closing quote.
    #[error("the key is not a valid RFC 8941 string")]
    Malformed,
    /// The header field appears more than once.
    #[error("the header was sent more than once")]
    Duplicate,
}

/// An error from a [`Store`](crate::store::Store). The engine answers 503 and never runs the
/// handler when a claim fails with one of these (fail closed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed the operation.
    #[error("idempotency store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store is full of live records and will not evict one that may still be replayed.
    #[error("idempotency store is full ({limit} live records)")]
    Full {
        /// The configured capacity.
        limit: usize,
    },
    /// A stored record could not be decoded.
    #[error("stored idempotency record is corrupt: {0}")]
    Corrupt(Cow<'static, str>),
    /// Applying the store's schema migrations failed.
    #[error("idempotency store migration {version} failed")]
    Migration {
        /// The migration that failed.
        version: i64,
        /// What the backend said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps any backend error as [`StoreError::Unavailable`].
    pub fn unavailable(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Unavailable(Box::new(err))
    }
}

/// A misconfigured [`Idempotency`](crate::Idempotency) engine, reported by
/// [`Builder::build`](crate::Builder::build) at start-up rather than by the first request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given to the builder.
    #[error("no idempotency store configured: call `.store(..)` on the builder")]
    MissingStore,
    /// An annotated endpoint names a scope that has no resolver.
    #[error(
        "endpoint `{endpoint}` uses scope \"{scope}\", which has no resolver: \
         call `.scope(\"{scope}\", |parts| ..)` on the builder"
    )]
    UnresolvedScope {
        /// The endpoint (module path and function name).
        endpoint: &'static str,
        /// The scope it names.
        scope: &'static str,
    },
    /// An endpoint takes a `Tx` for a database the engine's store does not live in.
    #[error(
        "endpoint `{endpoint}` runs in atomic mode on {database}, but the engine's store is not \
         the {database} store: build the engine with that store, on the database holding the \
         endpoint's tables"
    )]
    AtomicStoreMismatch {
        /// The endpoint (module path and function name).
        endpoint: &'static str,
        /// The database of its `Tx` (`"sqlite"`, `"postgres"`).
        database: &'static str,
    },
    /// `"global"` is built in and cannot be given a resolver.
    #[error("scope \"global\" is built in and takes no resolver")]
    ReservedScope,
}

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
    #[error("a request with this idempotency key is still being processed; retry later")]
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
}

impl Rejection {
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
        }
    }

    /// The HTTP status of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::KeyMissing { .. } | Self::KeyInvalid { .. } => StatusCode::BAD_REQUEST,
            Self::InProgress { .. } => StatusCode::CONFLICT,
            Self::KeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ScopeUnresolved { .. } => StatusCode::UNAUTHORIZED,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InProgress { retry_after } | Self::StoreUnavailable { retry_after } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut response =
            problem(self.status(), self.code(), &self.to_string(), &[]).into_response();
        if let Some(after) = self.retry_after() {
            let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}

/// Builds an RFC 9457 problem document. `extra` members are written as JSON values.
pub(crate) fn problem(
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
