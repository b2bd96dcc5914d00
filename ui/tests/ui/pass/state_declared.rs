#![deny(warnings)]

// `state = AppState`: every argument is checked where the handler is written, for that state,
// including extractors for this state only, substates, `Tx`, and a handler without arguments.
use axum::extract::{FromRef, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::{StatusCode, request::Parts};
use axum::{Json, Router, routing::post};
use idem_runtime::{AnyTx, Idempotency, idempotent, store::MemoryStore};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
    db: Db,
}

#[derive(Clone)]
struct Db;

struct User;

impl FromRequestParts<AppState> for User {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, StatusCode> {
        Ok(User)
    }
}

struct Upload;

impl FromRequest<AppState> for Upload {
    type Rejection = StatusCode;

    async fn from_request(_: Request, _: &AppState) -> Result<Self, StatusCode> {
        Ok(Upload)
    }
}

#[idempotent(scope = "global", state = AppState)]
async fn everything(
    State(_db): State<Db>,
    State(_engine): State<Idempotency>,
    _user: User,
    Path(_id): Path<u64>,
    Json(body): Json<String>,
) -> String {
    body
}

#[idempotent(scope = "global", state = AppState)]
async fn upload(_user: User, _upload: Upload) {}

#[idempotent(scope = "global", state = AppState)]
async fn atomic(_tx: AnyTx, _user: User) {}

#[idempotent(scope = "global", state = crate::AppState)]
async fn nothing() {}

fn main() {
    let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    let _app: Router = Router::new()
        .route("/a/{id}", post(everything))
        .route("/b", post(upload))
        .route("/c", post(atomic))
        .route("/d", post(nothing))
        .with_state(AppState { idempotency, db: Db });
}
