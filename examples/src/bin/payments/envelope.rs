//! How errors look on the wire, chosen once at start-up with `ERROR_FORMAT`:
//!
//! - `problem` (the default): `application/problem+json` (RFC 9457) with a stable `code`, the
//!   idempotency engine's own shape.
//! - `stripe`: Stripe's envelope, `{"error": {"type", "code", "message", "param", ...}}` as
//!   `application/json`, with Stripe's error types and a `Stripe-Should-Retry` header saying
//!   whether a retry could help. Stripe's SDKs read exactly this: they raise `CardError` for a
//!   `card_error`, `IdempotencyError` for an `idempotency_error` answered 400, and follow
//!   `Stripe-Should-Retry` before their own rules (retry a 409 or a 5xx).
//!
//! Every error goes through here: the service's own ([`ApiError`](crate::error::ApiError)), the
//! engine's (through [`render_rejection`], given to `Builder::render_rejections`), axum's
//! rejections ([`errors_only`]), and the server loop's 408 and 503 (`serve`). The format is
//! process-wide, like the tracing subscriber and the metrics recorder: [`ErrorFormat::install`]
//! sets it before the first request. Stored answers are replayed as they were first sent: a
//! decline stored under `ERROR_FORMAT=stripe` replays in Stripe's envelope.

use std::sync::OnceLock;

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idem_runtime::Rejection;
use serde_json::{Map, Value};

/// The content type of problem documents, for the OpenAPI document's responses.
pub(crate) const PROBLEM: &str = "application/problem+json";

/// The header Stripe's SDKs read before deciding to retry.
pub(crate) const STRIPE_SHOULD_RETRY: HeaderName = HeaderName::from_static("stripe-should-retry");

/// The wire format of every error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ErrorFormat {
    /// `application/problem+json` with a `code` member.
    #[default]
    Problem,
    /// Stripe's `{"error": {...}}` envelope, `application/json`, with `Stripe-Should-Retry`.
    Stripe,
}

static FORMAT: OnceLock<ErrorFormat> = OnceLock::new();

impl ErrorFormat {
    /// The `ERROR_FORMAT` value naming this format.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Problem => "problem",
            Self::Stripe => "stripe",
        }
    }

    /// Makes `self` the format of every error this process answers. Call once, before serving;
    /// a second call is ignored.
    pub(crate) fn install(self) {
        let _ = FORMAT.set(self);
    }

    /// The installed format ([`ErrorFormat::Problem`] until one is installed).
    pub(crate) fn current() -> Self {
        FORMAT.get().copied().unwrap_or_default()
    }
}

/// One error answer, before it is written in a format.
#[derive(Debug)]
pub(crate) struct ErrorDoc<'a> {
    pub(crate) status: StatusCode,
    /// The stable code: `card_declined`, `idempotency_key_reused`, ...
    pub(crate) code: &'a str,
    /// For people; already bounded by the caller.
    pub(crate) detail: &'a str,
    /// More members (`param`, `charge`, ...), written beside `code`.
    pub(crate) extra: &'a [(&'a str, Value)],
}

impl ErrorDoc<'_> {
    /// The answer in `format`: status, content type and body, plus `Stripe-Should-Retry` in
    /// Stripe's format. Callers add their own headers (`Retry-After`, `WWW-Authenticate`).
    pub(crate) fn render(&self, format: ErrorFormat) -> Response {
        let mut members = Map::new();
        let content_type = match format {
            ErrorFormat::Problem => {
                members.insert("type".into(), "about:blank".into());
                members.insert(
                    "title".into(),
                    self.status.canonical_reason().unwrap_or("Error").into(),
                );
                members.insert("status".into(), self.status.as_u16().into());
                members.insert("detail".into(), self.detail.into());
                members.insert("code".into(), self.code.into());
                "application/problem+json"
            }
            ErrorFormat::Stripe => {
                members.insert("type".into(), stripe_type(self.status, self.code).into());
                members.insert("code".into(), self.code.into());
                members.insert("message".into(), self.detail.into());
                "application/json"
            }
        };
        for (name, value) in self.extra {
            members.insert((*name).into(), value.clone());
        }
        let doc = match format {
            ErrorFormat::Problem => Value::Object(members),
            ErrorFormat::Stripe => serde_json::json!({ "error": members }),
        };
        let body = serde_json::to_vec(&doc).unwrap_or_default();
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
        )
            .into_response();
        if format == ErrorFormat::Stripe {
            let retry = if should_retry(self.status, self.code) {
                "true"
            } else {
                "false"
            };
            response
                .headers_mut()
                .insert(STRIPE_SHOULD_RETRY, HeaderValue::from_static(retry));
        }
        response
    }
}

