//! What only the SQL stores have: embedded migrations in their own table, connection settings,
//! configurable names, backend errors reported as `StoreError::Unavailable` and corrupt rows as
//! `StoreError::Corrupt`, and the scope a claim keeps for operators. SQLite's cases and what
//! every SQL store shares are here; PostgreSQL's and MySQL's in `sql/`.

#[path = "sql/mysql.rs"]
mod mysql;
#[path = "sql/postgres.rs"]
mod postgres;

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use idem_runtime::StoreError;
use idem_runtime::StoredResponse;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, RecordFilter};
use idem_runtime::store::{
    Admin, Claim, ClaimRequest, Completion, Fence, LeaseToken, SqliteStore, Store,
};
use idem_tests::TestStore;
use idem_tests::db;
use sqlx::SqlitePool;

const NOW: Timestamp = Timestamp::from_millis(1_750_000_000_000);
const KEY: RecordKey = RecordKey::from_bytes([7; 32]);
const FINGERPRINT: Fingerprint = Fingerprint::from_bytes([9; 32]);

fn request(token: i64) -> ClaimRequest<'static> {
    ClaimRequest {
        key: &KEY,
        fingerprint: &FINGERPRINT,
        token: LeaseToken::from_i64(token),
        now: NOW,
        lease_until: NOW.after(Duration::from_secs(30)),
        expires_at: NOW.after(Duration::from_secs(3600)),
        operation: "sql::create_charge",
        scope: "global",
        scope_value: "",
        tenant: 0,
    }
}

fn response() -> StoredResponse {
    StoredResponse::new(StatusCode::CREATED, [], Bytes::from_static(b"stored"))
}

/// Leaves a completed record for [`KEY`].
async fn store_one(store: &impl Store) {
    assert_eq!(
        store.claim(request(1)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let (token, expires_at) = (
        LeaseToken::from_i64(1),
        NOW.after(Duration::from_secs(3600)),
    );
    let payload = response().encode();
    let completion = Completion {
        payload: &payload,
        status: Some(201),
        completed_at: NOW.after(Duration::from_millis(250)),
        expires_at,
    };
    let done = store.complete(&KEY, token, completion).await;
    assert_eq!(done.unwrap(), Fence::Held);
}

/// Asserts the record [`store_one`] left is still replayed.
async fn replays_one(store: &impl Store) {
    assert_eq!(
        store.claim(request(2)).await.unwrap(),
        Claim::Completed {
            fingerprint: FINGERPRINT,
            payload: Bytes::from(response().encode()),
            completed_at: Some(NOW.after(Duration::from_millis(250))),
        }
    );
}

/// Two stores on one database or schema, with tables of their own: a record in the first is no
/// record in the second.
async fn records_are_per_table(first: &impl Store, second: &impl Store) {
    store_one(first).await;
    assert_eq!(
        second.claim(request(2)).await.unwrap(),
        Claim::Acquired { took_over: false },
        "records are per table"
    );
}

fn is_unavailable<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "expected Unavailable, got {result:?}"
    );
}

/// A store whose database or schema was dropped under it answers `Unavailable`.
async fn a_dropped_database_is_unavailable(store: &impl Store) {
    is_unavailable(store.claim(request(1)).await);
    is_unavailable(store.renew(&KEY, LeaseToken::from_i64(1), NOW).await);
}

/// A store whose records table was dropped under it answers `Unavailable`, to the engine and
/// to operators.
async fn a_dropped_table_is_unavailable(store: &(impl Store + Admin)) {
    is_unavailable(store.claim(request(1)).await);
    is_unavailable(store.purge_expired(NOW, 10).await);
    is_unavailable(store.read_record(&KEY).await);
}

fn is_migration_error(result: Result<impl std::fmt::Debug, StoreError>, version: i64) -> bool {
    matches!(result, Err(StoreError::Migration { version: v, .. }) if v == version)
}

// ---------------------------------------------------------------------------------------------
// SQLite

