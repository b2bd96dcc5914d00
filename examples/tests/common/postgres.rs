//! PostgreSQL for end-to-end tests: a fresh database per test, dropped afterwards.

use super::STEP_TIMEOUT;

/// A database of its own on the PostgreSQL server the workspace's tests use (`DATABASE_URL` if
/// it names one, else the `test` database of the local server), dropped afterwards.
pub(crate) struct PgDatabase {
    admin_url: String,
    name: String,
    /// The `DATABASE_URL` of this database.
    pub(crate) url: String,
}

impl PgDatabase {
    pub(crate) async fn create() -> Self {
        use sqlx::Connection;
        let admin_url = std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let name = format!(
            "payments_e2e_{}",
            std::iter::repeat_with(fastrand::lowercase)
                .take(12)
                .collect::<String>()
        );
        let (base, query) = admin_url
            .split_once('?')
            .map_or((admin_url.as_str(), None), |(b, q)| (b, Some(q)));
        let (server, _) = base.rsplit_once('/').expect("a database URL with a path");
        let url = match query {
            Some(query) => format!("{server}/{name}?{query}"),
            None => format!("{server}/{name}"),
        };
        let connect = sqlx::PgConnection::connect(&admin_url);
        let mut admin = tokio::time::timeout(STEP_TIMEOUT, connect)
            .await
            .expect("connect to PostgreSQL in time")
            .unwrap_or_else(|e| {
                panic!("PostgreSQL at {admin_url} is needed (set DATABASE_URL): {e}")
            });
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        Self {
            admin_url,
            name,
            url,
        }
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop is not async: use a runtime of its own on a thread of its own.
        let dropped = std::thread::spawn(move || {
            use sqlx::Connection;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&admin_url).await.ok()?;
                let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::query(sqlx::AssertSqlSafe(drop))
                    .execute(&mut admin)
                    .await
                    .ok()
            })
        })
        .join();
        if !matches!(dropped, Ok(Some(_))) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}
