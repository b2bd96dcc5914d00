//! Request bodies: JSON, or a form as Stripe's SDKs send it, into one typed request.
//!
//! A form (`application/x-www-form-urlencoded`) nests with brackets, as Stripe's API does:
//! `metadata[order]=42` is `{"metadata": {"order": "42"}}`, whether the brackets are sent as
//! they are (stripe-node) or percent-encoded (stripe-python). Values are strings on the wire
//! and take the type the request asks for: `amount=2000` is the integer 2000.
//!
//! Forms are parsed by `serde_qs`, the one crate that reads Rack-style brackets into serde
//! types (`serde_urlencoded`, behind axum's `Form`, reads flat pairs only); it needs nothing
//! this service does not already build. The engine fingerprints forms canonically, so a form
//! with the same pairs in another order is the same request, which is what this parser makes
//! of it too: a name sent twice is refused here, rather than one of its values silently chosen.

use std::pin::Pin;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The largest request body, in bytes (axum's default, stated so that [`refuse_oversized`]
/// and the router's `DefaultBodyLimit` agree).
pub(crate) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// A request's parameters, from a JSON or a form body; every rejection is one of the
/// service's error documents (axum's `Json` and `Form` answer in plain text). An empty body
/// reads as `{}`, so `POST /v1/charges/{id}/refunds` needs no body at all.
#[derive(Debug)]
pub(crate) struct ApiBody<T>(pub(crate) T);

/// The body encodings [`ApiBody`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Json,
    Form,
}

/// The encoding `Content-Type` names, if it is one [`ApiBody`] reads.
fn encoding(content_type: Option<&str>) -> Option<Encoding> {
    let mime = content_type?.split(';').next()?.trim();
    if mime.eq_ignore_ascii_case("application/json")
        || (mime.starts_with("application/") && mime.ends_with("+json"))
    {
        Some(Encoding::Json)
    } else if mime.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        Some(Encoding::Form)
    } else {
        None
    }
}

impl<S, T> FromRequest<S> for ApiBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = request.headers().get(header::CONTENT_TYPE);
        let encoding = encoding(content_type.and_then(|v| v.to_str().ok()));
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => {
                        ApiError::payload_too_large("the request body is too large")
                    }
                    _ => ApiError::body_unreadable(),
                }
                .into_response()
            })?;
        let parsed = if bytes.is_empty() {
            serde_json::from_slice(b"{}").map_err(|e| ApiError::invalid_json(&e))
        } else {
            match encoding {
                Some(Encoding::Json) => {
                    serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid_json(&e))
                }
                Some(Encoding::Form) => from_form(&bytes),
                None => Err(ApiError::unsupported_media_type()),
            }
        };
        parsed.map(ApiBody).map_err(IntoResponse::into_response)
    }
}

/// Reads a form body into `T`: brackets nest (encoded or not), a name sent twice is refused.
pub(crate) fn from_form<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_qs::Config::new()
        .use_form_encoding(true)
        .duplicate_key_behavior(serde_qs::DuplicateKeyBehavior::Error)
        .deserialize_bytes(body)
        .map_err(|e| ApiError::invalid_form(&e))
}

/// How much of a refused body [`refuse_oversized`] reads and discards after answering, and for
/// how long at most.
const MAX_DRAINED_BYTES: u64 = 8 * MAX_BODY_BYTES as u64;
const DRAIN_LINGER: Duration = Duration::from_secs(1);

