//! Atomic mode for the programmatic API: the operation's writes and its stored output commit in
//! one transaction on the store's database, through the same handle (idem-runtime's `Tx`) the
//! HTTP and gRPC faces hand out.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Operation, OperationError, OperationKey, Outcome};
use crate::engine::{LendError, Lending};

/// What an operation in atomic mode is handed: a transaction the engine's store lends, taken
/// from the attempt's [`Lending`] (idem-runtime's `Tx<DB>`, for the SQL stores of idem-sqlx).
/// A crate that lends transactions of another kind implements it for its own handle.
pub trait Lent: Sized + Send + 'static {
    /// The database the transactions are on, for errors (`"PostgreSQL"`).
    const DATABASE: &'static str;

    /// This handle on the transactions `lending` lends, or why the store lends none of its kind.
    fn lent(lending: &Lending) -> Result<Self, LendError>;
}

impl Operation<'_> {
    /// Runs `operation` once for `key` and `input`, like [`run`](Operation::run), in atomic
    /// mode: the writes it makes through its `Tx` and the stored output commit together, or
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
    /// ([`AtomicCommits`](crate::engine::AtomicCommits)); the transaction begins at the first `Tx::conn`; a
    /// closure that never calls it writes
    /// nothing and its output is stored as in [`run`](Operation::run). The engine's store must
    /// lend transactions on `DB` (`SqliteStore` for `sqlx::Sqlite`, `PostgresStore` for
    /// `sqlx::Postgres`); on any other store the call fails with
    /// [`OperationError::AtomicUnsupported`] before anything is claimed.
    ///
    /// An example with a `Tx<Postgres>` is on idem-runtime's `Tx`.
    pub async fn run_atomic<L, K, I, T, E, F, Fut>(
        self,
        key: K,
        input: I,
        operation: F,
    ) -> Result<Outcome<T>, OperationError<E>>
    where
        L: Lent,
        K: OperationKey,
        I: Serialize + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: FnOnce(L, I) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send,
    {
        let engine = self.idempotency.engine();
        let lent = engine
            .lending()
            .and_then(|lending| L::lent(&lending).ok().map(|tx| (lending, tx)));
        let Some((lending, tx)) = lent else {
            engine.count_invalid(&self.name);
            return Err(OperationError::AtomicUnsupported {
                store: engine.store_name(),
                database: L::DATABASE,
            });
        };
        let attempt = self.attempt(key, &input, Some(lending))?;
        self.execute(attempt, async move { operation(tx, input).await })
            .await
    }
}
