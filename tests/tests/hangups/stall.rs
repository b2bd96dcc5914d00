//! A store that stalls on demand while a claim is on its way, each through a real seam where it
//! has one: a lock held by another session on the SQL stores (`SHARE` mode on PostgreSQL, so
//! the claim is planned and then waits to write; SQLite's write lock; `LOCK TABLES .. READ` on
//! MySQL, where the claim's `INSERT` waits for the table), a reply held back on the
//! wire (Redis). The memory and object stores have no wire here, so a wrapper stands for one: a
//! claim sent is applied once the stall ends, whether or not its caller still waits, as a
//! request already on its way to S3 would be.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_runtime::StoreError;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{
    Claim, ClaimRequest, MySqlStore, PostgresStore, RedisStore, SqliteStore, Store,
};
use idem_tests::{Hooked, Hooks, TcpProxy};
use tokio::sync::{Mutex, oneshot, watch};

/// How long a reply is held back on the wire: past the engine's 1-second store deadline.
const HELD: Duration = Duration::from_millis(2500);

/// Makes a store stall from [`start`](Stall::start) to [`end`](Stall::end).
pub(crate) enum Stall {
    /// Claims wait while the flag is up, then land.
    Wrapped(watch::Sender<bool>),
    /// A write transaction on a connection of its own holds the database's lock.
    Sqlite {
        url: String,
        holder: Mutex<Option<sqlx::SqliteConnection>>,
    },
    /// A transaction on a connection of its own holds the records table in `SHARE` mode.
    Postgres {
        table: String,
        holder: Mutex<Option<sqlx::Transaction<'static, sqlx::Postgres>>>,
    },
    /// A connection of its own holds the records table with `LOCK TABLES .. READ`.
    MySql {
        table: String,
        holder: Mutex<Option<sqlx::MySqlConnection>>,
    },
    /// The next reply is held back.
    Redis(TcpProxy),
}

impl Stall {
    pub(crate) fn wrapping<S: Store + Clone>(store: S) -> (Stalling<S>, Self) {
        let (flag, stalled) = watch::channel(false);
        (
            Hooked {
                inner: store,
                hooks: Stalled {
                    stalled,
                    claims: Arc::default(),
                },
            },
            Self::Wrapped(flag),
        )
    }

    pub(crate) fn sqlite(store: &SqliteStore) -> Self {
        let url = store
            .pool()
            .connect_options()
            .get_filename()
            .display()
            .to_string();
        Self::Sqlite {
            url: format!("sqlite://{url}"),
            holder: Mutex::new(None),
        }
    }

    pub(crate) fn postgres(store: &PostgresStore) -> Self {
        Self::Postgres {
            table: format!("\"{}\".\"{}\"", store.schema(), store.table()),
            holder: Mutex::new(None),
        }
    }

    pub(crate) async fn mysql(store: &MySqlStore) -> Self {
        let database: String = sqlx::query_scalar("SELECT CONVERT(DATABASE() USING utf8mb4)")
            .fetch_one(store.pool())
            .await
            .expect("the store's database");
        Self::MySql {
            table: format!("`{database}`.`{}`", store.table()),
            holder: Mutex::new(None),
        }
    }

    pub(crate) async fn redis() -> (RedisStore, Self) {
        let proxy = TcpProxy::start(idem_tests::redis::redis_addr()).await;
        let store = RedisStore::builder(format!("redis://{}", proxy.addr()))
            .prefix(idem_tests::redis::unique_prefix())
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_millis(300))
            .build()
            .await
            .expect("a Redis store behind a proxy");
        (store, Self::Redis(proxy))
    }

    /// Starts stalling: a claim sent from now on waits.
    pub(crate) async fn start(&self) {
        use sqlx::Connection;
        match self {
            Self::Wrapped(flag) => {
                flag.send_replace(true);
            }
            Self::Sqlite { url, holder } => {
                let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
                sqlx::raw_sql("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                *holder.lock().await = Some(conn);
            }
            Self::Postgres { table, holder } => {
                let pool = idem_tests::db::postgres_pool().await;
                let mut tx = pool.begin().await.unwrap();
                let lock = format!("LOCK TABLE {table} IN SHARE MODE");
                sqlx::query(sqlx::AssertSqlSafe(lock))
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                *holder.lock().await = Some(tx);
            }
            Self::MySql { table, holder } => {
                let url = idem_tests::mysql::mysql_url();
                let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
                let lock = format!("LOCK TABLES {table} READ");
                sqlx::raw_sql(sqlx::AssertSqlSafe(lock))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                *holder.lock().await = Some(conn);
            }
            Self::Redis(proxy) => proxy.delay_next_reply(HELD),
        }
    }

    /// Ends the stall: what waited lands now (on Redis, once its held reply has gone).
    pub(crate) async fn end(&self) {
        match self {
            Self::Wrapped(flag) => {
                flag.send_replace(false);
            }
            Self::Sqlite { holder, .. } => {
                let conn = holder.lock().await.take();
                drop(conn); // the write transaction ends with its connection
            }
            Self::Postgres { holder, .. } => {
                let tx = holder.lock().await.take();
                tx.expect("started").rollback().await.unwrap();
            }
            Self::MySql { holder, .. } => {
                let mut conn = holder.lock().await.take().expect("started");
                sqlx::raw_sql("UNLOCK TABLES")
                    .execute(&mut conn)
                    .await
                    .unwrap();
            }
            Self::Redis(_) => {}
        }
    }
}

/// A store whose claims wait while the stall is up, then reach the store it wraps on a task of
/// their own: once sent, a claim lands even if its caller stopped waiting.
pub(crate) type Stalling<S> = Hooked<S, Stalled>;

/// The hooks of [`Stalling`].
pub(crate) struct Stalled {
    stalled: watch::Receiver<bool>,
    /// How many claims were sent.
    claims: Arc<AtomicUsize>,
}

impl Stalled {
    /// How many claims this store (and its clones) were sent.
    #[allow(dead_code)] // read by the waiting suite, which includes this file
    pub(crate) fn claims(&self) -> Arc<AtomicUsize> {
        self.claims.clone()
    }
}

impl<S: Store + Clone> Hooks<S> for Stalled {
    async fn claim(&self, inner: &S, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        let (inner, mut stalled) = (inner.clone(), self.stalled.clone());
        let (key, fingerprint): (RecordKey, Fingerprint) = (*request.key, *request.fingerprint);
        let operation = request.operation.to_owned();
        let (scope, scope_value) = (request.scope.to_owned(), request.scope_value.to_owned());
        let ClaimRequest {
            token,
            now,
            lease_until,
            expires_at,
            tenant,
            ..
        } = request;
        let (landed, answer) = oneshot::channel();
        tokio::spawn(async move {
            let _ = stalled.wait_for(|stalled| !*stalled).await;
            let request = ClaimRequest {
                key: &key,
                fingerprint: &fingerprint,
                token,
                now,
                lease_until,
                expires_at,
                operation: &operation,
                scope: &scope,
                scope_value: &scope_value,
                tenant,
            };
            let _ = landed.send(inner.claim(request).await);
        });
        answer.await.expect("the claim's task answers")
    }
}
