use axum::{Router, extract::State, routing::post};
use idem_runtime::{Idempotency, idempotent};

// `State<Idempotency>`: the state is inferred to be `Idempotency`.
#[idempotent(scope = "global")]
async fn create(State(_engine): State<Idempotency>, amount: u64, _body: String) -> String {
    amount.to_string()
}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
