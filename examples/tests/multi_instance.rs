//! Many app instances on one store: two
//! `payments` processes share the idempotency records, in one PostgreSQL database or in one
//! Redis, so a key claimed on one is in flight, or replayed, on the other. Duplicates split
//! across both run the charge once.

mod common;

use common::{DynamoTable, MyDatabase, PgDatabase, RedisPrefix, Server, ServerBuilder, charge};
use serde_json::Value;
use tokio::task::JoinSet;

const CHARGES: &str = "/v1/charges";
/// Requests in one burst, sent alternately to the two instances.
const BURST: usize = 60;

/// Starts `builders` at the same time, as a deployment starts its instances: both migrate the
/// fresh database concurrently.
fn start_together(builders: [ServerBuilder; 2]) -> [Server; 2] {
    std::thread::scope(|s| {
        let [a, b] = builders.map(|builder| s.spawn(move || builder.start()));
        [a, b].map(|handle| {
            handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    })
}

/// `GET /v1/charges` for `org` on every instance; asserts they agree and returns the list.
async fn list_everywhere(servers: &[Server; 2], org: &str) -> Vec<Value> {
    let mut lists = Vec::new();
    for server in servers {
        let response = server.get(CHARGES).org(org).send().await;
        assert_eq!(response.status, 200, "{}", response.text());
        lists.push(response.json()["data"].as_array().expect("data").clone());
    }
    assert_eq!(lists[0], lists[1], "both instances see the same charges");
    lists.swap_remove(0)
}

/// `idempotency_requests_total{create_charge, outcome}` of each instance.
async fn counters(servers: &[Server; 2], outcome: &str) -> [u64; 2] {
    [
        servers[0].counter("charges.create", outcome).await,
        servers[1].counter("charges.create", outcome).await,
    ]
}

/// What a burst did.
struct Burst {
    /// The body every 201 carried.
    body: Vec<u8>,
    /// Which instance ran the charge.
    executed_on: usize,
    /// 409 answers per instance.
    in_progress: [u64; 2],
}

/// Sends [`BURST`] copies of one charge at once, alternately to each instance, and checks that
/// one ran: one 201 that is not a replay, every other 201 its byte-identical replay, everything
/// else 409 `idempotency_key_in_progress` with `Retry-After`, and one `executed` across both
/// instances' metrics.
async fn burst(servers: &[Server; 2], org: &str, key: &str, request: &Value) -> Burst {
    let executed_before = counters(servers, "executed").await;
    let in_progress_before = counters(servers, "in_progress").await;
    let mut tasks = JoinSet::new();
    for i in 0..BURST {
        let call = servers[i % 2].post(CHARGES).org(org).key(key).json(request);
        tasks.spawn(async move { (i % 2, call.send().await) });
    }
    let settled = common::settle_burst(tasks, 2).await;
    let (body, in_progress) = (
        settled.body,
        [settled.in_progress[0], settled.in_progress[1]],
    );

    let executed_after = counters(servers, "executed").await;
    let executed = [0, 1].map(|i| executed_after[i] - executed_before[i]);
    assert_eq!(
        executed.iter().sum::<u64>(),
        1,
        "executed once across both instances: {executed:?}"
    );
    let in_progress_after = counters(servers, "in_progress").await;
    assert_eq!(
        [0, 1].map(|i| in_progress_after[i] - in_progress_before[i]),
        in_progress,
        "every 409 is counted as in_progress by the instance that sent it"
    );
    let executed_on = usize::from(executed[1] == 1);

    // Afterwards, either instance replays the charge.
    for server in servers {
        let retry = server
            .post(CHARGES)
            .org(org)
            .key(key)
            .json(request)
            .send()
            .await;
        assert_eq!(retry.status, 201, "{}", retry.text());
        assert!(retry.is_replay(), "Idempotent-Replayed: true");
        assert_eq!(retry.body, body);
    }
    Burst {
        body,
        executed_on,
        in_progress,
    }
}

fn parse(body: &[u8]) -> Value {
    serde_json::from_slice(body).expect("a JSON charge")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_postgres_database_charge_once() {
    let database = PgDatabase::create().await;
    let instance = || {
        Server::builder()
            .env("DATABASE_URL", database.url.as_str())
            .env("SLOW_MS", "1000")
    };
    let servers = start_together([instance(), instance()]);
    for server in &servers {
        assert!(
            server.output().contains("idempotency store: postgres"),
            "{}",
            server.output()
        );
    }
    charge_once_across(&servers).await;
    // The servers hold connections to the database: stop them before it is dropped.
    drop(servers);
}

/// Both instances start at once on a database that does not exist yet: one creates it, both
/// create their tables and the store's, and a burst across them charges once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_mysql_database_charge_once() {
    let database = MyDatabase::new();
    let instance = || Server::builder().mysql(&database).env("SLOW_MS", "1000");
    let servers = start_together([instance(), instance()]);
    for server in &servers {
        assert!(
            server.output().contains("idempotency store: mysql"),
            "{}",
            server.output()
        );
    }
    charge_once_across(&servers).await;
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_redis_charge_once() {
    // Records in one Redis, app data in one PostgreSQL database: both shared.
    let database = PgDatabase::create().await;
    let redis = RedisPrefix::new();
    let instance = || {
        Server::builder()
            .env("DATABASE_URL", database.url.as_str())
            .env("SLOW_MS", "1000")
            .redis(&redis)
    };
    let servers = start_together([instance(), instance()]);
    for server in &servers {
        assert!(
            server.output().contains("idempotency store: redis at"),
            "{}",
            server.output()
        );
    }
    charge_once_across(&servers).await;
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_dynamodb_table_charge_once() {
    // Records in one DynamoDB table (moto), app data in one PostgreSQL database: both shared.
    let table = DynamoTable::new();
    let database = PgDatabase::create().await;
    let instance = || {
        Server::builder()
            .env("DATABASE_URL", database.url.as_str())
            .env("SLOW_MS", "1000")
            .dynamodb(&table)
    };
    let servers = start_together([instance(), instance()]);
    for server in &servers {
        let listening = format!("idempotency store: dynamodb table {}", table.name);
        assert!(server.output().contains(&listening), "{}", server.output());
    }
    charge_once_across(&servers).await;
    drop(servers);
}

/// Bursts of duplicates split across both instances run once; keys and orgs stay apart.
async fn charge_once_across(servers: &[Server; 2]) {
    // A fast charge: duplicates find it in flight on either instance, or completed and replay.
    let fast = burst(servers, "acme", "multi-fast", &charge(1999, "tok_visa")).await;
    assert_eq!(
        list_everywhere(servers, "acme").await,
        vec![parse(&fast.body)]
    );

    // A slow charge (SLOW_MS=1000): most duplicates arrive while it runs. The instance that did
    // not run it answered 409 too: it saw the other process's claim in the shared store.
    let slow = burst(servers, "initech", "multi-slow", &charge(2999, "tok_slow")).await;
    assert_eq!(
        list_everywhere(servers, "initech").await,
        vec![parse(&slow.body)]
    );
    let idle = 1 - slow.executed_on;
    assert!(
        slow.in_progress[idle] > 0,
        "instance {idle} never saw instance {}'s charge in flight: {:?}",
        slow.executed_on,
        slow.in_progress
    );

    // Keys stay apart across processes: another key, sent to the instance that did not run the
    // first one, is a second charge.
    let other = &servers[1 - fast.executed_on];
    let second = other
        .post(CHARGES)
        .org("acme")
        .key("multi-fast-2")
        .json(&charge(1999, "tok_visa"))
        .send()
        .await;
    assert_eq!(second.status, 201, "{}", second.text());
    assert!(!second.is_replay());
    assert_ne!(second.json()["id"], parse(&fast.body)["id"]);
    assert_eq!(
        list_everywhere(servers, "acme").await,
        vec![second.json(), parse(&fast.body)],
        "two keys, two charges, newest first"
    );

    // So do orgs: the first key and body under another org, on the other instance, is that
    // org's own charge, not a replay of acme's.
    let globex = other
        .post(CHARGES)
        .org("globex")
        .key("multi-fast")
        .json(&charge(1999, "tok_visa"))
        .send()
        .await;
    assert_eq!(globex.status, 201, "{}", globex.text());
    assert!(!globex.is_replay());
    assert_ne!(globex.json()["id"], parse(&fast.body)["id"]);
    assert_eq!(
        list_everywhere(servers, "globex").await,
        vec![globex.json()]
    );
    assert_eq!(list_everywhere(servers, "acme").await.len(), 2);

    let executed = counters(servers, "executed").await;
    assert_eq!(executed.iter().sum::<u64>(), 4, "{executed:?}");
}
