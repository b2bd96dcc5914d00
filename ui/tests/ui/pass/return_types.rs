#![deny(warnings)]

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

struct ApiError;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        StatusCode::PAYMENT_REQUIRED.into_response()
    }
}

#[idempotent(scope = "global")]
async fn opaque() -> impl IntoResponse {
    (StatusCode::CREATED, "created")
}

#[idempotent(scope = "global")]
async fn fallible(Json(amount): Json<u64>) -> Result<(StatusCode, Json<u64>), ApiError> {
    if amount == 0 {
        return Err(ApiError);
    }
    Ok((StatusCode::CREATED, Json(amount)))
}

#[idempotent(scope = "global")]
async fn response() -> Response {
    StatusCode::ACCEPTED.into_response()
}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/a", post(opaque))
        .route("/b", post(fallible))
        .route("/c", post(response))
        .with_state(idempotency);
}
