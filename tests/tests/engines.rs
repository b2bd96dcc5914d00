//! Start-up checks per engine: a binary with several engines, each checking the endpoints of its
//! own modules, and atomic endpoints refused on a store that lends no transactions.

use axum::http::StatusCode;
use idem_runtime::store::{MemoryStore, SqliteStore};
use idem_runtime::{BuildError, Idempotency};

mod billing {
    use super::*;
    use idem_runtime::idempotent;

    /// Billing's handlers are scoped by organisation.
    #[idempotent(scope = "org")]
    #[allow(dead_code)] // registered, never routed: the checks are what is tested
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
    #[allow(dead_code)] // registered, never routed: the checks are what is tested
    pub(crate) async fn post_entry(tx: Db) -> StatusCode {
        drop(tx);
        StatusCode::CREATED
    }
}

fn org(caller: &idem_runtime::Caller<'_>) -> Option<String> {
    caller.metadata("x-org").map(str::to_owned)
}

#[test]
fn each_engine_checks_the_endpoints_of_its_own_modules() {
    let billing = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .endpoints_under("engines::billing")
        .build();
    assert!(billing.is_ok(), "{billing:?}");

    // Checking every endpoint in the binary finds ledger's scope missing on billing's engine.
    let everything = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            everything,
            BuildError::UnresolvedScope {
                endpoint: "engines::ledger::post_entry",
                scope: "user"
            } | BuildError::AtomicUnsupported { .. }
        ),
        "{everything}"
    );
    // A module prefix matches whole path segments only.
    let other = Idempotency::builder()
        .store(MemoryStore::new())
        .endpoints_under("engines::bill")
        .build();
    assert!(other.is_ok(), "no endpoint lives under `engines::bill`");
}

#[test]
fn an_atomic_endpoint_on_a_store_without_transactions_is_refused_naming_both() {
    let err = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("user", |_| None)
        .endpoints_under("engines::ledger")
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
        .endpoints_under("engines::ledger")
        .build();
    assert!(built.is_ok(), "{built:?}");
}
