use axum::{Router, extract::State, routing::post};
use idem_runtime::idempotent;

#[derive(Clone)]
struct AppState;

#[idempotent(scope = "global", state = AppState)]
async fn create(State(_state): State<AppState>) {}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
