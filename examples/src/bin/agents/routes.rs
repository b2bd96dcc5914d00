//! The HTTP API: one idempotency layer over everything under `/api`, plain handlers below it.
//!
//! The layer makes every `POST`, `PUT` and `PATCH` under `/api` idempotent with the optional
//! `X-Idempotency-Key` header, keys per user, replayed for 24 hours. The handlers take an
//! `AnyTx`: their writes commit in one transaction with the stored response (atomic mode).
//!
//! Each route is documented by `#[utoipa::path]` on its handler and routed through
//! utoipa-axum's `routes!`; `GET /openapi.json` serves the document, to which the layer itself
//! adds its key header and the engine's answers ([`crate::openapi`]).

use std::time::Duration;

use axum::extract::{Extension, Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::routing::get;
use axum::{Json, Router, middleware};
use idem_runtime::openapi::ProblemSchema;
use idem_runtime::{AnyTx, Idempotency};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::auth::{self, User};
use crate::db::{self, Action, Db, Story};
use crate::error::{ApiError, ApiJson, PROBLEM};
use crate::openapi::ApiDoc;
use idem_runtime::IdempotencyLayer;

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

/// The service's routes, and `GET /openapi.json` documenting them.
pub(crate) fn router(idempotency: &Idempotency, state: AppState) -> Router {
    let layer = IdempotencyLayer::new(idempotency)
        .scope("user")
        .ttl(KEYS_LIVE);
    let api = OpenApiRouter::new()
        .routes(routes!(act))
        .routes(routes!(heartbeat))
        .routes(routes!(dweller))
        .routes(routes!(create_story, list_stories))
        .layer(layer.clone())
        // Outer layers run first: the user is known when the idempotency layer needs it.
        .layer(middleware::from_fn(auth::require_user));
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest(API, api)
        .routes(routes!(healthz))
        .split_for_parts();
    let document = crate::openapi::document(doc, idempotency, API, &layer);
    router
        .route("/openapi.json", get(move || async move { document }))
        .fallback(no_route)
        .with_state(state)
}

/// Where the idempotency layer applies.
const API: &str = "/api";

#[derive(Debug, Deserialize, ToSchema)]
struct NewAction {
    /// What the dweller does; `"slow"` takes `SLOW_MS`.
    #[schema(min_length = 1, max_length = 100, example = "wave")]
    action: String,
}

/// `POST /api/dwellers/{id}/act`: 201 and the action with the dweller's count of actions.
/// The action `"slow"` takes `SLOW_MS` first, before the transaction begins.
#[utoipa::path(post, path = "/dwellers/{id}/act", tag = "dwellers", security(("agent" = [])),
    params(DwellerId),
    request_body = NewAction,
    responses(
        (status = 201, description = "The action, numbered among the dweller's.", body = Action),
        (status = 400, description = "`invalid_request` (the id or `action`) or `invalid_json`.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM, headers(("WWW-Authenticate" = String))),
        (status = 415, description = "`unsupported_media_type`: the body is not JSON.", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
async fn act(
    State(app): State<AppState>,
    Extension(user): Extension<User>,
    Path(DwellerId { id: dweller }): Path<DwellerId>,
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

/// A dweller's heartbeats.
#[derive(Debug, Serialize, ToSchema)]
struct Heartbeat {
    dweller: String,
    /// The dweller's count of heartbeats, this one included.
    beats: i64,
}

/// `POST /api/dwellers/{id}/heartbeat`: 200 and the dweller's count of heartbeats.
#[utoipa::path(post, path = "/dwellers/{id}/heartbeat", tag = "dwellers", security(("agent" = [])),
    params(DwellerId),
    responses(
        (status = 200, description = "The dweller's count of heartbeats.", body = Heartbeat),
        (status = 400, description = "`invalid_request`: the id.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM, headers(("WWW-Authenticate" = String))),
    ),
)]
async fn heartbeat(
    Path(DwellerId { id: dweller }): Path<DwellerId>,
    mut tx: AnyTx,
) -> Result<Json<Heartbeat>, ApiError> {
    check_id(&dweller)?;
    let beats = db::record_beat(&mut tx, &dweller).await?;
    Ok(Json(Heartbeat { dweller, beats }))
}

#[derive(Debug, Deserialize, ToSchema)]
struct NewStory {
    #[schema(min_length = 1, max_length = 200, example = "First light")]
    title: String,
    #[schema(max_length = 10_000, example = "d1 waved.")]
    body: String,
}

/// `POST /api/stories`: 201 and the story.
#[utoipa::path(post, path = "/stories", tag = "stories", security(("agent" = [])),
    request_body = NewStory,
    responses(
        (status = 201, description = "The story.", body = Story),
        (status = 400, description = "`invalid_request` (`title` or `body`) or `invalid_json`.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM, headers(("WWW-Authenticate" = String))),
        (status = 415, description = "`unsupported_media_type`: the body is not JSON.", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
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

/// A dweller's counts.
#[derive(Debug, Serialize, ToSchema)]
struct Dweller {
    id: String,
    actions: i64,
    beats: i64,
}

/// `GET /api/dwellers/{id}`: the dweller's counts, 0s for a dweller never seen.
#[utoipa::path(get, path = "/dwellers/{id}", tag = "dwellers", security(("agent" = [])),
    params(DwellerId),
    responses(
        (status = 200, description = "The dweller's counts; 0s for a dweller never seen.", body = Dweller),
        (status = 400, description = "`invalid_request`: the id.", body = ProblemSchema, content_type = PROBLEM),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM, headers(("WWW-Authenticate" = String))),
    ),
)]
async fn dweller(
    State(app): State<AppState>,
    Path(DwellerId { id }): Path<DwellerId>,
) -> Result<Json<Dweller>, ApiError> {
    check_id(&id)?;
    let (actions, beats) = app.db.dweller(&id).await?;
    Ok(Json(Dweller { id, actions, beats }))
}

/// The newest stories.
#[derive(Debug, Serialize, ToSchema)]
struct Stories {
    /// Newest first, at most 100.
    data: Vec<Story>,
}

/// `GET /api/stories`: the newest stories, newest first.
#[utoipa::path(get, path = "/stories", tag = "stories", security(("agent" = [])),
    responses(
        (status = 200, description = "The newest stories, newest first.", body = Stories),
        (status = 401, description = "`unauthorized`", body = ProblemSchema, content_type = PROBLEM, headers(("WWW-Authenticate" = String))),
    ),
)]
async fn list_stories(State(app): State<AppState>) -> Result<Json<Stories>, ApiError> {
    let data = app.db.stories(MAX_STORIES).await?;
    Ok(Json(Stories { data }))
}

/// The service's health.
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    #[schema(pattern = "^ok$")]
    status: &'static str,
}

/// `GET /healthz`: 200 when the database answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses(
        (status = 200, description = "The database answers.", body = Health),
        (status = 503, description = "`database_unavailable`", body = ProblemSchema, content_type = PROBLEM),
    ),
)]
async fn healthz(State(app): State<AppState>) -> Result<Json<Health>, ApiError> {
    match app.db.ping().await {
        Ok(()) => Ok(Json(Health { status: "ok" })),
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

/// The `{id}` of the dweller routes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DwellerId {
    /// The dweller: 1 to 64 letters, digits, `_` or `-`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$", example = "d1")]
    id: String,
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
