//! The PostgreSQL records table: its validated [`Names`], its [`migrations`], its hot path's
//! [`statements`] and the advisory lock ids every driver computes alike, so two drivers' claims
//! of one key exclude each other and two drivers' migrators take turns.

use sha2::{Digest, Sha256};

use idem_core::error::StoreError;
use idem_core::key::RecordKey;

pub mod migrations;
pub mod statements;

/// The configured schema and table, validated, and the quoted names SQL text uses.
///
/// Built only by [`Names::new`], which lets nothing but ASCII letters, digits and `_` near SQL
/// text: quoting cannot be escaped.
#[derive(Debug, Clone)]
pub struct Names {
    schema: String,
    table: String,
    quoted_schema: String,
    /// `"schema"."table"`
    records: String,
    /// `"table_expires_at"`, created in the records' schema.
    expires_at_index: String,
    /// `"table_in_flight"`, created in the records' schema.
    in_flight_index: String,
    /// `"schema"."table_tx_claim"`: one-commit mode's claim (migration 4).
    claim_in_tx: String,
    /// `"schema"."table_tx_done"`: one-commit mode's completion (migration 4).
    complete_in_tx: String,
    /// Mixed into each key's advisory lock in one-commit mode, so stores of different tables
    /// never wait on each other's keys.
    claim_lock_salt: i64,
    /// `"schema"."idem_migrations"`
    migrations: String,
}

/// The longest suffix a name made from the table's has (the index, the functions).
const EXPIRES_AT_SUFFIX: &str = "_expires_at";
/// PostgreSQL silently truncates longer identifiers.
const MAX_IDENTIFIER: usize = 63;

impl Names {
    /// Validates `schema` and `table`: 1 to 63 ASCII letters, digits or `_`, not starting with
    /// a digit (the table 11 fewer, room for the suffixes of the names made from it).
    ///
    /// # Errors
    ///
    /// [`StoreError::Config`] naming what is wrong with either.
    pub fn new(schema: String, table: String) -> Result<Self, StoreError> {
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

    /// The schema's name, as configured.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The records table's name, as configured.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The schema's name, double-quoted for SQL text.
    pub fn quoted_schema(&self) -> &str {
        &self.quoted_schema
    }

    /// The records table, `"schema"."table"`.
    pub fn records(&self) -> &str {
        &self.records
    }

    /// The migrations table, `"schema"."idem_migrations"`.
    pub fn migrations(&self) -> &str {
        &self.migrations
    }

    /// One-commit mode's claim function, `"schema"."table_tx_claim"` (migration 4).
    pub fn claim_in_tx(&self) -> &str {
        &self.claim_in_tx
    }

    /// One-commit mode's completion function, `"schema"."table_tx_done"` (migration 4).
    pub fn complete_in_tx(&self) -> &str {
        &self.complete_in_tx
    }

    /// Fills a statement template's `{records}`, `{expires_at_index}`, `{in_flight_index}`,
    /// `{claim_in_tx}`, `{complete_in_tx}` and `{migrations}`.
    pub fn render(&self, template: &str) -> String {
        template
            .replace("{records}", &self.records)
            .replace("{claim_in_tx}", &self.claim_in_tx)
            .replace("{complete_in_tx}", &self.complete_in_tx)
            .replace("{expires_at_index}", &self.expires_at_index)
            .replace("{in_flight_index}", &self.in_flight_index)
            .replace("{migrations}", &self.migrations)
    }

    /// The advisory lock serialising migrations of the schema: 64 bits of SHA-256 of its name.
    pub fn migration_lock(&self) -> i64 {
        lock_id(&format!("idem.migrate\0{}", self.schema))
    }

    /// The advisory lock one-commit mode claims `key` under: 64 bits of the key (a SHA-256
    /// digest) mixed with the table's salt, so stores of different tables never wait on each
    /// other's keys, and every driver's claims of one key in one table wait on one lock.
    pub fn claim_lock(&self, key: &RecordKey) -> i64 {
        claim_lock(self.claim_lock_salt, key)
    }

    /// The salt [`Names::claim_lock`] mixes in, for a driver that keeps it beside its
    /// statements rather than the names ([`claim_lock`]).
    pub fn claim_lock_salt(&self) -> i64 {
        self.claim_lock_salt
    }
}

/// [`Names::claim_lock`] from the table's salt.
pub fn claim_lock(salt: i64, key: &RecordKey) -> i64 {
    let mut first = [0; 8];
    first.copy_from_slice(&key.as_bytes()[..8]);
    i64::from_be_bytes(first) ^ salt
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

/// An advisory lock's 64-bit id for `label`: the first 8 bytes of its SHA-256.
fn lock_id(label: &str) -> i64 {
    let digest = Sha256::digest(label);
    let mut id = [0; 8];
    id.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(id)
}

#[cfg(test)]
mod tests;
