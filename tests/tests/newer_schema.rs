//! A rolling deploy: an instance of the previous release opens a database whose store schema a
//! newer release has already migrated. It starts (schema changes are additive), and says so in
//! its logs, once per start, so operators can tell which instances are behind. An instance of
//! the release that migrated the schema says nothing.
//!
//! ```text
//! cargo test -p idem-tests --test newer_schema
//! ```

use idem_runtime::store::SqliteStore;
use idem_tests::logs::Logs;

const WARNING: &str = "the idempotency store's schema was migrated by a newer release";

#[tokio::test]
async fn an_instance_behind_a_newer_schema_starts_and_warns() {
    let logs = Logs::default();
    let _guard = logs.capture();
    let path = std::env::temp_dir().join(format!("{}.db", idem_tests::db::unique_name()));
    let url = format!("sqlite://{}", path.display());

    let store = SqliteStore::connect(&url).await.unwrap();
    assert!(logs.text().contains("applied idempotency store migration"));
    logs.clear();
    // Opened again by the same release: nothing to migrate, nothing to warn about.
    drop(SqliteStore::connect(&url).await.unwrap());
    assert!(!logs.text().contains(WARNING), "{}", logs.text());

    // A newer release adds a migration this build does not know.
    sqlx::query(
        "INSERT INTO idem_migrations (version, description, checksum) \
         VALUES (1000, 'added by a newer release', x'00')",
    )
    .execute(store.pool())
    .await
    .unwrap();
    drop(SqliteStore::connect(&url).await.unwrap());
    let text = logs.text();
    assert!(text.contains(WARNING), "{text}");
    assert!(text.contains("version=1000"), "{text}");
    assert_eq!(text.matches(WARNING).count(), 1, "{text}");

    store.pool().close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
