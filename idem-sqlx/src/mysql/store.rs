//! The store contract on MySQL: claims, fenced writes and the sweep, each an autocommit
//! prepared statement; a claim that meets a record takes two or three.

use sqlx::mysql::MySqlQueryResult;

use super::positional::{Arg, Positional};
use super::{DEADLOCK, DEADLOCK_ATTEMPTS, DUPLICATE_KEY, MySqlStore, error_number};
use crate::sql::{fence, held_by};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

/// What [`READ`](super::READ) returns of the record that stopped a claim.
type HeldRow = (Vec<u8>, String, i64, Option<Vec<u8>>, Option<i64>, i64);

/// How many times a claim goes round when the record changed between its statements (deleted
/// after its insert failed, taken before its update): each needs another concurrent write to
/// that key.
const CLAIM_ATTEMPTS: usize = 16;

/// The claim's next statement.
enum Step {
    Insert,
    Read,
}

impl MySqlStore {
    /// Runs `statement` with `args` on the pool, running it again when InnoDB chose it as a
    /// deadlock victim (it was rolled back whole).
    async fn run(
        &self,
        statement: &Positional,
        args: &[Arg<'_>],
    ) -> Result<MySqlQueryResult, sqlx::Error> {
        let mut attempt = 0;
        loop {
            let bound = statement
                .arguments(args)
                .map_err(|e| sqlx::Error::Encode(e.into()))?;
            let done = sqlx::query_with(sqlx::AssertSqlSafe(statement.sql.as_str()), bound)
                .execute(&self.pool)
                .await;
            match done {
                Err(error)
                    if error_number(&error) == Some(DEADLOCK)
                        && attempt + 1 < DEADLOCK_ATTEMPTS =>
                {
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    /// The record that stopped a claim, if any.
    async fn held(&self, key: &RecordKey) -> Result<Option<HeldRow>, StoreError> {
        let bound = self.sql.read.arguments(&[Arg::Bytes(key.as_bytes())])?;
        sqlx::query_as_with(sqlx::AssertSqlSafe(self.sql.read.sql.as_str()), bound)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::unavailable)
    }

    /// The fenced completion, with `executor` on the pool or inside a lent transaction.
    pub(super) async fn complete_with<'e>(
        &self,
        executor: impl sqlx::Executor<'e, Database = sqlx::MySql>,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let status = completion.status.map(i64::from);
        let bound = self.sql.complete.arguments(&[
            Arg::Bytes(key.as_bytes()),
            Arg::Int(Some(token.as_i64())),
            Arg::Bytes(completion.payload),
            Arg::Int(Some(completion.expires_at.as_millis())),
            Arg::Int(status),
            Arg::Int(Some(completion.completed_at.as_millis())),
        ])?;
        let done = sqlx::query_with(sqlx::AssertSqlSafe(self.sql.complete.sql.as_str()), bound)
            .execute(executor)
            .await;
        fence(done.map(|d| d.rows_affected()))
    }
}

impl MySqlStore {
    /// The refusal of a payload the server could not take in one statement, if it is one.
    pub(super) fn too_large(&self, completion: &Completion<'_>) -> Option<StoreError> {
        let (size, limit) = (completion.payload.len(), self.sql.payload_limit);
        (size > limit).then_some(StoreError::TooLarge { size, limit })
    }

    /// Refuses a completion whose payload is `too_large`, as the contract says: the record stays
    /// in flight, its lease extended to its expiry, so no retry runs the operation again before
    /// then. Fenced like any completion: `Fence::Lost` when `token` no longer owns the record.
    async fn refuse(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: &Completion<'_>,
        too_large: StoreError,
    ) -> Result<Fence, StoreError> {
        match self.renew(key, token, completion.expires_at).await? {
            Fence::Held => Err(too_large),
            Fence::Lost => Ok(Fence::Lost),
        }
    }
}

/// Whether a claim may take `row`: expired, or in flight under a lapsed lease of the same
/// request (the fingerprint).
fn claimable(row: &HeldRow, req: &ClaimRequest<'_>) -> bool {
    let (fingerprint, state, lease_until, _, _, expires_at) = row;
    let now = req.now.as_millis();
    *expires_at <= now
        || (state == "in_flight"
            && *lease_until <= now
            && fingerprint.as_slice() == req.fingerprint.as_bytes())
}

impl Store for MySqlStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let args = [
            Arg::Bytes(req.key.as_bytes()),
            Arg::Bytes(req.fingerprint.as_bytes()),
            Arg::Int(Some(req.token.as_i64())),
            Arg::Int(Some(req.lease_until.as_millis())),
            Arg::Int(Some(req.expires_at.as_millis())),
            Arg::Int(Some(req.now.as_millis())),
            Arg::Text(Some(req.operation)),
            Arg::Text(Some(req.scope)),
            Arg::Text(Some(req.scope_value)),
        ];
        let mut step = Step::Insert;
        for _ in 0..CLAIM_ATTEMPTS {
            if let Step::Insert = step {
                match self.run(&self.sql.insert, &args).await {
                    Ok(_) => return Ok(Claim::Acquired { took_over: false }),
                    Err(error) if error_number(&error) == Some(DUPLICATE_KEY) => {}
                    Err(error) => return Err(StoreError::unavailable(error)),
                }
            }
            let Some(row) = self.held(req.key).await? else {
                // Deleted since the insert failed: insert again.
                step = Step::Insert;
                continue;
            };
            if !claimable(&row, &req) {
                let (fingerprint, state, lease_until, response, completed_at, _) = row;
                return held_by(fingerprint, &state, lease_until, response, completed_at);
            }
            let taken = self
                .run(&self.sql.take, &args)
                .await
                .map_err(StoreError::unavailable)?;
            if taken.rows_affected() > 0 {
                // `LAST_INSERT_ID(owners)`: more than one owner is a takeover.
                return Ok(Claim::Acquired {
                    took_over: taken.last_insert_id() > 1,
                });
            }
            // Taken, renewed or deleted by another since it was read: read it again.
            step = Step::Read;
        }
        Err(StoreError::unavailable(std::io::Error::other(
            "the record kept changing under the claim",
        )))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        if let Some(too_large) = self.too_large(&completion) {
            return self.refuse(key, token, &completion, too_large).await;
        }
        let mut attempt = 0;
        loop {
            match self.complete_with(&self.pool, key, token, completion).await {
                Err(StoreError::Unavailable(error))
                    if error.downcast_ref::<sqlx::Error>().and_then(error_number)
                        == Some(DEADLOCK)
                        && attempt + 1 < DEADLOCK_ATTEMPTS =>
                {
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let args = [Arg::Bytes(key.as_bytes()), Arg::Int(Some(token.as_i64()))];
        let done = self.run(&self.sql.release, &args).await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let args = [
            Arg::Bytes(key.as_bytes()),
            Arg::Int(Some(token.as_i64())),
            Arg::Int(Some(lease_until.as_millis())),
        ];
        // sqlx asks for `CLIENT_FOUND_ROWS`: a renewal to the lease end the row already has
        // counts the row it matched, so the fence holds.
        let done = self.run(&self.sql.renew, &args).await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let args = [
            Arg::Int(Some(now.as_millis())),
            Arg::Int(Some(i64::from(limit))),
        ];
        let done = self
            .run(&self.sql.purge, &args)
            .await
            .map_err(StoreError::unavailable)?;
        Ok(done.rows_affected())
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        capabilities.limit_payload(self.sql.payload_limit);
        crate::atomic::offer::<sqlx::MySql>(capabilities, self.clone());
    }
}
