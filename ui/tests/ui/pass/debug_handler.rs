#![deny(warnings)]

// `#[axum::debug_handler]` checks the function that holds the body, so it goes below
// `#[idempotent]`.
use axum::{Json, Router, extract::State, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "global")]
#[axum::debug_handler]
async fn create(State(_engine): State<Idempotency>, Json(body): Json<String>) -> String {
    body
}

#[idempotent(scope = "global")]
#[axum::debug_handler(state = Idempotency)]
async fn no_extractors() -> &'static str {
    "ok"
}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/a", post(create))
        .route("/b", post(no_extractors))
        .with_state(idempotency);
}
