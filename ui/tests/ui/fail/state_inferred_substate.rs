use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::{StatusCode, request::Parts};
use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
}

/// An extractor for this application's state only.
struct User;

impl FromRequestParts<AppState> for User {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, StatusCode> {
        Ok(User)
    }
}

// `State<Idempotency>` provides the engine, so it is taken for the router's state, for which
// `User` is no extractor. The note says how to name the router's state: `state = AppState`.
#[idempotent(scope = "global")]
async fn create(State(_engine): State<Idempotency>, _user: User) {}

fn main() {
    let _: Router<AppState> = Router::new().route("/", post(create));
}
