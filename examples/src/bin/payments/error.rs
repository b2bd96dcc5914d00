//! The service's errors: `application/problem+json` (RFC 9457) with a stable `code` member, the
//! same shape as the idempotency engine's own answers, so clients parse one format.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The longest `detail` sent, in characters: details may quote the request, and an error must
/// not echo megabytes back.
const MAX_DETAIL_CHARS: usize = 300;
/// How much of a client's value a detail quotes.
const MAX_QUOTED_CHARS: usize = 40;
/// The largest request body, in bytes (axum's default, stated so that [`refuse_oversized`]
/// and the router's `DefaultBodyLimit` agree).
pub(crate) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

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
    fn invalid_json(error: &serde_json::Error) -> Self {
        let message = error.to_string();
        let position = format!(" at line {} column {}", error.line(), error.column());
        let what = message.strip_suffix(&position).unwrap_or(&message);
        let detail = match error.line() {
            0 => format!("invalid JSON body: {}", bounded(what, 200)),
            _ => format!("invalid JSON body: {}{position}", bounded(what, 200)),
        };
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
        doc.insert(
            "detail".into(),
            bounded(&self.detail, MAX_DETAIL_CHARS).into(),
        );
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
                match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        "the request body is too large",
                    ),
                    _ => ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "request_body_unreadable",
                        "the request body could not be read",
                    ),
                }
                .into_response()
            })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return serde_json::from_slice(b"{}")
                .map(ApiJson)
                .map_err(|e| ApiError::invalid_json(&e).into_response());
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
            .map_err(|e| ApiError::invalid_json(&e).into_response())
    }
}

/// `value` cut to `max` characters, with `…` when cut.
fn bounded(value: &str, max: usize) -> Cow<'_, str> {
    match value.char_indices().nth(max) {
        None => Cow::Borrowed(value),
        Some((end, _)) => Cow::Owned(format!("{}…", &value[..end])),
    }
}

/// A client's value for an error message: quoted, and cut short if long.
pub(crate) fn quote(value: &str) -> String {
    format!("`{}`", bounded(value, MAX_QUOTED_CHARS))
}

/// Middleware (`from_fn`): a request whose `Content-Length` is over [`MAX_BODY_BYTES`] is
/// answered 413 at once, before anyone waits for a body that will be refused anyway.
pub(crate) async fn refuse_oversized(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the request body is over 2 MiB",
        )
        .into_response();
    }
    next.run(request).await
}

/// Middleware (`map_response`) that makes every error answer a problem document: axum's own
/// rejections (a path that is not UTF-8, a method or route that does not exist, ...) are plain
/// text. Their text is dropped, not passed on: it may quote the request.
pub(crate) async fn problems_only(response: Response) -> Response {
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/problem+json"));
    if is_problem || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (code, detail) = match status {
        StatusCode::BAD_REQUEST => (
            "bad_request",
            "the request's URL, headers or body are malformed",
        ),
        StatusCode::NOT_FOUND => ("resource_missing", "no such resource"),
        StatusCode::METHOD_NOT_ALLOWED => ("method_not_allowed", "the method is not allowed here"),
        StatusCode::REQUEST_TIMEOUT => ("request_timeout", "the request was not received in time"),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "the request body is too large"),
        StatusCode::URI_TOO_LONG => ("uri_too_long", "the URL is too long"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", "send the body as JSON"),
        s if s.is_server_error() => ("internal_error", "an internal error occurred; retry later"),
        _ => ("request_rejected", "the request was rejected"),
    };
    let mut problem = ApiError::new(status, code, detail).into_response();
    let kept = [
        header::ALLOW,
        header::RETRY_AFTER,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
    ];
    for name in kept {
        if let Some(value) = response.headers().get(&name) {
            problem.headers_mut().insert(name, value.clone());
        }
    }
    problem
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

    async fn assert_problem_response(response: Response, status: StatusCode, code: &str) {
        assert_eq!(response.status(), status);
        let content_type = &response.headers()[header::CONTENT_TYPE];
        assert_eq!(content_type, "application/problem+json");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (doc["status"].as_u64(), &doc["code"]),
            (Some(status.as_u16().into()), &code.into())
        );
    }

    #[tokio::test]
    async fn axum_rejections_become_problem_documents() {
        use axum::Router;
        use axum::body::Body;
        use axum::extract::{DefaultBodyLimit, Path};
        use tower::ServiceExt;

        async fn take(Path(_): Path<String>, ApiJson(_): ApiJson<Value>) {}
        let bare = Router::new()
            .route("/{id}", axum::routing::post(take))
            .layer(DefaultBodyLimit::max(8));
        let app = bare
            .clone()
            .layer(axum::middleware::map_response(problems_only));
        let json = |uri: &str, body: &'static str| {
            axum::http::Request::post(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .unwrap()
        };

        // ApiJson's own answer: a body over the limit (axum's is plain text).
        let too_large = bare.oneshot(json("/x", "[1, 2, 3, 4]")).await.unwrap();
        assert_problem_response(
            too_large,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        )
        .await;
        // axum's plain-text rejection of a path that is not UTF-8, through the middleware.
        let not_utf8 = app.clone().oneshot(json("/%FF", "{}")).await.unwrap();
        assert_problem_response(not_utf8, StatusCode::BAD_REQUEST, "bad_request").await;
        // Anything else passes untouched.
        let ok = app.oneshot(json("/x", "{}")).await.unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
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
