//! One-commit atomic mode's claim: sent with the `BEGIN`, in one round trip.
//!
//! The claim writes nothing. In a transaction that stays open while the operation runs, it
//! takes the key's transaction-scoped advisory lock (waiting up to the lock wait), then looks
//! for a committed record: idem-sqlx's function of the store's schema, called as a prepared
//! statement with binary parameters. A duplicate waits on that lock; if the first commits, the
//! duplicate finds its record and the engine reads it the ordinary way (replay, or 422); if it
//! rolls back or its connection dies, the lock is free. The open connection is the lease, and a
//! crash leaves nothing behind. The completion inserts the record whole, completed, with the
//! `COMMIT` ([`LentConn`]): a prepared `INSERT` (`idem_sql`'s `INSERT_COMPLETED`), which costs
//! the database less than the same `INSERT` made by idem-sqlx's function.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::conn::{LentConn, claimed_by};
use crate::db::{Db, discard, prepared, sqlstate};
use idem_core::error::StoreError;
use idem_core::store::atomic::{ClaimInTransaction, TransactionClaim};
use idem_core::store::{BoxFuture, ClaimRequest};

/// The store's one-commit claims.
pub(crate) struct Claims(pub(crate) Arc<Db>);

impl ClaimInTransaction for Claims {
    /// Of the claims of one key, one at a time goes to the database; the others wait their turn
    /// in the process, within the same `lock_wait`, holding no connection.
    fn claim_in_transaction<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> BoxFuture<'a, Result<TransactionClaim, StoreError>> {
        Box::pin(self.claim(request, lock_wait, statement_timeout))
    }
}

/// Milliseconds as a setting's text, at least 1 (0 would wait forever).
fn millis(duration: Duration) -> String {
    duration.as_millis().clamp(1, i32::MAX as u128).to_string()
}

impl Claims {
    async fn claim(
        &self,
        request: ClaimRequest<'_>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> Result<TransactionClaim, StoreError> {
        let db = &self.0;
        let started = Instant::now();
        let Some(_passage) = db.gates.pass(request.key, lock_wait).await else {
            return Ok(TransactionClaim::InFlight);
        };
        let lock_wait = lock_wait.saturating_sub(started.elapsed());
        let client = db.client().await?;
        let statement = prepared(&client, &db.sql.claim_in_tx)
            .await
            .map_err(StoreError::unavailable)?;
        let key = request.key.as_bytes().as_slice();
        let lock = db.sql.lock_of(request.key);
        let (lock_ms, statement_ms) = (millis(lock_wait), millis(statement_timeout));
        // Until the pair is answered, a drop closes the connection (nothing half-sent reused).
        let mut conn = LentConn::new(client.keep(), db.clone(), None);
        conn.busy.store(true, std::sync::atomic::Ordering::Relaxed);
        let args: [&(dyn ToSql + Sync); 4] = [&key, &lock, &lock_ms, &statement_ms];
        let (begun, claimed) = tokio::join!(
            conn.client().batch_execute("BEGIN"),
            conn.client().execute(&statement, &args)
        );
        *conn.busy.get_mut() = false;
        let error = match (begun, claimed) {
            (Ok(()), Ok(_)) => {
                let conn = LentConn::new(conn.take(), db.clone(), Some(claimed_by(&request)));
                return Ok(TransactionClaim::Acquired(Box::new(conn)));
            }
            (Err(error), _) | (Ok(()), Err(error)) => error,
        };
        let Some(code) = sqlstate(&error).cloned() else {
            // Not PostgreSQL's answer: the connection itself failed. Never reuse it.
            discard(conn.take());
            return Err(StoreError::unavailable(error));
        };
        // The transaction is aborted: dropping the connection queues its `ROLLBACK`.
        drop(conn);
        match code {
            // The claim found a committed record.
            SqlState::UNIQUE_VIOLATION => Ok(TransactionClaim::Stored),
            // The wait for the key's lock ran out (or the session's `statement_timeout` ended
            // it first): the other claim's transaction is still open.
            SqlState::LOCK_NOT_AVAILABLE | SqlState::QUERY_CANCELED if on_the_key(&error) => {
                Ok(TransactionClaim::InFlight)
            }
            // Anything else, a lock on the records table among them: the store cannot answer
            // (503), which is not a request in flight (409).
            _ => Err(StoreError::unavailable(error)),
        }
    }
}

/// Whether a lock wait that ran out was the wait for the key's advisory lock, as the error's
/// context (the claim function's line) says, rather than for a lock on the records table.
fn on_the_key(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .and_then(|e| e.where_())
        .is_some_and(|context| context.contains("pg_advisory_xact_lock"))
}
