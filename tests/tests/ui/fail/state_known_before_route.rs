use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[idempotent(scope = "global")]
async fn create(Json(body): Json<String>, _: String) -> String {
    body
}

fn main() {
    // The state is fixed before `post(create)` is checked: rustc reports the `Handler` bound.
    let _ = Router::<Idempotency>::new().route("/", post(create));
}
