//! What the store and its atomic mode share: the pool, the rendered statements, and the gates
//! that let one one-commit claim per key at a time wait on the database.

use deadpool_postgres::{ClientWrapper, Object, Pool};
use tokio_postgres::Statement;
use tokio_postgres::error::SqlState;

use crate::gate::KeyGates;
use crate::statements::{Sql, Statements};
use idem_core::error::StoreError;

/// One store's database.
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) sql: Statements,
    /// One-commit claims on their way to the database, one per key at a time.
    pub(crate) gates: KeyGates,
}

impl Db {
    /// A pooled connection, for one operation of the store: hand it back with
    /// [`Held::done`] once its statements are answered.
    pub(crate) async fn client(&self) -> Result<Held, StoreError> {
        let client = self.pool.get().await.map_err(StoreError::unavailable)?;
        Ok(Held(Some(client)))
    }
}

/// A pooled connection an operation holds. Dropped before [`done`](Self::done) (the operation's
/// future was dropped at the engine's deadline, a statement possibly still running), it is
/// closed rather than handed to the next user behind that statement.
pub(crate) struct Held(Option<Object>);

impl Held {
    /// The statements are answered: the connection goes back to the pool.
    pub(crate) fn done(mut self) {
        drop(self.0.take());
    }

    /// The connection, for a transaction that keeps it.
    pub(crate) fn keep(mut self) -> Object {
        self.0.take().expect("held until done or kept")
    }
}

impl std::ops::Deref for Held {
    type Target = Object;
    fn deref(&self) -> &Object {
        self.0.as_ref().expect("held until done or kept")
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Object {
        self.0.as_mut().expect("held until done or kept")
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            discard(client);
        }
    }
}

/// `sql` prepared on `client`, once per connection (deadpool-postgres's statement cache).
pub(crate) async fn prepared(
    client: &ClientWrapper,
    sql: &Sql,
) -> Result<Statement, tokio_postgres::Error> {
    client.prepare_typed_cached(&sql.text, sql.types).await
}

/// The SQLSTATE of a database's answer; `None` when the error is not the server's (the
/// connection failed, or a value could not be converted).
pub(crate) fn sqlstate(error: &tokio_postgres::Error) -> Option<&SqlState> {
    error.code()
}

/// A connection left mid-exchange (it failed, or its operation was stopped while a statement
/// ran): whether what was sent ran is unknown, so it must not go back to the pool. Takes it out
/// and closes it, first asking the server to cancel what it runs (a statement waiting on a
/// lock would otherwise hold its transaction, and the locks in it, until its timeout).
pub(crate) fn discard(client: Object) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let cancel = client.cancel_token();
        runtime.spawn(async move { cancel.cancel_query(tokio_postgres::NoTls).await });
    }
    drop(Object::take(client));
}

/// Polls `future` once, so that a request it makes on a tokio-postgres client is queued on the
/// connection, ahead of whatever its next user sends; its answer is then dropped unread.
pub(crate) fn poll_once<F: std::future::Future>(future: F) {
    let future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    let _ = future.poll(&mut std::task::Context::from_waker(waker));
}
