//! The store: [`TokioPostgresStore`] and its builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::db::{Db, prepared};
use crate::decode::{column, held_by};
use crate::gate::KeyGates;
use crate::schema::migrate;
use crate::statements::Statements;
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};
use idem_sql::postgres::Names;

/// Records in a PostgreSQL table, by default `idem.idempotency_records`, on tokio-postgres with
/// a deadpool-postgres pool: the same schema, migrations and rows as idem-sqlx's
/// `PostgresStore`, so the `idem` command and a sqlx instance read the same table, and an
/// application moves from one driver to the other without losing a record.
///
/// Every statement is prepared once per connection (the pool's statement cache) and sent with
/// binary parameters, the payload as `bytea`. Each plain operation is one statement, so one
/// round trip: a claim is an `INSERT .. ON CONFLICT DO UPDATE` that reports the record it found
/// when it could not take it; completion, release and renewal are fenced on the owner's token.
///
/// The store offers atomic mode ([`TokioPostgresTx`](crate::TokioPostgresTx)): a handler's writes and the record's
/// completion commit in one transaction, with one commit per fresh request by default, the
/// claim sent together with the `BEGIN` and the completion with the `COMMIT`.
///
/// ```no_run
/// use idem_tokio_postgres::TokioPostgresStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = TokioPostgresStore::connect("postgres://app@db.internal/payments").await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TokioPostgresStore {
    pub(crate) db: Arc<Db>,
    /// Where the transactions of atomic mode come from, when not from `db`'s pool.
    #[cfg(feature = "diesel-async")]
    diesel: Option<crate::diesel::DieselPool>,
}

impl TokioPostgresStore {
    /// The schema used unless [`TokioPostgresStoreBuilder::schema`] says otherwise.
    pub const DEFAULT_SCHEMA: &'static str = "idem";
    /// The table used unless [`TokioPostgresStoreBuilder::table`] says otherwise.
    pub const DEFAULT_TABLE: &'static str = "idempotency_records";
    /// The connections [`connect`](Self::connect)'s pool holds at most.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 10;

    /// Connects a pool to `url` (a `postgres://` URL or a `key=value` string, without TLS) and
    /// applies the store's migrations in the default schema.
    ///
    /// The pool's sessions have a `statement_timeout` and a `lock_timeout` of 5 s, so a stalled
    /// database fails a statement on the server too, not only at the engine's deadline. The pool
    /// holds up to [`DEFAULT_MAX_CONNECTIONS`](Self::DEFAULT_MAX_CONNECTIONS) and hands out a
    /// connection without a check query (a dead one fails its statement: 503, fail closed).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(StoreError::unavailable)?;
        let options = config.get_options().map(str::to_owned).unwrap_or_default();
        config.options(format!(
            "{options} -c statement_timeout=5000 -c lock_timeout=5000"
        ));
        Self::from_pool(pool(config, Self::DEFAULT_MAX_CONNECTIONS)?).await
    }

    /// Uses an application's existing pool, applying the store's migrations in the default
    /// schema. Its manager should recycle connections with `RecyclingMethod::Fast` or
    /// `Verified` (`Clean` runs `DISCARD ALL`, which forgets the prepared statements).
    pub async fn from_pool(pool: Pool) -> Result<Self, StoreError> {
        Self::builder(pool).build().await
    }

    /// Configures where the records live.
    pub fn builder(pool: Pool) -> TokioPostgresStoreBuilder {
        TokioPostgresStoreBuilder {
            pool,
            schema: Self::DEFAULT_SCHEMA.to_owned(),
            table: Self::DEFAULT_TABLE.to_owned(),
            #[cfg(feature = "diesel-async")]
            diesel: None,
        }
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &Pool {
        &self.db.pool
    }

    /// The schema holding the records and the migrations table.
    pub fn schema(&self) -> &str {
        &self.db.sql.schema
    }

    /// The records table, within [`schema`](Self::schema).
    pub fn table(&self) -> &str {
        &self.db.sql.table
    }
}

/// A pool of up to `max` connections to `config`, recycled without a check query.
fn pool(config: tokio_postgres::Config, max: usize) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(max)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(5)))
        .build()
        .map_err(StoreError::unavailable)
}

impl fmt::Debug for TokioPostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioPostgresStore")
            .field("schema", &self.db.sql.schema)
            .field("table", &self.db.sql.table)
            .finish_non_exhaustive()
    }
}

/// Configures a [`TokioPostgresStore`]; made by [`TokioPostgresStore::builder`].
#[must_use = "call `.build().await` to get the store"]
pub struct TokioPostgresStoreBuilder {
    pool: Pool,
    schema: String,
    table: String,
    #[cfg(feature = "diesel-async")]
    diesel: Option<crate::diesel::DieselPool>,
}

