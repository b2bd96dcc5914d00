//! MySQL/MariaDB for end-to-end tests: a database of the test's own on the server the
//! workspace's tests use, which the server creates on start (as it creates a SQLite file) and
//! this drops afterwards.

use super::ServerBuilder;

/// Whether this test binary runs every server on MySQL (see the `common` module docs).
pub(super) fn mysql_by_default() -> bool {
    env!("CARGO_CRATE_NAME").ends_with("_mysql")
}

impl ServerBuilder {
    /// Keeps the app data and the idempotency records in `database` (`DATABASE_URL`).
    pub(crate) fn mysql(self, database: &MyDatabase) -> Self {
        self.env("DATABASE_URL", database.url.as_str())
    }
}

/// A database name of its own on the MySQL server the workspace's tests use (`MYSQL_URL` if set,
/// else the local MariaDB), not yet created: the server creates it on start. Dropped on drop.
#[derive(Debug)]
pub(crate) struct MyDatabase {
    admin_url: String,
    name: String,
    /// The `DATABASE_URL` of this database.
    pub(crate) url: String,
}

impl MyDatabase {
    pub(crate) fn new() -> Self {
        let admin_url = std::env::var("MYSQL_URL")
            .ok()
            .filter(|u| u.starts_with("mysql://"))
            .unwrap_or_else(|| "mysql://root@127.0.0.1:3306/test".to_owned());
        let name = database_name();
        let url = with_database(&admin_url, &name);
        Self {
            admin_url,
            name,
            url,
        }
    }
}

impl Drop for MyDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = block_on_the_side(move || async move {
            use sqlx::Connection;
            let mut admin = sqlx::MySqlConnection::connect(&admin_url).await.ok()?;
            let drop = format!("DROP DATABASE IF EXISTS `{name}`");
            sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                .execute(&mut admin)
                .await
                .ok()
        });
        if dropped.is_none() {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}

/// A fresh database name for the servers of one test (`PgDatabase`'s form; `postgres.rs` stands
/// alone, as `orders_consumer.rs` includes it by itself).
fn database_name() -> String {
    format!(
        "payments_e2e_{}",
        std::iter::repeat_with(fastrand::lowercase)
            .take(12)
            .collect::<String>()
    )
}

/// `url` (`scheme://server/database?query`) with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let (server, _) = base.rsplit_once('/').expect("a database URL with a path");
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

/// Runs `work` on a runtime of its own on a thread of its own, as `Drop`, which is not async,
/// must; `None` when it could not.
fn block_on_the_side<T, F>(work: impl FnOnce() -> F + Send + 'static) -> Option<T>
where
    T: Send + 'static,
    F: std::future::Future<Output = Option<T>>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(work())
    })
    .join()
    .ok()
    .flatten()
}