async fn sqlite_scalar(pool: &SqlitePool, sql: &'static str) -> String {
    sqlx::query_scalar::<_, String>(sql)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn sqlite_tables(pool: &SqlitePool) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn sqlite_creates_the_file_in_wal_mode_and_reopens_it_without_migrating_again() {
    let path = db::sqlite_path();
    assert!(!path.exists());
    let store = SqliteStore::connect(&db::sqlite_url(&path)).await.unwrap();
    assert!(path.exists(), "the database file is created");
    let pool = store.pool();
    assert_eq!(sqlite_scalar(pool, "PRAGMA journal_mode").await, "wal");
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(synchronous, 1, "synchronous = NORMAL");
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(busy, SqliteStore::BUSY_TIMEOUT.as_millis() as i64);
    store_one(&store).await;
    pool.close().await;

    let reopened = SqliteStore::connect(&db::sqlite_url(&path)).await.unwrap();
    replays_one(&reopened).await;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM idem_migrations")
        .fetch_all(reopened.pool())
        .await
        .unwrap();
    assert_eq!(applied, [1, 2, 3]);
    assert_eq!(
        sqlite_tables(reopened.pool()).await,
        ["idem_migrations", "idem_records"]
    );
    reopened.discard().await;
}

#[tokio::test]
async fn sqlite_in_memory_database_works_across_calls() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store_one(&store).await;
    replays_one(&store).await;
    // An operator's forget takes the one connection and gives it back, whatever it answers.
    let forgotten = store.forget_record(&KEY, NOW, false).await.unwrap();
    assert!(matches!(forgotten, Forgotten::Deleted(_)), "{forgotten:?}");
    assert_eq!(
        store.claim(request(4)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let forgotten = store.forget_record(&KEY, NOW, false).await.unwrap();
    assert!(matches!(forgotten, Forgotten::Leased(_)), "{forgotten:?}");
    // Each in-memory store is its own database.
    let other = SqliteStore::connect("sqlite::memory:").await.unwrap();
    assert_eq!(
        other.claim(request(3)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
}

#[tokio::test]
async fn sqlite_shares_an_app_database_without_touching_its_tables() {
    let path = db::sqlite_path();
    let options = db::sqlite_url(&path)
        .parse::<sqlx::sqlite::SqliteConnectOptions>()
        .unwrap();
    let app = SqlitePool::connect_with(options.create_if_missing(true))
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE charges (id TEXT PRIMARY KEY); INSERT INTO charges VALUES ('ch_1')",
    )
    .execute(&app)
    .await
    .unwrap();
    let store = SqliteStore::from_pool(app.clone()).await.unwrap();
    // Twice, as on a restart: nothing to apply the second time.
    SqliteStore::from_pool(app.clone()).await.unwrap();
    store_one(&store).await;
    assert_eq!(
        sqlite_tables(&app).await,
        ["charges", "idem_migrations", "idem_records"],
        "no `_sqlx_migrations`, the app's table untouched"
    );
    assert_eq!(sqlite_scalar(&app, "SELECT id FROM charges").await, "ch_1");
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_processes_opening_one_new_file_at_once_all_start() {
    // Openers of a new file race to switch it to WAL, which SQLite refuses with SQLITE_BUSY
    // without waiting: the store retries within its busy timeout. Several rounds, so that a
    // race lost once in a while is lost here.
    for _ in 0..6 {
        let url = db::sqlite_url(&db::sqlite_path());
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { SqliteStore::connect(&url).await })
            })
            .collect();
        let mut stores = Vec::new();
        for opener in openers {
            stores.push(opener.await.unwrap().expect("every opener starts"));
        }
        let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_migrations")
            .fetch_one(stores[0].pool())
            .await
            .unwrap();
        assert_eq!(applied, 3);
        stores.swap_remove(0).discard().await;
    }
}

#[tokio::test]
async fn sqlite_refuses_an_edited_migration() {
    let store = db::sqlite_store().await;
    sqlx::query("UPDATE idem_migrations SET checksum = x'00' WHERE version = 1")
        .execute(store.pool())
        .await
        .unwrap();
    let restarted = SqliteStore::from_pool(store.pool().clone()).await;
    assert!(is_migration_error(restarted, 1));
    store.discard().await;
}

#[tokio::test]
async fn sqlite_errors_are_unavailable() {
    let store = db::sqlite_store().await;
    store.clone().discard().await;
    assert!(matches!(
        store.claim(request(1)).await,
        Err(StoreError::Unavailable(_))
    ));
    let done = store.release(&KEY, LeaseToken::from_i64(1)).await;
    assert!(matches!(done, Err(StoreError::Unavailable(_))));
}

#[path = "sql/sqlite_settings.rs"]
mod sqlite_settings;

// ---------------------------------------------------------------------------------------------
// Both: what a claim keeps for operators, and corrupt rows

/// A claim of [`KEY`] at `now` in `scope`, `scope_value`, leased for 30 s, live for an hour.
fn scoped(
    now: Timestamp,
    token: i64,
    scope: &'static str,
    value: &'static str,
) -> ClaimRequest<'static> {
    ClaimRequest {
        now,
        lease_until: now.after(Duration::from_secs(30)),
        expires_at: now.after(Duration::from_secs(3600)),
        scope,
        scope_value: value,
        ..request(token)
    }
}

