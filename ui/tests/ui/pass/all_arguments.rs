#![deny(warnings)]

use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[idempotent(scope = "org", ttl = "15m", key = "required", in_flight = "wait")]
async fn every_argument() {}

#[idempotent(in_flight = "reject", key = "optional", ttl = "30d", scope = "api_key.v2",)]
async fn any_order_and_trailing_comma() {}

#[idempotent(scope = "global", ttl = "1s")]
async fn shortest_ttl() {}

fn main() {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", |caller| caller.metadata("x-org").map(str::to_owned))
        .scope("api_key.v2", |_| Some("key".to_owned()))
        .build()
        .unwrap();
    let names: Vec<_> = idempotency.endpoints().map(|e| e.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let _app: Router = Router::new()
        .route("/a", post(every_argument))
        .route("/b", post(any_order_and_trailing_comma))
        .route("/c", post(shortest_ttl))
        .with_state(idempotency);
}
