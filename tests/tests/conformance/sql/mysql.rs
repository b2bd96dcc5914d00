//! What only the MySQL store has, on the MariaDB server: its own migrations table beside the
//! records in the URL's database (the application's tables untouched), session timeouts, a
//! named database created when missing, instances starting at once migrating once, stores
//! sharing a database, names checked before the database is touched, an edited migration
//! refused, and backend errors reported as `StoreError::Unavailable`.

use idem_runtime::StoreError;
use idem_runtime::store::MySqlStore;
use idem_tests::TestStore;
use idem_tests::mysql::{drop_database, mysql_database, mysql_pool_at, mysql_url, mysql_url_of};
use sqlx::{AssertSqlSafe, MySqlPool};

use super::{
    a_dropped_database_is_unavailable, a_dropped_table_is_unavailable,
    claims_keep_the_scope_of_the_record_they_take, corrupt_rows_are_errors, is_migration_error,
    records_are_per_table, replays_one, store_one,
};

/// How many migrations the store ships.
const MIGRATIONS: i64 = 2;

async fn count(pool: &MySqlPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The tables of `database`, by name.
async fn tables(pool: &MySqlPool, database: &str) -> Vec<String> {
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT CONVERT(TABLE_NAME USING utf8mb4) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = ?",
    )
    .bind(database)
    .fetch_all(pool)
    .await
    .unwrap();
    tables.sort();
    tables
}

#[tokio::test]
async fn mysql_connect_keeps_its_own_migrations_table_beside_the_apps_tables() {
    let database = mysql_database().await;
    let app = mysql_pool_at(&mysql_url_of(&database), 1).await;
    sqlx::raw_sql("CREATE TABLE orders (id BIGINT PRIMARY KEY); INSERT INTO orders VALUES (7)")
        .execute(&app)
        .await
        .unwrap();
    let store = MySqlStore::connect(&mysql_url_of(&database)).await.unwrap();
    assert_eq!(store.database(), None, "the URL's database");
    assert_eq!(store.table(), "idempotency_records");
    let timeouts: (i64, i64, i64) = sqlx::query_as(
        "SELECT CAST(@@innodb_lock_wait_timeout AS SIGNED), \
         CAST(@@lock_wait_timeout AS SIGNED), CAST(@@max_statement_time AS SIGNED)",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        timeouts,
        (5, 5, 5),
        "a locked or stalled database fails statements server-side"
    );
    store_one(&store).await;
    assert_eq!(
        tables(&app, &database).await,
        ["idem_migrations", "idempotency_records", "orders"],
        "no _sqlx_migrations, nothing else"
    );
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM orders WHERE id = 7".into()).await,
        1,
        "the app's rows untouched"
    );
    let applied = "SELECT COUNT(*) FROM idem_migrations \
                   WHERE records_table = 'idempotency_records'";
    assert_eq!(count(&app, applied.into()).await, MIGRATIONS);
    app.close().await;
    store.discard().await;
}

#[tokio::test]
async fn mysql_restart_applies_nothing_and_keeps_records() {
    let store = idem_tests::mysql::mysql_store().await;
    store_one(&store).await;
    let restarted = MySqlStore::from_pool(store.pool().clone()).await.unwrap();
    replays_one(&restarted).await;
    let applied = "SELECT COUNT(*) FROM idem_migrations";
    assert_eq!(count(store.pool(), applied.into()).await, MIGRATIONS);
    store.discard().await;
}

/// Eight instances name a database that does not exist yet: it is created once, migrated once,
/// and every instance starts and sees the others' records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_instances_starting_at_once_create_and_migrate_once() {
    let database = idem_tests::db::unique_name();
    let starters: Vec<_> = (0..8)
        .map(|_| {
            let database = database.clone();
            tokio::spawn(async move {
                let pool = mysql_pool_at(&mysql_url(), 2).await;
                MySqlStore::builder(pool).database(database).build().await
            })
        })
        .collect();
    let mut stores = Vec::new();
    for starter in starters {
        stores.push(starter.await.unwrap().expect("every instance starts"));
    }
    assert_eq!(stores[0].database(), Some(&*database));
    let applied = format!("SELECT COUNT(*) FROM `{database}`.idem_migrations");
    assert_eq!(count(stores[0].pool(), applied).await, MIGRATIONS);
    store_one(&stores[0]).await;
    replays_one(&stores[7]).await;
    for store in &stores {
        store.pool().close().await;
    }
    drop_database(&database).await;
}

