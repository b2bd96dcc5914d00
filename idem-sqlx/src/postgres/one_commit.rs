//! One-commit atomic mode: the record's claim, the handler's writes and the stored response in
//! one PostgreSQL transaction, the record written once.
//!
//! The claim writes nothing. In a transaction that stays open while the handler runs, it takes
//! the key's transaction-scoped advisory lock, then looks for a committed record. A duplicate
//! waits on that lock, up to a `lock_timeout`: if the first commits, the duplicate finds its
//! record and reads it the ordinary way (replay, or 422); if it rolls back or its connection
//! dies, the lock is free and the duplicate runs fresh. The open connection is the lease: there
//! is nothing to renew, and a crash leaves nothing behind. The completion inserts the record,
//! completed, and commits; a record that appeared in between (claimed outside a transaction, by
//! plain mode or an older version of this store) makes the insert fail, and nothing of the
//! attempt commits.
//!
//! Both ends take one round trip. The claim travels as one simple-protocol message with the
//! `BEGIN`; the completion with the `COMMIT`. The simple protocol binds no parameters, so each
//! is a call of a PL/pgSQL function of the store's schema (migration 4), whose statements are
//! planned once per session, with its arguments written into the text: only values that cannot
//! carry SQL, integers, and bytes as hex digits (digests, the payload, and the operation, scope
//! and scope value as UTF-8).

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Executor, PgConnection, Postgres, SqlSafeStr};
use sqlx_core::transaction::TransactionManager;

use super::{PostgresStore, Statements};
use crate::atomic::{self, ClaimedTransaction};
use idem_core::error::StoreError;
use idem_core::key::{RecordKey, hex};
use idem_core::store::atomic::{ClaimInTransaction, TransactionClaim};
use idem_core::store::{BoxFuture, ClaimRequest, Completion, Fence, LeaseToken};

type Manager = <Postgres as sqlx::Database>::TransactionManager;

/// A pooled connection in the transaction that holds a claim, with what the record will say
/// of it. Dropping it rolls the transaction back (the `ROLLBACK` goes out with the pool's check
/// when the connection returns), and the claim vanishes with the writes.
struct OpenClaim {
    conn: PoolConnection<Postgres>,
    sql: Arc<Statements>,
    /// The completion's arguments known at the claim, as SQL: fingerprint, lease end,
    /// operation, creation time, scope, scope value.
    claimed: String,
}

impl ClaimedTransaction<Postgres> for OpenClaim {
    fn conn(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// Writes the completed record and commits, in one round trip. `Fence::Lost` (and nothing
    /// committed) when a record of the key committed meanwhile.
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(self.complete_and_commit_owned(key, token, completion))
    }
}

impl OpenClaim {
    async fn complete_and_commit_owned(
        mut self: Box<Self>,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let status = completion
            .status
            .map_or_else(|| "NULL".to_owned(), |s| s.to_string());
        // The `BEGIN` after the `COMMIT` keeps sqlx's count of open transactions true; the
        // empty transaction is rolled back when the connection returns.
        let sql = format!(
            "SELECT {complete}(decode('{key}', 'hex'), {token}, {expires_at}, \
             decode('{payload}', 'hex'), {status}::smallint, {completed_at}, {claimed}); \
             COMMIT; BEGIN",
            complete = self.sql.names.complete_in_tx(),
            key = hex(key.as_bytes()),
            token = token.as_i64(),
            expires_at = completion.expires_at.as_millis(),
            payload = hex(completion.payload),
            completed_at = completion.completed_at.as_millis(),
            claimed = self.claimed,
        );
        match self.conn.execute(AssertSqlSafe(sql)).await {
            Ok(_) => Ok(Fence::Held),
            // unique_violation: a record of the key committed while the operation ran.
            Err(error) if sqlstate(&error).as_deref() == Some("23505") => Ok(Fence::Lost),
            Err(error) => {
                if sqlstate(&error).is_none() {
                    // The connection failed: whether the `COMMIT` ran is unknown; never reuse it.
                    self.conn.close_on_drop();
                }
                Err(StoreError::unavailable(error))
            }
        }
    }
}

impl Drop for OpenClaim {
    fn drop(&mut self) {
        Manager::start_rollback(&mut self.conn);
    }
}

impl ClaimInTransaction for PostgresStore {
    /// Of the claims of one key, one at a time goes to the database; the others wait their turn
    /// in the process, within the same `lock_wait`, holding no connection.
    fn claim_in_transaction<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> BoxFuture<'a, Result<TransactionClaim, StoreError>> {
        Box::pin(self.claim_in_open_transaction(request, lock_wait, statement_timeout))
    }
}

