#![deny(warnings)]

// A state inferred from `State<S>` arguments is checked only where `S` provides the engine; a
// part of the router's state (`State<Db>`), or several, leave every check to the route.
use axum::extract::{FromRef, FromRequestParts, State};
use axum::http::{StatusCode, request::Parts};
use axum::{Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
    db: Db,
    mailer: Mailer,
}

#[derive(Clone)]
struct Db;

#[derive(Clone)]
struct Mailer;

struct User;

impl FromRequestParts<AppState> for User {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, StatusCode> {
        Ok(User)
    }
}

#[idempotent(scope = "global")]
async fn whole(State(_state): State<AppState>, _user: User, body: String) -> String {
    body
}

#[idempotent(scope = "global")]
async fn part(State(_db): State<Db>, _user: User) {}

#[idempotent(scope = "global")]
async fn parts(State(_db): State<Db>, State(_mailer): State<Mailer>, _user: User) {}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/a", post(whole))
        .route("/b", post(part))
        .route("/c", post(parts))
        .with_state(AppState { idempotency, db: Db, mailer: Mailer });
}
