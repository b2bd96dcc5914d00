//! `orders-consumer` driven from outside, as its contract says: real processes on the NATS
//! JetStream server at 127.0.0.1:4222 (or a private one the test restarts), a stream of each
//! test's own, SQLite or PostgreSQL, and the faults the consumer must outlive. The measure is
//! the `orders` table, which has no unique constraint: every order must be there exactly once,
//! and every message answered (nothing pending, nothing awaiting an ack).

#[path = "orders_consumer/harness.rs"]
mod harness;
#[path = "common/postgres.rs"]
mod postgres;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use harness::{MyDatabase, Process, STEP, Topic, order, unique};
use postgres::PgDatabase;

/// What `postgres.rs` waits at most for each step.
const STEP_TIMEOUT: Duration = STEP;
const NATS: &str = "127.0.0.1:4222";
const SIGKILL: i32 = 9;

/// A SQLite file of the test's own, removed on drop.
struct SqliteFile(PathBuf);

impl SqliteFile {
    fn new() -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("orders-consumer-"));
        std::fs::create_dir_all(&dir).expect("a directory for the test");
        Self(dir)
    }

    fn url(&self) -> String {
        format!("sqlite://{}", self.0.join("orders.db").display())
    }
}

impl Drop for SqliteFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every row of `orders`: how many times each order id was recorded, and at which amounts.
async fn orders(url: &str) -> BTreeMap<String, Vec<i64>> {
    let query = "SELECT order_id, amount FROM orders ORDER BY id";
    let rows: Vec<(String, i64)> = if url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(url).await.expect("open SQLite");
        sqlx::query_as(query).fetch_all(&pool).await
    } else if url.starts_with("mysql:") {
        let pool = sqlx::MySqlPool::connect(url).await.expect("open MySQL");
        sqlx::query_as(query).fetch_all(&pool).await
    } else {
        let pool = sqlx::PgPool::connect(url).await.expect("open PostgreSQL");
        sqlx::query_as(query).fetch_all(&pool).await
    }
    .expect("read orders");
    let mut by_id: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (id, amount) in rows {
        by_id.entry(id).or_default().push(amount);
    }
    by_id
}

/// Asserts each of `ids` was recorded exactly once, and nothing else.
fn assert_once(recorded: &BTreeMap<String, Vec<i64>>, ids: impl IntoIterator<Item = String>) {
    let ids: Vec<String> = ids.into_iter().collect();
    let twice: Vec<_> = recorded.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(twice.is_empty(), "recorded more than once: {twice:?}");
    let missing: Vec<_> = ids
        .iter()
        .filter(|id| !recorded.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "never recorded: {missing:?}");
    assert_eq!(recorded.len(), ids.len(), "{recorded:?}");
}

/// Starts `orders-consumer` on `topic` and `database_url` and waits until it has made its
/// stream and durable consumer.
async fn start(topic: &Topic, database_url: &str, extra: &[(&str, &str)]) -> Process {
    let process = Process::start(&vars(topic, database_url, extra));
    topic.wait_created().await;
    process
}

fn vars(topic: &Topic, database_url: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut vars = topic.env();
    vars.push(("DATABASE_URL".into(), database_url.to_owned()));
    vars.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    vars
}

