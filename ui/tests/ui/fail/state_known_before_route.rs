use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[idempotent(scope = "global")]
async fn create(amount: u64, _body: String) -> String {
    amount.to_string()
}

fn main() {
    // The state is fixed before `post(create)` is checked: the error is still about the argument.
    let _ = Router::<Idempotency>::new().route("/", post(create));
}
