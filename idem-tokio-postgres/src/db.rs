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
    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(StoreError::unavailable)
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

/// A connection that failed mid-exchange: whether what was sent ran is unknown, so it must not
/// go back to the pool. Takes it out: dropping the client closes it.
pub(crate) fn discard(client: Object) {
    drop(Object::take(client));
}
