//! Where the PostgreSQL store's records live: the validated names of its schema and table, and
//! the migrations that create and extend them.

use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, PgPool};

use crate::migrate::{self, Migration, failed};
use idem_core::error::StoreError;

/// The configured names, validated, and their quoted forms for SQL text.
pub(super) struct Names {
    pub(super) schema: String,
    pub(super) table: String,
    quoted_schema: String,
    /// `"schema"."table"`
    records: String,
    /// `"table_expires_at"`, created in the records' schema.
    expires_at_index: String,
    /// `"table_in_flight"`, created in the records' schema.
    in_flight_index: String,
    /// `"schema"."table_tx_claim"`: one-commit mode's claim (migration 4).
    pub(super) claim_in_tx: String,
    /// `"schema"."table_tx_done"`: one-commit mode's completion (migration 4).
    pub(super) complete_in_tx: String,
    /// Mixed into each key's advisory lock in one-commit mode, so stores of different tables
    /// never wait on each other's keys.
    pub(super) claim_lock_salt: i64,
    /// `"schema"."idem_migrations"`
    migrations: String,
}

/// The longest suffix a name made from the table's has (the index, the functions).
const EXPIRES_AT_SUFFIX: &str = "_expires_at";
/// PostgreSQL silently truncates longer identifiers.
const MAX_IDENTIFIER: usize = 63;

impl Names {
    pub(super) fn new(schema: String, table: String) -> Result<Self, StoreError> {
        let quoted_schema = quote("schema", &schema, MAX_IDENTIFIER)?;
        let quoted_table = quote("table", &table, MAX_IDENTIFIER - EXPIRES_AT_SUFFIX.len())?;
        Ok(Self {
            records: format!("{quoted_schema}.{quoted_table}"),
            expires_at_index: format!("\"{table}{EXPIRES_AT_SUFFIX}\""),
            in_flight_index: format!("\"{table}_in_flight\""),
            claim_in_tx: format!("{quoted_schema}.\"{table}_tx_claim\""),
            complete_in_tx: format!("{quoted_schema}.\"{table}_tx_done\""),
            claim_lock_salt: lock_id(&format!("idem.claim\0{schema}\0{table}")),
            migrations: format!("{quoted_schema}.\"idem_migrations\""),
            quoted_schema,
            schema,
            table,
        })
    }

    /// Fills a statement template's `{records}`, `{expires_at_index}`, `{in_flight_index}`,
    /// `{claim_in_tx}`, `{complete_in_tx}` and `{migrations}`.
    pub(super) fn render(&self, template: &str) -> String {
        template
            .replace("{records}", &self.records)
            .replace("{claim_in_tx}", &self.claim_in_tx)
            .replace("{complete_in_tx}", &self.complete_in_tx)
            .replace("{expires_at_index}", &self.expires_at_index)
            .replace("{in_flight_index}", &self.in_flight_index)
            .replace("{migrations}", &self.migrations)
    }
}

/// `name` double-quoted, if it is 1..=`max` ASCII letters, digits or `_` and does not start with
/// a digit. Nothing else gets near SQL text, so quoting cannot be escaped.
fn quote(what: &'static str, name: &str, max: usize) -> Result<String, StoreError> {
    let valid = (1..=max).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if valid {
        Ok(format!("\"{name}\""))
    } else {
        Err(StoreError::Config(
            InvalidName {
                what,
                name: name.to_owned(),
                max,
            }
            .to_string()
            .into(),
        ))
    }
}

/// A schema or table name the builder refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid PostgreSQL {what} name {name:?}: use 1 to {max} ASCII letters, digits or `_`, \
     not starting with a digit"
)]
struct InvalidName {
    what: &'static str,
    name: String,
    max: usize,
}

/// The schema, in order, as templates over [`Names`]. Never edit a shipped migration: add the
/// next one.
const MIGRATIONS: &[Migration] = &[
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
];

/// The advisory lock serialising migrations of one schema: 64 bits of SHA-256 of its name.
fn lock_key(schema: &str) -> i64 {
    lock_id(&format!("idem.migrate\0{schema}"))
}

