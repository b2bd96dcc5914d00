//! What the Redis store tells the operator when it starts: a `maxmemory-policy` that may evict
//! records, a server that persists nothing (a restart forgets every record), and that no sweeper
//! is needed. Each on servers of the test's own: the shared one's configuration is not touched.

use std::time::Duration;

use idem_runtime::Idempotency;
use idem_runtime::store::RedisStore;
use idem_tests::logs::Logs;
use idem_tests::redis::{RedisServer, redis_store_builder};
use idem_tests::{TestStore, capabilities_of};

// Current-thread runtime: the store's tasks log on the thread that holds the capture.
#[tokio::test(flavor = "current_thread")]
async fn an_eviction_policy_that_may_drop_records_is_warned_about_at_connect() {
    // Servers of the test's own: the shared one's configuration is not touched.
    let evicting = RedisServer::start(&["--maxmemory-policy", "allkeys-lru"]);
    let safe = RedisServer::start(&["--maxmemory-policy", "noeviction", "--appendonly", "yes"]);
    let logs = Logs::default();
    let guard = logs.capture();
    let store = RedisStore::connect(evicting.url()).await.unwrap();
    assert_eq!(store.maxmemory_policy(), Some("allkeys-lru"));
    let warned = logs.text();
    assert!(warned.contains("WARN"), "{warned}");
    assert!(
        warned.contains("Redis maxmemory-policy is `allkeys-lru`"),
        "{warned}"
    );
    assert!(warned.contains("maxmemory-policy noeviction"), "{warned}");
    assert!(warned.contains("node=the server"), "which node: {warned}");

    let before = logs.text().len();
    let store = RedisStore::connect(safe.url()).await.unwrap();
    assert_eq!(store.maxmemory_policy(), Some("noeviction"));
    let quiet = logs.text()[before..].to_owned();
    assert!(!quiet.contains("WARN"), "{quiet}");
    drop(guard);
}

/// A Redis without AOF and without RDB snapshots forgets every record when it restarts: the
/// store says so, names the node and the fix, and reports it (#26 item 5).
#[tokio::test(flavor = "current_thread")]
async fn a_redis_that_persists_nothing_is_warned_about_at_connect() {
    let volatile = RedisServer::start(&[]); // `save ""`, `appendonly no`
    let aof = RedisServer::start(&["--appendonly", "yes", "--maxmemory-policy", "noeviction"]);
    let snapshots = RedisServer::start(&["--save", "3600 1", "--maxmemory-policy", "noeviction"]);
    let logs = Logs::default();
    let guard = logs.capture();
    let store = RedisStore::connect(volatile.url()).await.unwrap();
    assert_eq!(store.persists(), Some(false));
    let warned = logs.text();
    assert!(warned.contains("WARN"), "{warned}");
    assert!(
        warned.contains("Redis persists nothing (`appendonly no`, `save \"\"`)"),
        "{warned}"
    );
    assert!(
        warned.contains("run the operation again"),
        "the consequence: {warned}"
    );
    assert!(warned.contains("`appendonly yes`"), "the fix: {warned}");
    assert!(warned.contains("node=the server"), "which node: {warned}");

    for persisted in [&aof, &snapshots] {
        let before = logs.text().len();
        let store = RedisStore::connect(persisted.url()).await.unwrap();
        assert_eq!(store.persists(), Some(true));
        let quiet = logs.text()[before..].to_owned();
        assert!(!quiet.contains("WARN"), "{quiet}");
    }
    drop(guard);
}

#[tokio::test(flavor = "current_thread")]
async fn no_sweeper_runs_on_redis_and_it_says_so() {
    let store = redis_store_builder().build().await.unwrap();
    assert!(!capabilities_of(store.clone()).needs_sweeping());
    let logs = Logs::default();
    let guard = logs.capture();
    let idem = Idempotency::builder().store(store.clone()).build().unwrap();
    let sweeper = idem.spawn_sweeper(Duration::from_millis(10), 100);
    tokio::time::timeout(Duration::from_secs(10), sweeper)
        .await
        .expect("the sweeper ends at once on Redis")
        .unwrap();
    let said = logs.text();
    assert!(
        said.contains("the idempotency store expires records itself; no sweeper needed"),
        "{said}"
    );
    assert!(said.contains("RedisStore"), "{said}");
    drop(guard);
    store.discard().await;
}
