//! The store's statements, rendered once for its names, each with the types of its
//! parameters: prepared once per connection (deadpool-postgres's statement cache), bound in
//! binary. The text of the plain store's and the operators' statements is idem-sqlx's, so both
//! drivers read and write rows alike.

use tokio_postgres::types::Type;

use crate::schema::Names;

mod operators;

/// A statement's text and its parameters' types (given, not inferred, so a parameter that
/// appears only in an `INSERT .. SELECT` list still binds as its column's type).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) types: &'static [Type],
}

/// Every statement of one store.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) schema: String,
    pub(crate) table: String,
    pub(crate) claim: Sql,
    pub(crate) complete: Sql,
    /// The completion inside a handler's transaction (two commits): fails the statement when
    /// the fence is lost, so the `COMMIT` sent with it rolls back.
    pub(crate) complete_fenced: Sql,
    pub(crate) release: Sql,
    pub(crate) renew: Sql,
    pub(crate) purge: Sql,
    /// One-commit mode's claim and completion: idem-sqlx's functions (migration 4).
    pub(crate) claim_in_tx: Sql,
    pub(crate) complete_in_tx: Sql,
    pub(crate) list: Sql,
    pub(crate) read: Sql,
    pub(crate) forget: Sql,
    pub(crate) purge_records: Sql,
    pub(crate) stats: Sql,
    /// Mixed into each key's advisory lock (one commit).
    pub(crate) lock_salt: i64,
    /// diesel-async's one-commit claim: `$1` key, `$2` lock; as many rows as it found (0 the
    /// key is this claim's, 1 a record holds it, 2 another claim holds its lock).
    #[cfg(feature = "diesel-async")]
    pub(crate) diesel_try_claim: String,
    /// diesel-async's completion with two commits: fails with `check_violation` when the fence
    /// is lost.
    #[cfg(feature = "diesel-async")]
    pub(crate) diesel_complete_fenced: String,
}

const BYTEA: Type = Type::BYTEA;
const INT8: Type = Type::INT8;
const INT2: Type = Type::INT2;
const TEXT: Type = Type::TEXT;
const BOOL: Type = Type::BOOL;

/// `$1` now, `$2`..`$4` operation, scope, scope value, `$5` state, `$6` created before,
/// `$7`..`$8` the completion window: every operator statement's filter.
const FILTER_TYPES: [Type; 8] = [INT8, TEXT, TEXT, TEXT, TEXT, INT8, INT8, INT8];
const FILTER_AND_LIMIT: [Type; 9] = [INT8, TEXT, TEXT, TEXT, TEXT, INT8, INT8, INT8, INT8];

impl Statements {
    pub(crate) fn new(names: &Names) -> Self {
        let sql = |template: &str, types: &'static [Type]| Sql {
            text: names.render(template),
            types,
        };
        let operators = |template: &str, types: &'static [Type]| Sql {
            text: operators::render(template, &names.records),
            types,
        };
        Self {
            claim: sql(
                CLAIM,
                &[BYTEA, BYTEA, INT8, INT8, INT8, INT8, TEXT, TEXT, TEXT],
            ),
            complete: sql(COMPLETE, &[BYTEA, INT8, BYTEA, INT8, INT2, INT8]),
            complete_fenced: sql(COMPLETE_FENCED, &[BYTEA, INT8, BYTEA, INT8, INT2, INT8]),
            release: sql(RELEASE, &[BYTEA, INT8]),
            renew: sql(RENEW, &[BYTEA, INT8, INT8]),
            purge: sql(PURGE, &[INT8, INT8]),
            claim_in_tx: sql(CLAIM_IN_TX, &[BYTEA, INT8, TEXT, TEXT]),
            complete_in_tx: sql(
                COMPLETE_IN_TX,
                &[
                    BYTEA, INT8, INT8, BYTEA, INT2, INT8, BYTEA, INT8, TEXT, INT8, TEXT, TEXT,
                ],
            ),
            list: operators(operators::LIST, &FILTER_AND_LIMIT),
            read: operators(operators::READ, &[BYTEA]),
            forget: operators(operators::FORGET, &[BYTEA, INT8, BOOL]),
            purge_records: operators(operators::PURGE, &FILTER_AND_LIMIT),
            stats: operators(operators::STATS, &FILTER_TYPES),
            lock_salt: names.claim_lock_salt,
            #[cfg(feature = "diesel-async")]
            diesel_try_claim: names.render(DIESEL_TRY_CLAIM),
            #[cfg(feature = "diesel-async")]
            diesel_complete_fenced: names.render(DIESEL_COMPLETE_FENCED),
            schema: names.schema.clone(),
            table: names.table.clone(),
        }
    }

    /// The advisory lock one-commit mode claims `key` under: 64 bits of the key (a SHA-256
    /// digest) mixed with the table's salt, as idem-sqlx computes it.
    pub(crate) fn lock_of(&self, key: &idem_core::key::RecordKey) -> i64 {
        let mut first = [0; 8];
        first.copy_from_slice(&key.as_bytes()[..8]);
        i64::from_be_bytes(first) ^ self.lock_salt
    }
}

