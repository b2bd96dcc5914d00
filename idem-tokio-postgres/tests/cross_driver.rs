//! One table, two drivers: idem-sqlx's `PostgresStore` and this crate's store start on each
//! other's schema, read each other's records byte for byte, complete each other's claims under
//! the owner's token, and their one-commit claims of a key wait on the same lock. An
//! application moves from one driver to the other (or runs both during a rolling switch)
//! without losing a record.

mod support;

use std::time::Duration;

use idem_core::store::atomic::TransactionClaim;
use idem_core::store::{Admin, Claim, Completion, Fence, LeaseToken, Store};
use idem_core::testing::{at, capabilities_of, key, request};
use idem_sqlx::PostgresStore;
use idem_tokio_postgres::TokioPostgresStore;
use support::{Schemas, pool_at, url};

/// Both stores on one schema: sqlx's migrates it first when `sqlx_first`.
async fn both(schemas: &Schemas, sqlx_first: bool) -> (PostgresStore, TokioPostgresStore) {
    let schema = schemas.fresh();
    let pool = sqlx::PgPool::connect(&url()).await.unwrap();
    let sqlx_store = || PostgresStore::builder(pool.clone()).schema(schema.clone());
    let tokio_store = || TokioPostgresStore::builder(pool_at(&url(), 4)).schema(schema.clone());
    if sqlx_first {
        let a = sqlx_store().build().await.unwrap();
        (a, tokio_store().build().await.unwrap())
    } else {
        let b = tokio_store().build().await.unwrap();
        (sqlx_store().build().await.unwrap(), b)
    }
}

