//! Which migrations a database still needs.
//!
//! Each store embeds its schema as a list of [`Migration`]s and records the applied ones in its
//! own `idem_migrations` table, never in a migration table of the driver's or the host
//! application's. A store applies them in one transaction under a lock (PostgreSQL: an advisory
//! lock; SQLite: `BEGIN IMMEDIATE`; MySQL: a named lock), asking [`plan`] which are missing: a
//! restart applies nothing, several instances starting at once apply each migration exactly
//! once, and a crash mid-way leaves nothing half-applied.
//!
//! Shipped migrations are never edited: a change is a new migration with the next version. Each
//! applied migration is recorded with a checksum of its text, and a mismatch stops the store
//! from starting rather than run against a schema it does not know.

use sha2::{Digest, Sha256};

use idem_core::error::StoreError;

/// One embedded schema change.
#[derive(Debug)]
pub struct Migration {
    /// Applied in increasing order, starting at 1.
    pub version: i64,
    /// Recorded beside the version for people reading the migrations table.
    pub description: &'static str,
    /// The statements. For PostgreSQL a template whose `{placeholders}` name the configured
    /// schema and table ([`postgres::Names::render`](crate::postgres::Names::render)); the
    /// checksum covers the template, so it does not depend on them.
    pub sql: &'static str,
}

impl Migration {
    /// SHA-256 of the migration's text, recorded when it is applied.
    pub fn checksum(&self) -> Vec<u8> {
        Sha256::digest(self.sql.as_bytes()).to_vec()
    }
}

/// The migrations of `embedded` not yet in `applied` (`(version, checksum)` rows read back from
/// the migrations table), in order.
///
/// Fails when an applied migration's checksum differs from the embedded one. Versions this build
/// does not know (recorded by a newer release during a rolling deploy) are left alone: schema
/// changes are additive, so older instances keep working until they are replaced.
pub fn plan<'m>(
    embedded: &'m [Migration],
    applied: &[(i64, Vec<u8>)],
) -> Result<Vec<&'m Migration>, StoreError> {
    let mut pending = Vec::new();
    for migration in embedded {
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, checksum)) if *checksum != migration.checksum() => {
                return Err(StoreError::Migration {
                    version: migration.version,
                    source: Box::new(Modified {
                        description: migration.description,
                    }),
                });
            }
            Some(_) => {}
            None => pending.push(migration),
        }
    }
    let newest = embedded.iter().map(|m| m.version).max().unwrap_or(0);
    if let Some(unknown) = applied.iter().map(|(v, _)| *v).find(|v| *v > newest) {
        tracing::warn!(
            version = unknown,
            "the idempotency store's schema was migrated by a newer release"
        );
    }
    Ok(pending)
}

/// An applied migration whose recorded checksum no longer matches the embedded text.
#[derive(Debug, thiserror::Error)]
#[error(
    "migration `{description}` was changed after it was applied: its recorded checksum \
     differs from this build's"
)]
struct Modified {
    description: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMBEDDED: &[Migration] = &[
        Migration {
            version: 1,
            description: "first",
            sql: "CREATE TABLE a (x INTEGER)",
        },
        Migration {
            version: 2,
            description: "second",
            sql: "CREATE INDEX a_x ON a (x)",
        },
    ];

    fn applied(version: i64) -> (i64, Vec<u8>) {
        let m = EMBEDDED.iter().find(|m| m.version == version).unwrap();
        (version, m.checksum())
    }

    fn versions(plan: Vec<&Migration>) -> Vec<i64> {
        plan.into_iter().map(|m| m.version).collect()
    }

    #[test]
    fn a_fresh_database_gets_every_migration_in_order() {
        assert_eq!(versions(plan(EMBEDDED, &[]).unwrap()), [1, 2]);
    }

    #[test]
    fn applied_migrations_are_skipped() {
        assert_eq!(versions(plan(EMBEDDED, &[applied(1)]).unwrap()), [2]);
        assert!(
            plan(EMBEDDED, &[applied(1), applied(2)])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn versions_from_a_newer_release_are_tolerated() {
        let all = [applied(1), applied(2), (3, vec![0; 32])];
        assert!(plan(EMBEDDED, &all).unwrap().is_empty());
    }

    #[test]
    fn an_edited_migration_is_refused() {
        match plan(EMBEDDED, &[(1, vec![0; 32])]) {
            Err(StoreError::Migration { version: 1, source }) => {
                assert!(
                    source.to_string().contains("`first` was changed"),
                    "{source}"
                );
            }
            other => panic!("expected a migration error, got {other:?}"),
        }
    }
}