/// An advisory lock's 64-bit id for `label`: the first 8 bytes of its SHA-256.
fn lock_id(label: &str) -> i64 {
    let digest = Sha256::digest(label);
    let mut id = [0; 8];
    id.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(id)
}

/// Applies the missing [`MIGRATIONS`] in one transaction, under an advisory lock so instances
/// starting at once take turns.
pub(super) async fn migrate(pool: &PgPool, names: &Names) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(StoreError::unavailable)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(lock_key(&names.schema))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    // `CREATE .. IF NOT EXISTS` checks the CREATE privilege even when the object exists: look
    // first, so a restart needs no privilege beyond using what a DBA may have set up.
    let (has_schema, has_migrations): (bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1), \
                to_regclass($2) IS NOT NULL",
    )
    .bind(&names.schema)
    .bind(&names.migrations)
    .fetch_one(&mut *tx)
    .await
    .map_err(StoreError::unavailable)?;
    if !has_schema {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA {}",
            names.quoted_schema
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    }
    if !has_migrations {
        sqlx::raw_sql(AssertSqlSafe(names.render(
            "CREATE TABLE {migrations} (
                records_table text        NOT NULL,
                version       bigint      NOT NULL,
                description   text        NOT NULL,
                checksum      bytea       NOT NULL,
                applied_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (records_table, version)
            )",
        )))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::unavailable)?;
    }
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(AssertSqlSafe(
        names.render("SELECT version, checksum FROM {migrations} WHERE records_table = $1"),
    ))
    .bind(&names.table)
    .fetch_all(&mut *tx)
    .await
    .map_err(StoreError::unavailable)?;
    for migration in migrate::plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        sqlx::raw_sql(AssertSqlSafe(names.render(migration.sql)))
            .execute(&mut *tx)
            .await
            .map_err(failed(version))?;
        sqlx::query(AssertSqlSafe(names.render(
            "INSERT INTO {migrations} (records_table, version, description, checksum) \
             VALUES ($1, $2, $3, $4)",
        )))
        .bind(&names.table)
        .bind(version)
        .bind(migration.description)
        .bind(migration.checksum())
        .execute(&mut *tx)
        .await
        .map_err(failed(version))?;
        tracing::info!(
            version,
            migration.description,
            schema = names.schema,
            table = names.table,
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(StoreError::unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_and_quoted() {
        let names = Names::new("idem".into(), "idempotency_records".into()).unwrap();
        assert_eq!(names.records, r#""idem"."idempotency_records""#);
        assert_eq!(names.migrations, r#""idem"."idem_migrations""#);
        assert_eq!(
            names.expires_at_index,
            r#""idempotency_records_expires_at""#
        );
        assert!(Names::new("Billing_2".into(), "_t".into()).is_ok());
        for (schema, table) in [
            ("", "t"),
            ("s", ""),
            ("1s", "t"),
            ("s", "t-1"),
            ("s\"; DROP TABLE x; --", "t"),
            ("s", "t t"),
            ("sch\u{e9}ma", "t"),
            (&"s".repeat(64), "t"),
            ("s", &"t".repeat(53)),
        ] {
            match Names::new(schema.into(), table.into()) {
                Err(StoreError::Config(_)) => {}
                other => panic!("{schema:?}.{table:?} accepted: {:?}", other.map(|_| ())),
            }
        }
        let longest = Names::new("s".repeat(63), "t".repeat(52)).unwrap();
        for derived in [
            &longest.expires_at_index,
            &longest.claim_in_tx,
            &longest.complete_in_tx,
        ] {
            let name = derived.rsplit('.').next().unwrap().trim_matches('"');
            assert!(name.len() <= MAX_IDENTIFIER, "{derived} would be truncated");
        }
    }

    #[test]
    fn each_schema_has_its_own_migration_lock() {
        assert_eq!(lock_key("idem"), lock_key("idem"));
        assert_ne!(lock_key("idem"), lock_key("idem2"));
    }
}
