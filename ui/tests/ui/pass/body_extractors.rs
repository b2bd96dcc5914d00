#![deny(warnings)]

use axum::body::Bytes;
use axum::extract::{Form, Request, State};
use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "global")]
async fn form(Form(fields): Form<Vec<(String, String)>>) -> String {
    format!("{}", fields.len())
}

#[idempotent(scope = "global")]
async fn bytes(State(_engine): State<Idempotency>, body: Bytes) -> String {
    format!("{}", body.len())
}

#[idempotent(scope = "global")]
async fn string(body: String) -> String {
    body
}

#[idempotent(scope = "global")]
async fn request(request: Request) -> String {
    request.uri().to_string()
}

#[idempotent(scope = "global")]
async fn nothing() {}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    // `Router<()>`: the engine itself is the state.
    let _app: Router = Router::new()
        .route("/form", post(form))
        .route("/bytes", post(bytes))
        .route("/string", post(string))
        .route("/request", post(request))
        .route("/nothing", post(nothing))
        .with_state(idempotency);
}
