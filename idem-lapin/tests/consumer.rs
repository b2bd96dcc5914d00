//! The face in process against the RabbitMQ server at 127.0.0.1:5672 (records in memory): a
//! publisher's retries, a key in flight in another delivery, a reused key, poison, keyless
//! messages, a handler that panics or outlives its deadline, a connection lost mid-stream (cut
//! by a loopback proxy in front of the server). Each test has a queue of its own, deleted
//! afterwards, and counts the handler's runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem_core::idempotency::Idempotency;
use idem_core::store::MemoryStore;
use idem_lapin::{
    Counts, HandlerError, Keyless, Options, RabbitConsumer, RabbitDelivery, RabbitKeySource, Work,
    plain,
};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const WITHIN: Duration = Duration::from_secs(30);

/// A queue of the test's own on a channel of its own; deleted (and the connection closed) at
/// the end of [`Queue::finish`].
struct Queue {
    connection: Connection,
    channel: Channel,
    name: String,
}

impl Queue {
    async fn new(test: &str) -> Self {
        let connection = Connection::connect(AMQP, ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ at {AMQP} is needed: {e}"));
        let channel = connection.create_channel().await.expect("a channel");
        let name = format!("idem-lapin-{test}-{}", std::process::id());
        channel
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare the queue");
        Self {
            connection,
            channel,
            name,
        }
    }

    /// Publishes `payload` with `message_id` (when given) to the queue, confirmed.
    async fn publish(&self, message_id: Option<&str>, payload: &str) {
        let mut properties = BasicProperties::default();
        if let Some(id) = message_id {
            properties = properties.with_message_id(id.into());
        }
        self.channel
            .basic_publish(
                "".into(),
                self.name.as_str().into(),
                BasicPublishOptions::default(),
                payload.as_bytes(),
                properties,
            )
            .await
            .expect("publish")
            .await
            .expect("confirmed");
    }

    /// Runs `consumer` with `handler` until `done` holds of its counts (at most [`WITHIN`]),
    /// on a channel of its own.
    async fn consume(
        &self,
        consumer: &RabbitConsumer,
        handler: impl Work<RabbitDelivery>,
        done: impl Fn(&Counts) -> bool + Send + 'static,
    ) -> Counts {
        let channel = self.connection.create_channel().await.expect("a channel");
        let stop = consumer.core().stop_when(done);
        let run = consumer.run(&channel, &self.name, handler, stop);
        let counts = tokio::time::timeout(WITHIN, run)
            .await
            .unwrap_or_else(|_| panic!("not done in {WITHIN:?}: {:?}", consumer.core().counts()))
            .expect("the consumer runs");
        let _ = channel.close(200, "done".into()).await;
        counts
    }

    /// How many messages wait in the queue (its unacked ones come back when their channel
    /// closes).
    async fn left(&self) -> u32 {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let queue = self
            .channel
            .queue_declare(self.name.as_str().into(), passive, FieldTable::default())
            .await
            .expect("the queue");
        queue.message_count()
    }

    async fn finish(self) {
        let _ = self
            .channel
            .queue_delete(self.name.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = self.connection.close(200, "done".into()).await;
    }
}

/// Options for `operation` on an engine of its own, records in memory.
fn options(operation: &'static str) -> Options {
    let engine = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .expect("an engine");
    Options::new(engine, operation).retry_delay(Duration::from_millis(100))
}

/// A handler that counts its runs, sleeps `slow`, and answers the payload.
fn counting(
    runs: &Arc<AtomicUsize>,
    slow: Duration,
) -> impl Work<RabbitDelivery, Output = String, Error = String> {
    let runs = Arc::clone(runs);
    plain(move |delivery: RabbitDelivery| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(slow);
        let text = String::from_utf8_lossy(&delivery.payload).into_owned();
        std::future::ready(match text.starts_with("poison") {
            true => Err(HandlerError::poison(text)),
            false => Ok(text),
        })
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn retried_sends_run_once_and_a_running_key_is_requeued_then_skipped() {
    let queue = Queue::new("retries").await;
    let runs = Arc::new(AtomicUsize::new(0));
    // Three sends of one message (a publisher retrying), taken together: one runs for a
    // second, the others find the key in flight, are requeued, then find the output stored.
    for _ in 0..3 {
        queue.publish(Some("k-1"), r#"{"a":1}"#).await;
    }
    let consumer = RabbitConsumer::new(options("test.retries").concurrency(3));
    let handler = counting(&runs, Duration::from_secs(1));
    let counts = queue
        .consume(&consumer, handler, |c| c.processed + c.replayed == 3)
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{counts:?}");
    assert!(counts.handed_back >= 1, "{counts:?}");
    assert_eq!(queue.left().await, 0);
    queue.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_key_poison_and_keyless_messages_are_rejected_for_good() {
    let queue = Queue::new("rejects").await;
    let runs = Arc::new(AtomicUsize::new(0));
    queue.publish(Some("k-1"), "first").await;
    queue.publish(Some("k-1"), "another payload").await;
    queue.publish(Some("k-2"), "poison: not an order").await;
    queue.publish(None, "no key").await;
    let consumer = RabbitConsumer::new(options("test.rejects").concurrency(1));
    let counts = queue
        .consume(&consumer, counting(&runs, Duration::ZERO), |c| {
            c.processed == 1 && c.key_reused == 1 && c.poison == 1 && c.keyless == 1
        })
        .await;
    // The first and the poison ran; the reused key and the keyless one did not; none is left.
    assert_eq!(runs.load(Ordering::SeqCst), 2, "{counts:?}");
    assert_eq!(queue.left().await, 0);

    queue.publish(None, "no key, run unprotected").await;
    let unprotected = RabbitConsumer::new(options("test.rejects").keyless(Keyless::Unprotected));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sources = Arc::clone(&seen);
    let handler = move |delivery: RabbitDelivery| {
        sources.lock().unwrap().push(delivery.key_source);
        std::future::ready(Ok::<_, HandlerError<String>>(String::new()))
    };
    let counts = queue
        .consume(&unprotected, plain(handler), |c| c.processed == 1)
        .await;
    assert_eq!(counts.unprotected, 1, "{counts:?}");
    assert_eq!(*seen.lock().unwrap(), vec![RabbitKeySource::None]);
    queue.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_that_panics_or_outlives_its_deadline_runs_again_on_redelivery() {
    let queue = Queue::new("failures").await;
    queue.publish(Some("panics"), "p").await;
    queue.publish(Some("slow"), "s").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let handler = move |delivery: RabbitDelivery| {
        let first = !delivery.redelivered;
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            match (first, delivery.key.as_deref()) {
                (true, Some("panics")) => panic!("the handler's bug"),
                (true, _) => tokio::time::sleep(Duration::from_secs(60)).await,
                _ => {}
            }
            Ok::<_, HandlerError<String>>(String::new())
        }
    };
    let consumer =
        RabbitConsumer::new(options("test.failures").handler_timeout(Duration::from_millis(300)));
    let counts = queue
        .consume(&consumer, plain(handler), |c| c.processed == 2)
        .await;
    assert_eq!(counts.failed, 2, "{counts:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 4, "{counts:?}");
    assert_eq!(queue.left().await, 0);
    queue.finish().await;
}

/// A loopback TCP proxy to the RabbitMQ server; [`cut`](Self::cut) drops every connection
/// through it (both ends: the broker sees its consumer gone, the consumer its broker) and
/// refuses new ones until [`restore`](Self::restore).
struct Proxy {
    url: String,
    up: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = tokio::sync::watch::channel(true);
        let state = up.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut down = state.subscribe();
                if !*down.borrow_and_update() {
                    continue; // refused
                }
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect("127.0.0.1:5672").await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self {
            url: AMQP.replacen("127.0.0.1:5672", &addr.to_string(), 1),
            up,
            task,
        }
    }

    fn cut(&self) {
        self.up.send_replace(false);
    }

    fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_connection_is_opened_again_and_no_message_runs_twice() {
    let queue = Queue::new("reconnect").await;
    for n in 0..20 {
        queue.publish(Some(&format!("k-{n}")), "order").await;
    }
    let proxy = Proxy::start().await;
    let url = proxy.url.clone();
    let connect = move || {
        let url = url.clone();
        async move {
            let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
            connection.create_channel().await
        }
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let handler = move |_: RabbitDelivery| {
        counted.fetch_add(1, Ordering::SeqCst);
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, HandlerError<String>>(String::new())
        }
    };
    // Cut while handlers run: what the lost channel held comes back, the running ones commit.
    let consumer = RabbitConsumer::new(options("test.reconnect").concurrency(4));
    let cutter = {
        let runs = Arc::clone(&runs);
        async move {
            while runs.load(Ordering::SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            proxy.cut();
            tokio::time::sleep(Duration::from_secs(1)).await;
            proxy.restore();
            proxy
        }
    };
    // Stopped once every order ran and nothing moved for longer than a handed-back message's
    // pause (1 s): nothing ready in the queue, nothing held.
    let settled = async {
        let core = consumer.core();
        let mut last = core.counts();
        loop {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let now = core.counts();
            if now.processed == 20 && now == last && queue.left().await == 0 {
                return;
            }
            last = now;
        }
    };
    let run = consumer.run_reconnecting(connect, &queue.name, plain(handler), settled);
    let (counts, _proxy) = tokio::time::timeout(WITHIN, async { tokio::join!(run, cutter) })
        .await
        .unwrap_or_else(|_| panic!("not done in {WITHIN:?}: {:?}", consumer.core().counts()));
    let counts = counts.expect("the consumer runs");
    // Each ran once; the messages the lost channel held came back and were acked, not run.
    assert_eq!(runs.load(Ordering::SeqCst), 20, "{counts:?}");
    assert_eq!(counts.processed, 20, "{counts:?}");
    assert!(counts.replayed + counts.handed_back >= 1, "{counts:?}");
    assert_eq!(queue.left().await, 0);
    queue.finish().await;
}
