#![deny(warnings)]

// `#[utoipa::path]` above `#[idempotent]` documents the handler, for `#[openapi(paths(..))]` and
// for utoipa-axum's `routes!`.
use axum::Router;
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
use utoipa::OpenApi;
use utoipa_axum::{router::OpenApiRouter, routes};

/// Creates a thing.
#[utoipa::path(post, path = "/things", responses((status = 201, body = String)))]
#[idempotent(scope = "global", key = "required")]
async fn create_thing(body: String) -> String {
    body
}

#[derive(OpenApi)]
#[openapi(paths(create_thing))]
struct ApiDoc;

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let (_app, _doc): (Router, utoipa::openapi::OpenApi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_thing))
        .with_state(idempotency)
        .split_for_parts();
}
