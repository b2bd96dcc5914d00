//! `orders-consumer` on RabbitMQ (`BROKER_URL=amqp://...`, `QUEUE`), driven as on NATS: a
//! queue of each test's own (deleted afterwards), messages keyed by their `message_id`. AMQP
//! shows no unacked count without the management plugin, so a test waits until every order is
//! recorded, the queue holds nothing ready and a message handed back would have come back,
//! then stops the consumer with SIGTERM (which lets the running messages finish and answer)
//! and checks that nothing came back to the queue. The connection to RabbitMQ, or to
//! PostgreSQL, is cut with a loopback TCP proxy in front of the shared server (live connections
//! dropped at both ends, new ones refused), which the broker sees as a consumer gone. The broker
//! restart runs on a private node (`rabbitmq_node.rs`; about 30 s, most of it the node starting
//! three times), never on the shared server.

use std::time::{Duration, Instant};

use idem_tests::TcpProxy;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::harness::{MyDatabase, Process, STEP, cleanup, lock_orders, order, unique, unlock};
use super::postgres::PgDatabase;
use super::rabbitmq_node::PrivateRabbit;
use super::{SqliteFile, assert_once, orders};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const POLL: Duration = Duration::from_millis(100);
/// AMQP's `delivery_mode` for a message written to disk.
const PERSISTENT: u8 = 2;
/// How long a settled queue stays quiet before the consumers are stopped: longer than the
/// pause before a handed-back message is requeued (1 s), so none is still held.
const QUIET: Duration = Duration::from_millis(2500);

/// A queue of the test's own, deleted on drop; the consumer declares it.
struct Queue {
    name: String,
    url: String,
    connection: Connection,
    channel: Channel,
}

impl Queue {
    async fn new() -> Self {
        Self::on(AMQP, Duration::ZERO).await
    }

    /// A queue on the broker at `url`, which may take `patience` to accept a connection.
    async fn on(url: &str, patience: Duration) -> Self {
        let (connection, channel) = open(url, patience).await;
        Self {
            name: unique("idem-orders-"),
            url: url.to_owned(),
            connection,
            channel,
        }
    }

    /// Opens the test's connection again, after the broker restarted.
    async fn reopen(&mut self) {
        (self.connection, self.channel) = open(&self.url, STEP).await;
    }

    /// Starts `orders-consumer` on this queue and `database_url`, and waits until it has
    /// declared the queue.
    async fn start(&self, database_url: &str, extra: &[(&str, &str)]) -> Process {
        self.start_on(AMQP, database_url, extra).await
    }

    /// [`start`](Self::start) with `BROKER_URL=broker`.
    async fn start_on(&self, broker: &str, database_url: &str, extra: &[(&str, &str)]) -> Process {
        let mut vars = vec![
            ("BROKER_URL".to_owned(), broker.to_owned()),
            ("QUEUE".to_owned(), self.name.clone()),
            ("DATABASE_URL".to_owned(), database_url.to_owned()),
        ];
        vars.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let process = Process::start(&vars);
        let deadline = Instant::now() + STEP;
        while self.ready().await.is_none() {
            assert!(Instant::now() < deadline, "no queue:\n{}", process.output());
            tokio::time::sleep(POLL).await;
        }
        process
    }

    /// Publishes `payload` with `message_id` (when given), to the queue, persistent (a durable
    /// queue keeps it through a broker restart).
    async fn publish(&self, message_id: Option<&str>, payload: &str) {
        let mut properties = BasicProperties::default().with_delivery_mode(PERSISTENT);
        if let Some(id) = message_id {
            properties = properties.with_message_id(id.into());
        }
        let route = self.name.as_str().into();
        let sent = self
            .channel
            .basic_publish(
                "".into(),
                route,
                BasicPublishOptions::default(),
                payload.as_bytes(),
                properties,
            )
            .await
            .expect("publish");
        assert!(
            sent.await.expect("confirmed").is_ack(),
            "the broker refused {payload}"
        );
    }

    /// Publishes order `o-<n>` (amount `n`) with the message id `<prefix>-<n>`, for each `n`.
    async fn publish_orders(&self, prefix: &str, range: std::ops::Range<i64>) {
        for n in range {
            let id = format!("{prefix}-{n}");
            self.publish(Some(&id), &order(&format!("o-{n}"), n)).await;
        }
    }

