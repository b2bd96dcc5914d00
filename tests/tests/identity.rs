//! An operation's identity survives a deploy that renames or moves its handler: records are
//! keyed by the operation's `name`, or by the route as routed, never by the Rust path. And the
//! upgrade path the CHANGELOG gives for records written under the previous default (the Rust
//! path) works: `name = "<that path>"` replays them.
//!
//! Each "build" is a router of its own on an engine of its own; they share one SQLite file, as
//! two deploys of one service share their database.

use axum::Router;
use axum::body::Body;
use axum::handler::Handler;
use axum::http::{HeaderValue, Method, Request, StatusCode, Uri};
use axum::routing::post;
use bytes::Bytes;
use http_body_util::BodyExt;
use idem_runtime::clock::{Clock, SystemClock};
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, SqliteStore, Store};
use idem_runtime::{Idempotency, IdempotencyKey, StoredResponse};
use idem_tests::logs::Logs;
use tower::ServiceExt;

/// A handler called as a service of its own, outside any router, with no `name`.
mod unrouted {
    use axum::http::StatusCode;
    use idem_runtime::idempotent;

    #[idempotent(scope = "global")]
    pub(crate) async fn export(body: String) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("exported {body}"))
    }

    /// The same operation, routed, pinned to the unrouted handler's Rust path.
    #[idempotent(scope = "global", name = "identity::unrouted::export")]
    pub(crate) async fn export_routed(body: String) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("exported {body} (routed)"))
    }
}

/// The first build: the handler as it was.
mod before {
    use axum::http::StatusCode;
    use idem_runtime::idempotent;

    #[idempotent(scope = "global")]
    pub(crate) async fn create_charge(body: String) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("charged {body} (first build)"))
    }

    #[idempotent(scope = "global", name = "refunds.create")]
    pub(crate) async fn create_refund(body: String) -> (StatusCode, String) {
        (
            StatusCode::CREATED,
            format!("refunded {body} (first build)"),
        )
    }
}

/// The next build: the same handlers, renamed and moved to another module.
mod after {
    pub(crate) mod billing {
        use axum::http::StatusCode;
        use idem_runtime::idempotent;

        #[idempotent(scope = "global")]
        pub(crate) async fn charge(body: String) -> (StatusCode, String) {
            (StatusCode::CREATED, format!("charged {body} (next build)"))
        }

        #[idempotent(scope = "global", name = "refunds.create")]
        pub(crate) async fn refund(body: String) -> (StatusCode, String) {
            (StatusCode::CREATED, format!("refunded {body} (next build)"))
        }

        /// The charge handler of a release that keyed records by the Rust path, pinned to it.
        #[idempotent(scope = "global", name = "identity::legacy::create_charge")]
        pub(crate) async fn pinned(body: String) -> (StatusCode, String) {
            (StatusCode::CREATED, format!("charged {body} (next build)"))
        }
    }
}

/// One handler that a router serves on several routes and methods.
mod shared {
    use axum::http::StatusCode;
    use idem_runtime::idempotent;

    #[idempotent(scope = "global")]
    pub(crate) async fn create(body: String) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("created {body}"))
    }
}

async fn idempotency(path: &std::path::Path) -> Idempotency {
    let store = SqliteStore::connect(&idem_tests::db::sqlite_url(path))
        .await
        .unwrap();
    Idempotency::builder().store(store).build().unwrap()
}

fn request(uri: &str, key: &str) -> Request<Body> {
    Request::post(uri)
        .header("idempotency-key", key)
        .header("content-type", "text/plain")
        .body(Body::from("500"))
        .unwrap()
}

async fn send(router: &Router, uri: &str, key: &str) -> (StatusCode, bool, String) {
    read(router.clone().oneshot(request(uri, key)).await.unwrap()).await
}

