#![deny(warnings)]

use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "global")]
#[tracing::instrument(skip_all, fields(amount = body.0))]
async fn idempotent_outside(Json(body): Json<(u64,)>) -> String {
    tracing::info!("charging");
    body.0.to_string()
}

#[tracing::instrument(level = "debug", ret)]
#[idempotent(scope = "global")]
async fn instrument_outside(Json(body): Json<(u64,)>) -> String {
    body.0.to_string()
}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/a", post(idempotent_outside))
        .route("/b", post(instrument_outside))
        .with_state(idempotency);
}
