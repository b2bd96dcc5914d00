//! The service's errors: `application/problem+json` (RFC 9457) with a stable `code`, the shape
//! of the idempotency layer's own answers, and a JSON body extractor that answers the same way.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The media type of every error answer (RFC 9457).
pub(crate) const PROBLEM: &str = "application/problem+json";

/// An error answer; database details never reach the client.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: Cow<'static, str>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
        }
    }

    /// `400 invalid_request`: a field or path parameter failed validation.
    pub(crate) fn invalid(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", detail)
    }

    /// `401 unauthorized`.
    pub(crate) fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer agent_<name>`, with a name of 1 to 64 letters, digits, \
             `_` or `-`",
        )
    }

    /// `404 not_found`.
    pub(crate) fn not_found(detail: String) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    /// `503 database_unavailable`.
    pub(crate) fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
            "the database is not answering",
        )
    }
}

impl From<sqlx::Error> for ApiError {
    /// `500 internal_error`; the cause is logged here, never sent.
    fn from(error: sqlx::Error) -> Self {
        tracing::error!(error = &error as &dyn std::error::Error, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "an internal error occurred; retry later",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let doc = json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("Error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "code": self.code,
        });
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM))],
            doc.to_string(),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A JSON body whose rejections are problem documents (axum's `Json` answers in plain text):
/// `415 unsupported_media_type` without a JSON content type, `400 invalid_json` otherwise.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let is_json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            let detail = "send the body as JSON with `Content-Type: application/json`";
            let error = ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                detail,
            );
            return Err(error.into_response());
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        serde_json::from_slice(&bytes).map(ApiJson).map_err(|e| {
            let detail = format!("invalid JSON body: {e}");
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", detail).into_response()
        })
    }
}
