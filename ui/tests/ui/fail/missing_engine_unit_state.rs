use axum::{Router, routing::post};
use idem_runtime::idempotent;

#[idempotent(scope = "global")]
async fn create() -> &'static str {
    "created"
}

fn main() {
    let _: Router = Router::new().route("/", post(create));
}
