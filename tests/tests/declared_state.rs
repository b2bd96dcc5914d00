//! `#[idempotent(state = S)]` and a state inferred from `State<S>` arguments: the handler
//! extracts every argument as without them, answers an extractor's rejection with it, and
//! replays like any other.

use axum::body::Body;
use axum::extract::{FromRef, FromRequestParts, Path, State};
use axum::http::{Request, StatusCode, request::Parts};
use axum::{Json, Router, routing::post};
use http_body_util::BodyExt;
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::ServiceExt;

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
    db: Db,
}

#[derive(Clone)]
struct Db(Arc<AtomicUsize>);

/// An extractor for this application's state only.
struct User(Db);

impl FromRequestParts<AppState> for User {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, StatusCode> {
        Ok(User(state.db.clone()))
    }
}

#[idempotent(scope = "global", state = AppState)]
async fn declared(
    State(db): State<Db>,
    User(user): User,
    Path(id): Path<u64>,
    Json(body): Json<String>,
) -> String {
    let n = db.0.fetch_add(1, Ordering::SeqCst) + 1;
    format!("run {n}: {id} {body} {}", Arc::ptr_eq(&db.0, &user.0))
}

#[idempotent(scope = "global", state = AppState)]
async fn declared_without_arguments() -> &'static str {
    "none"
}

/// The last argument extracts from the head only.
#[idempotent(scope = "global", state = AppState)]
async fn declared_head_last(User(user): User) -> String {
    format!("runs so far: {}", user.0.load(Ordering::SeqCst))
}

/// `State<Idempotency>` provides the engine, so it would be inferred as the state, for which
/// `User` is no extractor: `state = AppState` says which state is meant.
#[idempotent(scope = "global", state = AppState)]
async fn declared_over_substate(State(engine): State<Idempotency>, User(_user): User) -> String {
    format!("{} endpoints", engine.endpoints().count().min(1))
}

/// Inferred: `State<AppState>` is the state.
#[idempotent(scope = "global")]
async fn inferred(State(state): State<AppState>, User(user): User, body: String) -> String {
    format!("{body} {}", Arc::ptr_eq(&state.db.0, &user.0))
}

/// `Db` does not provide the engine, so it is a part of the router's state: not checked as the
/// state, and `User` extracts for the router's.
#[idempotent(scope = "global")]
async fn substate(State(db): State<Db>, User(user): User) -> String {
    format!("{}", Arc::ptr_eq(&db.0, &user.0))
}

fn app() -> Router {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    Router::new()
        .route("/declared/{id}", post(declared))
        .route("/none", post(declared_without_arguments))
        .route("/head", post(declared_head_last))
        .route("/engine", post(declared_over_substate))
        .route("/inferred", post(inferred))
        .route("/substate", post(substate))
        .with_state(AppState {
            idempotency,
            db: Db(Arc::new(AtomicUsize::new(0))),
        })
}

async fn send(app: &Router, uri: &str, key: &str, body: &str) -> (StatusCode, String, bool) {
    let request = Request::post(uri)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap(), replayed)
}

#[tokio::test]
async fn every_argument_is_extracted_with_the_declared_state() {
    let app = app();
    let first = send(&app, "/declared/7", "k1", "\"hi\"").await;
    assert_eq!(
        first,
        (StatusCode::OK, "run 1: 7 hi true".to_owned(), false)
    );
    let retry = send(&app, "/declared/7", "k1", "\"hi\"").await;
    assert_eq!(retry, (StatusCode::OK, "run 1: 7 hi true".to_owned(), true));
    assert_eq!(
        send(&app, "/none", "k1", "").await,
        (StatusCode::OK, "none".to_owned(), false)
    );
    assert_eq!(
        send(&app, "/head", "k1", "").await,
        (StatusCode::OK, "runs so far: 1".to_owned(), false)
    );
    assert_eq!(
        send(&app, "/engine", "k1", "").await,
        (StatusCode::OK, "1 endpoints".to_owned(), false)
    );
}

#[tokio::test]
async fn an_extractor_rejection_is_answered_and_not_stored() {
    let app = app();
    let (status, _, _) = send(&app, "/declared/seven", "k2", "\"hi\"").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = send(&app, "/declared/7", "k3", "not json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Not stored: the same key with a good request runs.
    let fixed = send(&app, "/declared/7", "k3", "\"ok\"").await;
    assert_eq!(
        fixed,
        (StatusCode::OK, "run 1: 7 ok true".to_owned(), false)
    );
}

#[tokio::test]
async fn an_inferred_state_and_a_substate_extract_as_before() {
    let app = app();
    assert_eq!(
        send(&app, "/inferred", "k1", "body").await,
        (StatusCode::OK, "body true".to_owned(), false)
    );
    assert_eq!(
        send(&app, "/substate", "k1", "").await,
        (StatusCode::OK, "true".to_owned(), false)
    );
}