#[tokio::test]
async fn mysql_stores_can_share_a_database_with_their_own_tables() {
    let first = idem_tests::mysql::mysql_store().await;
    let second = MySqlStore::builder(first.pool().clone())
        .table("Other_Records")
        .build()
        .await
        .unwrap();
    assert_eq!(second.table(), "Other_Records");
    records_are_per_table(&first, &second).await;
    let applied = "SELECT COUNT(*) FROM idem_migrations";
    assert_eq!(
        count(first.pool(), applied.into()).await,
        2 * MIGRATIONS,
        "each table's migrations"
    );
    first.discard().await;
}

#[tokio::test]
async fn mysql_rejects_invalid_names_before_touching_the_database() {
    let pool = mysql_pool_at(&mysql_url(), 1).await;
    for (database, table) in [
        ("idem`; DROP DATABASE test; --", "t"),
        ("idem-test", "t"),
        ("idem", "records.v2"),
        ("idem", ""),
        ("9lives", "t"),
        ("idem", &*"t".repeat(65)),
    ] {
        let built = MySqlStore::builder(pool.clone())
            .database(database)
            .table(table)
            .build()
            .await;
        assert!(
            matches!(built, Err(StoreError::Config(_))),
            "{database:?}.{table:?}"
        );
    }
    let made = "SELECT COUNT(*) FROM information_schema.SCHEMATA \
                WHERE SCHEMA_NAME LIKE 'idem-%' OR SCHEMA_NAME LIKE '9%' OR SCHEMA_NAME = 'idem'";
    assert_eq!(count(&pool, made.into()).await, 0);
    pool.close().await;
}

#[tokio::test]
async fn mysql_refuses_an_edited_migration() {
    let store = idem_tests::mysql::mysql_store().await;
    sqlx::raw_sql("UPDATE idem_migrations SET checksum = X'00'")
        .execute(store.pool())
        .await
        .unwrap();
    let restarted = MySqlStore::from_pool(store.pool().clone()).await;
    assert!(is_migration_error(restarted, 1));
    store.discard().await;
}

#[tokio::test]
async fn mysql_errors_are_unavailable() {
    // The store's database dropped under it.
    let store = idem_tests::mysql::mysql_store().await;
    let database: String = sqlx::query_scalar("SELECT CONVERT(DATABASE() USING utf8mb4)")
        .fetch_one(store.pool())
        .await
        .unwrap();
    drop_database(&database).await;
    a_dropped_database_is_unavailable(&store).await;
    store.pool().close().await;
    // And a missing table (dropped under a running store) is a backend error too.
    let store = idem_tests::mysql::mysql_store().await;
    sqlx::raw_sql("DROP TABLE idempotency_records")
        .execute(store.pool())
        .await
        .unwrap();
    a_dropped_table_is_unavailable(&store).await;
    store.discard().await;
}

#[tokio::test]
async fn mysql_claims_keep_the_scope_of_the_record_they_take() {
    let store = idem_tests::mysql::mysql_store().await;
    claims_keep_the_scope_of_the_record_they_take(&store).await;
    store.discard().await;
}

#[tokio::test]
async fn mysql_corrupt_rows_are_errors_not_panics() {
    let store = idem_tests::mysql::mysql_store().await;
    store_one(&store).await;
    sqlx::raw_sql("UPDATE idempotency_records SET status = -1")
        .execute(store.pool())
        .await
        .unwrap();
    corrupt_rows_are_errors(&store).await;
    store.discard().await;
}