    /// How many messages wait in the queue (not those delivered and unacked); `None` while it
    /// does not exist.
    async fn ready(&self) -> Option<u32> {
        // A passive declare of a missing queue closes its channel: use one of its own.
        let channel = self.connection.create_channel().await.ok()?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let declared = channel
            .queue_declare(self.name.as_str().into(), passive, FieldTable::default())
            .await;
        let _ = channel.close(200, "".into()).await;
        declared.ok().map(|queue| queue.message_count())
    }

    /// Waits until `url` holds `rows` orders and nothing waits in the queue, and then for
    /// [`QUIET`]; then stops `consumers` and checks that nothing came back.
    async fn settle(&self, url: &str, rows: usize, consumers: &mut [&mut Process]) {
        let deadline = Instant::now() + STEP;
        loop {
            let recorded: usize = orders(url).await.values().map(Vec::len).sum();
            if recorded >= rows && self.ready().await == Some(0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{recorded} of {rows} orders recorded"
            );
            tokio::time::sleep(POLL).await;
        }
        tokio::time::sleep(QUIET).await;
        for consumer in consumers.iter_mut() {
            let status = consumer.terminate();
            assert_eq!(status.code(), Some(0), "{}", consumer.output());
        }
        assert_eq!(self.ready().await, Some(0), "messages came back unanswered");
    }
}

