//! The PostgreSQL records table's migrations, and the statements every driver's migrator runs
//! around them: under the schema's advisory lock ([`Names::migration_lock`]), look
//! ([`LOOK`]), create what is missing ([`CREATE_MIGRATIONS`]), read what was applied
//! ([`APPLIED`]), then apply and record ([`RECORD`]) what [`plan`](crate::migrate::plan) says, in
//! one transaction.

use crate::migrate::Migration;

#[cfg(doc)]
use super::Names;

/// Whether the schema and the migrations table exist: `$1` the schema's name, `$2` the
/// migrations table's quoted name ([`Names::migrations`]); two booleans.
///
/// `CREATE .. IF NOT EXISTS` checks the CREATE privilege even when the object exists: the
/// migrator looks first, so a restart needs no privilege beyond using what a DBA set up.
pub const LOOK: &str = "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1::text), \
                to_regclass($2::text) IS NOT NULL";

/// Creates the migrations table (a template over [`Names`]).
pub const CREATE_MIGRATIONS: &str = "CREATE TABLE {migrations} (
                records_table text        NOT NULL,
                version       bigint      NOT NULL,
                description   text        NOT NULL,
                checksum      bytea       NOT NULL,
                applied_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (records_table, version)
            )";

/// The applied migrations of one records table: `$1` the table's name; rows of `(version
/// bigint, checksum bytea)`.
pub const APPLIED: &str = "SELECT version, checksum FROM {migrations} WHERE records_table = $1";

/// Records an applied migration: `$1` the table's name, `$2` version, `$3` description, `$4`
/// checksum.
pub const RECORD: &str = "INSERT INTO {migrations} (records_table, version, description, checksum) \
             VALUES ($1, $2, $3, $4)";

/// The schema, in order, as templates over [`Names`]. Never edit a shipped
/// migration: add the next one (every driver applies the same list, and compares checksums).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create the records table",
        // `owners` counts the requests that held the record since it was (re)created: more than
        // one means a lapsed lease was taken over.
        sql: "\
CREATE TABLE {records} (
    key         bytea   PRIMARY KEY CHECK (octet_length(key) = 32),
    fingerprint bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
    token       bigint  NOT NULL,
    state       text    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owners      integer NOT NULL,
    lease_until bigint  NOT NULL,
    expires_at  bigint  NOT NULL,
    response    bytea,
    CHECK ((state = 'completed') = (response IS NOT NULL))
);
CREATE INDEX {expires_at_index} ON {records} (expires_at);",
    },
    Migration {
        version: 2,
        description: "columns for operators: operation, status, created and completed times",
        // Adding columns with constant defaults rewrites nothing on PostgreSQL 11+. Records
        // written before keep replaying: their new columns take the defaults.
        sql: "\
ALTER TABLE {records}
    ADD COLUMN operation    text     NOT NULL DEFAULT '',
    ADD COLUMN status       smallint,
    ADD COLUMN created_at   bigint   NOT NULL DEFAULT 0,
    ADD COLUMN completed_at bigint;
CREATE INDEX {in_flight_index} ON {records} (operation, lease_until) WHERE state = 'in_flight';",
    },
    Migration {
        version: 3,
        description: "columns for operators: the scope and its value",
        // Constant defaults again: nothing is rewritten, and records written before show an
        // empty scope. No index: operators' listings read the table, and the claims' writes
        // stay as cheap as they were.
        sql: "\
ALTER TABLE {records}
    ADD COLUMN scope       text NOT NULL DEFAULT '',
    ADD COLUMN scope_value text NOT NULL DEFAULT '';",
    },
    Migration {
        version: 4,
        description: "one-commit mode: claim under an advisory lock, write the record once",
        // PL/pgSQL keeps each statement's plan for the life of the session, so one-commit
        // mode's claim and completion, sent as text in the messages of `BEGIN` and `COMMIT`,
        // are parsed as a function call and never planned again. The claim writes nothing: it
        // waits for the key's transaction-scoped advisory lock (under the lock timeout it is
        // given), then looks for a committed record; the completion inserts the record whole,
        // once. Each statement of a volatile function sees what committed before it began, so
        // the look after the wait sees a record the previous holder committed.
        sql: "\
CREATE FUNCTION {claim_in_tx}(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM {records} WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
CREATE FUNCTION {complete_in_tx}(p_key bytea, p_token bigint, p_expires_at bigint,
    p_response bytea, p_status smallint, p_completed_at bigint, p_fingerprint bytea,
    p_lease_until bigint, p_operation text, p_created_at bigint, p_scope text,
    p_scope_value text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {records} (key, fingerprint, token, state, owners, lease_until, expires_at,
        operation, created_at, scope, scope_value, response, status, completed_at)
    VALUES (p_key, p_fingerprint, p_token, 'completed', 1, p_lease_until, p_expires_at,
        p_operation, p_created_at, p_scope, p_scope_value, p_response, p_status,
        p_completed_at);
END
$$;",
    },
    Migration {
        version: 5,
        description: "drop the records table's CHECK constraints",
        // PostgreSQL plans a table's CHECK constraints anew in every statement that writes it:
        // migration 1's four cost a one-commit request's database more instructions than its
        // advisory lock, PL/pgSQL calls and expiry index together. Only the stores' own
        // statements write the table, and every read of a row checks what the constraints
        // checked (a key or fingerprint of 32 bytes, a known state, a response exactly when
        // completed), reporting a row that breaks them as corrupt. The constraints are found
        // by their columns, since PostgreSQL names them after the table and truncates long
        // names: a check an operator added on any other column stays.
        sql: "\
DO $$
DECLARE
    drops text;
BEGIN
    SELECT string_agg(format('DROP CONSTRAINT %I', c.conname), ', ')
    INTO drops
    FROM pg_constraint AS c
    WHERE c.conrelid = '{records}'::regclass
      AND c.contype = 'c'
      AND NOT EXISTS (
          SELECT FROM unnest(c.conkey) AS k (attnum)
          JOIN pg_attribute AS a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
          WHERE a.attname NOT IN ('key', 'fingerprint', 'state', 'response'));
    IF drops IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s %s', '{records}'::regclass, drops);
    END IF;
END
$$;",
    },
];
