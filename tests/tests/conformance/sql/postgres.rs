//! What only the PostgreSQL store has: the `idem` schema and its own migrations table, session
//! timeouts, stores sharing a schema, names checked before the database is touched, and backend
//! errors reported as `StoreError::Unavailable`.

use idem_runtime::StoreError;
use idem_runtime::store::{Admin, PostgresStore, Store};
use idem_tests::db::{self, TestDatabase};
use idem_tests::{TestStore, postgres_store};
use sqlx::{AssertSqlSafe, PgPool};

use super::{
    KEY, a_dropped_database_is_unavailable, a_dropped_table_is_unavailable,
    claims_keep_the_scope_of_the_record_they_take, corrupt_rows_are_errors, is_corrupt,
    is_migration_error, records_are_per_table, replays_one, request, store_one,
};

async fn count(pool: &PgPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn postgres_connect_uses_the_idem_schema_and_its_own_migrations_table() {
    let database = TestDatabase::create().await;
    let store = PostgresStore::connect(&database.url).await.unwrap();
    assert_eq!(store.schema(), "idem");
    let timeouts: (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        timeouts,
        ("5s".to_owned(), "5s".to_owned()),
        "a stalled database fails statements server-side"
    );
    assert_eq!(store.table(), "idempotency_records");
    store_one(&store).await;
    let pool = store.pool();
    let present =
        |name: &str| format!("SELECT count(*) FROM pg_class WHERE oid = to_regclass('{name}')");
    assert_eq!(count(pool, present("idem.idempotency_records")).await, 1);
    assert_eq!(
        count(pool, present("idem.idempotency_records_expires_at")).await,
        1
    );
    assert_eq!(count(pool, present("idem.idem_migrations")).await, 1);
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM pg_class WHERE relname = '_sqlx_migrations'".into()
        )
        .await,
        0
    );
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'".into()
        )
        .await,
        0,
        "nothing in the app's schema"
    );
    assert_eq!(
        count(
            pool,
            "SELECT count(*) FROM idem.idem_migrations WHERE records_table = 'idempotency_records'"
                .into()
        )
        .await,
        5
    );
    pool.close().await;
    database.drop().await;
}

