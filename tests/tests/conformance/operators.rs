//! What operators rely on in the SQL stores: records written by the first release (schema 1)
//! keep replaying after the upgrade and are listed with the fields they never had empty, and
//! the README's two questions ("which keys are stuck in flight, per endpoint?", "how many
//! completed in the last hour?") are one query each, on MySQL too (whose store is newer than
//! the first release, so it has no upgrade to prove).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;
use idem_runtime::StoredResponse;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{RecordFilter, RecordState};
use idem_runtime::store::{
    Admin, Claim, ClaimRequest, Completion, LeaseToken, PostgresStore, SqliteStore, Store,
};
use idem_tests::db;
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Row};

/// Migration 1 exactly as the first release shipped it: its checksum is what that release
/// recorded, so the current store must accept it and apply only what came after.
const SQLITE_V1: &str = "CREATE TABLE idem_records (
            key         BLOB    NOT NULL PRIMARY KEY CHECK (length(key) = 32),
            fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),
            token       INTEGER NOT NULL,
            state       TEXT    NOT NULL CHECK (state IN ('in_flight', 'completed')),
            owners      INTEGER NOT NULL,
            lease_until INTEGER NOT NULL,
            expires_at  INTEGER NOT NULL,
            response    BLOB,
            CHECK ((state = 'completed') = (response IS NOT NULL))
        );
        CREATE INDEX idem_records_expires_at ON idem_records (expires_at);";

const POSTGRES_V1: &str = "\
CREATE TABLE {records} (
    key         bytea   PRIMARY KEY CHECK (octet_length(key) = 32),
    fingerprint bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
    token       bigint  NOT NULL,
    state       text    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owners      integer NOT NULL,
    lease_until bigint  NOT NULL,
    expires_at  bigint  NOT NULL,
    response    bytea,
    CHECK ((state = 'completed') = (response IS NOT NULL))
);
CREATE INDEX {expires_at_index} ON {records} (expires_at);";

const KEY: RecordKey = RecordKey::from_bytes([3; 32]);
const FINGERPRINT: Fingerprint = Fingerprint::from_bytes([4; 32]);

fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    Timestamp::from_millis(ms as i64)
}

/// A response as the first release encoded it (the HTTP face's format 1 is unchanged).
fn response() -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        [],
        Bytes::from_static(b"{\"id\":\"ch_1\"}"),
    )
}

fn claim_at(now: Timestamp, token: i64) -> ClaimRequest<'static> {
    ClaimRequest {
        key: &KEY,
        fingerprint: &FINGERPRINT,
        token: LeaseToken::from_i64(token),
        now,
        lease_until: now.after(Duration::from_secs(30)),
        expires_at: now.after(Duration::from_secs(3600)),
        operation: "operators::create",
        scope: "global",
        scope_value: "",
        tenant: 0,
    }
}

/// The first release's record, listed after the upgrade: the fields it never had show empty.
async fn lists_the_old_record(store: &(impl Store + Admin)) {
    let listed = store
        .list_records(&RecordFilter::new(), now(), 10)
        .await
        .unwrap();
    let [record] = listed.as_slice() else {
        panic!("one record expected, got {listed:?}");
    };
    assert_eq!(record.key, KEY);
    assert_eq!(
        (
            record.operation.as_str(),
            record.scope.as_str(),
            record.scope_value.as_str()
        ),
        ("", "", ""),
        "written before the store kept them"
    );
    assert_eq!(record.created_at, Timestamp::from_millis(0));
    assert_eq!(record.completed_at, None);
    assert_eq!(record.state(now()), RecordState::Completed);
}

async fn replays_the_old_record(store: &impl Store) {
    match store.claim(claim_at(now(), 2)).await.unwrap() {
        Claim::Completed {
            fingerprint,
            payload,
            ..
        } => {
            assert_eq!(fingerprint, FINGERPRINT);
            assert_eq!(StoredResponse::decode(&payload).unwrap(), response());
        }
        other => panic!("the first release's record must replay, got {other:?}"),
    }
}

#[tokio::test]
async fn sqlite_records_of_the_first_release_replay_after_the_upgrade() {
    let path = db::sqlite_path();
    let url = db::sqlite_url(&path);
    let options = url.parse::<sqlx::sqlite::SqliteConnectOptions>().unwrap();
    let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true))
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE idem_migrations (version INTEGER NOT NULL PRIMARY KEY, \
         description TEXT NOT NULL, checksum BLOB NOT NULL, \
         applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(SQLITE_V1).execute(&pool).await.unwrap();
    sqlx::query("INSERT INTO idem_migrations (version, description, checksum) VALUES (1, 'create idem_records', ?)")
        .bind(Sha256::digest(SQLITE_V1).to_vec())
        .execute(&pool)
        .await
        .unwrap();
    let expires = now().after(Duration::from_secs(3600));
    sqlx::query("INSERT INTO idem_records VALUES (?, ?, 1, 'completed', 1, 0, ?, ?)")
        .bind(KEY.as_bytes().as_slice())
        .bind(FINGERPRINT.as_bytes().as_slice())
        .bind(expires.as_millis())
        .bind(response().encode())
        .execute(&pool)
        .await
        .unwrap();

    let store = SqliteStore::from_pool(pool.clone())
        .await
        .expect("the upgrade applies");
    lists_the_old_record(&store).await;
    replays_the_old_record(&store).await;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM idem_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(versions, [1, 2, 3]);
    db::remove_sqlite_store(&store).await;
}

