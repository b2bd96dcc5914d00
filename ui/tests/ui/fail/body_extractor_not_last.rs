use axum::{Json, Router, extract::State, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[idempotent(scope = "global")]
async fn create(Json(body): Json<String>, State(_engine): State<Idempotency>) -> String {
    body
}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
