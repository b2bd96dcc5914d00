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

/// A database that cannot be reached, or is too busy right now, is `503 database_unavailable`
/// with `Retry-After`: the request may be retried as it is (the idempotency engine releases its
/// record). Any other database error is a bug or bad data: `500 internal_error`.
impl From<sqlx::Error> for ApiError {
    fn from(error: sqlx::Error) -> Self {
        if !is_transient(&error) {
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

/// Whether `error` says the database is out of reach or overloaded, not that the request or
/// the code is wrong.
fn is_transient(error: &sqlx::Error) -> bool {
    use sqlx::postgres::PgDatabaseError;
    use sqlx::sqlite::SqliteError;
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
                // SQLSTATE: connection exception, insufficient resources, shutting down or not
                // yet accepting connections, serialization failure, deadlock, lock timeout,
                // statement timeout.
                let code = pg.code();
                code.starts_with("08")
                    || code.starts_with("53")
                    || matches!(
                        code,
                        "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "55P03" | "57014"
                    )
            } else if db.try_downcast_ref::<SqliteError>().is_some() {
                // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
                db.code()
                    .and_then(|code| code.parse::<u32>().ok())
                    .is_some_and(|code| matches!(code & 0xff, 5 | 6))
            } else {
                false
            }
        }
        _ => false,
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
            .map_err(IntoResponse::into_response)?;
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
