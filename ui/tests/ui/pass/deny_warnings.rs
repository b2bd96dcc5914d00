//! `#[idempotent]` adds no warning of its own: docs are kept on the endpoint (`missing_docs`),
//! the lowercase struct does not trip `non_camel_case_types`, nothing is unused.
#![deny(warnings, missing_docs, unreachable_pub, unused_qualifications)]

use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

/// Creates a charge. Retries with the same `Idempotency-Key` replay the first answer.
#[idempotent(scope = "global")]
pub async fn create_charge() -> &'static str {
    "created"
}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/charges", post(create_charge))
        .with_state(idempotency);
}
