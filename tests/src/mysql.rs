//! Fresh MySQL/MariaDB stores for tests: a database of its own per store on the server at
//! [`mysql_url`], named like the PostgreSQL schemas ([`unique_name`]) and dropped by
//! [`TestStore::discard`]; a later test process drops what a failed test left behind once it is
//! an hour old. Real servers, never mocks.

use std::sync::atomic::{AtomicBool, Ordering};

use idem_runtime::store::MySqlStore;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, MySqlPool};

use crate::db::{TestStore, is_stale, unique_name};

/// The MySQL database tests use unless `MYSQL_URL` names another.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// The server for tests: `MYSQL_URL`, else `DATABASE_URL` when it is a `mysql://` URL, else
/// [`DEFAULT_MYSQL_URL`].
pub fn mysql_url() -> String {
    std::env::var("MYSQL_URL")
        .ok()
        .or_else(|| {
            std::env::var("DATABASE_URL")
                .ok()
                .filter(|url| url.starts_with("mysql://") || url.starts_with("mariadb://"))
        })
        .unwrap_or_else(|| DEFAULT_MYSQL_URL.to_owned())
}

/// [`mysql_url`] with its database replaced by `database`.
pub fn mysql_url_of(database: &str) -> String {
    let url = mysql_url();
    let (base, query) = url
        .split_once('?')
        .map_or((&*url, None), |(b, q)| (b, Some(q)));
    let server = match base.split_once("://") {
        Some((_, rest)) if rest.contains('/') => base.rsplit_once('/').map_or(base, |(s, _)| s),
        _ => base,
    };
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// A pool of up to `max` connections to `url`.
///
/// # Panics
/// When the server cannot be reached, with a hint on how to start it.
pub async fn mysql_pool_at(url: &str, max: u32) -> MySqlPool {
    let pool = MySqlPoolOptions::new()
        .max_connections(max)
        .connect(url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "MySQL/MariaDB is not reachable at {url} ({e}); start it with \
                 `service mariadb start` or set MYSQL_URL"
            )
        });
    sweep(&pool).await;
    pool
}

/// A fresh, empty database on the test server (see [`unique_name`]); its name.
pub async fn mysql_database() -> String {
    let server = mysql_pool_at(&mysql_url(), 1).await;
    let name = unique_name();
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .execute(&server)
        .await
        .expect("creating a test database");
    server.close().await;
    name
}

/// A [`MySqlStore`] in a fresh database of the test server, opened with
/// [`MySqlStore::connect`] (its session timeouts, a pool of up to 10 connections), its database
/// then named to the builder too, so that [`MySqlStore::database`] tells it even once the pool
/// is closed. [`TestStore::discard`] drops the database.
pub async fn mysql_store() -> MySqlStore {
    let database = mysql_database().await;
    let connected = MySqlStore::connect(&mysql_url_of(&database))
        .await
        .expect("migrating a fresh MySQL database");
    MySqlStore::builder(connected.pool().clone())
        .database(database)
        .build()
        .await
        .expect("the store, its database named")
}

/// Drops the store's database, records and migrations table included, and closes its pool
/// (which may be closed already when the store names its database).
pub async fn drop_mysql_store(store: &MySqlStore) {
    let database: String = match store.database() {
        Some(database) => database.to_owned(),
        None => sqlx::query_scalar("SELECT CONVERT(DATABASE() USING utf8mb4)")
            .fetch_one(store.pool())
            .await
            .expect("the store's database"),
    };
    store.pool().close().await;
    drop_database(&database).await;
}

/// Drops a database [`mysql_database`] made.
pub async fn drop_database(database: &str) {
    assert!(database.starts_with("idem_test_"), "{database}");
    let server = mysql_pool_at(&mysql_url(), 1).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS `{database}`"
    )))
    .execute(&server)
    .await
    .expect("dropping a test database");
    server.close().await;
}

impl TestStore for MySqlStore {
    async fn fresh() -> Self {
        mysql_store().await
    }

    async fn discard(self) {
        drop_mysql_store(&self).await;
    }
}

/// Once per process: drops stale test databases. Best effort; another process may be sweeping
/// too.
async fn sweep(pool: &MySqlPool) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::Relaxed) {
        return;
    }
    let databases: Vec<String> = sqlx::query_scalar(
        "SELECT CONVERT(SCHEMA_NAME USING utf8mb4) FROM information_schema.SCHEMATA \
         WHERE SCHEMA_NAME LIKE 'idem\\_test\\_%'",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    for database in databases.iter().filter(|d| is_stale(d)) {
        let drop = format!("DROP DATABASE IF EXISTS `{database}`");
        let _ = sqlx::raw_sql(AssertSqlSafe(drop)).execute(pool).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced() {
        let url = mysql_url_of("idem_test_x");
        assert!(
            url.ends_with("/idem_test_x") || url.contains("/idem_test_x?"),
            "{url}"
        );
    }
}
