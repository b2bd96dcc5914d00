use axum::{Router, extract::State, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone)]
struct Db;

#[idempotent(scope = "global")]
async fn create(State(_db): State<Db>) {}

fn main() {
    let _: Router<Idempotency> = Router::new().route("/", post(create));
}
