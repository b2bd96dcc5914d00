//! SQL stores reached through a loopback proxy the test cuts and restores, and the macro that
//! runs a case on each of them.

use std::time::Duration;

use idem_runtime::store::{MySqlStore, PostgresStore};
use idem_tests::TcpProxy as Proxy;
use sqlx::postgres::PgPoolOptions;

/// A PostgreSQL store reached through `proxy`, on the schema of `direct`.
pub(crate) async fn proxied_store(
    proxy: &Proxy,
    template: &str,
    direct: &PostgresStore,
) -> PostgresStore {
    let url = template.replace("{proxy}", &proxy.addr().to_string());
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(&url)
        .unwrap();
    PostgresStore::builder(pool)
        .schema(direct.schema())
        .build()
        .await
        .unwrap()
}

/// A MySQL store reached through `proxy`, on the database of `direct`.
pub(crate) async fn proxied_mysql_store(
    proxy: &Proxy,
    template: &str,
    direct: &MySqlStore,
) -> MySqlStore {
    let url = template.replace("{proxy}", &proxy.addr().to_string());
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect_lazy(&url)
        .unwrap();
    let database = direct.database().expect("a test store names its database");
    MySqlStore::builder(pool)
        .database(database)
        .build()
        .await
        .unwrap()
}

/// `$postgres` and `$mysql`: tests running `$case(store, &proxy)` on a PostgreSQL store, and on
/// a MySQL one, each reached through a proxy the case may cut.
macro_rules! on_each_sql_store {
    ($postgres:ident, $mysql:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            let (target, template) = idem_tests::proxy::postgres_target();
            let direct = idem_tests::postgres_store().await;
            let proxy = Proxy::start(target).await;
            let store = proxied::proxied_store(&proxy, &template, &direct).await;
            $case(store, &proxy).await;
            idem_tests::db::drop_postgres_store(&direct).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $mysql() {
            let (target, template) = idem_tests::proxy::mysql_target();
            let direct = idem_tests::mysql::mysql_store().await;
            let proxy = Proxy::start(target).await;
            let store = proxied::proxied_mysql_store(&proxy, &template, &direct).await;
            $case(store, &proxy).await;
            idem_tests::TestStore::discard(direct).await;
        }
    };
}
