use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

// Wrong order: `#[axum::debug_handler]` must go below `#[idempotent]`, on the function.
#[axum::debug_handler(state = Idempotency)]
#[idempotent(scope = "global")]
async fn create() -> &'static str {
    "created"
}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
