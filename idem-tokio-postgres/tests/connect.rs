//! `TokioPostgresStore::connect`: its own pool, whose sessions bound statements and lock waits,
//! and the default schema, in a database of the test's own.

mod support;

use idem_tokio_postgres::TokioPostgresStore;
use idem_tokio_postgres::tokio_postgres::{self, NoTls};
use support::{unique_name, url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_makes_a_pool_whose_sessions_time_out_in_the_default_schema() {
    let (server, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let name = unique_name();
    server
        .batch_execute(&format!("CREATE DATABASE \"{name}\""))
        .await
        .unwrap();
    let (base, query) = url()
        .split_once('?')
        .map_or((url(), String::new()), |(b, q)| {
            (b.to_owned(), format!("?{q}"))
        });
    let at = format!("{}/{name}{query}", base.rsplit_once('/').unwrap().0);
    let checked = async move {
        let store = TokioPostgresStore::connect(&at).await.unwrap();
        assert_eq!(
            (store.schema(), store.table()),
            ("idem", "idempotency_records")
        );
        let client = store.pool().get().await.unwrap();
        for setting in ["statement_timeout", "lock_timeout"] {
            let row = client
                .query_one(&format!("SHOW {setting}"), &[])
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), "5s", "{setting}");
        }
        assert_eq!(store.pool().status().max_size, 10);
    };
    let outcome = tokio::spawn(checked).await;
    server
        .batch_execute(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .await
        .unwrap();
    outcome.unwrap();
}
