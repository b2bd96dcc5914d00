//! The service's errors: a status, a stable `code` and a message, written in the format
//! `ERROR_FORMAT` chose ([`envelope`](crate::envelope)): `application/problem+json` (RFC 9457),
//! the same shape as the idempotency engine's own answers, or Stripe's envelope.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::envelope::{ErrorDoc, ErrorFormat};

/// The longest `detail` sent, in characters: details may quote the request, and an error must
/// not echo megabytes back.
const MAX_DETAIL_CHARS: usize = 300;
/// How much of a client's value a detail quotes.
const MAX_QUOTED_CHARS: usize = 40;

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

    /// `400 invalid_json`: the body is not the JSON this route takes. serde's message may quote
    /// the body (an unknown field, a string where a number belongs): it is cut short, keeping
    /// the position.
    pub(crate) fn invalid_json(error: &serde_json::Error) -> Self {
        let message = error.to_string();
        let position = format!(" at line {} column {}", error.line(), error.column());
        let what = message.strip_suffix(&position).unwrap_or(&message);
        let detail = match error.line() {
            0 => format!("invalid JSON body: {}", bounded(what, 200)),
            _ => format!("invalid JSON body: {}{position}", bounded(what, 200)),
        };
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", detail)
    }

    /// `400 invalid_form`: the form body is not what this route takes (a missing or unknown
    /// parameter, a value of the wrong type, a parameter sent twice). The message may quote the
    /// body: it is cut short.
    pub(crate) fn invalid_form(error: &serde_qs::Error) -> Self {
        let detail = format!("invalid form body: {}", bounded(&error.to_string(), 200));
        Self::new(StatusCode::BAD_REQUEST, "invalid_form", detail)
    }

    /// `400 request_body_unreadable`: the body could not be read (the client went away, a
    /// broken chunked encoding).
    pub(crate) fn body_unreadable() -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "request_body_unreadable",
            "the request body could not be read",
        )
    }

    /// `408 request_body_timeout`: the body did not arrive in time; the connection closes.
    pub(crate) fn body_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_body_timeout",
            "the request body did not arrive in time",
        )
        .header(header::CONNECTION, "close")
    }

    /// `413 payload_too_large`.
    pub(crate) fn payload_too_large(detail: &'static str) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", detail)
    }

    /// `415 unsupported_media_type`: a body that is neither JSON nor a form.
    pub(crate) fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON (`Content-Type: application/json`) or as a form \
             (`application/x-www-form-urlencoded`)",
        )
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

    /// `400 resource_missing`: a parameter names an object that does not exist.
    pub(crate) fn missing(detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "resource_missing", detail)
    }

    /// `409` with a business `code`: the request is valid but the resource's state forbids it.
    pub(crate) fn conflict(code: &'static str, detail: impl Into<Cow<'static, str>>) -> Self {
        Self::new(StatusCode::CONFLICT, code, detail)
    }

    /// Adds a member to the error document (e.g. the amount still refundable).
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

    /// `503 server_busy`: the server is at its connection limit; the connection closes.
    pub(crate) fn server_busy() -> Self {
        Self::unavailable(
            "server_busy",
            "the server is at its connection limit; retry later",
        )
        .header(header::CONNECTION, "close")
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

    /// The `detail` member.
    pub(crate) fn detail(&self) -> &str {
        &self.detail
    }

    /// An extra member of the problem document.
    pub(crate) fn extra(&self, name: &str) -> Option<&Value> {
        self.extra.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// A database that cannot be reached, or is too busy right now, is `503 database_unavailable`
/// with `Retry-After`: the request may be retried as it is (the idempotency engine releases its
/// record). Any other database error is a bug or bad data: `500 internal_error`.
impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        if !idem_examples::sql_errors::is_transient(&error) {
            return Self::internal(&error);
        }
        tracing::warn!(
            error = &error as &dyn std::error::Error,
            "database unavailable"
        );
        Self::unavailable(
            "database_unavailable",
            "the database is unavailable; retry later",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let detail = bounded(&self.detail, MAX_DETAIL_CHARS);
        let mut response = ErrorDoc {
            status: self.status,
            code: self.code,
            detail: &detail,
            extra: &self.extra,
        }
        .render(ErrorFormat::current());
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// `value` cut to `max` characters, with `…` when cut.
pub(crate) fn bounded(value: &str, max: usize) -> Cow<'_, str> {
    match value.char_indices().nth(max) {
        None => Cow::Borrowed(value),
        Some((end, _)) => Cow::Owned(format!("{}…", &value[..end])),
    }
}

/// A client's value for an error message: quoted, and cut short if long.
pub(crate) fn quote(value: &str) -> String {
    format!("`{}`", bounded(value, MAX_QUOTED_CHARS))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
    use sqlx::{ConnectOptions, Connection};

    use super::*;

    #[track_caller]
    fn assert_answer(error: sqlx::Error, status: StatusCode, code: &str) {
        let error = ApiError::from(error);
        assert_eq!((error.status, error.code), (status, code));
        let retry_after = error.headers.iter().any(|(n, _)| n == header::RETRY_AFTER);
        assert_eq!(retry_after, status == StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn an_unreachable_database_is_503_and_a_bug_is_500() {
        for error in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()),
        ] {
            assert_answer(
                error,
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
            );
        }
        for error in [
            sqlx::Error::RowNotFound,
            sqlx::Error::ColumnNotFound("amount".into()),
            sqlx::Error::Protocol("unexpected message".into()),
        ] {
            assert_answer(error, StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
        }
    }

    #[tokio::test]
    async fn a_locked_sqlite_database_is_503_and_a_constraint_is_500() {
        let path = std::env::temp_dir().join(format!("payments-locked-{}.db", std::process::id()));
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true);
        let mut holder = options.connect().await.unwrap();
        sqlx::query("CREATE TABLE t (x NOT NULL)")
            .execute(&mut holder)
            .await
            .unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .unwrap();
        let mut other: SqliteConnection = options
            .busy_timeout(Duration::ZERO)
            .connect()
            .await
            .unwrap();
        let busy = sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut other)
            .await
            .unwrap_err();
        assert_answer(
            busy,
            StatusCode::SERVICE_UNAVAILABLE,
            "database_unavailable",
        );
        let null = sqlx::query("INSERT INTO t VALUES (NULL)")
            .execute(&mut holder)
            .await
            .unwrap_err();
        assert_answer(null, StatusCode::INTERNAL_SERVER_ERROR, "internal_error");
        let _ = (other.close().await, holder.close().await);
        let _ = std::fs::remove_file(&path);
    }
}
