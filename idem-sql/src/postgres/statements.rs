//! The hot path's statements over the records table, templates over [`Names`](super::Names):
//! each one statement, so a claim, a completion, a release or a renewal is one round trip.

/// Takes the record when it is absent, expired (a new life: one owner) or in flight under a
/// lapsed lease of the same request (a takeover: one more owner, which keeps what the record
/// says about itself: its operation, scope and creation time), returning the new `owners`;
/// otherwise returns the record that stopped it, in one statement.
///
/// `$1` key, `$2` fingerprint, `$3` token, `$4` lease_until, `$5` expires_at, `$6` now,
/// `$7` operation, `$8` scope, `$9` scope value.
///
/// `held` reads first: when the statement's snapshot already shows a live record that cannot be
/// claimed (a completed response to replay, or an owner in flight), the `INSERT` gets no row to
/// insert, so the statement locks nothing, writes no WAL and commits without a flush: a replay
/// is one read-only round trip. The answer is the record as of the snapshot, the statement's
/// linearisation point.
///
/// Otherwise the upsert runs. Under READ COMMITTED its `ON CONFLICT` may fire on a row the
/// snapshot does not show (a concurrent claimer committed it after the snapshot); then neither
/// part returns a row and the caller runs the statement again with a new snapshot.
pub const CLAIM: &str = "\
WITH held AS (
    SELECT r.fingerprint, r.state, r.lease_until, r.response, r.completed_at
    FROM {records} AS r
    WHERE r.key = $1
      AND r.expires_at > $6
      AND NOT (r.state = 'in_flight' AND r.lease_until <= $6 AND r.fingerprint = $2)
), claimed AS (
    INSERT INTO {records} AS r
        (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at,
         scope, scope_value)
    SELECT $1, $2, $3, 'in_flight', 1, $4, $5, $7, $6, $8, $9
    WHERE NOT EXISTS (SELECT FROM held)
    ON CONFLICT (key) DO UPDATE SET
        fingerprint = excluded.fingerprint,
        token = excluded.token,
        state = 'in_flight',
        owners = CASE WHEN r.expires_at <= $6 THEN 1 ELSE r.owners + 1 END,
        created_at = CASE WHEN r.expires_at <= $6 THEN $6 ELSE r.created_at END,
        lease_until = excluded.lease_until,
        expires_at = excluded.expires_at,
        operation = CASE WHEN r.expires_at <= $6 THEN excluded.operation ELSE r.operation END,
        scope = CASE WHEN r.expires_at <= $6 THEN excluded.scope ELSE r.scope END,
        scope_value = CASE WHEN r.expires_at <= $6 THEN excluded.scope_value
                           ELSE r.scope_value END,
        response = NULL,
        status = NULL,
        completed_at = NULL
    WHERE r.expires_at <= $6
       OR (r.state = 'in_flight' AND r.lease_until <= $6 AND r.fingerprint = excluded.fingerprint)
    RETURNING r.owners
)
SELECT owners, NULL::bytea AS fingerprint, NULL::text AS state, NULL::bigint AS lease_until,
       NULL::bytea AS response, NULL::bigint AS completed_at
FROM claimed
UNION ALL
SELECT NULL, fingerprint, state, lease_until, response, completed_at
FROM held";

/// Completes the owner's record: `$1` key, `$2` token, `$3` response, `$4` expires_at, `$5`
/// status, `$6` completed_at; no row when the fence is lost.
pub const COMPLETE: &str = "\
UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
    completed_at = $6
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

/// One-commit mode's completion where statements are prepared: the record inserted whole,
/// completed, as the function `{complete_in_tx}` (migration 4) inserts it, with the function's
/// parameters in the same order; `unique_violation` when a record of the key committed
/// meanwhile (the fence lost). Drivers that send the completion as text in the simple protocol
/// call the function, whose plan PL/pgSQL keeps for the session; a prepared statement keeps its
/// own, and costs the database less than the function call.
///
/// `$1` key, `$2` token, `$3` expires_at, `$4` response, `$5` status, `$6` completed_at, `$7`
/// fingerprint, `$8` lease_until, `$9` operation, `$10` created_at, `$11` scope, `$12` scope
/// value.
pub const INSERT_COMPLETED: &str = "\
INSERT INTO {records} (key, fingerprint, token, state, owners, lease_until, expires_at,
    operation, created_at, scope, scope_value, response, status, completed_at)
VALUES ($1, $7, $2, 'completed', 1, $8, $3, $9, $10, $11, $12, $4, $5, $6)";

/// Deletes the owner's in-flight record: `$1` key, `$2` token.
pub const RELEASE: &str = "\
DELETE FROM {records} WHERE key = $1 AND token = $2 AND state = 'in_flight'";

/// Extends the owner's lease: `$1` key, `$2` token, `$3` lease_until.
pub const RENEW: &str = "\
UPDATE {records} SET lease_until = $3
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

/// Deletes expired records, `$1` now, at most `$2`. Oldest first; rows a claimer is replacing right now are skipped, not waited for.
pub const PURGE: &str = "\
DELETE FROM {records}
WHERE expires_at <= $1 AND key IN (
    SELECT key FROM {records} WHERE expires_at <= $1
    ORDER BY expires_at LIMIT $2
    FOR UPDATE SKIP LOCKED
)";