#[tokio::test]
async fn postgres_restart_applies_nothing_and_keeps_records() {
    let store = postgres_store().await;
    store_one(&store).await;
    let restarted = PostgresStore::builder(db::postgres_pool().await)
        .schema(store.schema())
        .build()
        .await
        .unwrap();
    replays_one(&restarted).await;
    let migrations = format!(
        "SELECT count(*) FROM \"{}\".idem_migrations",
        store.schema()
    );
    assert_eq!(count(store.pool(), migrations).await, 5);
    restarted.pool().close().await;
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_instances_starting_at_once_migrate_once() {
    let schema = db::unique_name();
    let starters: Vec<_> = (0..8)
        .map(|_| {
            let schema = schema.clone();
            tokio::spawn(async move {
                let pool = db::postgres_pool().await;
                PostgresStore::builder(pool).schema(schema).build().await
            })
        })
        .collect();
    let mut stores = Vec::new();
    for starter in starters {
        stores.push(starter.await.unwrap().expect("every instance starts"));
    }
    let migrations = format!("SELECT count(*) FROM \"{schema}\".idem_migrations");
    assert_eq!(count(stores[0].pool(), migrations).await, 5);
    store_one(&stores[0]).await;
    replays_one(&stores[7]).await;
    for store in &stores[1..] {
        store.pool().close().await;
    }
    stores.swap_remove(0).discard().await;
}

#[tokio::test]
async fn postgres_stores_can_share_a_schema_with_their_own_tables() {
    let first = postgres_store().await;
    let second = PostgresStore::builder(first.pool().clone())
        .schema(first.schema())
        .table("Other_Records")
        .build()
        .await
        .unwrap();
    assert_eq!(second.table(), "Other_Records");
    records_are_per_table(&first, &second).await;
    let migrations = format!(
        "SELECT count(*) FROM \"{}\".idem_migrations",
        first.schema()
    );
    assert_eq!(
        count(first.pool(), migrations).await,
        10,
        "five migrations per table"
    );
    first.discard().await;
}

#[tokio::test]
async fn postgres_rejects_invalid_names_before_touching_the_database() {
    let pool = db::postgres_pool().await;
    for (schema, table) in [
        ("idem\"; DROP SCHEMA public; --", "t"),
        ("idem-test", "t"),
        ("idem", "records.v2"),
        ("idem", ""),
        ("9lives", "t"),
    ] {
        let built = PostgresStore::builder(pool.clone())
            .schema(schema)
            .table(table)
            .build()
            .await;
        assert!(
            matches!(built, Err(StoreError::Config(_))),
            "{schema:?}.{table:?}"
        );
    }
    let schemas =
        "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'idem-%' OR nspname LIKE '9%'";
    assert_eq!(count(&pool, schemas.into()).await, 0);
}

#[tokio::test]
async fn postgres_refuses_an_edited_migration() {
    let store = postgres_store().await;
    let edit = format!(
        "UPDATE \"{}\".idem_migrations SET checksum = '\\x00'",
        store.schema()
    );
    sqlx::raw_sql(AssertSqlSafe(edit))
        .execute(store.pool())
        .await
        .unwrap();
    let restarted = PostgresStore::builder(store.pool().clone())
        .schema(store.schema())
        .build()
        .await;
    assert!(is_migration_error(restarted, 1));
    store.discard().await;
}

#[tokio::test]
async fn postgres_errors_are_unavailable() {
    let store = postgres_store().await;
    store.clone().discard().await;
    a_dropped_database_is_unavailable(&store).await;
    // And a missing table (dropped under a running store) is a backend error too.
    let store = postgres_store().await;
    let drop = format!("DROP TABLE \"{}\".idempotency_records", store.schema());
    sqlx::raw_sql(AssertSqlSafe(drop))
        .execute(store.pool())
        .await
        .unwrap();
    a_dropped_table_is_unavailable(&store).await;
    store.discard().await;
}

#[tokio::test]
async fn postgres_claims_keep_the_scope_of_the_record_they_take() {
    let store = postgres_store().await;
    claims_keep_the_scope_of_the_record_they_take(&store).await;
    store.discard().await;
}

#[tokio::test]
async fn postgres_corrupt_rows_are_errors_not_panics() {
    let store = postgres_store().await;
    store_one(&store).await;
    let corrupt = format!(
        "UPDATE \"{}\".idempotency_records SET status = -1",
        store.schema()
    );
    sqlx::raw_sql(AssertSqlSafe(corrupt))
        .execute(store.pool())
        .await
        .unwrap();
    corrupt_rows_are_errors(&store).await;
    store.discard().await;
}

/// The table keeps no `CHECK` constraints (migration 5: PostgreSQL plans them anew in every
/// write), so what they refused is refused where the row is read: a claim of the key and an
/// operator's read both report each such row as corrupt, and nothing is acquired or replayed.
#[tokio::test]
async fn postgres_rows_the_dropped_checks_refused_fail_closed() {
    let store = postgres_store().await;
    store_one(&store).await;
    let table = format!("\"{}\".idempotency_records", store.schema());
    let checks = format!(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'c'"
    );
    assert_eq!(count(store.pool(), checks).await, 0);
    let pool = store.pool().clone();
    let exec = |sql: String| {
        let pool = pool.clone();
        async move {
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    exec(format!("CREATE TABLE {table}_kept AS TABLE {table}")).await;
    // Each with whether an operator's read sees the corruption (it shows no fingerprint).
    for (corruption, read) in [
        ("state = 'done'", true),
        ("response = NULL", true),
        ("fingerprint = '\\x0102'", false),
        (
            "state = 'in_flight', lease_until = 0, fingerprint = '\\x01'",
            false,
        ),
    ] {
        exec(format!("UPDATE {table} SET {corruption}")).await;
        is_corrupt(store.claim(request(3)).await);
        if read {
            is_corrupt(store.read_record(&KEY).await);
        }
        exec(format!(
            "DELETE FROM {table}; INSERT INTO {table} SELECT * FROM {table}_kept"
        ))
        .await;
        replays_one(&store).await;
    }
    store.discard().await;
}