/// Stripe's error type for an answer: what its SDKs turn into an exception class.
fn stripe_type(status: StatusCode, code: &str) -> &'static str {
    match code {
        "idempotency_key_reused"
        | "idempotency_key_in_progress"
        | "idempotency_response_too_large" => "idempotency_error",
        "card_declined" => "card_error",
        _ if status.is_server_error() => "api_error",
        _ => "invalid_request_error",
    }
}

/// Whether sending the same request again could get another answer: the first one is still
/// running (409 in progress), the body came too slowly (408), or something was briefly down
/// (503, or a response body that failed; the key was released). Everything else would get the
/// same answer (or its replay), so Stripe's SDKs are told not to retry, even a 409 or a 500.
fn should_retry(status: StatusCode, code: &str) -> bool {
    matches!(
        code,
        "idempotency_key_in_progress" | "request_body_timeout" | "response_body_failed"
    ) || status == StatusCode::SERVICE_UNAVAILABLE
}

/// The engine's own answers in Stripe's format, for `Builder::render_rejections` (the engine
/// then sets the status and `Retry-After` itself).
pub(crate) fn render_rejection(rejection: &Rejection) -> Response {
    let original;
    let extra: &[(&str, Value)] = match rejection {
        Rejection::ResponseTooLarge { original_status } => {
            original = [("original_status", Value::from(*original_status))];
            &original
        }
        _ => &[],
    };
    ErrorDoc {
        status: rejection.status(),
        code: rejection.code(),
        detail: &rejection.to_string(),
        extra,
    }
    .render(ErrorFormat::Stripe)
}

/// Middleware (`map_response`) that makes every error answer one of this service's documents
/// in the installed format: axum's own rejections (a path that is not UTF-8, a method or route
/// that does not exist, ...) are plain text. Their text is dropped, not passed on: it may quote
/// the request.
///
/// In Stripe's format it also answers a reused key `400`, as Stripe does, where the engine
/// answers `422`: Stripe's SDKs raise `IdempotencyError` only for a 400 or a 404.
pub(crate) async fn errors_only(response: Response) -> Response {
    errors_in(ErrorFormat::current(), response)
}

