//! What only the Redis store has, beside the conformance suite it passes like every store: the
//! record as an operator reads it, keys that Redis expires by itself, a claim run again after a
//! lost reply, settings refused before connecting, timeouts that fail closed, and no atomic
//! mode. What it says at start-up is in `redis_startup.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use idem_runtime::clock::{Clock, ManualClock, SystemClock, Timestamp};
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{
    Claim, ClaimRequest, Completion, Fence, LeaseToken, RedisStore, RedisStoreBuilder, Store,
};
use idem_runtime::{BuildError, Idempotency, StoreError};
use idem_tests::redis::{RedisServer, unique_prefix};
use idem_tests::{TcpProxy, TestStore, redis_store, redis_url};
use redis::AsyncCommands;
use tower::ServiceExt;

/// An endpoint in atomic mode on PostgreSQL: no engine on Redis may serve it. Never routed.
#[allow(dead_code)]
mod atomic {
    use axum::http::StatusCode;
    use idem_runtime::{Tx, idempotent};

    #[idempotent(scope = "global")]
    pub(crate) async fn charge(mut tx: Tx<sqlx::Postgres>) -> StatusCode {
        let _ = tx.conn().await;
        StatusCode::CREATED
    }
}

/// A plain endpoint that counts its runs.
mod plain {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::extract::State;
    use axum::http::StatusCode;
    use idem_runtime::idempotent;

    #[idempotent(scope = "global")]
    pub(crate) async fn create(State(calls): State<Arc<AtomicUsize>>) -> StatusCode {
        calls.fetch_add(1, Ordering::SeqCst);
        StatusCode::CREATED
    }
}

#[derive(Clone, axum::extract::FromRef)]
struct App {
    idem: Idempotency,
    calls: Arc<AtomicUsize>,
}

const KEY: RecordKey = RecordKey::from_bytes([0xab; 32]);
const HOUR: Duration = Duration::from_secs(3600);

fn fingerprint(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

fn claim_at(now: Timestamp, token: i64, fp: &Fingerprint, ttl: Duration) -> ClaimRequest<'static> {
    claim_of(&KEY, now, token, fp, ttl)
}

fn claim_of(
    key: &RecordKey,
    now: Timestamp,
    token: i64,
    fp: &Fingerprint,
    ttl: Duration,
) -> ClaimRequest<'static> {
    let (key, fp): (&'static RecordKey, &'static Fingerprint) =
        (Box::leak(Box::new(*key)), Box::leak(Box::new(*fp)));
    ClaimRequest {
        key,
        fingerprint: fp,
        token: LeaseToken::from_i64(token),
        now,
        lease_until: now.after(Duration::from_secs(30)),
        expires_at: now.after(ttl),
        operation: "redis_store::create_charge",
        scope: "global",
        scope_value: "",
        tenant: 0,
    }
}

async fn direct() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    conn.pttl(key).await.unwrap()
}

#[tokio::test]
async fn records_are_hashes_an_operator_reads_and_redis_expires() {
    let store = redis_store().await;
    let mut conn = direct().await;
    let key = store.record_key(&KEY);
    assert_eq!(key, format!("{}{{{}}}", store.prefix(), "ab".repeat(32)));
    let now = SystemClock.now();
    let fp = fingerprint(7);

    let claimed = store.claim(claim_at(now, -42, &fp, HOUR)).await.unwrap();
    assert_eq!(claimed, Claim::Acquired { took_over: false });
    let record: std::collections::HashMap<String, Vec<u8>> = conn.hgetall(&key).await.unwrap();
    let field = |name: &str| String::from_utf8(record[name].clone()).unwrap();
    assert_eq!(field("state"), "in_flight");
    assert_eq!(field("fingerprint"), "07".repeat(32));
    assert_eq!(field("token"), "-42");
    assert_eq!(field("owners"), "1");
    assert_eq!(field("operation"), "redis_store::create_charge");
    assert_eq!(field("scope"), "global");
    assert_eq!(field("scope_value"), "");
    assert_eq!(field("created_at"), now.as_millis().to_string());
    assert_eq!(field("expires_at"), now.after(HOUR).as_millis().to_string());
    assert!(!record.contains_key("payload"));
    // The key lives as long as the record: the TTL comes from `expires_at - now`.
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 0 && ttl <= 3_600_000, "{ttl}");

    // Renewing the lease writes one field and keeps the key's expiry.
    let renewed = store
        .renew(&KEY, LeaseToken::from_i64(-42), now.after(HOUR))
        .await;
    assert_eq!(renewed.unwrap(), Fence::Held);
    let kept = pttl(&mut conn, &key).await;
    assert!(
        kept > 0 && kept <= ttl,
        "{kept} after renewal, {ttl} before"
    );

    // Completion sets the record's expiry, and the key's with it.
    let completion = Completion {
        payload: b"\x1d\x01stored",
        status: Some(201),
        completed_at: now,
        expires_at: now.after(HOUR * 2),
    };
    let done = store.complete(&KEY, LeaseToken::from_i64(-42), completion);
    assert_eq!(done.await.unwrap(), Fence::Held);
    let record: std::collections::HashMap<String, Vec<u8>> = conn.hgetall(&key).await.unwrap();
    assert_eq!(record["state"], b"completed");
    assert_eq!(record["status"], b"201");
    assert_eq!(record["payload"], b"\x1d\x01stored");
    assert_eq!(
        record["completed_at"],
        now.as_millis().to_string().as_bytes()
    );
    let ttl = pttl(&mut conn, &key).await;
    assert!(ttl > 3_600_000 && ttl <= 7_200_000, "{ttl}");
    store.discard().await;
}

