use axum::{Router, extract::{FromRef, State}, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState { idempotency: Idempotency }
#[derive(Clone)]
struct Db;

#[idempotent(scope = "global")]
async fn create(State(_db): State<Db>, _body: String) {}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
