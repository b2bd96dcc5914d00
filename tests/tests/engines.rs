//! Start-up checks per engine: a binary with several engines, each checking the endpoints it is
//! told it serves, atomic endpoints refused on a store that lends no transactions, and an
//! endpoint no engine was told of failing closed at its first request.

use axum::http::StatusCode;
use idem_runtime::store::{MemoryStore, SqliteStore};
use idem_runtime::{BuildError, Idempotency};

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

#[test]
fn an_atomic_endpoint_on_a_store_without_transactions_is_refused_naming_both() {
    let err = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("user", |_| None)
        .serves(ledger::post_entry)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::AtomicUnsupported {
            endpoint: "engines::ledger::post_entry",
            database: "SQLite",
            store: std::any::type_name::<MemoryStore>(),
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("`engines::ledger::post_entry`"),
        "{message}"
    );
    assert!(message.contains("MemoryStore"), "{message}");
    assert!(message.contains("SQLite"), "{message}");
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

#[tokio::test(flavor = "current_thread")]
async fn an_atomic_endpoint_not_served_fails_closed_at_its_first_request_and_says_why() {
    use axum::{Router, body::Body, http::Request, routing::post};
    use tower::ServiceExt;

    let logs = idem_tests::logs::Logs::default();
    let guard = logs.capture();
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("user", |_| Some("u1".to_owned()))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/entries", post(ledger::post_entry))
        .with_state(idem);
    let request = Request::post("/entries")
        .header("idempotency-key", "k")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "idempotency_misconfigured");
    let said = logs.text();
    assert!(said.contains("Builder::serves"), "{said}");
    // Every request is answered 500, but a flood of them is logged once.
    let again = Request::post("/entries")
        .header("idempotency-key", "k2")
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(again).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let said = logs.text();
    assert_eq!(said.matches("Builder::serves").count(), 1, "{said}");
    drop(guard);
}
