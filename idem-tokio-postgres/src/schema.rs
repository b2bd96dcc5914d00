//! Where the records live: the validated names of the schema and table, and the migrations that
//! create and extend them. The same schema, migrations table, checksums and advisory locks as
//! idem-sqlx's PostgreSQL store, so either driver starts on a database the other migrated, and
//! instances of both, starting at once, take turns.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use idem_core::error::StoreError;

/// The configured names, validated, and their quoted forms for SQL text.
pub(crate) struct Names {
    pub(crate) schema: String,
    pub(crate) table: String,
    quoted_schema: String,
    /// `"schema"."table"`
    pub(crate) records: String,
    /// `"table_expires_at"`, created in the records' schema.
    expires_at_index: String,
    /// `"table_in_flight"`, created in the records' schema.
    in_flight_index: String,
    /// `"schema"."table_tx_claim"`: one-commit mode's claim (migration 4).
    pub(crate) claim_in_tx: String,
    /// `"schema"."table_tx_done"`: one-commit mode's completion (migration 4).
    pub(crate) complete_in_tx: String,
    /// Mixed into each key's advisory lock in one-commit mode, so stores of different tables
    /// never wait on each other's keys (the same salt as idem-sqlx's, so the two drivers'
    /// claims of one key exclude each other).
    pub(crate) claim_lock_salt: i64,
    /// `"schema"."idem_migrations"`
    migrations: String,
}

/// The longest suffix a name made from the table's has (the index, the functions).
const EXPIRES_AT_SUFFIX: &str = "_expires_at";
/// PostgreSQL silently truncates longer identifiers.
const MAX_IDENTIFIER: usize = 63;

impl Names {
    pub(crate) fn new(schema: String, table: String) -> Result<Self, StoreError> {
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
    pub(crate) fn render(&self, template: &str) -> String {
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
            format!(
                "invalid PostgreSQL {what} name {name:?}: use 1 to {max} ASCII letters, digits \
                 or `_`, not starting with a digit"
            )
            .into(),
        ))
    }
}

/// One embedded schema change.
struct Migration {
    /// Applied in increasing order, starting at 1.
    version: i64,
    /// Recorded beside the version for people reading the migrations table.
    description: &'static str,
    /// A template whose `{placeholders}` name the configured schema and table; the checksum
    /// covers the template, so it does not depend on them.
    sql: &'static str,
}

impl Migration {
    /// SHA-256 of the migration's text, recorded when it is applied.
    fn checksum(&self) -> Vec<u8> {
        Sha256::digest(self.sql.as_bytes()).to_vec()
    }
}

/// The schema, in order: idem-sqlx's PostgreSQL migrations, byte for byte (their checksums are
/// compared when either driver starts; `tests/cross_driver.rs` runs both on one schema). Never
/// edit one: a change is the next migration, made in both drivers together.
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

/// The migrations of [`MIGRATIONS`] not yet in `applied` (`(version, checksum)` rows), in
/// order. Fails when an applied migration's checksum differs from the embedded one; versions
/// this build does not know (a newer release's, during a rolling deploy) are left alone.
fn plan(applied: &[(i64, Vec<u8>)]) -> Result<Vec<&'static Migration>, StoreError> {
    let mut pending = Vec::new();
    for migration in MIGRATIONS {
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, checksum)) if *checksum != migration.checksum() => {
                return Err(StoreError::Migration {
                    version: migration.version,
                    source: format!(
                        "migration `{}` was changed after it was applied: its recorded \
                         checksum differs from this build's",
                        migration.description
                    )
                    .into(),
                });
            }
            Some(_) => {}
            None => pending.push(migration),
        }
    }
    let newest = MIGRATIONS.iter().map(|m| m.version).max().unwrap_or(0);
    if let Some(unknown) = applied.iter().map(|(v, _)| *v).find(|v| *v > newest) {
        tracing::warn!(
            version = unknown,
            "the idempotency store's schema was migrated by a newer release"
        );
    }
    Ok(pending)
}

/// Applies the missing [`MIGRATIONS`] in one transaction, under the schema's advisory lock.
pub(crate) async fn migrate(client: &mut Client, names: &Names) -> Result<(), StoreError> {
    let unavailable = StoreError::unavailable;
    let tx = client.transaction().await.map_err(unavailable)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&lock_key(&names.schema)],
    )
    .await
    .map_err(unavailable)?;
    // `CREATE .. IF NOT EXISTS` checks the CREATE privilege even when the object exists: look
    // first, so a restart needs no privilege beyond using what a DBA may have set up.
    let row = tx
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1::text), \
                    to_regclass($2::text) IS NOT NULL",
            &[&names.schema, &names.migrations],
        )
        .await
        .map_err(unavailable)?;
    let (has_schema, has_migrations): (bool, bool) = (row.get(0), row.get(1));
    if !has_schema {
        let create = format!("CREATE SCHEMA {}", names.quoted_schema);
        tx.batch_execute(&create).await.map_err(unavailable)?;
    }
    if !has_migrations {
        let create = names.render(
            "CREATE TABLE {migrations} (
                records_table text        NOT NULL,
                version       bigint      NOT NULL,
                description   text        NOT NULL,
                checksum      bytea       NOT NULL,
                applied_at    timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (records_table, version)
            )",
        );
        tx.batch_execute(&create).await.map_err(unavailable)?;
    }
    let read = names.render("SELECT version, checksum FROM {migrations} WHERE records_table = $1");
    let applied: Vec<(i64, Vec<u8>)> = tx
        .query(&read, &[&names.table])
        .await
        .map_err(unavailable)?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let record = names.render(
        "INSERT INTO {migrations} (records_table, version, description, checksum) \
         VALUES ($1, $2, $3, $4)",
    );
    for migration in plan(&applied)? {
        let version = migration.version;
        let failed = |error| StoreError::Migration {
            version,
            source: Box::new(error),
        };
        tx.batch_execute(&names.render(migration.sql))
            .await
            .map_err(failed)?;
        let checksum = migration.checksum();
        tx.execute(
            &record,
            &[&names.table, &version, &migration.description, &checksum],
        )
        .await
        .map_err(failed)?;
        tracing::info!(
            version,
            migration.description,
            schema = names.schema,
            table = names.table,
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated_and_quoted() {
        let names = Names::new("idem".into(), "idempotency_records".into()).unwrap();
        assert_eq!(names.records, r#""idem"."idempotency_records""#);
        assert_eq!(names.migrations, r#""idem"."idem_migrations""#);
        for (schema, table) in [
            ("", "t"),
            ("1s", "t"),
            ("s", "t-1"),
            ("s\"; DROP TABLE x; --", "t"),
            (&"s".repeat(64), "t"),
            ("s", &"t".repeat(53)),
        ] {
            assert!(
                matches!(
                    Names::new(schema.into(), table.into()),
                    Err(StoreError::Config(_))
                ),
                "{schema:?}.{table:?} accepted"
            );
        }
    }

    #[test]
    fn an_edited_migration_is_refused_and_a_newer_one_tolerated() {
        let all: Vec<_> = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.checksum()))
            .collect();
        assert!(plan(&all).unwrap().is_empty());
        assert_eq!(plan(&[]).unwrap().len(), MIGRATIONS.len());
        let mut newer = all.clone();
        newer.push((99, vec![0; 32]));
        assert!(plan(&newer).unwrap().is_empty());
        let edited = [(1, vec![0; 32])];
        assert!(matches!(
            plan(&edited),
            Err(StoreError::Migration { version: 1, .. })
        ));
    }
}
