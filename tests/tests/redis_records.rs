//! What operators do with records on Redis beyond the conformance suite: walks that span many
//! `SCAN` batches, prefixes holding glob characters, what a claim keeps of the scope, and keys
//! under the prefix that are not records.

use std::future::Future;
use std::time::Duration;

use idem_runtime::StoreError;
use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, RecordFilter, RecordState};
use idem_runtime::store::{
    Admin, Claim, ClaimRequest, Completion, Fence, LeaseToken, RedisStore, Store,
};
use idem_tests::db::unique_name;
use idem_tests::{TestStore, redis_store, redis_url};
use tokio::task::JoinSet;

const HOUR: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(30);

fn key(n: u32) -> RecordKey {
    let mut bytes = [0x5a; 32];
    bytes[..4].copy_from_slice(&n.to_be_bytes());
    RecordKey::from_bytes(bytes)
}

/// The lease token of record `n`'s claim at `now`: another claim of the same record gets another.
fn token(n: u32, now: Timestamp) -> LeaseToken {
    LeaseToken::from_i64(now.as_millis() * 10_000 + i64::from(n))
}

fn fp(n: u32) -> Fingerprint {
    Fingerprint::from_bytes(*key(n).as_bytes())
}

async fn claim(
    store: &RedisStore,
    n: u32,
    now: Timestamp,
    (scope, scope_value): (&str, &str),
) -> Claim {
    store
        .claim(ClaimRequest {
            key: &key(n),
            fingerprint: &fp(n),
            token: token(n, now),
            now,
            lease_until: now.after(LEASE),
            expires_at: now.after(HOUR),
            operation: "redis_records::create",
            scope,
            scope_value,
            tenant: 0,
        })
        .await
        .expect("claim")
}

