use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[idempotent(scope = "global")]
async fn create(amount: u64, _body: String) -> String {
    amount.to_string()
}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
