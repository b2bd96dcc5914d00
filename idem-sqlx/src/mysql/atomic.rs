//! Atomic mode on MySQL: the record completes inside the transaction lent to the handler, but
//! only while that transaction is still the one that was lent.
//!
//! InnoDB ends a whole transaction when it picks it as a deadlock victim (error 1213), and with
//! `innodb_rollback_on_timeout` when a lock wait times out; the session then goes on in
//! autocommit. A handler that swallowed that error and answered 2xx would otherwise have its
//! response stored, in autocommit, beside writes that rolled back. The lent transaction begins
//! with a savepoint (`idem_tx`); the completion releases it first, and a savepoint that is
//! gone means the transaction was rolled back under the handler: nothing is stored, the
//! transaction is dropped, and the request is answered 503 (the key released, so a retry runs
//! the operation on a database its first attempt left untouched).

use sqlx::{Executor, MySqlConnection};

use super::{MySqlStore, error_number};
use crate::atomic::{AtomicStore, MYSQL_SAVEPOINT as SAVEPOINT};
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{BoxFuture, Completion, Fence, LeaseToken};

/// ER_SP_DOES_NOT_EXIST: the savepoint is gone, with the transaction that held it.
const NO_SUCH_SAVEPOINT: u16 = 1305;

impl MySqlStore {
    /// Completes the record in the lent transaction `conn` is in, if it is still open.
    async fn complete_in_lent(
        &self,
        conn: &mut MySqlConnection,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        // Nothing of the transaction commits; the engine answers as for any refused result.
        if let Some(too_large) = self.too_large(&completion) {
            return Err(too_large);
        }
        let release = format!("RELEASE SAVEPOINT {SAVEPOINT}");
        if let Err(error) = conn.execute(sqlx::AssertSqlSafe(release)).await {
            if error_number(&error) == Some(NO_SUCH_SAVEPOINT) {
                return Err(StoreError::unavailable(RolledBackUnderTheHandler));
            }
            return Err(StoreError::unavailable(error));
        }
        self.complete_with(conn, key, token, completion).await
    }
}

/// The lent transaction was rolled back by the server while the handler ran.
#[derive(Debug, thiserror::Error)]
#[error(
    "MySQL rolled the operation's transaction back while it ran (a deadlock, or a lock wait \
     that timed out): nothing of it is stored"
)]
struct RolledBackUnderTheHandler;

impl AtomicStore<sqlx::MySql> for MySqlStore {
    fn pool(&self) -> &sqlx::MySqlPool {
        &self.pool
    }

    fn complete_in<'a>(
        &'a self,
        conn: &'a mut MySqlConnection,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.complete_in_lent(conn, key, token, completion))
    }
}
