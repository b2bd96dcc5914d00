//! What HTTP clients see when the engine answers itself: `application/problem+json` (RFC 9457).

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};

use idem_core::rejection::Rejection;

/// A [`Rejection`] as the HTTP faces send it unless the builder's
/// [`render_rejections`](idem_core::idempotency::Builder::render_rejections) says otherwise: an
/// `application/problem+json` document (RFC 9457) with the rejection's status, its stable
/// `code`, and `Retry-After` where a retry can succeed.
///
/// ```
/// use axum::response::IntoResponse;
/// use idem_runtime::{Problem, Rejection};
///
/// let response = Problem(Rejection::KeyReused).into_response();
/// assert_eq!(response.status(), 422);
/// assert_eq!(response.headers()["content-type"], "application/problem+json");
/// ```
#[derive(Debug)]
pub struct Problem(pub Rejection);

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let Self(rejection) = self;
        let extra: &[(&str, serde_json::Value)] = match rejection {
            Rejection::ResponseTooLarge { original_status } => {
                &[("original_status", serde_json::Value::from(original_status))]
            }
            _ => &[],
        };
        let document = problem(
            rejection.status(),
            rejection.code(),
            &rejection.to_string(),
            extra,
        );
        let mut response = document.into_response();
        if let Some(value) = rejection.retry_after_header() {
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
    use std::time::Duration;

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
            let response = Problem(rejection).into_response();
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
        let response = Problem(Rejection::InProgress {
            retry_after: Duration::from_secs(1),
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let doc = body_json(response).await;
        assert_eq!(doc["code"], "idempotency_key_in_progress");
        let detail = doc["detail"].as_str().unwrap();
        assert!(detail.starts_with("Request is being processed"), "{detail}");
    }

    #[tokio::test]
    async fn retry_after_is_rounded_up_to_whole_seconds() {
        let response = Problem(Rejection::InProgress {
            retry_after: Duration::from_millis(1500),
        })
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let response = Problem(Rejection::StoreUnavailable {
            retry_after: Duration::ZERO,
        })
        .into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
