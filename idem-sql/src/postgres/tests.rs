use super::migrations::MIGRATIONS;
use super::statements::{CLAIM, COMPLETE, INSERT_COMPLETED, PURGE, RELEASE, RENEW};
use super::*;
use crate::migrate::plan;
use crate::records::RecordStatements;

#[test]
fn names_are_validated_and_quoted() {
    let names = Names::new("idem".into(), "idempotency_records".into()).unwrap();
    assert_eq!(names.records(), r#""idem"."idempotency_records""#);
    assert_eq!(names.migrations(), r#""idem"."idem_migrations""#);
    assert_eq!(names.quoted_schema(), r#""idem""#);
    assert_eq!(
        names.render("{expires_at_index}"),
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
            Err(StoreError::Config(message)) => {
                assert!(message.to_string().contains("ASCII letters"), "{message}");
            }
            other => panic!("{schema:?}.{table:?} accepted: {:?}", other.map(|_| ())),
        }
    }
    let longest = Names::new("s".repeat(63), "t".repeat(52)).unwrap();
    for derived in [
        &longest.render("{expires_at_index}"),
        &longest.render("{in_flight_index}"),
        longest.claim_in_tx(),
        longest.complete_in_tx(),
    ] {
        let name = derived.rsplit('.').next().unwrap().trim_matches('"');
        assert!(name.len() <= MAX_IDENTIFIER, "{derived} would be truncated");
    }
}

#[test]
fn each_schema_has_its_own_migration_lock() {
    let lock = |schema: &str| {
        Names::new(schema.into(), "t".into())
            .unwrap()
            .migration_lock()
    };
    assert_eq!(lock("idem"), lock("idem"));
    assert_ne!(lock("idem"), lock("idem2"));
}

#[test]
fn tables_lock_the_same_key_apart() {
    let names = |schema: &str, table: &str| Names::new(schema.into(), table.into()).unwrap();
    let key = RecordKey::from_bytes([7; 32]);
    let lock = |n: &Names| n.claim_lock(&key);
    assert_eq!(lock(&names("a", "t")), lock(&names("a", "t")));
    assert_ne!(lock(&names("a", "t")), lock(&names("a", "u")));
    assert_ne!(lock(&names("a", "t")), lock(&names("b", "t")));
    assert_ne!(
        lock(&names("a", "t")),
        names("a", "t").claim_lock(&RecordKey::from_bytes([8; 32]))
    );
    let n = names("a", "t");
    assert_eq!(claim_lock(n.claim_lock_salt(), &key), n.claim_lock(&key));
}

#[test]
fn statements_name_only_the_configured_table() {
    let names = Names::new("a".into(), "b".into()).unwrap();
    let operators = RecordStatements::new(names.records(), "FOR UPDATE SKIP LOCKED");
    let hot = [CLAIM, COMPLETE, INSERT_COMPLETED, RELEASE, RENEW, PURGE].map(|s| names.render(s));
    let operators = [
        &operators.list,
        &operators.read,
        &operators.forget,
        &operators.purge,
        &operators.stats,
    ]
    .map(|s| s.to_string());
    for statement in hot.iter().chain(&operators) {
        assert!(statement.contains(r#""a"."b""#), "{statement}");
        assert!(!statement.contains('{'), "{statement}");
    }
    for migration in MIGRATIONS {
        let sql = names.render(migration.sql);
        assert!(!sql.contains("{records}"), "{sql}");
    }
}

/// The checksums every database that ran these migrations recorded: an edit of a shipped
/// migration would stop every store already deployed from starting, so it fails here first.
#[test]
fn shipped_migrations_keep_their_checksums() {
    let hex = |bytes: Vec<u8>| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let recorded: Vec<(i64, String)> = MIGRATIONS
        .iter()
        .map(|m| (m.version, hex(m.checksum())))
        .collect();
    assert_eq!(recorded, SHIPPED.map(|(v, c)| (v, c.to_owned())));
    let applied: Vec<_> = MIGRATIONS
        .iter()
        .map(|m| (m.version, m.checksum()))
        .collect();
    assert!(plan(MIGRATIONS, &applied).unwrap().is_empty());
    assert_eq!(plan(MIGRATIONS, &[]).unwrap().len(), MIGRATIONS.len());
}

const SHIPPED: [(i64, &str); 5] = [
    (
        1,
        "c6e4a8bc81589a072395abffde2129c166ec5280995fcea9cf46e60b00a9972b",
    ),
    (
        2,
        "39d29aeec2806e7d8a60d7e735fdc4aca8135ede9a3988dd0c4e60581b77618a",
    ),
    (
        3,
        "8a42f10946310d7de775c6dc4d592fce72ccc3e13e4e62e230bcb8d66b4fc02a",
    ),
    (
        4,
        "65d17c0203df13471b75d7be075e43971dec78dc35fa34c81e44cb8b23c1a707",
    ),
    (
        5,
        "f7b1139d9dddc80356ae0a05fd65381a2f9bfe3e975925d8e3b97173dcc29065",
    ),
];
