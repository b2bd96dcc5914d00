//! The handler under test, bare and with `#[idempotent]`, and the router that serves both.
//!
//! Both forms run the same body: the `Json` extractor parses the order, the handler answers
//! `201 Created` with a small JSON document and a `Location`. Any difference between them is what
//! idempotency costs.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use idem_runtime::{Idempotency, IdempotencyLayer, idempotent};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Route of the bare handler.
pub const BARE: &str = "/bare";
/// Route of the same handler with `#[idempotent(scope = "global")]`.
pub const IDEM: &str = "/idem";
/// Route of the bare handler under `IdempotencyLayer` (default settings, scope global).
pub const LAYER: &str = "/layer";
/// Route of the idempotent handler that waits at the [`Gate`] (to hold a request in flight).
pub const HELD: &str = "/held";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The `#[idempotent]` handlers [`router`] routes, for `Builder::serves`.
pub fn idempotent() -> impl idem_runtime::Serves {
    (idem, held)
}

/// The work every variant does once its body is parsed.
fn create_order(order: &Value) -> Response {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let items = order
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let amount = order.get("amount").and_then(Value::as_u64).unwrap_or(0);
    let location = format!("/v1/orders/ord_{id}");
    (
        StatusCode::CREATED,
        [(header::LOCATION, location.clone())],
        Json(json!({
            "id": format!("ord_{id}"),
            "object": "order",
            "amount": amount,
            "items": items,
            "status": "accepted",
            "url": location,
        })),
    )
        .into_response()
}

/// The bare handler.
pub async fn bare(Json(order): Json<Value>) -> Response {
    create_order(&order)
}

/// The same handler, idempotent.
#[idempotent(scope = "global")]
pub async fn idem(Json(order): Json<Value>) -> Response {
    create_order(&order)
}

/// The idempotent handler, stopping at the gate until it opens.
#[idempotent(scope = "global")]
pub async fn held(State(gate): State<Arc<Gate>>, Json(order): Json<Value>) -> Response {
    gate.entered.notify_one();
    gate.open.notified().await;
    create_order(&order)
}

/// Holds [`held`] requests in their handler: the benches park one request there to measure
/// what its concurrent duplicates cost (409 in flight).
#[derive(Debug, Default)]
pub struct Gate {
    /// Notified when a request enters the handler.
    pub entered: Notify,
    /// Notify (one waiter) to let it finish.
    pub open: Notify,
}

/// The router state: the engine and the gate.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// The idempotency engine.
    pub idempotency: Idempotency,
    /// The gate of [`held`].
    pub gate: Arc<Gate>,
}

/// `POST /bare`, `POST /idem`, `POST /layer`, `POST /held` and `GET /healthz`, the idempotent
/// ones on `engine`.
pub fn router(idempotency: Idempotency, gate: Arc<Gate>) -> Router {
    Router::new()
        .route(BARE, post(bare))
        .route(IDEM, post(idem))
        .route(LAYER, post(bare).layer(IdempotencyLayer::new(&idempotency)))
        .route(HELD, post(held))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(AppState { idempotency, gate })
}
