//! A pooled connection inside a transaction lent to one operation: what the engine parks with
//! a one-commit claim in it, what a [`TokioPostgresTx`](super::TokioPostgresTx) writes through, and what is handed back
//! for the engine to complete the record in and commit, pipelined with the `COMMIT`.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use crate::db::{Db, discard, poll_once, prepared, sqlstate};
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::atomic::OpenTransaction;
use idem_core::store::{BoxFuture, Completion, Fence, LeaseToken};

/// What the record will say of a one-commit claim, written when it completes.
pub(crate) struct Claimed {
    pub(crate) fingerprint: [u8; 32],
    pub(crate) lease_until: i64,
    pub(crate) operation: String,
    pub(crate) created_at: i64,
    pub(crate) scope: String,
    pub(crate) scope_value: String,
}

/// What the record will say of `request`'s claim when it completes.
pub(crate) fn claimed_by(request: &idem_core::store::ClaimRequest<'_>) -> Claimed {
    Claimed {
        fingerprint: *request.fingerprint.as_bytes(),
        lease_until: request.lease_until.as_millis(),
        operation: request.operation.to_owned(),
        created_at: request.now.as_millis(),
        scope: request.scope.to_owned(),
        scope_value: request.scope_value.to_owned(),
    }
}

/// An open transaction on a pooled connection. Dropped unfinished, it rolls back: the
/// `ROLLBACK` is queued on the connection before it goes back to the pool, or, when a statement
/// of it may still be running (its future was dropped mid-way), the connection is closed.
pub(crate) struct LentConn {
    /// `None` once finished.
    client: Option<Object>,
    pub(crate) db: Arc<Db>,
    /// `Some` when the transaction holds a one-commit claim (no record row yet).
    claimed: Option<Claimed>,
    /// A statement was sent and its answer not read yet.
    pub(crate) busy: AtomicBool,
}

impl LentConn {
    /// A connection in an open transaction, with a one-commit claim in it or not.
    pub(crate) fn new(client: Object, db: Arc<Db>, claimed: Option<Claimed>) -> Self {
        Self {
            client: Some(client),
            db,
            claimed,
            busy: AtomicBool::new(false),
        }
    }

    /// The client, taken out: the transaction is no longer this value's to end.
    pub(crate) fn take(mut self) -> Object {
        self.client.take().expect("taken once")
    }

    /// Queues `sql` (the simple protocol) on the connection without waiting for its answer,
    /// unless a statement is still unanswered (then the connection is closed on drop anyway).
    pub(crate) fn send_now(&self, sql: &str) {
        if let Some(client) = &self.client
            && !self.busy.load(Ordering::Relaxed)
        {
            poll_once(client.batch_execute(sql));
        }
    }

    /// The connection's client.
    pub(crate) fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("a lent connection is used only until it is finished")
    }

    /// Completes the record inside the transaction and commits, in one round trip: the
    /// completion and the `COMMIT` are sent together. A completion that finds the fence lost
    /// fails, so the `COMMIT` rolls back.
    async fn complete_and_commit_owned(
        mut self: Box<Self>,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let outcome = self.complete_with_commit(key, token, completion).await;
        let client = self.client.take().expect("finished once");
        match outcome {
            Ok(()) => Ok(Fence::Held),
            // The lost fence failed the completion: the `COMMIT` rolled back.
            Err(error) if self.fence_lost(&error) => Ok(Fence::Lost),
            Err(error) => Err(failed(client, error)),
        }
    }

    /// Sends the completion and the `COMMIT` together; the first error, if any.
    async fn complete_with_commit(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<(), tokio_postgres::Error> {
        let client = self.client();
        let key = key.as_bytes().as_slice();
        let token = token.as_i64();
        let status = completion.status.map(|s| s as i16);
        let (expires_at, completed_at) = (
            completion.expires_at.as_millis(),
            completion.completed_at.as_millis(),
        );
        let fingerprint;
        let (sql, args): (_, Vec<&(dyn ToSql + Sync)>) = match &self.claimed {
            Some(claimed) => {
                fingerprint = claimed.fingerprint.as_slice();
                let args: Vec<&(dyn ToSql + Sync)> = vec![
                    &key,
                    &token,
                    &expires_at,
                    &completion.payload,
                    &status,
                    &completed_at,
                    &fingerprint,
                    &claimed.lease_until,
                    &claimed.operation,
                    &claimed.created_at,
                    &claimed.scope,
                    &claimed.scope_value,
                ];
                (&self.db.sql.complete_in_tx, args)
            }
            None => (
                &self.db.sql.complete_fenced,
                vec![
                    &key,
                    &token,
                    &completion.payload,
                    &expires_at,
                    &status,
                    &completed_at,
                ],
            ),
        };
        // Dropped from here on, the connection is closed: the answers are not read.
        self.busy.store(true, Ordering::Relaxed);
        // Preparing fails in an aborted transaction too (the work's own statement failed).
        let statement = prepared(client, sql).await?;
        let (completed, committed) = tokio::join!(
            client.execute(&statement, &args),
            client.batch_execute("COMMIT")
        );
        self.busy.store(false, Ordering::Relaxed);
        completed?;
        committed
    }

    /// Whether `error` is the completion's own report of a lost fence.
    fn fence_lost(&self, error: &tokio_postgres::Error) -> bool {
        let lost = match self.claimed {
            // A record of the key committed while the operation ran (one commit).
            Some(_) => &SqlState::UNIQUE_VIOLATION,
            // The fenced `UPDATE` matched no row (two commits).
            None => &SqlState::DIVISION_BY_ZERO,
        };
        sqlstate(error) == Some(lost)
    }
}

/// The completion or the `COMMIT` failed: nothing of the attempt committed unless the
/// connection itself failed (then nobody knows, and it is closed).
fn failed(client: Object, error: tokio_postgres::Error) -> StoreError {
    match sqlstate(&error) {
        // The work's own statement had aborted the transaction: its failure, not the store's.
        Some(code) if *code == SqlState::IN_FAILED_SQL_TRANSACTION => {
            rollback_later(&client);
            StoreError::Aborted(Box::new(error))
        }
        Some(_) => {
            rollback_later(&client);
            StoreError::unavailable(error)
        }
        None => {
            discard(client);
            StoreError::unavailable(error)
        }
    }
}

/// Queues a `ROLLBACK` on `client`'s connection without waiting for it: polled once, the
/// request is on the connection's queue, ahead of whatever its next user sends.
fn rollback_later(client: &Object) {
    poll_once(client.batch_execute("ROLLBACK"));
}

impl Drop for LentConn {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if *self.busy.get_mut() {
            // A statement of the transaction may still run (or wait on a lock): closing the
            // connection ends the transaction without anyone waiting behind it.
            discard(client);
        } else {
            rollback_later(&client);
        }
    }
}

impl OpenTransaction for LentConn {
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
                // Dropped: rolls back.
                return Err(StoreError::unavailable(std::io::Error::other(
                    "a claim's transaction commits only with its record",
                )));
            }
            self.busy.store(true, Ordering::Relaxed);
            let committed = self.client().batch_execute("COMMIT").await;
            self.busy.store(false, Ordering::Relaxed);
            let client = self.client.take().expect("finished once");
            committed.map_err(|error| failed(client, error))
        })
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}
