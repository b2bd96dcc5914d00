//! The application's formats: form bodies fingerprinted canonically, and the engine's own
//! answers rendered in the application's error envelope with their status and `Retry-After`.

use axum::body::Body;
use axum::extract::Form;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, Rejection, idempotent};
use idem_tests::Gate;
use serde_json::{Value, json};
use tower::ServiceExt;

#[idempotent(scope = "global")]
async fn charge(Form(form): Form<Vec<(String, String)>>) -> (StatusCode, Json<Value>) {
    let id = fastrand::u64(..);
    (
        StatusCode::CREATED,
        Json(json!({ "id": id, "pairs": form.len() })),
    )
}

#[idempotent(scope = "global")]
async fn gated(axum::extract::State(gate): axum::extract::State<Gate>) -> StatusCode {
    gate.pass().await;
    StatusCode::CREATED
}

#[derive(Clone, axum::extract::FromRef)]
struct App {
    idem: Idempotency,
    gate: Gate,
}

fn app(idem: Idempotency, gate: Gate) -> Router {
    Router::new()
        .route("/charges", post(charge))
        .route("/gated", post(gated))
        .with_state(App { idem, gate })
}

async fn send(
    app: &Router,
    key: &str,
    path: &str,
    body: &'static str,
) -> (StatusCode, Option<String>, bool, Value) {
    let request = Request::post(path)
        .header("idempotency-key", key)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let replayed = response.headers().contains_key("idempotent-replayed");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        replayed,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn form_bodies_in_another_order_replay_and_a_changed_value_is_another_request() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let app = app(idem, Gate::default());
    let body = "amount=2000&currency=usd&metadata%5Border%5D=42";
    let (status, _, replayed, first) = send(&app, "f1", "/charges", body).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    let reordered = "metadata[order]=42&currency=usd&amount=2000";
    let (status, _, replayed, again) = send(&app, "f1", "/charges", reordered).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(again["id"], first["id"]);
    let (status, ..) = send(
        &app,
        "f1",
        "/charges",
        "amount=2001&currency=usd&metadata[order]=42",
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_answers_in_the_application_envelope_keeping_status_and_retry_after() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .retry_after(std::time::Duration::from_secs(3))
        .render_rejections(|rejection: &Rejection| {
            let kind = match rejection {
                Rejection::KeyReused | Rejection::InProgress { .. } => "idempotency_error",
                Rejection::KeyInvalid { .. } => "invalid_request_error",
                _ => "api_error",
            };
            // The renderer's own status is overridden by the engine's.
            let body = json!({ "error": { "type": kind, "code": rejection.code() } });
            (StatusCode::IM_A_TEAPOT, Json(body)).into_response()
        })
        .build()
        .unwrap();
    let gate = Gate::default();
    let app = app(idem, gate.clone());

    let (status, _, _, body) = send(&app, "bad key", "/charges", "a=1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "idempotency_key_invalid");

    send(&app, "r", "/charges", "a=1").await;
    let (status, _, _, body) = send(&app, "r", "/charges", "a=2").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["type"], "idempotency_error");

    let owner = tokio::spawn({
        let app = app.clone();
        async move { send(&app, "g", "/gated", "").await }
    });
    gate.entered().await;
    let (status, retry_after, _, body) = send(&app, "g", "/gated", "").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(retry_after.as_deref(), Some("3"));
    assert_eq!(body["error"]["code"], "idempotency_key_in_progress");
    gate.open();
    assert_eq!(owner.await.unwrap().0, StatusCode::CREATED);
}