/// A connection to the broker at `url` (retried for `patience`, for a broker just started) and
/// a channel on it whose publishes wait for the broker's confirm: the message is in the queue,
/// and on disk if persistent.
async fn open(url: &str, patience: Duration) -> (Connection, Channel) {
    let deadline = Instant::now() + patience;
    let connection = loop {
        match Connection::connect(url, ConnectionProperties::default()).await {
            Ok(connection) => break connection,
            Err(e) if Instant::now() >= deadline => panic!("RabbitMQ at {url} is needed: {e}"),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    };
    let channel = connection.create_channel().await.expect("a channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("publisher confirms");
    (connection, channel)
}

impl Drop for Queue {
    fn drop(&mut self) {
        let (channel, name) = (self.channel.clone(), self.name.clone());
        cleanup(async move {
            let options = QueueDeleteOptions::default();
            channel
                .queue_delete(name.as_str().into(), options)
                .await
                .map(drop)
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_publisher_that_retries_gets_each_order_recorded_once() {
    let (queue, db) = (Queue::new().await, SqliteFile::new());
    let mut consumer = queue.start(&db.url(), &[]).await;
    // 30 orders, each sent three times: 90 messages.
    for _ in 0..3 {
        queue.publish_orders("key", 0..30).await;
    }
    queue.settle(&db.url(), 30, &mut [&mut consumer]).await;
    assert_once(&orders(&db.url()).await, (0..30).map(|n| format!("o-{n}")));
    consumer.assert_said("processed: 30");
    consumer.assert_said("replayed: 60");
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_consumer_killed_mid_handler_leaves_nothing_and_the_redelivery_records_once() {
    use std::os::unix::process::ExitStatusExt;
    let (queue, db) = (Queue::new().await, SqliteFile::new());
    let slow = [("SLOW_MS", "5000"), ("IDEM_LEASE_MS", "1500")];
    let mut first = queue.start(&db.url(), &slow).await;
    queue.publish(Some("kill-1"), &order("o-kill", 7)).await;
    // Delivered (nothing waits in the queue): the handler sleeps in its transaction.
    while queue.ready().await != Some(0) {
        tokio::time::sleep(POLL).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(first.kill().signal(), Some(9));
    assert!(
        !first.output().contains("order recorded"),
        "{}",
        first.output()
    );
    assert!(
        orders(&db.url()).await.is_empty(),
        "the uncommitted row survived the kill"
    );

    // RabbitMQ requeued it when the connection died; the key is taken over once its lease lapses.
    let mut second = queue.start(&db.url(), &[("IDEM_LEASE_MS", "1500")]).await;
    queue.settle(&db.url(), 1, &mut [&mut second]).await;
    assert_once(&orders(&db.url()).await, ["o-kill".to_owned()]);
    second.assert_said("order recorded");
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_two_consumers_on_one_queue_record_each_order_once_on_postgres() {
    let (queue, db) = (Queue::new().await, PgDatabase::create().await);
    let extra = [("CONCURRENCY", "4"), ("SLOW_MS", "20")];
    let mut a = queue.start(&db.url, &extra).await;
    let mut b = queue.start(&db.url, &extra).await;
    // 60 orders, the first 20 sent twice: 80 messages between two processes.
    queue.publish_orders("pg", 0..60).await;
    queue.publish_orders("pg", 0..20).await;
    queue.settle(&db.url, 60, &mut [&mut a, &mut b]).await;
    assert_once(&orders(&db.url).await, (0..60).map(|n| format!("o-{n}")));
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_reused_key_and_poison_are_rejected_not_run() {
    let (queue, db) = (Queue::new().await, SqliteFile::new());
    let mut consumer = queue.start(&db.url(), &[("CONCURRENCY", "1")]).await;
    queue.publish(Some("reused"), &order("o-1", 100)).await;
    queue.publish(Some("reused"), &order("o-1", 200)).await;
    queue.publish(Some("poison-1"), "not json").await;
    queue
        .publish(Some("poison-2"), r#"{"order_id": "o-x", "amount": 1.5}"#)
        .await;
    queue.publish(Some("good"), &order("o-good", 1)).await;
    queue.settle(&db.url(), 2, &mut [&mut consumer]).await;
    let recorded = orders(&db.url()).await;
    assert_eq!(recorded.get("o-1"), Some(&vec![100]), "{recorded:?}");
    assert_once(&recorded, ["o-1".to_owned(), "o-good".to_owned()]);
    let reused = "its idempotency key was used before with another payload";
    assert_eq!(consumer.said(reused), 1, "{}", consumer.output());
    assert_eq!(
        consumer.said("no delivery can succeed"),
        2,
        "{}",
        consumer.output()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_database_stalled_past_the_handler_deadline_rolls_back_and_runs_none_twice() {
    let (queue, db) = (Queue::new().await, PgDatabase::create().await);
    let mut consumer = queue
        .start(&db.url, &[("HANDLER_TIMEOUT_MS", "1500")])
        .await;
    queue.publish(Some("before"), &order("o-before", 1)).await;
    let deadline = Instant::now() + STEP;
    while orders(&db.url).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the first order was never recorded"
        );
        tokio::time::sleep(POLL).await;
    }
    let lock = lock_orders(&db.url).await;
    queue.publish_orders("stall", 0..5).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    unlock(lock).await;

    queue.settle(&db.url, 6, &mut [&mut consumer]).await;
    let ids = std::iter::once("o-before".to_owned()).chain((0..5).map(|n| format!("o-{n}")));
    assert_once(&orders(&db.url).await, ids);
    consumer.assert_said("the handler ran longer than");
}

/// A proxy in front of the server at `target`, and `url` with that address replaced by the
/// proxy's.
async fn proxied(target: &str, url: &str) -> (TcpProxy, String) {
    let proxy = TcpProxy::start(target.parse().expect("an address")).await;
    let through = url.replacen(target, &proxy.addr().to_string(), 1);
    assert_ne!(through, url, "this test needs the server at {target}");
    (proxy, through)
}

/// Waits until `url` holds at least `rows` orders.
async fn wait_recorded(url: &str, rows: usize) {
    let deadline = Instant::now() + STEP;
    while orders(url).await.values().map(Vec::len).sum::<usize>() < rows {
        assert!(
            Instant::now() < deadline,
            "fewer than {rows} orders recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_connection_cut_mid_stream_reconnects_and_records_each_order_once() {
    let (queue, db) = (Queue::new().await, SqliteFile::new());
    let (proxy, broker) = proxied("127.0.0.1:5672", AMQP).await;
    let mut consumer = queue
        .start_on(&broker, &db.url(), &[("SLOW_MS", "200")])
        .await;
    queue.publish_orders("cut", 0..20).await;
    // Cut while messages are being handled: RabbitMQ requeues what the consumer held, and the
    // handlers still running commit, but their acks cannot reach the broker.
    wait_recorded(&db.url(), 1).await;
    proxy.set_up(false);
    let at_cut = orders(&db.url()).await.len();
    assert!(
        at_cut < 20,
        "cut too late: {at_cut} orders recorded already"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    proxy.set_up(true);
    queue.publish_orders("cut", 20..40).await;
    queue.settle(&db.url(), 40, &mut [&mut consumer]).await;
    assert_once(&orders(&db.url()).await, (0..40).map(|n| format!("o-{n}")));
    consumer.assert_said("the channel to RabbitMQ was lost");
    consumer.assert_said("reconnected to RabbitMQ");
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_broker_restart_mid_stream_reconnects_and_records_each_order_once() {
    // Dropped last: the node is killed and its directory removed after everything else.
    let mut node = PrivateRabbit::start();
    let mut queue = Queue::on(&node.url(), STEP).await;
    let db = SqliteFile::new();
    // 100 ms handlers, one at a time on SQLite: 40 orders take 4 s, so each stop comes
    // mid-stream.
    let slow = [("SLOW_MS", "100"), ("CONCURRENCY", "2")];
    let mut consumer = queue.start_on(&node.url(), &db.url(), &slow).await;
    queue.publish_orders("restart", 0..40).await;
    // Stopped (SIGTERM) while messages are being handled: the node closes the consumer's
    // connection and requeues what it held; the handlers still running commit, but their acks
    // are lost. Up again on its data: the durable queue and its persistent messages come back.
    wait_recorded(&db.url(), 2).await;
    node.down();
    let at_stop = orders(&db.url()).await.len();
    assert!(at_stop < 40, "stopped too late: {at_stop} orders recorded");
    node.up();
    queue.reopen().await;
    queue.publish_orders("restart", 40..80).await;
    // Killed (SIGKILL), as a crashed broker: what it confirmed is on disk.
    wait_recorded(&db.url(), at_stop + 10).await;
    node.kill();
    let at_kill = orders(&db.url()).await.len();
    assert!(at_kill < 80, "killed too late: {at_kill} orders recorded");
    node.up();
    queue.reopen().await;
    queue.publish_orders("restart", 80..100).await;
    queue.settle(&db.url(), 100, &mut [&mut consumer]).await;
    assert_once(&orders(&db.url()).await, (0..100).map(|n| format!("o-{n}")));
    // One process did it all (settle saw it exit 0 on SIGTERM): it reconnected by itself
    // after each outage, and ran each order once; the redeliveries of orders it had recorded
    // (their acks lost, or not yet on disk when the node was killed) were skipped.
    for line in [
        "the channel to RabbitMQ was lost",
        "reconnected to RabbitMQ",
    ] {
        assert_eq!(consumer.said(line), 2, "{}", consumer.output());
    }
    consumer.assert_said("processed: 100");
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_a_database_cut_off_hands_messages_back_and_runs_none_twice() {
    let (queue, db) = (Queue::new().await, PgDatabase::create().await);
    let (proxy, through) = proxied("127.0.0.1:5432", &db.url).await;
    let mut consumer = queue.start(&through, &[]).await;
    queue.publish(Some("before"), &order("o-before", 1)).await;
    wait_recorded(&db.url, 1).await;

    proxy.set_up(false);
    queue.publish_orders("cut", 0..10).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Nothing recorded while cut; had a message been acked unrecorded, it would never be.
    assert_eq!(
        orders(&db.url).await.len(),
        1,
        "an order was recorded while cut off"
    );

    proxy.set_up(true);
    queue.settle(&db.url, 11, &mut [&mut consumer]).await;
    let ids = std::iter::once("o-before".to_owned()).chain((0..10).map(|n| format!("o-{n}")));
    assert_once(&orders(&db.url).await, ids);
    consumer.assert_said("message handed back");
}

#[tokio::test(flavor = "multi_thread")]
async fn rabbitmq_two_consumers_on_one_queue_record_each_order_once_on_mysql() {
    let (queue, db) = (Queue::new().await, MyDatabase::create().await);
    let extra = [("CONCURRENCY", "4"), ("SLOW_MS", "20")];
    let mut a = queue.start(&db.url, &extra).await;
    let mut b = queue.start(&db.url, &extra).await;
    // 60 orders, the first 20 sent twice: 80 messages between two processes.
    queue.publish_orders("my", 0..60).await;
    queue.publish_orders("my", 0..20).await;
    queue.settle(&db.url, 60, &mut [&mut a, &mut b]).await;
    assert_once(&orders(&db.url).await, (0..60).map(|n| format!("o-{n}")));
}
