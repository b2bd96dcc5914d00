//! The SQLite store's page cache, memory map and pool size: what `SqliteStore::builder` sets
//! reaches every pooled connection, and what SQLite cannot use is refused before a file exists.

use idem_runtime::StoreError;
use idem_runtime::store::SqliteStore;
use idem_tests::{TestStore, db};

use super::{replays_one, sqlite_scalar, store_one};

/// `PRAGMA cache_size` and `PRAGMA mmap_size` on `n` connections of the store's pool, all held
/// at once so that each is a different connection.
async fn sqlite_cache_and_mmap_of(store: &SqliteStore, n: usize) -> Vec<(i64, i64)> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(store.pool().acquire().await.unwrap());
    }
    let mut settings = Vec::new();
    for conn in &mut held {
        let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        let mmap: i64 = sqlx::query_scalar("PRAGMA mmap_size")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        settings.push((cache, mmap));
    }
    // Held at once, so distinct (the pool may have opened one more meanwhile).
    assert!(store.pool().size() as usize >= n, "{n} connections open");
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_connect_gives_every_connection_the_default_cache_and_mmap() {
    let store = db::sqlite_store().await;
    assert_eq!(
        store.pool().options().get_max_connections(),
        SqliteStore::DEFAULT_MAX_CONNECTIONS
    );
    let expected = (
        -i64::from(SqliteStore::DEFAULT_CACHE_SIZE_KIB),
        SqliteStore::DEFAULT_MMAP_SIZE as i64,
    );
    // SQLite's own defaults.
    assert_eq!(expected, (-2000, 0));
    assert_eq!(sqlite_cache_and_mmap_of(&store, 4).await, [expected; 4]);
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_builder_gives_every_connection_its_cache_and_mmap() {
    let path = db::sqlite_path();
    let store = SqliteStore::builder(db::sqlite_url(&path))
        .cache_size_kib(12_345)
        .mmap_size(48 << 20)
        .max_connections(5)
        .build()
        .await
        .unwrap();
    assert_eq!(store.pool().options().get_max_connections(), 5);
    // Negative: KiB, not pages. All five connections, held at once.
    assert_eq!(
        sqlite_cache_and_mmap_of(&store, 5).await,
        [(-12_345_i64, 48_i64 << 20); 5]
    );
    // The settings change nothing else: WAL, and records kept.
    assert_eq!(
        sqlite_scalar(store.pool(), "PRAGMA journal_mode").await,
        "wal"
    );
    store_one(&store).await;
    replays_one(&store).await;
    store.discard().await;

    // No memory-mapped I/O, and the smallest cache the builder takes.
    let store = SqliteStore::builder(db::sqlite_url(&db::sqlite_path()))
        .cache_size_kib(1)
        .mmap_size(0)
        .build()
        .await
        .unwrap();
    assert_eq!(
        sqlite_cache_and_mmap_of(&store, 3).await,
        [(-1_i64, 0_i64); 3]
    );
    store_one(&store).await;
    replays_one(&store).await;
    store.discard().await;
}

#[tokio::test]
async fn sqlite_builder_caps_mmap_at_sqlites_limit() {
    // Above the bundled SQLite's compile-time limit (2 GiB): SQLite lowers it.
    let store = SqliteStore::builder(db::sqlite_url(&db::sqlite_path()))
        .mmap_size(1 << 40)
        .build()
        .await
        .unwrap();
    assert_eq!(
        sqlite_cache_and_mmap_of(&store, 2).await,
        [(
            -i64::from(SqliteStore::DEFAULT_CACHE_SIZE_KIB),
            0x7fff_0000_i64
        ); 2]
    );
    store.discard().await;
}

#[tokio::test]
async fn sqlite_builder_configures_an_in_memory_database() {
    let store = SqliteStore::builder("sqlite::memory:")
        .cache_size_kib(4096)
        .max_connections(4)
        .build()
        .await
        .unwrap();
    // One connection whatever was asked: a second would open an empty database of its own.
    assert_eq!(store.pool().options().get_max_connections(), 1);
    let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(cache, -4096);
    store_one(&store).await;
    replays_one(&store).await;
    assert_eq!(store.pool().size(), 1, "still the one connection");
}

#[tokio::test]
async fn sqlite_builder_refuses_settings_sqlite_cannot_use_before_opening_anything() {
    let path = db::sqlite_path();
    for (builder, named) in [
        (
            SqliteStore::builder(db::sqlite_url(&path)).mmap_size(u64::MAX),
            "mmap_size",
        ),
        (
            SqliteStore::builder(db::sqlite_url(&path)).max_connections(0),
            "max_connections",
        ),
        (
            SqliteStore::builder(db::sqlite_url(&path)).cache_size_kib(0),
            "cache_size_kib",
        ),
    ] {
        let built = builder.build().await;
        let Err(StoreError::Config(message)) = built else {
            panic!("expected a configuration error, got {built:?}");
        };
        assert!(message.contains(named), "{message}");
        assert!(!path.exists(), "no database file is created");
    }
    // The largest value SQLite reads is accepted (and lowered to its limit).
    let store = SqliteStore::builder(db::sqlite_url(&path))
        .mmap_size(i64::MAX as u64)
        .build()
        .await
        .unwrap();
    store.discard().await;
}