fn errors_in(format: ErrorFormat, mut response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let ours = match format {
        ErrorFormat::Problem => "application/problem+json",
        ErrorFormat::Stripe => "application/json",
    };
    let is_ours = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(ours.as_bytes()));
    if is_ours {
        if format == ErrorFormat::Stripe && status == StatusCode::UNPROCESSABLE_ENTITY {
            *response.status_mut() = StatusCode::BAD_REQUEST;
        }
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
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "send the body as JSON or as a form",
        ),
        s if s.is_server_error() => ("internal_error", "an internal error occurred; retry later"),
        _ => ("request_rejected", "the request was rejected"),
    };
    let mut replaced = ErrorDoc {
        status,
        code,
        detail,
        extra: &[],
    }
    .render(format);
    let kept = [
        header::ALLOW,
        header::RETRY_AFTER,
        header::WWW_AUTHENTICATE,
        header::CONNECTION,
    ];
    for name in kept {
        if let Some(value) = response.headers().get(&name) {
            replaced.headers_mut().insert(name, value.clone());
        }
    }
    replaced
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn retry_header(response: &Response) -> Option<&str> {
        response
            .headers()
            .get(STRIPE_SHOULD_RETRY)
            .map(|v| v.to_str().unwrap())
    }

    #[tokio::test]
    async fn stripe_errors_are_enveloped_with_stripe_types() {
        let decline = ErrorDoc {
            status: StatusCode::PAYMENT_REQUIRED,
            code: "card_declined",
            detail: "the card was declined",
            extra: &[("charge", "ch_1".into())],
        }
        .render(ErrorFormat::Stripe);
        assert_eq!(decline.headers()[header::CONTENT_TYPE], "application/json");
        assert_eq!(retry_header(&decline), Some("false"));
        assert_eq!(
            body(decline).await,
            serde_json::json!({ "error": {
                "type": "card_error", "code": "card_declined",
                "message": "the card was declined", "charge": "ch_1"
            }})
        );
        for (status, code, kind, retry) in [
            (400, "invalid_request", "invalid_request_error", false),
            (401, "unauthorized", "invalid_request_error", false),
            (
                409,
                "charge_already_refunded",
                "invalid_request_error",
                false,
            ),
            (408, "request_body_timeout", "invalid_request_error", true),
            (500, "internal_error", "api_error", false),
            (503, "processor_unavailable", "api_error", true),
            (503, "server_busy", "api_error", true),
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            let doc = ErrorDoc {
                status,
                code,
                detail: "x",
                extra: &[],
            };
            let response = doc.render(ErrorFormat::Stripe);
            assert_eq!(response.status(), status);
            assert_eq!(
                retry_header(&response),
                Some(if retry { "true" } else { "false" })
            );
            assert_eq!(body(response).await["error"]["type"], kind, "{code}");
        }
    }

    #[tokio::test]
    async fn engine_answers_are_idempotency_errors_that_say_whether_to_retry() {
        let reused = render_rejection(&Rejection::KeyReused);
        assert_eq!(retry_header(&reused), Some("false"));
        let doc = body(reused).await;
        assert_eq!(doc["error"]["type"], "idempotency_error");
        assert_eq!(doc["error"]["code"], "idempotency_key_reused");

        let running = render_rejection(&Rejection::InProgress {
            retry_after: Duration::from_secs(1),
        });
        assert_eq!(running.status(), StatusCode::CONFLICT);
        assert_eq!(retry_header(&running), Some("true"));
        assert_eq!(body(running).await["error"]["type"], "idempotency_error");

        let down = render_rejection(&Rejection::StoreUnavailable {
            retry_after: Duration::from_secs(1),
        });
        assert_eq!(retry_header(&down), Some("true"));
        assert_eq!(body(down).await["error"]["type"], "api_error");

        let too_large = render_rejection(&Rejection::ResponseTooLarge {
            original_status: 201,
        });
        assert_eq!(retry_header(&too_large), Some("false"));
        assert_eq!(body(too_large).await["error"]["original_status"], 201);
    }

    #[tokio::test]
    async fn plain_errors_are_replaced_in_either_format() {
        let plain = || {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "GET")],
                "Method Not Allowed",
            )
                .into_response()
        };
        let problem = errors_in(ErrorFormat::Problem, plain());
        assert_eq!(problem.headers()[header::ALLOW], "GET");
        assert_eq!(body(problem).await["code"], "method_not_allowed");
        let stripe = errors_in(ErrorFormat::Stripe, plain());
        assert_eq!(stripe.headers()[header::ALLOW], "GET");
        assert_eq!(body(stripe).await["error"]["code"], "method_not_allowed");
        // Successes pass untouched.
        let ok = errors_in(ErrorFormat::Stripe, "ok".into_response());
        assert_eq!(
            ok.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }

    #[test]
    fn a_reused_key_is_400_in_stripe_format_only() {
        let reused = || {
            let mut response = render_rejection(&Rejection::KeyReused);
            *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY; // as the engine sends it
            response
        };
        assert_eq!(
            errors_in(ErrorFormat::Stripe, reused()).status(),
            StatusCode::BAD_REQUEST
        );
        let problem = idem_runtime::Problem(Rejection::KeyReused).into_response();
        assert_eq!(
            errors_in(ErrorFormat::Problem, problem).status(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
}
