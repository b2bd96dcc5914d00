//! `SqliteStore::connect("sqlite::memory:")`: an in-memory database lives in one connection, so
//! the store keeps exactly one and every request goes through it, however many arrive at once.
//! (With a pool of several, each new connection would open an empty database of its own.)
//!
//! ```text
//! cargo test -p idem-tests --test sqlite_in_memory
//! ```

use std::time::Duration;

use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, LeaseToken, SqliteStore, Store};

async fn claim(store: &SqliteStore, n: u8) -> Claim {
    let key = RecordKey::from_bytes([n; 32]);
    let fingerprint = Fingerprint::of_bytes(&[n]);
    let now = Timestamp::from_millis(1_000_000);
    store
        .claim(ClaimRequest {
            key: &key,
            fingerprint: &fingerprint,
            token: LeaseToken::from_i64(i64::from(n)),
            now,
            lease_until: now.after(Duration::from_secs(60)),
            expires_at: now.after(Duration::from_secs(3600)),
            operation: "sqlite::in_memory",
            scope: "global",
            scope_value: "",
            tenant: 0,
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_in_memory_database() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    let claims: Vec<_> = (0..16u8)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move { claim(&store, n).await })
        })
        .collect();
    for claim in claims {
        assert_eq!(claim.await.unwrap(), Claim::Acquired { took_over: false });
    }
    // Every record is in the one database: each key is now held.
    for n in 0..16u8 {
        assert!(
            matches!(claim(&store, n).await, Claim::InFlight { .. }),
            "record {n} was not kept"
        );
    }
}
