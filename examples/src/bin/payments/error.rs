//! The service's errors: `application/problem+json` (RFC 9457) with a stable `code` member, the
//! same shape as the idempotency engine's own answers, so clients parse one format.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// An error answer. Built with the constructors below; database details never reach the client.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    detail: Cow<'static, str>,
    extra: Vec<(&'static str, Value)>,
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            code,
            detail: detail.into(),
            extra: Vec::new(),
            headers: Vec::new(),
        }
    }

    fn with(mut self, member: &'static str, value: impl Into<Value>) -> Self {
        self.extra.push((member, value.into()));
        self
    }

    fn header(mut self, name: header::HeaderName, value: &'static str) -> Self {
        self.headers.push((name, HeaderValue::from_static(value)));
        self
    }

    /// `400 invalid_request`: a parameter failed validation; `param` names it.
    pub(crate) fn invalid(param: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", detail).with("param", param)
    }

    /// `400 invalid_json`: the body is not the JSON this route takes.
    fn invalid_json(detail: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", detail)
    }

    /// `401 unauthorized`, with the challenge telling the client how to authenticate.
    pub(crate) fn unauthorized(detail: &'static str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
            .header(header::WWW_AUTHENTICATE, "Bearer")
    }

    /// `402 card_declined`: the charge was recorded with status `failed`.
    pub(crate) fn declined(charge_id: &str) -> Self {
        Self::new(
            StatusCode::PAYMENT_REQUIRED,
            "card_declined",
            "the card was declined",
        )
        .with("charge", charge_id)
    }

    /// `404 resource_missing`.
    pub(crate) fn not_found(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "resource_missing", detail)
    }

    /// `409` with a business `code`: the request is valid but the resource's state forbids it.
    pub(crate) fn conflict(code: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    /// Adds a member to the problem document (e.g. the amount still refundable).
    pub(crate) fn member(self, name: &'static str, value: impl Into<Value>) -> Self {
        self.with(name, value)
    }

    /// `503 processor_unavailable`: nothing happened; retrying is safe and runs again.
    pub(crate) fn processor_unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "processor_unavailable",
            "the card processor is unavailable; nothing was charged, retry later",
        )
        .header(header::RETRY_AFTER, "1")
    }

    /// `405 method_not_allowed`.
    pub(crate) fn method_not_allowed(detail: String) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", detail)
    }

    /// `503` with `code`: a dependency is down; retry later.
    pub(crate) fn unavailable(code: &'static str, detail: &'static str) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, detail).header(header::RETRY_AFTER, "1")
    }

    /// `500 internal_error`. The cause is logged here, never sent.
    pub(crate) fn internal(error: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "an internal error occurred; retry later",
        )
    }
}

#[cfg(test)]
impl ApiError {
    /// The `code` member.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// An extra member of the problem document.
    pub(crate) fn extra(&self, name: &str) -> Option<&Value> {
        self.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        Self::internal(&error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut doc = Map::new();
        doc.insert("type".into(), "about:blank".into());
        doc.insert(
            "title".into(),
            self.status.canonical_reason().unwrap_or("Error").into(),
        );
        doc.insert("status".into(), self.status.as_u16().into());
        doc.insert("detail".into(), self.detail.into_owned().into());
        doc.insert("code".into(), self.code.into());
        for (name, value) in self.extra {
            doc.insert(name.into(), value);
        }
        let body = serde_json::to_vec(&Value::Object(doc)).unwrap_or_default();
        let mut response = (
            self.status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            )],
            body,
        )
            .into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// A JSON body whose rejections are problem documents (axum's `Json` answers in plain text).
/// An empty body reads as `{}`, so `POST /v1/charges/{id}/refunds` needs no body at all.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim();
                mime.eq_ignore_ascii_case("application/json")
                    || (mime.starts_with("application/") && mime.ends_with("+json"))
            });
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "payload_too_large"
                } else {
                    "invalid_body"
                };
                ApiError::new(status, code, rejection.body_text()).into_response()
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return serde_json::from_slice(b"{}")
                .map(ApiJson)
                .map_err(|e| ApiError::invalid_json(e.to_string()).into_response());
        }
        if is_json != Some(true) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            )
            .into_response());
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| ApiError::invalid_json(format!("invalid JSON body: {e}")).into_response())
    }
}