#[tokio::test]
async fn key_lifetimes_follow_the_engine_clock_however_far_it_is_from_redis() {
    let store = redis_store().await;
    let mut conn = direct().await;
    let keys = [1, 2, 3].map(|n| RecordKey::from_bytes([n; 32]));
    // An engine clock ten days ahead of Redis's (a `ManualClock` moved forward): the key lives
    // an hour, not ten days and an hour.
    let ahead = SystemClock.now().after(HOUR * 240);
    let claimed = store.claim(claim_of(&keys[0], ahead, 1, &fingerprint(1), HOUR));
    assert_eq!(claimed.await.unwrap(), Claim::Acquired { took_over: false });
    let ttl = pttl(&mut conn, &store.record_key(&keys[0])).await;
    assert!(ttl > 0 && ttl <= 3_600_000, "{ttl}");
    // And one a year behind: the key is not born expired.
    let behind = Timestamp::from_millis(SystemClock.now().as_millis() - 365 * 86_400_000);
    let claimed = store.claim(claim_of(&keys[1], behind, 2, &fingerprint(2), HOUR));
    assert_eq!(claimed.await.unwrap(), Claim::Acquired { took_over: false });
    let ttl = pttl(&mut conn, &store.record_key(&keys[1])).await;
    assert!(ttl > 0 && ttl <= 3_600_000, "{ttl}");

    // Redis drops an expired record by itself (bounded wait, no timing assertion).
    let short = Duration::from_millis(300);
    let claimed = store.claim(claim_of(
        &keys[2],
        SystemClock.now(),
        3,
        &fingerprint(3),
        short,
    ));
    assert_eq!(claimed.await.unwrap(), Claim::Acquired { took_over: false });
    let key = store.record_key(&keys[2]);
    tokio::time::timeout(Duration::from_secs(10), async {
        while conn.exists::<_, bool>(&key).await.unwrap() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("Redis should have expired the record");
    store.discard().await;
}

#[tokio::test]
async fn a_claim_run_again_after_a_lost_reply_still_owns_the_record() {
    let store = redis_store().await;
    let (fp, now) = (fingerprint(5), Timestamp::from_millis(1_750_000_000_000));
    let first = claim_at(now, 11, &fp, HOUR);
    assert_eq!(
        store.claim(first).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    // The same claim again (same token): its reply was lost, it still owns the record.
    assert_eq!(
        store.claim(first).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    // Anyone else finds it in flight.
    let other = store.claim(claim_at(now, 12, &fp, HOUR)).await.unwrap();
    assert!(matches!(other, Claim::InFlight { .. }), "{other:?}");

    // The same holds for a takeover, which is reported as one each time.
    let lapsed = now.after(Duration::from_secs(30));
    let takeover = claim_at(lapsed, 13, &fp, HOUR);
    let took = Claim::Acquired { took_over: true };
    assert_eq!(store.claim(takeover).await.unwrap(), took);
    assert_eq!(store.claim(takeover).await.unwrap(), took);
    let stale = store.complete(
        &KEY,
        LeaseToken::from_i64(11),
        Completion {
            payload: b"stale",
            status: None,
            completed_at: lapsed,
            expires_at: lapsed.after(HOUR),
        },
    );
    assert_eq!(stale.await.unwrap(), Fence::Lost);
    let done = store.complete(
        &KEY,
        LeaseToken::from_i64(13),
        Completion {
            payload: b"done",
            status: None,
            completed_at: lapsed,
            expires_at: lapsed.after(HOUR),
        },
    );
    assert_eq!(done.await.unwrap(), Fence::Held);
    // Once completed, running the claim again replays: it never takes the record back.
    assert_eq!(
        store.claim(takeover).await.unwrap(),
        Claim::Completed {
            fingerprint: fp,
            payload: Bytes::from_static(b"done"),
            completed_at: Some(lapsed),
        }
    );
    store.discard().await;
}

/// A store on the shared server reached through a [`TcpProxy`], its builder set by `configure`.
async fn behind_proxy(
    configure: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> (TcpProxy, RedisStore) {
    let proxy = TcpProxy::start(idem_tests::redis::redis_addr()).await;
    let builder = RedisStore::builder(format!("redis://{}", proxy.addr())).prefix(unique_prefix());
    let store = configure(builder).build().await.unwrap();
    (proxy, store)
}

/// Claims another key first, so that Redis has loaded the claim script before the claim a test
/// watches: that claim's reply is then its own answer, not the script load's.
async fn load_claim_script(store: &RedisStore, now: Timestamp, token: i64, fp: &Fingerprint) {
    let other = RecordKey::from_bytes([0xcd; 32]);
    let loaded = store.claim(claim_of(&other, now, token, fp, HOUR)).await;
    assert_eq!(loaded.unwrap(), Claim::Acquired { took_over: false });
}

/// A claim whose reply the network loses after Redis ran it: the store sends it again on the
/// reconnected connection, finds its own token, and the request owns the record it claimed (not
/// an error, not "in flight" against itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_is_lost_on_the_wire_is_sent_again_and_owns_the_record() {
    let (proxy, store) = behind_proxy(|builder| builder).await;
    let (fp, now) = (fingerprint(7), Timestamp::from_millis(1_750_000_000_000));
    load_claim_script(&store, now, 20, &fp).await;

    proxy.lose_next_reply();
    assert_eq!(
        store.claim(claim_at(now, 21, &fp, HOUR)).await.unwrap(),
        Claim::Acquired { took_over: false },
        "the claim ran once on the server; its second run finds its own token"
    );
    let other = store.claim(claim_at(now, 22, &fp, HOUR)).await.unwrap();
    assert!(matches!(other, Claim::InFlight { .. }), "{other:?}");
    let done = Completion {
        payload: b"first",
        status: None,
        completed_at: now,
        expires_at: now.after(HOUR),
    };
    let fence = store.complete(&KEY, LeaseToken::from_i64(21), done).await;
    assert_eq!(fence.unwrap(), Fence::Held);
    assert_eq!(
        store.claim(claim_at(now, 23, &fp, HOUR)).await.unwrap(),
        Claim::Completed {
            fingerprint: fp,
            payload: Bytes::from_static(b"first"),
            completed_at: Some(now),
        }
    );
    store.discard().await;
}

/// A claim whose reply comes after the response timeout (a slow network, a paused server):
/// the store sends it again, and the late reply does not confuse the second one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_comes_too_late_is_sent_again_and_owns_the_record() {
    let (proxy, store) = behind_proxy(|builder| {
        builder
            .connect_timeout(Duration::from_secs(2))
            .response_timeout(Duration::from_millis(300))
    })
    .await;
    let (fp, now) = (fingerprint(9), Timestamp::from_millis(1_750_000_000_000));
    load_claim_script(&store, now, 40, &fp).await;

    proxy.delay_next_reply(Duration::from_millis(450));
    assert_eq!(
        store.claim(claim_at(now, 41, &fp, HOUR)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let other = store.claim(claim_at(now, 42, &fp, HOUR)).await.unwrap();
    assert!(matches!(other, Claim::InFlight { .. }), "{other:?}");
    store.discard().await;
}

/// A claim Redis refuses (here a full server under `noeviction`, which answers `OOM`) fails
/// once, as unavailable, so the engine answers 503; it is not sent again, since only a lost
/// reply leaves the claim's fate unknown.
#[tokio::test]
async fn a_claim_refused_by_a_full_redis_is_unavailable_and_sent_once() {
    let server = RedisServer::start(&["--maxmemory-policy", "noeviction"]);
    let store = RedisStore::connect(server.url()).await.unwrap();
    let (fp, now) = (fingerprint(8), Timestamp::from_millis(1_750_000_000_000));
    // Redis learns the script while it has room, so only the refused claim is counted below.
    load_claim_script(&store, now, 30, &fp).await;
    let _: () = server
        .query(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1))
        .unwrap();
    let _: () = server.query(redis::cmd("CONFIG").arg("RESETSTAT")).unwrap();
    let refused = store.claim(claim_at(now, 31, &fp, HOUR)).await;
    match refused {
        Err(StoreError::Unavailable(error)) => {
            assert!(error.to_string().contains("OOM"), "{error}")
        }
        other => panic!("a full Redis refuses the claim, got {other:?}"),
    }
    let stats: String = server
        .query(redis::cmd("INFO").arg("commandstats"))
        .unwrap();
    // `calls` counts the scripts Redis ran, `rejected_calls` those it refused before running.
    let line = stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or_else(|| panic!("no EVALSHA counted: {stats}"));
    let sent: u32 = line
        .split(',')
        .filter_map(|field| field.split_once('='))
        .filter(|(name, _)| matches!(*name, "calls" | "rejected_calls"))
        .map(|(_, n)| n.parse::<u32>().unwrap())
        .sum();
    assert_eq!(sent, 1, "{line}");
}

#[tokio::test]
async fn settings_are_checked_before_connecting() {
    let config = |result: Result<RedisStore, StoreError>| match result {
        Err(StoreError::Config(message)) => message.into_owned(),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let message = config(RedisStore::builder(redis_url()).prefix("a{b").build().await);
    assert!(
        message.contains("invalid Redis key prefix \"a{b\""),
        "{message}"
    );
    let message = config(
        RedisStore::builder(redis_url())
            .response_timeout(Duration::ZERO)
            .build()
            .await,
    );
    assert!(message.contains("response timeout"), "{message}");
    let message = config(RedisStore::connect("http://user:hunter2@cache:6379").await);
    assert!(message.contains("invalid Redis URL"), "{message}");
    assert!(
        !message.contains("hunter2"),
        "the password is never repeated"
    );

    // Nothing listens there: unavailable, within the timeouts (the wait is only a hang guard).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let refused = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(200))
        .build();
    let refused = tokio::time::timeout(Duration::from_secs(20), refused).await;
    assert!(matches!(
        refused.expect("connecting must give up"),
        Err(StoreError::Unavailable(_))
    ));
}

async fn send(app: &Router, key: &str) -> (StatusCode, Option<String>) {
    let request = Request::post("/create").header("idempotency-key", key);
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let retry_after = response.headers().get("retry-after");
    let retry_after = retry_after.map(|v| v.to_str().unwrap().to_owned());
    (response.status(), retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_answer_in_time_gets_503_and_the_handler_does_not_run() {
    // A server of the test's own: pausing it must not stall the other tests.
    let server = RedisServer::start(&[]);
    let store = RedisStore::builder(server.url())
        .prefix(unique_prefix())
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let idem = Idempotency::builder()
        .store(store)
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/create", post(plain::create))
        .with_state(App {
            idem,
            calls: calls.clone(),
        });
    assert_eq!(send(&app, "before").await.0, StatusCode::CREATED);

    // Every client's commands wait for 5 s, far past the store's deadline (connect timeout plus
    // response timeout, 1.2 s): the claim times out.
    let _: () = server
        .query(redis::cmd("CLIENT").arg("PAUSE").arg(5000).arg("ALL"))
        .unwrap();
    let (status, retry_after) = send(&app, "during").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler did not run");
    // A PING from another client waits for the pause to end; then service resumes on the
    // store's connection, without a restart.
    let (pong, server) =
        tokio::task::spawn_blocking(move || (server.query::<String>(&redis::cmd("PING")), server))
            .await
            .unwrap();
    assert_eq!(pong.unwrap(), "PONG");
    assert_eq!(send(&app, "after").await.0, StatusCode::CREATED);
    // The claim that timed out was only delayed: it ran when the pause ended, on the store's
    // connection before anything sent after it. Its record is in flight (409) until its lease
    // lapses; then a retry takes it over and runs. Never twice, never lost.
    assert_eq!(send(&app, "during").await.0, StatusCode::CONFLICT);
    clock.advance(Duration::from_secs(31));
    assert_eq!(send(&app, "during").await.0, StatusCode::CREATED);
    assert_eq!(send(&app, "during").await.0, StatusCode::CREATED);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "before, after, during: once each"
    );
    drop(server);
}

#[tokio::test]
async fn an_atomic_endpoint_is_refused_at_start_up_and_the_message_says_why() {
    let store = redis_store().await;
    let err = Idempotency::builder()
        .store(store.clone())
        .serves(atomic::charge)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::AtomicUnsupported {
            endpoint: "redis_store::atomic::charge",
            database: "PostgreSQL",
            store: std::any::type_name::<RedisStore>(),
        }
    );
    let message = err.to_string();
    for part in [
        "endpoint `redis_store::atomic::charge` runs in atomic mode on PostgreSQL",
        "RedisStore` offers no PostgreSQL transactions",
        "the handler's writes could not commit with its stored response",
        "`PostgresStore` for PostgreSQL",
        "or take no `Tx` in the handler",
    ] {
        assert!(message.contains(part), "{message}");
    }
    // The other endpoints of the binary are served.
    let plain = Idempotency::builder()
        .store(store.clone())
        .serves(plain::create)
        .build();
    assert!(plain.is_ok());
    store.discard().await;
}