async fn listed_scope(store: &(impl Store + Admin), now: Timestamp) -> (String, String, Timestamp) {
    let listed = store
        .list_records(&RecordFilter::new(), now, 10)
        .await
        .unwrap();
    let [record] = listed.as_slice() else {
        panic!("one record expected, got {listed:?}");
    };
    (
        record.scope.clone(),
        record.scope_value.clone(),
        record.created_at,
    )
}

/// A takeover of a lapsed lease keeps what the record says about itself; a claim that replaces
/// an expired record writes its own.
async fn claims_keep_the_scope_of_the_record_they_take(store: &(impl Store + Admin)) {
    assert_eq!(
        store.claim(scoped(NOW, 1, "org", "acme")).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let lapsed = NOW.after(Duration::from_secs(60));
    assert_eq!(
        store.claim(scoped(lapsed, 2, "user", "u-1")).await.unwrap(),
        Claim::Acquired { took_over: true }
    );
    assert_eq!(
        listed_scope(store, lapsed).await,
        ("org".into(), "acme".into(), NOW)
    );
    let expired = lapsed.after(Duration::from_secs(3600));
    assert_eq!(
        store
            .claim(scoped(expired, 3, "user", "u-1"))
            .await
            .unwrap(),
        Claim::Acquired { took_over: false }
    );
    assert_eq!(
        listed_scope(store, expired).await,
        ("user".into(), "u-1".into(), expired)
    );
}

#[tokio::test]
async fn sqlite_claims_keep_the_scope_of_the_record_they_take() {
    let store = db::sqlite_store().await;
    claims_keep_the_scope_of_the_record_they_take(&store).await;
    store.discard().await;
}

/// A row no release writes is reported as corrupt by every operator method that reads it.
fn is_corrupt<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::Corrupt(_))),
        "expected Corrupt, got {result:?}"
    );
}

async fn corrupt_rows_are_errors(store: &(impl Store + Admin)) {
    let now = NOW.after(Duration::from_secs(1));
    is_corrupt(store.list_records(&RecordFilter::new(), now, 10).await);
    is_corrupt(store.read_record(&KEY).await);
    is_corrupt(store.forget_record(&KEY, now, true).await);
    // The forget deleted nothing: the row is there, as corrupt as it was.
    is_corrupt(store.read_record(&KEY).await);
}

#[tokio::test]
async fn sqlite_corrupt_rows_are_errors_not_panics() {
    let store = db::sqlite_store().await;
    store_one(&store).await;
    sqlx::query("UPDATE idem_records SET status = 70000")
        .execute(store.pool())
        .await
        .unwrap();
    corrupt_rows_are_errors(&store).await;
    store.discard().await;
}
