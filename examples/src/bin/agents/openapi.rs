//! The API's OpenAPI document, served at `GET /openapi.json`.
//!
//! The routes document themselves (`#[utoipa::path]`, routed through utoipa-axum's
//! `routes!`); the idempotency layer's part comes from the layer itself:
//! [`IdempotencyDoc::nested_layer`] gives every operation it covers (`POST` under `/api`) the
//! optional `X-Idempotency-Key` parameter and the engine's answers (400, 409, 422, 503), and
//! leaves the reads and `/healthz` alone.

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use idem_runtime::openapi::{IdempotencyDoc, ProblemSchema};
use idem_runtime::{Idempotency, IdempotencyLayer};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// What every `/api` operation needs: `Authorization: Bearer agent_<name>` (named in the
/// routes' `security(("agent" = []))`).
const AGENT: &str = "agent";

/// The parts of the document that no route carries: title, security scheme, shared schemas.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "agents",
        description = "An agent platform's API whose every mutating route is safe to retry: \
                       send an `X-Idempotency-Key` and a retry gets the first answer, per agent, \
                       for 24 hours. Errors are `application/problem+json` (RFC 9457) with a \
                       stable `code`.",
    ),
    modifiers(&BearerAgent),
    components(schemas(ProblemSchema)),
    tags((name = "dwellers"), (name = "stories"), (name = "operations")),
)]
pub(crate) struct ApiDoc;

struct BearerAgent;

impl Modify for BearerAgent {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some("`agent_<name>`: the agent whose keys these are.".into());
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(AGENT, SecurityScheme::Http(scheme));
    }
}

/// Completes the routes' document with what `layer`, applied to the routes under `prefix`,
/// makes of them.
pub(crate) fn document(
    mut doc: utoipa::openapi::OpenApi,
    idempotency: &Idempotency,
    prefix: &str,
    layer: &IdempotencyLayer,
) -> Document {
    IdempotencyDoc::new(idempotency)
        .nested_layer(prefix, layer)
        .modify(&mut doc);
    let json = serde_json::to_vec(&doc).expect("an OpenAPI document serializes");
    Document(Bytes::from(json))
}

/// The document, serialized once at start-up.
#[derive(Debug, Clone)]
pub(crate) struct Document(Bytes);

impl IntoResponse for Document {
    fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}
