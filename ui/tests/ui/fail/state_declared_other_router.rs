use axum::{Router, extract::FromRef, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
}

// Declared for `AppState`, routed with the engine alone as the state.
#[idempotent(scope = "global", state = AppState)]
async fn create(_body: String) {}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
