//! A pooled diesel-async connection inside a transaction lent to one operation: its one-commit
//! claim, sent with the `BEGIN`, and its completion, then the `COMMIT`.
//!
//! diesel-async reports most of PostgreSQL's errors without their SQLSTATE, so nothing here
//! relies on one but `unique_violation` and `not_null_violation`, which it names: the claim takes
//! the key's lock with `pg_try_advisory_xact_lock` and says what it found in its row count, and
//! a lost fence fails the completion with one of those two.

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::result::{DatabaseErrorKind, Error};
use diesel_async::TransactionManager;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AnsiTransactionManager, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use super::raw::{Param, Raw};
use crate::atomic::{Claimed, claimed_by};
use crate::db::Db;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::atomic::{OpenTransaction, TransactionClaim};
use idem_core::store::{BoxFuture, ClaimRequest, Completion, Fence, LeaseToken};

/// A connection of the application's diesel-async pool.
pub(crate) type Pooled = deadpool::managed::Object<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// An open transaction on a pooled diesel-async connection, diesel's transaction depth kept at
/// one so that the handler's `conn.transaction(..)` makes savepoints. Dropped unfinished, its
/// connection is closed: the transaction rolls back on the server.
pub(crate) struct DieselConn {
    conn: Option<Pooled>,
    db: Arc<Db>,
    claimed: Option<Claimed>,
}

/// Sets diesel's transaction depth to one (`true`) or none.
fn in_transaction(conn: &mut AsyncPgConnection, open: bool) -> Result<(), Error> {
    use diesel::connection::TransactionDepthChange::{DecreaseDepth, IncreaseDepth};
    let status = AnsiTransactionManager::transaction_manager_status_mut(conn);
    let state = status.transaction_state()?;
    match (state.transaction_depth().is_some(), open) {
        (false, true) => state.change_transaction_depth(IncreaseDepth),
        (true, false) => state.change_transaction_depth(DecreaseDepth),
        _ => Ok(()),
    }
}

impl DieselConn {
    /// `conn`, in a transaction whose `BEGIN` was sent.
    pub(crate) fn new(
        mut conn: Pooled,
        db: Arc<Db>,
        claimed: Option<Claimed>,
    ) -> Result<Self, Error> {
        in_transaction(&mut conn, true)?;
        Ok(Self {
            conn: Some(conn),
            db,
            claimed,
        })
    }

    /// The connection, for the operation's statements.
    pub(crate) fn conn(&mut self) -> &mut AsyncPgConnection {
        self.conn.as_mut().expect("used until finished")
    }

    /// Completes the record, then commits (a lost fence fails the completion, and the `COMMIT`
    /// of the aborted transaction rolls back).
    async fn complete_with_commit(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<(), Error> {
        let conn: &AsyncPgConnection = self.conn.as_deref().expect("used until finished");
        let status = completion.status.map(|s| s as i16);
        let (expires_at, completed_at) = (
            completion.expires_at.as_millis(),
            completion.completed_at.as_millis(),
        );
        let key = key.as_bytes().as_slice();
        let completed = async {
            let mut c = conn;
            match &self.claimed {
                Some(claimed) => {
                    let params = [
                        Param::Bytes(key),
                        Param::Int(token.as_i64()),
                        Param::Int(expires_at),
                        Param::Bytes(completion.payload),
                        Param::Status(status),
                        Param::Int(completed_at),
                        Param::Bytes(claimed.fingerprint.as_slice()),
                        Param::Int(claimed.lease_until),
                        Param::Text(&claimed.operation),
                        Param::Int(claimed.created_at),
                        Param::Text(&claimed.scope),
                        Param::Text(&claimed.scope_value),
                    ];
                    let sql = &self.db.sql.complete_in_tx.text;
                    Raw {
                        sql,
                        params: &params,
                    }
                    .execute(&mut c)
                    .await
                }
                None => {
                    let params = [
                        Param::Bytes(key),
                        Param::Int(token.as_i64()),
                        Param::Bytes(completion.payload),
                        Param::Int(expires_at),
                        Param::Status(status),
                        Param::Int(completed_at),
                    ];
                    let sql = &self.db.sql.diesel_complete_fenced;
                    Raw {
                        sql,
                        params: &params,
                    }
                    .execute(&mut c)
                    .await
                }
            }
        };
        // The `COMMIT` as a statement diesel-async prepares and caches too, not as text: it
        // then takes its turn at the connection's statement cache, which the completion holds
        // from before it sends anything (preparing its statement first, on a connection that
        // has not run it yet) until its execution is queued on the connection. Polled first
        // (`biased`), the completion is ahead on the wire whether or not it was prepared, and
        // a completion that fails aborts the transaction the `COMMIT` then rolls back. (Sent
        // as text, the `COMMIT` could overtake a completion being prepared, and commit the
        // operation's writes without the record whose fence was lost.)
        let commit = async {
            let mut c = conn;
            Raw {
                sql: "COMMIT",
                params: &[],
            }
            .execute(&mut c)
            .await
        };
        let (completed, committed) = tokio::join!(biased; completed, commit);
        completed?;
        committed.map(drop)
    }

    async fn complete_and_commit_owned(
        mut self: Box<Self>,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let outcome = self.complete_with_commit(key, token, completion).await;
        let mut conn = self.conn.take().expect("finished once");
        // Whatever the answers, the transaction is over (committed, or rolled back by the
        // `COMMIT` of an aborted one) unless the connection failed.
        let lost = matches!(
            &outcome,
            Err(Error::DatabaseError(
                DatabaseErrorKind::UniqueViolation | DatabaseErrorKind::NotNullViolation,
                _
            ))
        );
        match outcome {
            Ok(()) if in_transaction(&mut conn, false).is_ok() => Ok(Fence::Held),
            Err(_) if lost && in_transaction(&mut conn, false).is_ok() => Ok(Fence::Lost),
            Ok(()) => Ok(Fence::Held),
            Err(error) => {
                close(conn);
                Err(StoreError::unavailable(error))
            }
        }
    }
}

/// Takes `conn` out of its pool and closes it (after asking the server to cancel what it runs).
fn close(conn: Pooled) {
    let cancel = conn.cancel_token();
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { cancel.cancel_query(tokio_postgres::NoTls).await });
    }
    drop(deadpool::managed::Object::take(conn));
}

