//! `minimal`: one idempotent route, records in memory. The smallest complete idem service.
//!
//! ```sh
//! cargo run -p idem-examples --bin minimal        # listens on 127.0.0.1:3000 (BIND to change)
//!
//! # 201 and a new order id.
//! curl -i localhost:3000/orders -H 'Idempotency-Key: k1' -H 'Content-Type: application/json' \
//!   -d '{"item": "book"}'
//! # The same again: the same id, plus `Idempotent-Replayed: true`; the handler did not run.
//! curl -i localhost:3000/orders -H 'Idempotency-Key: k1' -H 'Content-Type: application/json' \
//!   -d '{"item": "book"}'
//! # The same key with another body: 422 idempotency_key_reused.
//! curl -i localhost:3000/orders -H 'Idempotency-Key: k1' -H 'Content-Type: application/json' \
//!   -d '{"item": "pen"}'
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use axum::{Json, Router, http::StatusCode, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
use serde_json::{Value, json};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Runs at most once per `Idempotency-Key`; retries get its first answer.
#[idempotent(scope = "global", ttl = "1h")]
async fn create_order(Json(order): Json<Value>) -> (StatusCode, Json<Value>) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::CREATED,
        Json(json!({ "id": id, "order": order })),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .serves(create_order) // checked at build
        .build()?;
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(idempotency);
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(bind).await?;
    println!("minimal listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
