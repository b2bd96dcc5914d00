use axum::{Router, extract::FromRef, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
}

#[idempotent(scope = "global", state = AppState)]
async fn create(amount: u64) -> String {
    amount.to_string()
}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