#[tokio::test]
async fn postgres_records_of_the_first_release_replay_after_the_upgrade() {
    let pool = db::postgres_pool().await;
    let schema = db::unique_name();
    let records = format!("\"{schema}\".\"idempotency_records\"");
    let v1 = POSTGRES_V1
        .replace("{records}", &records)
        .replace("{expires_at_index}", "\"idempotency_records_expires_at\"");
    let setup = format!(
        "CREATE SCHEMA \"{schema}\";
         CREATE TABLE \"{schema}\".idem_migrations (
            records_table text NOT NULL, version bigint NOT NULL, description text NOT NULL,
            checksum bytea NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (records_table, version));
         {v1}"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".idem_migrations (records_table, version, description, checksum) \
         VALUES ('idempotency_records', 1, 'create the records table', $1)"
    )))
    .bind(Sha256::digest(POSTGRES_V1).to_vec())
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {records} VALUES ($1, $2, 1, 'completed', 1, 0, $3, $4)"
    )))
    .bind(KEY.as_bytes().as_slice())
    .bind(FINGERPRINT.as_bytes().as_slice())
    .bind(now().after(Duration::from_secs(3600)).as_millis())
    .bind(response().encode())
    .execute(&pool)
    .await
    .unwrap();

    let store = PostgresStore::builder(pool.clone())
        .schema(&schema)
        .build()
        .await
        .expect("the upgrade applies");
    lists_the_old_record(&store).await;
    replays_the_old_record(&store).await;
    db::drop_postgres_store(&store).await;
}

/// Leaves, for the operator queries: two records of `a` stuck in flight (lease lapsed), one of
/// `b` in flight with a live lease, one of `a` completed a minute ago, one completed two hours
/// ago. Times are real: the queries compare with the database's clock.
async fn operator_fixture(store: &impl Store) {
    let now = now();
    let minutes = |m: u64| Timestamp::from_millis(now.as_millis() - (m * 60_000) as i64);
    let mut n = 0u8;
    let mut claim = async |operation: &'static str, at: Timestamp, lease: Duration| {
        n += 1;
        let key = RecordKey::from_bytes([n; 32]);
        let request = ClaimRequest {
            key: &key,
            fingerprint: &FINGERPRINT,
            token: LeaseToken::from_i64(i64::from(n)),
            now: at,
            lease_until: at.after(lease),
            expires_at: now.after(Duration::from_secs(86_400)),
            operation,
            scope: "global",
            scope_value: "",
            tenant: 0,
        };
        assert_eq!(
            store.claim(request).await.unwrap(),
            Claim::Acquired { took_over: false }
        );
        (key, LeaseToken::from_i64(i64::from(n)))
    };
    claim("a", minutes(10), Duration::from_secs(30)).await;
    claim("a", minutes(5), Duration::from_secs(30)).await;
    claim("b", now, Duration::from_secs(600)).await;
    let payload = response().encode();
    for (operation, done) in [("a", minutes(1)), ("a", minutes(120))] {
        let (key, token) = claim(operation, done, Duration::from_secs(30)).await;
        let completion = Completion {
            payload: &payload,
            status: Some(201),
            completed_at: done,
            expires_at: now.after(Duration::from_secs(86_400)),
        };
        store.complete(&key, token, completion).await.unwrap();
    }
}

#[tokio::test]
async fn sqlite_operators_query_stuck_and_recent_records_in_one_statement_each() {
    let store = db::sqlite_store().await;
    operator_fixture(&store).await;
    let stuck: Vec<(String, i64)> = sqlx::query_as(
        "SELECT operation, count(*) FROM idem_records \
         WHERE state = 'in_flight' AND lease_until < unixepoch('subsec') * 1000 GROUP BY operation",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(stuck, [("a".to_owned(), 2)]);
    let recent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idem_records \
         WHERE state = 'completed' AND completed_at >= (unixepoch('subsec') - 3600) * 1000",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(recent, 1);
    let status: i64 =
        sqlx::query("SELECT status FROM idem_records WHERE state = 'completed' LIMIT 1")
            .fetch_one(store.pool())
            .await
            .unwrap()
            .get(0);
    assert_eq!(status, 201);
    db::remove_sqlite_store(&store).await;
}

#[tokio::test]
async fn postgres_operators_query_stuck_and_recent_records_in_one_statement_each() {
    let store = db::postgres_store().await;
    operator_fixture(&store).await;
    let table = format!("\"{}\".idempotency_records", store.schema());
    let stuck: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT operation, count(*) FROM {table} \
         WHERE state = 'in_flight' AND lease_until < extract(epoch FROM now()) * 1000 \
         GROUP BY operation"
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(stuck, [("a".to_owned(), 2)]);
    let recent: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} \
         WHERE state = 'completed' \
           AND completed_at >= extract(epoch FROM now() - interval '1 hour') * 1000"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(recent, 1);
    db::drop_postgres_store(&store).await;
}

/// The same two questions on MySQL: text is kept as bytes (`CONVERT(.. USING utf8mb4)` reads it
/// back), the clock is `UNIX_TIMESTAMP(NOW(3))`.
#[tokio::test]
async fn mysql_operators_query_stuck_and_recent_records_in_one_statement_each() {
    use idem_tests::TestStore;
    let store = idem_tests::mysql::mysql_store().await;
    operator_fixture(&store).await;
    let stuck: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CONVERT(operation USING utf8mb4) AS operation, COUNT(*) \
         FROM idempotency_records \
         WHERE state = 'in_flight' AND lease_until < UNIX_TIMESTAMP(NOW(3)) * 1000 \
         GROUP BY operation",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(stuck, [("a".to_owned(), 2)]);
    let recent: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM idempotency_records \
         WHERE state = 'completed' AND completed_at >= (UNIX_TIMESTAMP(NOW(3)) - 3600) * 1000",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(recent, 1);
    store.discard().await;
}
