//! Start-up checks per engine: a binary with several engines, each checking the endpoints it is
//! told it serves, atomic endpoints refused on a store that lends no transactions (memory,
//! Redis, DynamoDB, object storage), and an endpoint no engine was told of failing closed at its
//! first request on each of them.

use axum::http::{Request, StatusCode};
use axum::{Router, body::Body, routing::post};
use idem_runtime::store::records::RecordFilter;
use idem_runtime::store::{MemoryStore, SqliteStore};
use idem_runtime::{BuildError, Idempotency};
use idem_tests::TestStore;
use tower::ServiceExt;

mod billing {
    use super::*;
    use idem_runtime::idempotent;

    /// Billing's handlers are scoped by organisation.
    #[idempotent(scope = "org")]
    pub(crate) async fn create_invoice() -> StatusCode {
        StatusCode::CREATED
    }
}

mod ledger {
    use super::*;
    use idem_runtime::{Tx, idempotent};

    /// An alias: atomic mode is chosen by the type, not by the parameter's spelling.
    type Db = Tx<sqlx::Sqlite>;

    /// Ledger's handlers are scoped by user and write in atomic mode.
    #[idempotent(scope = "user")]
    pub(crate) async fn post_entry(tx: Db) -> StatusCode {
        drop(tx);
        StatusCode::CREATED
    }

    /// Another atomic handler, which only the test of the log serves.
    #[idempotent(scope = "user")]
    pub(crate) async fn post_reversal(tx: Db) -> StatusCode {
        drop(tx);
        StatusCode::CREATED
    }
}

fn org(caller: &idem_runtime::Caller<'_>) -> Option<String> {
    caller.metadata("x-org").map(str::to_owned)
}

#[test]
fn each_engine_checks_what_it_is_told_it_serves() {
    // Billing's engine serves billing's handler: ledger's, linked into the same binary, is not
    // its business.
    let billing = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .serves(billing::create_invoice)
        .build();
    assert!(billing.is_ok(), "{billing:?}");

    // Told it serves ledger's handler too, it finds ledger's scope missing.
    let both = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .serves((billing::create_invoice, ledger::post_entry))
        .build()
        .unwrap_err();
    assert_eq!(
        both,
        BuildError::UnresolvedScope {
            endpoint: "engines::ledger::post_entry",
            scope: "user"
        }
    );
    assert!(both.to_string().contains(".scope(\"user\""), "{both}");
}

#[test]
fn an_engine_told_nothing_builds_whatever_the_binary_links() {
    // Neither resolver, and a store without transactions: the binary links handlers this engine
    // never serves, and it need not say so.
    let bare = Idempotency::builder().store(MemoryStore::new()).build();
    assert!(bare.is_ok(), "{bare:?}");
}

/// A store without transactions refuses an atomic endpoint it serves at build, naming the
/// endpoint, the database it needs and the store.
async fn an_atomic_endpoint_on_a_store_without_transactions_is_refused_naming_both<S: TestStore>() {
    let store = S::fresh().await;
    let err = Idempotency::builder()
        .store(store.clone())
        .scope("user", |_| None)
        .serves(ledger::post_entry)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::AtomicUnsupported {
            endpoint: "engines::ledger::post_entry",
            database: "SQLite",
            store: std::any::type_name::<S>(),
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`engines::ledger::post_entry`"),
        "{message}"
    );
    let store_name = std::any::type_name::<S>().rsplit("::").next().unwrap();
    assert!(message.contains(store_name), "{message}");
    assert!(message.contains("SQLite"), "{message}");
    store.discard().await;
}

#[tokio::test]
async fn the_same_endpoint_builds_on_a_store_that_lends_its_transactions() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    let built = Idempotency::builder()
        .store(store)
        .scope("user", |_| None)
        .serves(ledger::post_entry)
        .build();
    assert!(built.is_ok(), "{built:?}");
}

/// An atomic endpoint the engine was not told it serves, on a store without transactions: every
/// request is answered 500 before anything is claimed or run.
async fn an_atomic_endpoint_not_served_fails_closed_at_its_first_request<S: TestStore>() {
    let store = S::fresh().await;
    let idem = Idempotency::builder()
        .store(store.clone())
        .scope("user", |_| Some("u1".to_owned()))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/entries", post(ledger::post_entry))
        .with_state(idem.clone());
    for key in ["k", "k2"] {
        let (status, problem) = post_to(&app, "/entries", key).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(problem["code"], "idempotency_misconfigured");
    }
    let records = idem
        .records()
        .list(&RecordFilter::default(), 10)
        .await
        .unwrap();
    assert!(records.is_empty(), "nothing claimed: {records:?}");
    store.discard().await;
}

/// The status and problem document `app` answers a POST to `path` under `key`.
async fn post_to(app: &Router, path: &str, key: &str) -> (StatusCode, serde_json::Value) {
    let request = Request::post(path)
        .header("idempotency-key", key)
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

/// The log says how to have the build refuse such an endpoint, once however many requests come:
/// each request is the client's to send, and a flood of them must not flood the log.
#[tokio::test(flavor = "current_thread")]
async fn a_misconfigured_endpoint_is_logged_once_with_the_fix() {
    let logs = idem_tests::logs::Logs::default();
    let guard = logs.capture();
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("user", |_| Some("u1".to_owned()))
        .build()
        .unwrap();
    // A handler of its own: the first report is per handler and per process.
    let app = Router::new()
        .route("/reversals", post(ledger::post_reversal))
        .with_state(idem);
    for key in ["k", "k2", "k3"] {
        let (status, _) = post_to(&app, "/reversals", key).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let said = logs.text();
    assert_eq!(said.matches("Builder::serves").count(), 1, "{said}");
    drop(guard);
}

/// The two refusals above, on each store that lends no transactions.
macro_rules! on_stores_without_transactions {
    ($($module:ident: $store:ty),* $(,)?) => {$(
        mod $module {
            #[tokio::test(flavor = "current_thread")]
            async fn an_atomic_endpoint_on_it_is_refused_at_build_naming_both() {
                super::an_atomic_endpoint_on_a_store_without_transactions_is_refused_naming_both::<$store>().await;
            }

            #[tokio::test(flavor = "current_thread")]
            async fn an_atomic_endpoint_not_served_fails_closed_at_its_first_request() {
                super::an_atomic_endpoint_not_served_fails_closed_at_its_first_request::<$store>().await;
            }
        }
    )*};
}

on_stores_without_transactions!(
    memory: idem_runtime::store::MemoryStore,
    redis: idem_runtime::store::RedisStore,
    dynamodb: idem_runtime::store::DynamoDbStore,
    bucket: idem_runtime::store::BucketStore,
);