/// Runs `each(store, n)` for `n` in `0..count`, at most 100 at a time.
async fn on_each<F>(store: &RedisStore, count: u32, each: impl Fn(RedisStore, u32) -> F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut running = JoinSet::new();
    for n in 0..count {
        if running.len() == 100 {
            running.join_next().await.unwrap().unwrap();
        }
        running.spawn(each(store.clone(), n));
    }
    while let Some(done) = running.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_counting_and_purging_walk_every_scan_batch() {
    let store = redis_store().await;
    let start = SystemClock.now();
    // 2 500 records, more than one SCAN batch (COUNT 1000), each created a millisecond later.
    let at = move |n: u32| Timestamp::from_millis(start.as_millis() + i64::from(n));
    on_each(&store, 2500, |store, n| async move {
        let claimed = claim(&store, n, at(n), ("org", "acme")).await;
        assert_eq!(claimed, Claim::Acquired { took_over: false });
    })
    .await;
    let now = at(2500);
    let all = store
        .list_records(&RecordFilter::new(), now, 5000)
        .await
        .unwrap();
    assert_eq!(all.len(), 2500);
    assert!(
        all.iter().zip(0..).all(|(r, n)| r.key == key(n)),
        "oldest first, each once"
    );
    let oldest = store
        .list_records(&RecordFilter::new(), now, 10)
        .await
        .unwrap();
    assert_eq!(oldest, all[..10]);

    // Complete the first 1 200, then purge them in two bounded rounds.
    on_each(&store, 1200, |store, n| async move {
        let completion = Completion {
            payload: b"done",
            status: Some(201),
            completed_at: at(n),
            expires_at: at(n).after(HOUR),
        };
        let done = store.complete(&key(n), token(n, at(n)), completion).await;
        assert_eq!(done.unwrap(), Fence::Held);
    })
    .await;
    let stats = store.record_stats(&RecordFilter::new(), now).await.unwrap();
    assert_eq!(stats.total(RecordState::Completed), 1200);
    assert_eq!(stats.total(RecordState::InFlight), 1300);
    assert_eq!(stats.oldest_in_flight, Some(at(1200)));
    let every = RecordFilter::new();
    assert_eq!(store.purge_records(&every, now, 1000).await.unwrap(), 1000);
    assert_eq!(store.purge_records(&every, now, 1000).await.unwrap(), 200);
    let stats = store.record_stats(&RecordFilter::new(), now).await.unwrap();
    assert_eq!(stats.total(RecordState::Completed), 0);
    assert_eq!(stats.total(RecordState::InFlight), 1300);
    store.discard().await;
}

#[tokio::test]
async fn a_prefix_with_glob_characters_lists_only_its_own_records() {
    let base = unique_name();
    let connect = async |prefix: String| {
        RedisStore::builder(redis_url())
            .prefix(prefix)
            .build()
            .await
            .expect("a prefix with glob characters is accepted")
    };
    // Unescaped, `<base>t[1]*:{*` would match the other store's keys, `<base>t1x:{...}`.
    let globbed = connect(format!("{base}t[1]*:")).await;
    let other = connect(format!("{base}t1x:")).await;
    let now = SystemClock.now();
    claim(&globbed, 1, now, ("org", "acme")).await;
    for n in 2..5 {
        claim(&other, n, now, ("org", "acme")).await;
    }
    let keys = |store: RedisStore| async move {
        let records = store
            .list_records(&RecordFilter::new(), now, 10)
            .await
            .unwrap();
        records.iter().map(|r| r.key).collect::<Vec<_>>()
    };
    assert_eq!(keys(globbed.clone()).await, [key(1)]);
    assert_eq!(keys(other.clone()).await, [key(2), key(3), key(4)]);
    let stats = globbed.record_stats(&RecordFilter::new(), now).await;
    assert_eq!(stats.unwrap().total(RecordState::InFlight), 1);
    globbed.discard().await;
    other.discard().await;
}

#[tokio::test]
async fn a_takeover_keeps_the_scope_and_a_fresh_claim_writes_its_own() {
    let store = redis_store().await;
    let now = SystemClock.now();
    claim(&store, 1, now, ("org", "acme")).await;
    // The lease lapsed: the same request takes the record over and it stays acme's.
    let lapsed = now.after(LEASE);
    let taken = claim(&store, 1, lapsed, ("org", "globex")).await;
    assert_eq!(taken, Claim::Acquired { took_over: true });
    let record = store.read_record(&key(1)).await.unwrap().unwrap();
    assert_eq!(
        (record.scope.as_str(), record.scope_value.as_str()),
        ("org", "acme")
    );
    // Expired: a new claim writes a record of its own.
    let later = lapsed.after(HOUR);
    let fresh = claim(&store, 1, later, ("user", "u-7")).await;
    assert_eq!(fresh, Claim::Acquired { took_over: false });
    let record = store.read_record(&key(1)).await.unwrap().unwrap();
    assert_eq!(
        (record.scope.as_str(), record.scope_value.as_str()),
        ("user", "u-7")
    );
    assert_eq!(record.created_at, later);
    store.discard().await;
}

#[tokio::test]
async fn keys_under_the_prefix_that_are_not_records() {
    let store = redis_store().await;
    let mut conn = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let now = SystemClock.now();
    claim(&store, 1, now, ("org", "acme")).await;
    // Another store's key the pattern also matches (`<prefix>{a}:{hex}`) is not a record here.
    let nested = format!("{}{{a}}:{{{}}}", store.prefix(), key(2).to_hex());
    let () = redis::cmd("SET")
        .arg(&nested)
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let listed = store
        .list_records(&RecordFilter::new(), now, 10)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key(1));
    // A key named like a record that is not a hash is corrupt, and stays.
    let () = redis::cmd("SET")
        .arg(store.record_key(&key(3)))
        .arg("x")
        .query_async(&mut conn)
        .await
        .unwrap();
    for outcome in [
        store.read_record(&key(3)).await.map(|_| ()),
        store.forget_record(&key(3), now, true).await.map(|_| ()),
        store
            .list_records(&RecordFilter::new(), now, 10)
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(outcome, Err(StoreError::Corrupt(_))),
            "{outcome:?}"
        );
    }
    let kept: bool = redis::cmd("EXISTS")
        .arg(store.record_key(&key(3)))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(kept);
    // A hash with a record's name but not a record's fields: refused without force, deleted with.
    let () = redis::cmd("HSET")
        .arg(store.record_key(&key(4)))
        .arg("state")
        .arg("unknown")
        .query_async(&mut conn)
        .await
        .unwrap();
    let refused = store.forget_record(&key(4), now, false).await;
    assert!(
        matches!(refused, Err(StoreError::Corrupt(_))),
        "{refused:?}"
    );
    assert!(store.read_record(&key(4)).await.is_err(), "still there");
    let forced = store.forget_record(&key(4), now, true).await;
    assert!(
        matches!(&forced, Err(StoreError::Corrupt(what)) if what.contains("deleted")),
        "{forced:?}"
    );
    assert_eq!(store.read_record(&key(4)).await.unwrap(), None);
    assert_eq!(
        store.forget_record(&key(4), now, true).await.unwrap(),
        Forgotten::Absent
    );
    store.discard().await;
}
