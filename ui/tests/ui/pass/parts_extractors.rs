#![deny(warnings)]

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, request::Parts};
use axum::{Json, Router, routing::post};
use idem_runtime::{Idempotency, idempotent, store::MemoryStore};

#[derive(Clone, FromRef)]
struct AppState {
    idempotency: Idempotency,
    db: Db,
}

#[derive(Clone)]
struct Db(&'static str);

/// A custom extractor, as an auth layer would provide.
struct OrgId(String);

impl<S: Send + Sync> FromRequestParts<S> for OrgId {
    type Rejection = StatusCode;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        let org = parts.headers.get("x-org").ok_or(StatusCode::UNAUTHORIZED)?;
        Ok(OrgId(org.to_str().map_err(|_| StatusCode::UNAUTHORIZED)?.to_owned()))
    }
}

/// An extractor for this application's state only.
struct User(&'static str);

impl FromRequestParts<AppState> for User {
    type Rejection = StatusCode;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, StatusCode> {
        Ok(User(state.db.0))
    }
}

/// A body extractor for this application's state only.
struct Upload(Bytes);

impl FromRequest<AppState> for Upload {
    type Rejection = StatusCode;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, StatusCode> {
        let bytes = Bytes::from_request(request, state).await;
        Ok(Upload(bytes.map_err(|_| StatusCode::BAD_REQUEST)?))
    }
}

#[idempotent(scope = "org")]
async fn everything(
    State(state): State<AppState>,
    State(db): State<Db>,
    Path(id): Path<u64>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    org: OrgId,
    Json(body): Json<serde_json::Value>,
) -> String {
    let _ = (state.db.0, headers.len());
    format!("{} {id} {} {} {body}", db.0, query.len(), org.0)
}

#[idempotent(scope = "org")]
async fn state_specific(user: User, Path(id): Path<u64>, upload: Upload) -> String {
    format!("{} {id} {}", user.0, upload.0.len())
}

#[idempotent(scope = "org")]
async fn parts_only(org: OrgId, Path(id): Path<u64>) -> String {
    format!("{} {id}", org.0)
}

fn main() {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", |caller| caller.metadata("x-org").map(str::to_owned))
        .build()
        .unwrap();
    let _app: Router = Router::new()
        .route("/charges/{id}", post(everything).put(parts_only).patch(state_specific))
        .with_state(AppState { idempotency, db: Db("db") });
}