impl PostgresStore {
    /// Begins a transaction on a pooled connection and claims the key in it, waiting up to
    /// `lock_wait` for a transaction that holds the key's lock.
    async fn claim_in_open_transaction(
        &self,
        request: ClaimRequest<'_>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> Result<TransactionClaim, StoreError> {
        let started = Instant::now();
        let Some(_passage) = self.gates.pass(request.key, lock_wait).await else {
            return Ok(TransactionClaim::InFlight);
        };
        let lock_wait = lock_wait.saturating_sub(started.elapsed());
        let mut conn = self.pool.acquire().await.map_err(StoreError::unavailable)?;
        // The lock wait applies to the claim only; the operation's statements after it get the
        // transaction's own timeouts (the function sets them).
        let sql = format!(
            "BEGIN; SELECT {claim}(decode('{key}', 'hex'), {lock}, '{lock_ms}', '{statement_ms}')",
            claim = self.sql.names.claim_in_tx(),
            key = hex(request.key.as_bytes()),
            lock = self.sql.names.claim_lock(request.key),
            // 0 would wait forever.
            lock_ms = lock_wait.as_millis().clamp(1, i32::MAX as u128),
            statement_ms = statement_timeout.as_millis().clamp(1, i32::MAX as u128),
        );
        // What the record will say of the claim, written when it completes.
        let claimed = format!(
            "decode('{fingerprint}', 'hex'), {lease_until}, {operation}, {now}, {scope}, \
             {scope_value}",
            fingerprint = hex(request.fingerprint.as_bytes()),
            lease_until = request.lease_until.as_millis(),
            operation = text(request.operation),
            now = request.now.as_millis(),
            scope = text(request.scope),
            scope_value = text(request.scope_value),
        );
        let error = match Manager::begin(&mut conn, Some(AssertSqlSafe(sql).into_sql_str())).await {
            Ok(()) => {
                let sql = self.sql.clone();
                let open = Box::new(OpenClaim { conn, sql, claimed });
                return Ok(TransactionClaim::Acquired(atomic::claimed::<Postgres>(
                    open,
                )));
            }
            Err(error) => error,
        };
        let code = sqlstate(&error);
        if code.is_none() {
            // Not PostgreSQL's answer: the connection itself failed. Never reuse it.
            conn.close_on_drop();
            return Err(StoreError::unavailable(error));
        }
        // The transaction failed before sqlx counted it as open: end it here, or the connection
        // would go back to the pool inside an aborted transaction.
        conn.execute("ROLLBACK")
            .await
            .map_err(StoreError::unavailable)?;
        match code.as_deref() {
            // unique_violation: the claim found a committed record.
            Some("23505") => Ok(TransactionClaim::Stored),
            // lock_not_available, or query_canceled when the session's `statement_timeout` ended
            // the wait first, on the key's lock: the claim's transaction is still open.
            Some("55P03" | "57014") if on_the_key(&error) => Ok(TransactionClaim::InFlight),
            // Anything else, a lock on the records table among them: the store cannot answer
            // (503), which is not a request in flight (409).
            _ => Err(StoreError::unavailable(error)),
        }
    }
}

/// `value` as a SQL expression of type text that carries nothing of it but hex digits: its UTF-8
/// bytes in hex, decoded by the server. Client-chosen strings (the operation, the scope and its
/// value) go into the claim's text only this way, since its protocol binds no parameters.
fn text(value: &str) -> String {
    format!(
        "convert_from(decode('{}', 'hex'), 'UTF8')",
        hex(value.as_bytes())
    )
}

/// Whether a lock wait that ran out was the wait for the key's advisory lock, as the error's
/// context (the claim function's line) says, rather than for a lock on the records table.
fn on_the_key(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    error
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .and_then(|e| e.r#where())
        .is_some_and(|context| context.contains("pg_advisory_xact_lock"))
}

/// The SQLSTATE of a database error.
fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(e) => e.code().map(|c| c.into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_strings_reach_the_sql_text_as_hex_digits_only() {
        let nasty = r"o'brien\'); DROP TABLE x; --";
        let sql = text(nasty);
        let inner = sql
            .strip_prefix("convert_from(decode('")
            .and_then(|s| s.strip_suffix("', 'hex'), 'UTF8')"))
            .expect("the decoding expression around the digits");
        assert!(inner.bytes().all(|b| b.is_ascii_hexdigit()), "{sql}");
        assert_eq!(inner, hex(nasty.as_bytes()));
        assert_eq!(text(""), "convert_from(decode('', 'hex'), 'UTF8')");
    }
}