/// Middleware (`from_fn`): a request whose `Content-Length` is over [`MAX_BODY_BYTES`] is
/// answered 413 at once, before anyone waits for a body that will be refused anyway, and its
/// connection closed.
///
/// Until it closes, what arrives of the body is read and thrown away, for [`DRAIN_LINGER`] at
/// most and up to [`MAX_DRAINED_BYTES`]: many clients (Python's `requests`, for one) send the
/// whole body before reading the answer, and a connection closed on unread bytes is reset,
/// which fails their write and can lose the 413 on its way.
pub(crate) async fn refuse_oversized(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(declared) = declared.filter(|len| *len > MAX_BODY_BYTES as u64) else {
        return next.run(request).await;
    };
    if declared <= MAX_DRAINED_BYTES {
        let mut body = request.into_body();
        // Framed by `Content-Length`: at most `declared` bytes arrive.
        let drain = async move {
            loop {
                let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
                if !matches!(frame.await, Some(Ok(_))) {
                    break;
                }
            }
        };
        tokio::spawn(tokio::time::timeout(DRAIN_LINGER, drain));
    }
    let mut response =
        ApiError::payload_too_large("the request body is over 2 MiB").into_response();
    let close = HeaderValue::from_static("close");
    response.headers_mut().insert(header::CONNECTION, close);
    response
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::{DefaultBodyLimit, Path};
    use serde::Deserialize;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::envelope::errors_only;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Params {
        amount: i64,
        description: Option<String>,
        metadata: Option<BTreeMap<String, String>>,
    }

    fn form(body: &str) -> Result<Params, ApiError> {
        from_form(body.as_bytes())
    }

    #[test]
    fn forms_nest_with_brackets_sent_either_way() {
        let expected = Params {
            amount: 2000,
            description: Some("order 42".into()),
            metadata: Some(BTreeMap::from([
                ("order".into(), "42".into()),
                ("note".into(), "a&b=c".into()),
            ])),
        };
        // stripe-python percent-encodes brackets; stripe-node sends them as they are.
        let python =
            "amount=2000&description=order+42&metadata%5Border%5D=42&metadata%5Bnote%5D=a%26b%3Dc";
        let node = "metadata[note]=a%26b%3Dc&amount=2000&metadata[order]=42&description=order%2042";
        assert_eq!(form(python).unwrap(), expected);
        assert_eq!(form(node).unwrap(), expected);
        let bare = form("amount=5").unwrap();
        assert_eq!(
            (bare.amount, bare.description, bare.metadata),
            (5, None, None)
        );
    }

    #[test]
    fn bad_forms_are_invalid_form_errors_that_quote_little() {
        let long = "x".repeat(100_000);
        for bad in [
            "amount=ten".to_owned(),
            "amount=1&amount=2".to_owned(),
            "amount=1&colour=red".to_owned(),
            "description=x".to_owned(),
            "amount=1&metadata[a][b]=c".to_owned(),
            format!("amount=1&{long}=1"),
        ] {
            let err = form(&bad).unwrap_err();
            assert_eq!(err.code(), "invalid_form", "{bad:.40}");
            assert!(err.detail().len() < 300, "{}", err.detail());
        }
    }

    async fn status_and_body(
        app: &Router,
        request: axum::http::Request<Body>,
    ) -> (StatusCode, Value) {
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn post(content_type: Option<&str>, body: &'static str) -> axum::http::Request<Body> {
        let mut request = axum::http::Request::post("/x");
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        request.body(Body::from(body)).unwrap()
    }

    #[tokio::test]
    async fn the_content_type_chooses_the_parser() {
        async fn echo(ApiBody(params): ApiBody<BTreeMap<String, Value>>) -> axum::Json<Value> {
            axum::Json(serde_json::to_value(params).unwrap())
        }
        let app = Router::new().route("/{id}", axum::routing::post(echo));
        let json = post(Some("application/json"), r#"{"amount": 1}"#);
        assert_eq!(
            status_and_body(&app, json).await,
            (StatusCode::OK, serde_json::json!({ "amount": 1 }))
        );
        let form = post(
            Some("application/x-www-form-urlencoded; charset=utf-8"),
            "amount=1",
        );
        assert_eq!(
            status_and_body(&app, form).await,
            (StatusCode::OK, serde_json::json!({ "amount": "1" }))
        );
        // No body at all is `{}`, whatever the content type.
        let empty = post(None, "");
        assert_eq!(
            status_and_body(&app, empty).await,
            (StatusCode::OK, serde_json::json!({}))
        );
        // A body of whitespace is a body: not JSON, and not a document to read as `{}`.
        let blank = post(Some("application/json"), "\n");
        let (status, doc) = status_and_body(&app, blank).await;
        assert_eq!(
            (status, &doc["code"]),
            (StatusCode::BAD_REQUEST, &"invalid_json".into())
        );
        let text = post(Some("text/plain"), "amount=1");
        let (status, doc) = status_and_body(&app, text).await;
        assert_eq!(
            (status, &doc["code"]),
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &"unsupported_media_type".into()
            )
        );
    }

    #[tokio::test]
    async fn axum_rejections_become_error_documents() {
        async fn take(Path(_): Path<String>, ApiBody(_): ApiBody<Value>) {}
        let bare = Router::new()
            .route("/{id}", axum::routing::post(take))
            .layer(DefaultBodyLimit::max(8));
        let app = bare
            .clone()
            .layer(axum::middleware::map_response(errors_only));
        let json = |uri: &str, body: &'static str| {
            axum::http::Request::post(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body))
                .unwrap()
        };

        // ApiBody's own answer: a body over the limit (axum's is plain text).
        let (status, doc) = status_and_body(&bare, json("/x", "[1, 2, 3, 4]")).await;
        assert_eq!(
            (status, &doc["code"]),
            (StatusCode::PAYLOAD_TOO_LARGE, &"payload_too_large".into())
        );
        // axum's plain-text rejection of a path that is not UTF-8, through the middleware.
        let (status, doc) = status_and_body(&app, json("/%FF", "{}")).await;
        assert_eq!(
            (status, &doc["code"]),
            (StatusCode::BAD_REQUEST, &"bad_request".into())
        );
        // Anything else passes untouched.
        let ok = app.oneshot(json("/x", "{}")).await.unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
    }
}
