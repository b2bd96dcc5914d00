//! Atomic mode for the programmatic API: the operation's writes and its stored output commit in
//! one transaction on the store's database, through the same [`Tx`] the HTTP faces hand out.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Operation, OperationError, OperationKey, Outcome};
use crate::adapters::tx::Tx;
use crate::store::atomic::AtomicDatabase;

impl Operation<'_> {
    /// Runs `operation` once for `key` and `input`, like [`run`](Operation::run), in atomic
    /// mode: the writes it makes through its [`Tx`] and the stored output commit together, or
    /// neither does.
    ///
    /// - The closure returns `Ok`: its output is stored in its transaction, which then commits.
    /// - It returns `Err` or panics: the transaction rolls back and the key is released, so a
    ///   retry runs against a database the failed attempt never touched.
    /// - The process dies before the commit: only the claim is left, which a retry takes over
    ///   once its lease lapses. The database effects happen exactly once.
    /// - Another run took the record over (this one outlived its lease): the transaction rolls
    ///   back and the call fails with [`OperationError::LeaseLost`].
    ///
    /// The claim commits on its own first, as with `commits = "two"` on an HTTP endpoint
    /// ([`Commits`](crate::Commits)); the transaction begins at the first [`Tx::conn`]; a
    /// closure that never calls it writes
    /// nothing and its output is stored as in [`run`](Operation::run). The engine's store must
    /// lend transactions on `DB` (`SqliteStore` for `sqlx::Sqlite`, `PostgresStore` for
    /// `sqlx::Postgres`); on any other store the call fails with
    /// [`OperationError::AtomicUnsupported`] before anything is claimed.
    ///
    /// ```no_run
    /// use idem_runtime::{Idempotency, Tx};
    /// use sqlx::Postgres;
    ///
    /// # async fn f(idempotency: Idempotency, order: u64) -> Result<(), Box<dyn std::error::Error>> {
    /// let shipment = idempotency
    ///     .operation("shipping::ship")
    ///     .run_atomic("ship-order-1001", order, |mut tx: Tx<Postgres>, order| async move {
    ///         let id: i64 = sqlx::query_scalar("INSERT INTO shipments (order_id) VALUES ($1) RETURNING id")
    ///             .bind(order as i64)
    ///             .fetch_one(tx.conn().await?)
    ///             .await?;
    ///         Ok::<_, sqlx::Error>(id)
    ///     })
    ///     .await?
    ///     .into_inner();
    /// # let _ = shipment; Ok(()) }
    /// ```
    pub async fn run_atomic<DB, K, I, T, E, F, Fut>(
        self,
        key: K,
        input: I,
        operation: F,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        DB: AtomicDatabase,
        K: OperationKey,
        I: Serialize + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: FnOnce(Tx<DB>, I) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send,
    {
        let engine = self.idempotency.engine();
        let lent = engine
            .lending()
            .and_then(|lending| Tx::<DB>::lent(&lending).ok().map(|tx| (lending, tx)));
        let Some((lending, tx)) = lent else {
            engine.count_invalid(&self.name);
            return Err(OperationError::AtomicUnsupported {
                store: engine.store_name(),
                database: <DB as AtomicDatabase>::NAME,
            });
        };
        let attempt = self.attempt(key, &input, Some(lending))?;
        self.execute(attempt, async move { operation(tx, input).await })
            .await
    }
}
