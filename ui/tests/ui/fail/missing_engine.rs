use axum::{Router, routing::post};
use idem_runtime::idempotent;

#[derive(Clone)]
struct AppState {
    _db: (),
}

#[idempotent(scope = "global")]
async fn create() -> &'static str {
    "created"
}

fn main() {
    let _: Router = Router::new().route("/", post(create)).with_state(AppState { _db: () });
}