async fn read(response: axum::response::Response) -> (StatusCode, bool, String) {
    let replayed = response.headers().contains_key("idempotent-replayed");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn a_retry_across_a_deploy_that_renames_and_moves_the_handler_replays() {
    let path = idem_tests::db::sqlite_path();
    let first: Router = Router::new()
        .route("/v1/charges", post(before::create_charge))
        .route("/v1/refunds", post(before::create_refund))
        .with_state(idempotency(&path).await);
    assert_eq!(
        send(&first, "/v1/charges", "k1").await,
        (
            StatusCode::CREATED,
            false,
            "charged 500 (first build)".into()
        )
    );
    assert_eq!(
        send(&first, "/v1/refunds", "k2").await,
        (
            StatusCode::CREATED,
            false,
            "refunded 500 (first build)".into()
        )
    );

    let next: Router = Router::new()
        .route("/v1/charges", post(after::billing::charge))
        .route("/v1/refunds", post(after::billing::refund))
        .with_state(idempotency(&path).await);
    assert_eq!(
        send(&next, "/v1/charges", "k1").await,
        (
            StatusCode::CREATED,
            true,
            "charged 500 (first build)".into()
        ),
        "keyed by the route as routed, not the function's path"
    );
    assert_eq!(
        send(&next, "/v1/refunds", "k2").await,
        (
            StatusCode::CREATED,
            true,
            "refunded 500 (first build)".into()
        ),
        "keyed by its name"
    );
    let idempotency = idempotency(&path).await;
    let handlers: Vec<_> = idempotency.endpoints().map(|e| e.handler()).collect();
    assert!(handlers.contains(&"identity::before::create_charge"));
    assert!(handlers.contains(&"identity::after::billing::charge"));
    let name_of = |handler: &str| {
        let mut endpoints = idempotency.endpoints();
        endpoints.find(|e| e.handler() == handler).unwrap().name()
    };
    assert_eq!(
        name_of("identity::after::billing::refund"),
        Some("refunds.create")
    );
    assert_eq!(name_of("identity::after::billing::charge"), None);
}

/// What the previous release wrote for a request to an unnamed `#[idempotent]` handler: a
/// completed record keyed by the handler's Rust path.
async fn previous_release_record(store: &SqliteStore, path: &str, key: &str) {
    let operation = "identity::legacy::create_charge";
    let record = RecordKey::derive(
        "global",
        "",
        operation,
        &IdempotencyKey::parse(key.as_bytes()).unwrap(),
    );
    let content_type = HeaderValue::from_static("text/plain");
    let fingerprint = idem_runtime::__private::fingerprint_of_request(
        &Method::POST,
        &Uri::try_from(path).unwrap(),
        Some(&content_type),
        b"500",
    );
    let now = SystemClock.now();
    let claim = ClaimRequest {
        key: &record,
        fingerprint: &fingerprint,
        token: LeaseToken::from_i64(7),
        now,
        lease_until: now.after(std::time::Duration::from_secs(30)),
        expires_at: now.after(std::time::Duration::from_secs(3600)),
        operation,
        scope: "global",
        scope_value: "",
        tenant: 0,
    };
    assert_eq!(
        store.claim(claim).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let response = StoredResponse::new(
        StatusCode::CREATED,
        [],
        Bytes::from("charged 500 (previous release)"),
    );
    let completion = Completion {
        payload: &response.encode(),
        status: Some(201),
        completed_at: now,
        expires_at: now.after(std::time::Duration::from_secs(3600)),
    };
    let fence = store
        .complete(&record, LeaseToken::from_i64(7), completion)
        .await;
    assert_eq!(fence.unwrap(), Fence::Held);
}

#[tokio::test]
async fn records_of_the_previous_default_identity_replay_under_a_pinned_name() {
    let path = idem_tests::db::sqlite_path();
    let store = SqliteStore::connect(&idem_tests::db::sqlite_url(&path))
        .await
        .unwrap();
    previous_release_record(&store, "/v1/charges", "k1").await;

    let upgraded: Router = Router::new()
        .route("/v1/charges", post(after::billing::pinned))
        .with_state(idempotency(&path).await);
    assert_eq!(
        send(&upgraded, "/v1/charges", "k1").await,
        (
            StatusCode::CREATED,
            true,
            "charged 500 (previous release)".into()
        ),
        "the upgrade path: `name` set to the handler's old Rust path"
    );
    // Without the pin, the route is the identity: the old record is another operation's.
    let unpinned: Router = Router::new()
        .route("/v1/charges", post(after::billing::charge))
        .with_state(idempotency(&path).await);
    assert_eq!(
        send(&unpinned, "/v1/charges", "k1").await,
        (
            StatusCode::CREATED,
            false,
            "charged 500 (next build)".into()
        )
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_handler_outside_a_route_is_keyed_by_its_rust_path_with_one_warning() {
    const WARNING: &str = "ran outside a router's route and has no `name`";
    let logs = Logs::default();
    let _guard = logs.capture();
    let path = idem_tests::db::sqlite_path();
    let service = unrouted::export.with_state(idempotency(&path).await);
    let call = |key: &'static str| {
        let service = service.clone();
        async move { read(service.oneshot(request("/export", key)).await.unwrap()).await }
    };
    let fresh = (StatusCode::CREATED, false, "exported 500".to_owned());
    assert_eq!(call("k1").await, fresh);
    assert_eq!(
        call("k1").await,
        (StatusCode::CREATED, true, "exported 500".into())
    );
    assert_eq!(call("k2").await, fresh);
    let text = logs.text();
    assert_eq!(text.matches(WARNING).count(), 1, "warned once: {text}");
    assert!(
        text.contains("handler=\"identity::unrouted::export\""),
        "{text}"
    );

    // The records' identity is the Rust path: a route pinned to it replays them.
    let pinned: Router = Router::new()
        .route("/export", post(unrouted::export_routed))
        .with_state(idempotency(&path).await);
    assert_eq!(
        send(&pinned, "/export", "k1").await,
        (StatusCode::CREATED, true, "exported 500".into())
    );
}

/// A handler routed on several routes and methods is an operation on each: a key used on one
/// is new on the others, and each replays its own response.
#[tokio::test]
async fn one_handler_on_several_routes_keeps_an_operation_per_route_and_method() {
    let path = idem_tests::db::sqlite_path();
    let idempotency = idempotency(&path).await;
    let router: Router = Router::new()
        .route("/v1/orders", post(shared::create).put(shared::create))
        .route("/v2/orders", post(shared::create))
        .with_state(idempotency.clone());
    let routes = [
        (Method::POST, "/v1/orders"),
        (Method::PUT, "/v1/orders"),
        (Method::POST, "/v2/orders"),
    ];
    for round in 0..3 {
        for (method, uri) in &routes {
            let mut request = request(uri, "one-key");
            *request.method_mut() = method.clone();
            let answer = read(router.clone().oneshot(request).await.unwrap()).await;
            assert_eq!(
                answer,
                (StatusCode::CREATED, round > 0, "created 500".into()),
                "{method} {uri}, round {round}: the key runs once per route and method"
            );
        }
    }
    let filter = idem_runtime::store::records::RecordFilter::new();
    let records = idempotency.records().list(&filter, 10).await.unwrap();
    let mut operations: Vec<_> = records.iter().map(|r| r.operation.as_str()).collect();
    operations.sort_unstable();
    assert_eq!(
        operations,
        ["POST /v1/orders", "POST /v2/orders", "PUT /v1/orders"]
    );
}
