//! What the tests share: the PostgreSQL server under test, a fresh schema per store (dropped
//! when the test ends, pass or fail), and a proxy that counts round trips on the wire.
#![allow(dead_code, unreachable_pub)]

pub mod proxy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use idem_tokio_postgres::TokioPostgresStore;
use idem_tokio_postgres::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use idem_tokio_postgres::tokio_postgres::{self, NoTls};

/// The PostgreSQL database under test: `DATABASE_URL` when it is a `postgres://` URL, else the
/// local server's `test` database.
pub fn url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| url.starts_with("postgres://") || url.starts_with("postgresql://"))
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A fresh schema name, `itp_test_<seconds>_<pid>_<n>`.
pub fn unique_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("itp_test_{secs}_{}_{seq}", std::process::id())
}

/// A pool of up to `max` connections to `url`, recycled without a check query.
pub fn pool_at(url: &str, max: usize) -> Pool {
    let config: tokio_postgres::Config = url.parse().expect("a PostgreSQL URL");
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager).max_size(max).build().unwrap()
}

/// Schemas made by one test, dropped when it is dropped (on a thread of its own, so a
/// panicking test inside a runtime drops them too).
#[derive(Clone, Default)]
pub struct Schemas(Arc<Mutex<Vec<String>>>);

impl Schemas {
    /// A fresh schema's name, dropped with `self`.
    pub fn fresh(&self) -> String {
        let name = unique_name();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.clone());
        name
    }

    /// A store in a fresh schema, on a pool of its own.
    pub async fn store(&self) -> TokioPostgresStore {
        self.store_on(pool_at(&url(), 8)).await
    }

    /// A store in a fresh schema on `pool`.
    pub async fn store_on(&self, pool: Pool) -> TokioPostgresStore {
        TokioPostgresStore::builder(pool)
            .schema(self.fresh())
            .build()
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {} ({e:?})", url()))
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        if Arc::strong_count(&self.0) > 1 {
            return;
        }
        let names = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        if names.is_empty() {
            return;
        }
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let (client, connection) = tokio_postgres::connect(&url(), NoTls).await?;
                let connection = tokio::spawn(connection);
                for name in names {
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
                        .await?;
                }
                drop(client);
                let _ = connection.await;
                Ok::<_, tokio_postgres::Error>(())
            })
        });
        if let Err(error) = dropped.join().expect("the dropping thread") {
            eprintln!("could not drop a test schema: {error}");
        }
    }
}
