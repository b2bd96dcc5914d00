//! The store's statements, rendered once for its names, each with the types of its
//! parameters: prepared once per connection (deadpool-postgres's statement cache), bound in
//! binary. The text of the plain store's and the operators' statements is idem-sqlx's, so both
//! drivers read and write rows alike.

use tokio_postgres::types::Type;

use idem_sql::postgres::Names;
use idem_sql::postgres::statements::{CLAIM, COMPLETE, INSERT_COMPLETED, PURGE, RELEASE, RENEW};
use idem_sql::records::RecordStatements;

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
    /// One-commit mode's claim (idem-sqlx's function, migration 4) and completion.
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
    /// diesel-async's completion with two commits: fails with `not_null_violation` when the
    /// fence is lost.
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
        let operators = RecordStatements::new(names.records(), "FOR UPDATE SKIP LOCKED");
        let operator = |text: &str, types: &'static [Type]| Sql {
            text: text.to_owned(),
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
                INSERT_COMPLETED,
                &[
                    BYTEA, INT8, INT8, BYTEA, INT2, INT8, BYTEA, INT8, TEXT, INT8, TEXT, TEXT,
                ],
            ),
            list: operator(&operators.list, &FILTER_AND_LIMIT),
            read: operator(&operators.read, &[BYTEA]),
            forget: operator(&operators.forget, &[BYTEA, INT8, BOOL]),
            purge_records: operator(&operators.purge, &FILTER_AND_LIMIT),
            stats: operator(&operators.stats, &FILTER_TYPES),
            lock_salt: names.claim_lock_salt(),
            #[cfg(feature = "diesel-async")]
            diesel_try_claim: names.render(DIESEL_TRY_CLAIM),
            #[cfg(feature = "diesel-async")]
            diesel_complete_fenced: names.render(DIESEL_COMPLETE_FENCED),
            schema: names.schema().to_owned(),
            table: names.table().to_owned(),
        }
    }

    /// The advisory lock one-commit mode claims `key` under: 64 bits of the key (a SHA-256
    /// digest) mixed with the table's salt, as idem-sqlx computes it.
    pub(crate) fn lock_of(&self, key: &idem_core::key::RecordKey) -> i64 {
        idem_sql::postgres::claim_lock(self.lock_salt, key)
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

/// [`COMPLETE`] that fails with `not_null_violation` (which diesel-async names) when it matched
/// no row: the row it then inserts has no key.
#[cfg(feature = "diesel-async")]
const DIESEL_COMPLETE_FENCED: &str = "\
WITH done AS (
    UPDATE {records} SET state = 'completed', response = $3, expires_at = $4, status = $5,
        completed_at = $6
    WHERE key = $1 AND token = $2 AND state = 'in_flight'
    RETURNING 1
)
INSERT INTO {records} (key, fingerprint, token, state, owners, lease_until, expires_at)
SELECT NULL, '\\x'::bytea, 0, 'in_flight', 0, 0, 0 WHERE NOT EXISTS (SELECT FROM done)";

/// One-commit mode's claim: the key's advisory lock within `$3` (ms), a look for a committed
/// record (`unique_violation` when there is one), then the transaction's own timeouts `$4`.
const CLAIM_IN_TX: &str = "SELECT {claim_in_tx}($1, $2, $3, $4)";

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
