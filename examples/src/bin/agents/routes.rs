//! The HTTP API: one idempotency layer over everything under `/api`, plain handlers below it.
//!
//! The layer makes every `POST`, `PUT` and `PATCH` under `/api` idempotent with the optional
//! `X-Idempotency-Key` header, keys per user, replayed for 24 hours. The handlers take an
//! `AnyTx`: their writes commit in one transaction with the stored response (atomic mode).

use std::time::Duration;

use axum::extract::{Extension, Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use idem_runtime::{AnyTx, Idempotency};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{self, User};
use crate::db::{self, Action, Db};
use crate::error::{ApiError, ApiJson};

/// How long a completed request is replayed to retries with its key.
const KEYS_LIVE: Duration = Duration::from_secs(24 * 60 * 60);
const MAX_ID_LEN: usize = 64;
const MAX_ACTION_LEN: usize = 100;
const MAX_TITLE_LEN: usize = 200;
const MAX_STORY_LEN: usize = 10_000;
/// The longest list `GET /api/stories` returns.
const MAX_STORIES: i64 = 100;

/// What handlers share.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) db: Db,
    /// How long the action `"slow"` takes.
    pub(crate) slow: Duration,
}

/// The service's routes.
pub(crate) fn router(idempotency: &Idempotency, state: AppState) -> Router {
    let api = Router::new()
        .route("/dwellers/{id}/act", post(act))
        .route("/dwellers/{id}/heartbeat", post(heartbeat))
        .route("/dwellers/{id}", get(dweller))
        .route("/stories", post(create_story).get(list_stories))
        .layer(idempotency.layer().scope("user").ttl(KEYS_LIVE))
        // Outer layers run first: the user is known when the idempotency layer needs it.
        .layer(middleware::from_fn(auth::require_user));
    Router::new()
        .nest("/api", api)
        .route("/healthz", get(healthz))
        .fallback(no_route)
        .with_state(state)
}

#[derive(Debug, Deserialize)]
struct NewAction {
    action: String,
}

/// `POST /api/dwellers/{id}/act`: 201 and the action with the dweller's count of actions.
/// The action `"slow"` takes `SLOW_MS` first, before the transaction begins.
async fn act(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Path(dweller): Path<String>,
    mut tx: AnyTx,
    ApiJson(request): ApiJson<NewAction>,
) -> Result<(StatusCode, Json<Action>), ApiError> {
    check_id(&dweller)?;
    let action = request.action.trim();
    if action.is_empty() || action.chars().count() > MAX_ACTION_LEN {
        return Err(ApiError::invalid(format!(
            "`action` must be 1 to {MAX_ACTION_LEN} characters"
        )));
    }
    if action == "slow" {
        tokio::time::sleep(app.slow).await;
    }
    let action = db::record_action(&mut tx, &user.0, &dweller, action).await?;
    tracing::info!(dweller, agent = user.0, seq = action.seq, "action recorded");
    Ok((StatusCode::CREATED, Json(action)))
}

/// `POST /api/dwellers/{id}/heartbeat`: 200 and the dweller's count of heartbeats.
async fn heartbeat(Path(dweller): Path<String>, mut tx: AnyTx) -> Result<Json<Value>, ApiError> {
    check_id(&dweller)?;
    let beats = db::record_beat(&mut tx, &dweller).await?;
    Ok(Json(json!({ "dweller": dweller, "beats": beats })))
}

#[derive(Debug, Deserialize)]
struct NewStory {
    title: String,
    body: String,
}

/// `POST /api/stories`: 201 and the story.
async fn create_story(
    Extension(user): Extension<User>,
    mut tx: AnyTx,
    ApiJson(story): ApiJson<NewStory>,
) -> Result<(StatusCode, Json<db::Story>), ApiError> {
    let title = story.title.trim();
    if title.is_empty() || title.chars().count() > MAX_TITLE_LEN {
        return Err(ApiError::invalid(format!(
            "`title` must be 1 to {MAX_TITLE_LEN} characters"
        )));
    }
    if story.body.chars().count() > MAX_STORY_LEN {
        return Err(ApiError::invalid(format!(
            "`body` must be at most {MAX_STORY_LEN} characters"
        )));
    }
    let story = db::insert_story(&mut tx, &user.0, title, &story.body).await?;
    tracing::info!(story = story.id, author = user.0, "story recorded");
    Ok((StatusCode::CREATED, Json(story)))
}

/// `GET /api/dwellers/{id}`: the dweller's counts, 0s for a dweller never seen.
async fn dweller(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let (actions, beats) = app.db.dweller(&id).await?;
    Ok(Json(
        json!({ "id": id, "actions": actions, "beats": beats }),
    ))
}

/// `GET /api/stories`: the newest stories, newest first.
async fn list_stories(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let stories = app.db.stories(MAX_STORIES).await?;
    Ok(Json(json!({ "data": stories })))
}

/// `GET /healthz`: 200 when the database answers.
async fn healthz(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    match app.db.ping().await {
        Ok(()) => Ok(Json(json!({ "status": "ok" }))),
        Err(error) => {
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "health check failed"
            );
            Err(ApiError::unavailable())
        }
    }
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

/// Dweller ids: 1 to 64 letters, digits, `_` or `-`.
fn check_id(id: &str) -> Result<(), ApiError> {
    let valid = (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "a dweller id is 1 to {MAX_ID_LEN} letters, digits, `_` or `-`"
        )))
    }
}