impl Drop for DieselConn {
    fn drop(&mut self) {
        // Unfinished: rolled back. The handler's own statements run on the connection without
        // this value seeing them, so one may still run (its future dropped at the deadline):
        // the connection is closed, its statement cancelled, rather than handed to the pool's
        // next user behind it.
        if let Some(conn) = self.conn.take() {
            close(conn);
        }
    }
}

impl OpenTransaction for DieselConn {
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.complete_and_commit_owned(key, token, completion))
    }

    fn commit(mut self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async move {
            if self.claimed.is_some() {
                return Err(StoreError::unavailable(std::io::Error::other(
                    "a claim's transaction commits only with its record",
                )));
            }
            let committed = {
                let mut c: &AsyncPgConnection = self.conn.as_deref().expect("finished once");
                c.batch_execute("COMMIT").await
            };
            let mut conn = self.conn.take().expect("finished once");
            match committed {
                Ok(()) if in_transaction(&mut conn, false).is_ok() => Ok(()),
                Ok(()) => {
                    close(conn);
                    Ok(())
                }
                Err(error) => {
                    close(conn);
                    Err(StoreError::unavailable(error))
                }
            }
        })
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// How long a claim waits between tries of the key's lock.
const TRY_AGAIN: Duration = Duration::from_millis(5);

/// Begins a transaction on a connection of `pool` and claims `request`'s key in it: the `BEGIN`
/// (with the transaction's timeouts) and the first try of the key's lock go out together. The
/// lock is tried again until `lock_wait` runs out.
pub(crate) async fn claim(
    db: &Arc<Db>,
    pool: &super::DieselPool,
    request: ClaimRequest<'_>,
    lock_wait: Duration,
    statement_timeout: Duration,
) -> Result<TransactionClaim, StoreError> {
    let started = Instant::now();
    let Some(_passage) = db.gates.pass(request.key, lock_wait).await else {
        return Ok(TransactionClaim::InFlight);
    };
    let conn = pool.get().await.map_err(StoreError::unavailable)?;
    let ms = statement_timeout.as_millis().clamp(1, i32::MAX as u128);
    let begin = format!("BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}");
    let key = request.key.as_bytes().as_slice();
    let lock = db.sql.lock_of(request.key);
    let conn = DieselConn::new(conn, db.clone(), Some(claimed_by(&request)))
        .map_err(StoreError::unavailable)?;
    let first = {
        let c: &AsyncPgConnection = conn.conn.as_deref().expect("open");
        let begun = async {
            let mut c = c;
            c.batch_execute(&begin).await
        };
        let (begun, tried) = tokio::join!(begun, try_claim(&db.sql.diesel_try_claim, c, key, lock));
        begun.and(tried)
    };
    let mut found = first;
    // 0 rows: the key is this claim's; 1: a record holds it; 2: another claim's lock.
    while matches!(found, Ok(2)) && started.elapsed() < lock_wait {
        tokio::time::sleep(TRY_AGAIN).await;
        let c: &AsyncPgConnection = conn.conn.as_deref().expect("open");
        found = try_claim(&db.sql.diesel_try_claim, c, key, lock).await;
    }
    match found {
        Ok(0) => Ok(TransactionClaim::Acquired(Box::new(conn))),
        // Dropped: rolled back.
        Ok(1) => Ok(TransactionClaim::Stored),
        Ok(_) => Ok(TransactionClaim::InFlight),
        Err(error) => Err(StoreError::unavailable(error)),
    }
}

/// One try of the key's lock, and a look for a record: how many rows it returned.
async fn try_claim(
    sql: &str,
    conn: &AsyncPgConnection,
    key: &[u8],
    lock: i64,
) -> Result<usize, Error> {
    let mut conn = conn;
    let params = [Param::Bytes(key), Param::Int(lock)];
    Raw {
        sql,
        params: &params,
    }
    .execute(&mut conn)
    .await
}