/// diesel-async's claim, which reports in its row count what it found, since diesel-async does
/// not pass on the SQLSTATE of a lock wait that ran out: the key's lock, tried without waiting,
/// then a look for a committed record.
#[cfg(feature = "diesel-async")]
const DIESEL_TRY_CLAIM: &str = "\
SELECT generate_series(1, CASE WHEN NOT pg_try_advisory_xact_lock($2) THEN 2
                              WHEN EXISTS (SELECT FROM {records} WHERE key = $1) THEN 1
                              ELSE 0 END)";

/// [`COMPLETE`] that fails with `check_violation` (which diesel-async names) when it matched no
/// row: the row it then inserts has an empty key, which the table's check refuses.
#[cfg(feature = "diesel-async")]
const DIESEL_COMPLETE_FENCED: &str = "\
WITH done AS (
    UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
        completed_at = $6
    WHERE key = $1 AND token = $2 AND state = 'in_flight'
    RETURNING 1
)
INSERT INTO {records} (key, fingerprint, token, state, owners, lease_until, expires_at)
SELECT '\\x'::bytea, '\\x'::bytea, 0, 'in_flight', 0, 0, 0 WHERE NOT EXISTS (SELECT FROM done)";

/// One-commit mode's claim: the key's advisory lock within `$3` (ms), a look for a committed
/// record (`unique_violation` when there is one), then the transaction's own timeouts `$4`.
const CLAIM_IN_TX: &str = "SELECT {claim_in_tx}($1, $2, $3, $4)";

/// One-commit mode's completion: the record inserted whole, completed; `unique_violation` when
/// a record of the key committed meanwhile (the fence lost).
const COMPLETE_IN_TX: &str =
    "SELECT {complete_in_tx}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// [`COMPLETE`] that fails (`division_by_zero`) when it matched no row: sent with the `COMMIT`,
/// a lost fence must abort the transaction, since a pipelined `COMMIT` commits whatever ran
/// before it, an `UPDATE` of no row included.
const COMPLETE_FENCED: &str = "\
WITH done AS (
    UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
        completed_at = $6
    WHERE key = $1 AND token = $2 AND state = 'in_flight'
    RETURNING 1
)
SELECT 1 / (SELECT count(*)::integer FROM done)";

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
const CLAIM: &str = "\
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

const COMPLETE: &str = "\
UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
    completed_at = $6
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

const RELEASE: &str = "\
DELETE FROM {records} WHERE key = $1 AND token = $2 AND state = 'in_flight'";

const RENEW: &str = "\
UPDATE {records} SET lease_until = $3
WHERE key = $1 AND token = $2 AND state = 'in_flight'";

/// Oldest first; rows a claimer is replacing right now are skipped, not waited for.
const PURGE: &str = "\
DELETE FROM {records}
WHERE expires_at <= $1 AND key IN (
    SELECT key FROM {records} WHERE expires_at <= $1
    ORDER BY expires_at LIMIT $2
    FOR UPDATE SKIP LOCKED
)";
