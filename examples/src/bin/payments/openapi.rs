//! The API's OpenAPI document, served at `GET /openapi.json`.
//!
//! Each route is documented by `#[utoipa::path]` on its handler (above `#[idempotent]`), and
//! routed through utoipa-axum's `routes!`, so a route cannot be served without being documented.
//! [`IdempotencyDoc`] then adds to the three idempotent operations the `Idempotency-Key`
//! parameter and the engine's own answers (400, 409, 422, 503).

use axum::body::Bytes;
use axum::http::header;
use axum::response::IntoResponse;
use idem_runtime::Idempotency;
use idem_runtime::openapi::{IdempotencyDoc, Problem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// What every `/v1` operation needs: `Authorization: Bearer sk_test_<org>` (named in the
/// routes' `security(("api_key" = []))`).
const API_KEY: &str = "api_key";

/// The parts of the document that no route carries: title, security scheme, shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "payments",
        description = "A small payments API whose mutating routes are safe to retry: send an \
                       `Idempotency-Key` and a retry gets the first answer. Errors are \
                       `application/problem+json` (RFC 9457) with a stable `code`.",
    ),
    modifiers(&BearerKey),
    components(schemas(Problem)),
    tags((name = "charges"), (name = "payouts"), (name = "operations")),
)]
pub(crate) struct ApiDoc;

struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some("`sk_test_<org>`: the org owns its charges and keys.".into());
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(API_KEY, SecurityScheme::Http(scheme));
    }
}

/// Completes the routes' document with what `engine` makes of its idempotent operations.
pub(crate) fn document(mut doc: utoipa::openapi::OpenApi, engine: &Idempotency) -> Document {
    IdempotencyDoc::new(engine).apply(&mut doc);
    let json = doc.to_json().expect("an OpenAPI document serializes");
    Document(Bytes::from(json))
}

/// The document, serialized once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Document(Bytes);

impl IntoResponse for Document {
    fn into_response(self) -> axum::response::Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}
