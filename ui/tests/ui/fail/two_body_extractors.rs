use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[idempotent(scope = "global")]
async fn create(Json(body): Json<String>, raw: String) -> String {
    body + &raw
}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