/// The migrations recorded in `schema`: `(version, checksum)`.
async fn migrations(store: &PostgresStore) -> Vec<(i64, Vec<u8>)> {
    let sql = format!(
        "SELECT version, checksum FROM \"{}\".idem_migrations ORDER BY version",
        store.schema()
    );
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_driver_starts_on_a_schema_the_other_migrated() {
    let schemas = Schemas::default();
    let (by_sqlx, _) = both(&schemas, true).await;
    let (by_tokio, _) = both(&schemas, false).await;
    let (a, b) = (migrations(&by_sqlx).await, migrations(&by_tokio).await);
    assert_eq!(
        a.len(),
        idem_sql::postgres::migrations::MIGRATIONS.len(),
        "{a:?}"
    );
    // The same migrations, recorded once, with the same checksums whoever applied them.
    assert_eq!(a, b);
}

/// Every byte value, and more, as a payload.
fn payload() -> Vec<u8> {
    (0..=255u8).cycle().take(4096).collect()
}

fn completion(payload: &[u8]) -> Completion<'_> {
    Completion {
        payload,
        status: Some(201),
        completed_at: at(10),
        expires_at: at(86_400_000),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_written_by_one_driver_are_read_and_completed_by_the_other() {
    let schemas = Schemas::default();
    let (sqlx_store, tokio_store) = both(&schemas, true).await;
    let payload = payload();
    let scope = ("org", "acme");
    let ttl = 86_400_000;

    // Written by sqlx, replayed by tokio-postgres, and the other way round.
    for (i, (writer, reader)) in [(0, 1), (1, 0)].into_iter().enumerate() {
        let k = key(i as u32);
        let claimed = if writer == 0 {
            sqlx_store.claim(request(&k, 1, 0, ttl, scope)).await
        } else {
            tokio_store.claim(request(&k, 1, 0, ttl, scope)).await
        };
        assert_eq!(claimed.unwrap(), Claim::Acquired { took_over: false });
        // Completed by the other driver, under the owner's token; a wrong token is fenced.
        let (wrong, right) = (LeaseToken::from_i64(2), LeaseToken::from_i64(1));
        let fenced = if reader == 0 {
            sqlx_store.complete(&k, wrong, completion(&payload)).await
        } else {
            tokio_store.complete(&k, wrong, completion(&payload)).await
        };
        assert_eq!(fenced.unwrap(), Fence::Lost);
        let held = if reader == 0 {
            sqlx_store.complete(&k, right, completion(&payload)).await
        } else {
            tokio_store.complete(&k, right, completion(&payload)).await
        };
        assert_eq!(held.unwrap(), Fence::Held);
        for replay in [
            sqlx_store.claim(request(&k, 3, 20, ttl, scope)).await,
            tokio_store.claim(request(&k, 3, 20, ttl, scope)).await,
        ] {
            match replay.unwrap() {
                Claim::Completed {
                    payload: stored,
                    completed_at,
                    ..
                } => {
                    assert_eq!(&stored[..], &payload[..]);
                    assert_eq!(completed_at, Some(at(10)));
                }
                other => panic!("expected a replay, got {other:?}"),
            }
        }
        // What operators read is the same through either driver.
        let (a, b) = (
            sqlx_store.read_record(&k).await.unwrap(),
            tokio_store.read_record(&k).await.unwrap(),
        );
        assert!(a.is_some());
        assert_eq!(a, b);
    }
    let filter = Default::default();
    let (a, b) = (
        sqlx_store.list_records(&filter, at(30), 10).await.unwrap(),
        tokio_store.list_records(&filter, at(30), 10).await.unwrap(),
    );
    assert_eq!((a.len(), &a), (2, &b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_claims_of_both_drivers_wait_on_one_lock() {
    let schemas = Schemas::default();
    let (sqlx_store, tokio_store) = both(&schemas, false).await;
    let (sqlx_claims, tokio_claims) = (
        capabilities_of(sqlx_store.clone()),
        capabilities_of(tokio_store.clone()),
    );
    let (sqlx_claims, tokio_claims) = (
        sqlx_claims.claim_in_transaction().unwrap(),
        tokio_claims.claim_in_transaction().unwrap(),
    );
    let k = key(7);
    let wait = Duration::from_millis(100);
    let timeout = Duration::from_secs(5);
    let scope = ("org", "acme");
    // sqlx's claim holds the key's lock in its open transaction: tokio-postgres's waits, then
    // reports it in flight; and the other way round.
    let held = sqlx_claims
        .claim_in_transaction(request(&k, 1, 0, 60_000, scope), wait, timeout)
        .await
        .unwrap();
    assert!(matches!(held, TransactionClaim::Acquired(_)), "{held:?}");
    let other = tokio_claims
        .claim_in_transaction(request(&k, 2, 0, 60_000, scope), wait, timeout)
        .await
        .unwrap();
    assert!(matches!(other, TransactionClaim::InFlight), "{other:?}");
    drop(held); // rolls back: the key is free

    let held = tokio_claims
        .claim_in_transaction(request(&k, 3, 0, 60_000, scope), wait, timeout)
        .await
        .unwrap();
    let TransactionClaim::Acquired(held) = held else {
        panic!("{held:?}")
    };
    let other = sqlx_claims
        .claim_in_transaction(request(&k, 4, 0, 60_000, scope), wait, timeout)
        .await
        .unwrap();
    assert!(matches!(other, TransactionClaim::InFlight), "{other:?}");
    // Completed and committed by tokio-postgres: sqlx's next claim finds the record.
    let payload = payload();
    let done = held
        .complete_and_commit(&k, LeaseToken::from_i64(3), completion(&payload))
        .await
        .unwrap();
    assert_eq!(done, Fence::Held);
    let after = sqlx_claims
        .claim_in_transaction(request(&k, 5, 20, 60_000, scope), wait, timeout)
        .await
        .unwrap();
    assert!(matches!(after, TransactionClaim::Stored), "{after:?}");
    match sqlx_store
        .claim(request(&k, 5, 20, 60_000, scope))
        .await
        .unwrap()
    {
        Claim::Completed { payload: p, .. } => assert_eq!(&p[..], &payload[..]),
        other => panic!("expected a replay, got {other:?}"),
    }
}