impl fmt::Debug for TokioPostgresStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioPostgresStoreBuilder")
            .field("schema", &self.schema)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl TokioPostgresStoreBuilder {
    /// The schema for the records table and the migrations table (default `idem`), created if
    /// missing. ASCII letters, digits and `_`, not starting with a digit, at most 63
    /// characters; case is kept (the name is quoted).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The records table (default `idempotency_records`): the same characters as
    /// [`schema`](Self::schema), at most 52.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Atomic mode on diesel-async: the transactions lent to handlers (as
    /// [`DieselTx`](crate::diesel::DieselTx)) come from `pool`, a pool of the same database,
    /// instead of tokio-postgres's [`TokioPostgresTx`](crate::TokioPostgresTx), which the store then no longer lends.
    /// Configure its manager with `RecyclingMethod::Fast`: the default checks each connection
    /// with a query before handing it out, a round trip per request.
    #[cfg(feature = "diesel-async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "diesel-async")))]
    pub fn diesel(mut self, pool: crate::diesel::DieselPool) -> Self {
        self.diesel = Some(pool);
        self
    }

    /// Validates the names and applies the store's migrations.
    ///
    /// # Errors
    /// [`StoreError::Config`] when a name is not a valid identifier (checked before the
    /// database is touched), [`StoreError::Unavailable`] when the database cannot be reached,
    /// [`StoreError::Migration`] when a migration fails.
    pub async fn build(self) -> Result<TokioPostgresStore, StoreError> {
        let names = Names::new(self.schema, self.table)?;
        let mut client = self.pool.get().await.map_err(StoreError::unavailable)?;
        migrate(&mut client, &names).await?;
        Ok(TokioPostgresStore {
            db: Arc::new(Db {
                pool: self.pool,
                sql: Statements::new(&names),
                gates: KeyGates::default(),
            }),
            #[cfg(feature = "diesel-async")]
            diesel: self.diesel,
        })
    }
}

/// How many times a claim runs again when its snapshot could not report the record that
/// stopped it; each retry needs yet another concurrent write to that key.
const CLAIM_ATTEMPTS: usize = 16;

/// A fenced write held when it changed the owner's row; zero rows means another owner or none.
fn fence(rows: Result<u64, tokio_postgres::Error>) -> Result<Fence, StoreError> {
    match rows.map_err(StoreError::unavailable)? {
        0 => Ok(Fence::Lost),
        _ => Ok(Fence::Held),
    }
}

impl TokioPostgresStore {
    /// The claim's statement on `client`, run again while its snapshot cannot report the
    /// record that stopped it.
    async fn claim_on(&self, client: &Object, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let statement = prepared(client, &self.db.sql.claim)
            .await
            .map_err(StoreError::unavailable)?;
        let (key, fingerprint) = (req.key.as_bytes().as_slice(), req.fingerprint.as_bytes());
        let (token, lease_until) = (req.token.as_i64(), req.lease_until.as_millis());
        let (expires_at, now) = (req.expires_at.as_millis(), req.now.as_millis());
        for _ in 0..CLAIM_ATTEMPTS {
            let row = client
                .query_opt(
                    &statement,
                    &[
                        &key,
                        &fingerprint.as_slice(),
                        &token,
                        &lease_until,
                        &expires_at,
                        &now,
                        &req.operation,
                        &req.scope,
                        &req.scope_value,
                    ],
                )
                .await
                .map_err(StoreError::unavailable)?;
            // The snapshot could not report the record: run the statement again.
            let Some(row) = row else { continue };
            if let Some(owners) = column::<Option<i32>>(&row, 0)? {
                return Ok(Claim::Acquired {
                    took_over: owners > 1,
                });
            }
            let state: Option<String> = column(&row, 2)?;
            return match (column(&row, 1)?, state, column(&row, 3)?) {
                (Some(fingerprint), Some(state), Some(lease_until)) => held_by(
                    fingerprint,
                    &state,
                    lease_until,
                    column(&row, 4)?,
                    column(&row, 5)?,
                ),
                _ => Err(StoreError::Corrupt("record with missing columns".into())),
            };
        }
        Err(StoreError::unavailable(std::io::Error::other(
            "the record kept changing under the claim",
        )))
    }
}

impl Store for TokioPostgresStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let client = self.db.client().await?;
        let claimed = self.claim_on(&client, req).await;
        client.done();
        claimed
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.complete)
            .await
            .map_err(StoreError::unavailable)?;
        let status = completion.status.map(|s| s as i16);
        let done = client
            .execute(
                &statement,
                &[
                    &key.as_bytes().as_slice(),
                    &token.as_i64(),
                    &completion.payload,
                    &completion.expires_at.as_millis(),
                    &status,
                    &completion.completed_at.as_millis(),
                ],
            )
            .await;
        client.done();
        fence(done)
    }
    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.release)
            .await
            .map_err(StoreError::unavailable)?;
        let done = client
            .execute(&statement, &[&key.as_bytes().as_slice(), &token.as_i64()])
            .await;
        client.done();
        fence(done)
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.renew)
            .await
            .map_err(StoreError::unavailable)?;
        let done = client
            .execute(
                &statement,
                &[
                    &key.as_bytes().as_slice(),
                    &token.as_i64(),
                    &lease_until.as_millis(),
                ],
            )
            .await;
        client.done();
        fence(done)
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        let statement = prepared(&client, &self.db.sql.purge)
            .await
            .map_err(StoreError::unavailable)?;
        let purged = client
            .execute(&statement, &[&now.as_millis(), &i64::from(limit)])
            .await;
        client.done();
        purged.map_err(StoreError::unavailable)
    }

    fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        #[cfg(feature = "diesel-async")]
        if let Some(pool) = &self.diesel {
            return crate::diesel::offer(capabilities, &self.db, pool);
        }
        crate::atomic::offer(capabilities, &self.db);
    }
}