#[tokio::test(flavor = "multi_thread")]
async fn a_publisher_that_retries_gets_each_order_recorded_once() {
    let (topic, db) = (Topic::new(NATS).await, SqliteFile::new());
    let mut consumer = start(&topic, &db.url(), &[]).await;
    // 30 orders, each sent three times (a publisher retrying after lost acks): 90 messages.
    for _ in 0..3 {
        topic.publish_orders("key", 0..30).await;
    }
    topic.wait_drained(STEP).await;
    assert_once(&orders(&db.url()).await, (0..30).map(|n| format!("o-{n}")));
    let status = consumer.terminate();
    assert_eq!(status.code(), Some(0), "{}", consumer.output());
    consumer.assert_said("processed: 30");
    consumer.assert_said("replayed: 60");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_killed_mid_handler_leaves_nothing_and_the_redelivery_records_once() {
    let db = SqliteFile::new();
    killed_mid_handler(&db.url()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_killed_mid_handler_leaves_nothing_and_the_redelivery_records_once_on_mysql() {
    let db = MyDatabase::create().await;
    killed_mid_handler(&db.url).await;
}

/// A process SIGKILLed while its handler sleeps in its transaction, its row inserted: no row
/// after the kill; the redelivery, in a new process once the lease lapses, records it once.
async fn killed_mid_handler(db: &str) {
    use std::os::unix::process::ExitStatusExt;
    let topic = Topic::new(NATS).await;
    let slow = [
        ("SLOW_MS", "5000"),
        ("IDEM_LEASE_MS", "1500"),
        ("ACK_WAIT_MS", "2000"),
    ];
    let mut first = start(&topic, db, &slow).await;
    topic.publish(Some("kill-1"), &order("o-kill", 7)).await;
    // Delivered and not acked: the handler has inserted its row and sleeps in its transaction.
    topic.wait_in_hand(1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(first.kill().signal(), Some(SIGKILL));
    assert!(
        !first.output().contains("order recorded"),
        "killed too late:\n{}",
        first.output()
    );
    assert!(
        orders(db).await.is_empty(),
        "the uncommitted row survived the kill"
    );

    let lease = [("IDEM_LEASE_MS", "1500")];
    let second = Process::start(&vars(&topic, db, &lease));
    topic.wait_drained(STEP).await;
    assert_once(&orders(db).await, ["o-kill".to_owned()]);
    second.assert_said("order recorded");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_handler_lets_it_finish_acks_it_and_exits_0() {
    let (topic, db) = (Topic::new(NATS).await, SqliteFile::new());
    let mut consumer = start(&topic, &db.url(), &[("SLOW_MS", "2000")]).await;
    topic.publish(Some("term-1"), &order("o-term", 3)).await;
    topic.wait_in_hand(1).await;
    let status = consumer.terminate();
    assert_eq!(status.code(), Some(0), "{}", consumer.output());
    // Finished and answered before the exit: committed, and nothing left for anyone else.
    assert_once(&orders(&db.url()).await, ["o-term".to_owned()]);
    assert_eq!(topic.backlog().await, Some((0, 0, 0)));
    consumer.assert_said("processed: 1");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ack_wait_shorter_than_the_handler_records_each_order_once() {
    let (topic, db) = (Topic::new(NATS).await, SqliteFile::new());
    // The handler outlasts the ack wait more than twice over; two consumers, so a message
    // JetStream redelivered would reach the other.
    let extra = [("ACK_WAIT_MS", "1000"), ("SLOW_MS", "2500")];
    let a = start(&topic, &db.url(), &extra).await;
    let b = Process::start(&vars(&topic, &db.url(), &extra));
    topic.publish_orders("slow", 0..6).await;
    topic.wait_drained(STEP).await;
    assert_once(&orders(&db.url()).await, (0..6).map(|n| format!("o-{n}")));
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_consumers_on_one_durable_record_each_order_once_on_postgres() {
    let (topic, db) = (Topic::new(NATS).await, PgDatabase::create().await);
    let extra = [("CONCURRENCY", "4"), ("SLOW_MS", "20")];
    let a = start(&topic, &db.url, &extra).await;
    let b = Process::start(&vars(&topic, &db.url, &extra));
    // 60 orders, the first 20 sent twice: 80 messages between two processes.
    topic.publish_orders("pg", 0..60).await;
    topic.publish_orders("pg", 0..20).await;
    topic.wait_drained(STEP).await;
    assert_once(&orders(&db.url).await, (0..60).map(|n| format!("o-{n}")));
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_reused_with_another_payload_is_terminated_not_run() {
    let (topic, db) = (Topic::new(NATS).await, SqliteFile::new());
    let consumer = start(&topic, &db.url(), &[]).await;
    topic.publish(Some("reused"), &order("o-1", 100)).await;
    topic.wait_drained(STEP).await;
    // The same order with the fields in another order is the same payload: skipped, acked.
    topic
        .publish(Some("reused"), r#"{ "amount": 100, "order_id": "o-1" }"#)
        .await;
    topic.publish(Some("reused"), &order("o-1", 200)).await;
    topic.wait_drained(STEP).await;
    let recorded = orders(&db.url()).await;
    assert_eq!(recorded.get("o-1"), Some(&vec![100]), "{recorded:?}");
    let reused = "its idempotency key was used before with another payload";
    consumer.wait_for_line(reused).await;
    // Terminated, so never delivered (nor warned about) again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(consumer.said(reused), 1, "{}", consumer.output());
    consumer.assert_said("message skipped");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_message_is_terminated_not_redelivered() {
    let (topic, db) = (Topic::new(NATS).await, SqliteFile::new());
    let consumer = start(&topic, &db.url(), &[]).await;
    let poison = [
        "not json",
        r#"{"order_id": 5, "amount": 1}"#,
        r#"{"order_id": "o-x", "amount": 1.5}"#,
    ];
    for (n, payload) in poison.iter().enumerate() {
        topic.publish(Some(&format!("poison-{n}")), payload).await;
    }
    topic.publish(Some("good"), &order("o-good", 1)).await;
    topic.wait_drained(STEP).await;
    assert_once(&orders(&db.url()).await, ["o-good".to_owned()]);
    consumer.wait_for_line("no delivery can succeed").await;
    // Terminated, so never delivered (nor warned about) again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let warned = consumer.said("no delivery can succeed");
    assert_eq!(warned, 3, "{}", consumer.output());
}

#[path = "orders_consumer/faults.rs"]
mod faults;

#[path = "orders_consumer/amqp.rs"]
mod amqp;

#[path = "orders_consumer/rabbitmq_node.rs"]
mod rabbitmq_node;
