#![deny(warnings)]

// `#[utoipa::path]` below `#[idempotent]` documents the handler too, for `#[openapi(paths(..))]`
// and for utoipa-axum's `routes!`, with the doc comment above both attributes.
use axum::Router;
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Creates a thing.
#[idempotent(scope = "global", key = "required")]
#[utoipa::path(post, path = "/things", responses((status = 201, body = String)))]
async fn create_thing(body: String) -> String {
    body
}

#[derive(OpenApi)]
#[openapi(paths(create_thing))]
struct ApiDoc;

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let (_app, doc): (Router, utoipa::openapi::OpenApi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_thing))
        .with_state(idempotency)
        .split_for_parts();
    let operation = doc.paths.paths["/things"].post.as_ref().unwrap();
    assert_eq!(operation.operation_id.as_deref(), Some("create_thing"));
    assert_eq!(operation.summary.as_deref(), Some("Creates a thing."));
}
