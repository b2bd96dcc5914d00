#![deny(warnings)]

// A `Tx` parameter is an extractor of the request head, so it goes anywhere before the body
// extractor, and puts the handler in atomic mode.
use axum::extract::State;
use axum::http::StatusCode;
use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, Tx, idempotent};
use sqlx::Sqlite;

#[idempotent(scope = "global")]
async fn create(
    State(_engine): State<Idempotency>,
    mut tx: Tx<Sqlite>,
    Json(name): Json<String>,
) -> Result<StatusCode, StatusCode> {
    let conn = tx.conn().await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    sqlx::query("INSERT INTO items (name) VALUES (?)")
        .bind(name)
        .execute(conn)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(StatusCode::CREATED)
}

#[idempotent(scope = "global")]
async fn only_a_transaction(tx: idem_runtime::Tx<Sqlite>) -> String {
    tx.downstream_key("processor")
}

fn main() {
    // Not run: the engine would need a SQLite store. Type-checking the router is the test.
    let _router = |idempotency: Idempotency| -> Router {
        Router::new()
            .route("/a", post(create))
            .route("/b", post(only_a_transaction))
            .with_state(idempotency)
    };
}
