//! The function `#[idempotent]` wraps stays callable, with its extractors' values, as a unit
//! test calls a plain axum handler; a `name` gives the endpoint its identity.
#![deny(warnings)]

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use idem_runtime::idempotent;

#[idempotent(scope = "global", name = "charges.create")]
pub(crate) async fn create_charge(
    State(rate): State<u64>,
    Path(account): Path<String>,
    Json(amount): Json<u64>,
) -> Result<(StatusCode, String), StatusCode> {
    if amount == 0 {
        return Err(StatusCode::UNPROCESSABLE_ENTITY);
    }
    Ok((StatusCode::CREATED, format!("{account}: {}", amount * rate)))
}

#[idempotent(scope = "global")]
async fn ping() -> &'static str {
    "pong"
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let charged = create_charge::call(State(3), Path("acct_1".into()), Json(5)).await;
        assert_eq!(charged, Ok((StatusCode::CREATED, "acct_1: 15".to_owned())));
        let refused = create_charge::call(State(3), Path("acct_1".into()), Json(0)).await;
        assert_eq!(refused, Err(StatusCode::UNPROCESSABLE_ENTITY));
        assert_eq!(ping::call().await, "pong");
    });
}
