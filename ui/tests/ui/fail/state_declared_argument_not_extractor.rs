use axum::{Router, extract::FromRef, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
}

// With the state known, the error is on the argument, and `post(create)` is not an error.
#[idempotent(scope = "global", state = AppState)]
async fn create(amount: u64, _body: String) -> String {
    amount.to_string()
}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
