//! The face's own paths, in process, against the JetStream server at 127.0.0.1:4222 (records in
//! memory): a key in flight in another delivery, keyless and invalid keys, a handler that
//! panics or outlives its deadline. Each test has a stream of its own, deleted afterwards, and
//! counts the handler's runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use idem_core::idempotency::Idempotency;
use idem_core::store::MemoryStore;
use idem_nats::{
    Counts, HandlerError, KeyFrom, Keyless, NatsConsumer, NatsDelivery, NatsKeySource, Options,
    Work, plain,
};

const NATS: &str = "127.0.0.1:4222";
const WITHIN: Duration = Duration::from_secs(30);

/// A stream and durable pull consumer of the test's own; the stream is deleted on drop.
struct Topic {
    js: jetstream::Context,
    name: String,
    subject: String,
    durable: consumer::PullConsumer,
}

impl Topic {
    async fn new(test: &str) -> Self {
        let client = async_nats::connect(NATS)
            .await
            .unwrap_or_else(|e| panic!("NATS with JetStream at {NATS} is needed: {e}"));
        let js = jetstream::new(client);
        let name = format!("IDEMNATS_{test}_{}", std::process::id());
        let subject = format!("idem-nats-test.{name}");
        let created = js
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                storage: stream::StorageType::Memory,
                ..Default::default()
            })
            .await
            .expect("create the stream");
        let durable = created
            .create_consumer(consumer::pull::Config {
                durable_name: Some("test".into()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(5),
                ..Default::default()
            })
            .await
            .expect("create the consumer");
        Self {
            js,
            name,
            subject,
            durable,
        }
    }

    async fn publish(&self, headers: &[(&str, &str)], payload: &'static str) {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        self.js
            .publish_with_headers(
                self.subject.clone(),
                map,
                Bytes::from_static(payload.as_bytes()),
            )
            .await
            .expect("publish")
            .await
            .expect("stored");
    }

    /// Runs `consumer` with `handler` until `done` holds of its counts (at most [`WITHIN`]).
    async fn consume(
        &self,
        consumer: &NatsConsumer,
        handler: impl Work<NatsDelivery>,
        done: impl Fn(&Counts) -> bool + Send + 'static,
    ) -> Counts {
        let stop = consumer.core().stop_when(done);
        let run = consumer.run(&self.durable, handler, stop);
        tokio::time::timeout(WITHIN, run)
            .await
            .unwrap_or_else(|_| panic!("not done in {WITHIN:?}: {:?}", consumer.core().counts()))
            .expect("the consumer runs")
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        let (js, name) = (self.js.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async { js.delete_stream(&name).await.ok() })
        })
        .join();
    }
}

/// Options for `operation` on an engine of its own, records in memory.
fn options(operation: &'static str) -> Options {
    let engine = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .expect("an engine");
    Options::new(engine, operation)
}

/// A handler that counts its runs and answers where its key came from.
fn counting(
    runs: &Arc<AtomicUsize>,
    slow: Duration,
) -> impl Work<NatsDelivery, Output = String, Error = String> {
    let runs = Arc::clone(runs);
    plain(move |delivery: NatsDelivery| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(slow);
        std::future::ready(Ok(delivery.key_source.as_str().to_owned()))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_whose_key_runs_elsewhere_is_handed_back_then_skipped() {
    let topic = Topic::new("inflight").await;
    let runs = Arc::new(AtomicUsize::new(0));
    // Two copies of one message, pulled together: one runs for a second, the other finds the
    // key in flight, is handed back, and on its redelivery finds the output stored.
    topic
        .publish(&[("Idempotency-Key", "k-1")], r#"{"a":1}"#)
        .await;
    topic
        .publish(&[("Idempotency-Key", "k-1")], r#"{ "a": 1 }"#)
        .await;
    let consumer = NatsConsumer::new(options("test.inflight").concurrency(2));
    let counts = topic
        .consume(&consumer, counting(&runs, Duration::from_secs(1)), |c| {
            c.processed + c.replayed == 2
        })
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{counts:?}");
    assert_eq!((counts.processed, counts.replayed), (1, 1), "{counts:?}");
    assert!(counts.handed_back >= 1, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keyless_messages_are_terminated_unless_run_unprotected() {
    let topic = Topic::new("keyless").await;
    let runs = Arc::new(AtomicUsize::new(0));
    topic.publish(&[], "no key").await;
    topic
        .publish(&[("Nats-Msg-Id", "m-1")], "keyed by its id")
        .await;
    let consumer = NatsConsumer::new(options("test.keyless")).key_from(KeyFrom::Publisher);
    let counts = topic
        .consume(&consumer, counting(&runs, Duration::ZERO), |c| {
            c.keyless == 1 && c.processed == 1
        })
        .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the keyless one must not run"
    );
    assert_eq!(counts.keyless, 1, "{counts:?}");

    topic.publish(&[], "no key, run unprotected").await;
    let unprotected = options("test.keyless").keyless(Keyless::Unprotected);
    let consumer = NatsConsumer::new(unprotected).key_from(KeyFrom::Publisher);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sources = Arc::clone(&seen);
    let handler = move |delivery: NatsDelivery| {
        sources
            .lock()
            .unwrap()
            .push((delivery.key_source, delivery.key));
        std::future::ready(Ok::<_, HandlerError<String>>(String::new()))
    };
    let counts = topic
        .consume(&consumer, plain(handler), |c| c.processed == 1)
        .await;
    assert_eq!(counts.unprotected, 1, "{counts:?}");
    assert_eq!(*seen.lock().unwrap(), vec![(NatsKeySource::None, None)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_rules_refuse_is_terminated_and_the_sequence_keys_the_rest() {
    let topic = Topic::new("invalid").await;
    let runs = Arc::new(AtomicUsize::new(0));
    topic
        .publish(&[("Idempotency-Key", "clé à accents")], "x")
        .await;
    topic.publish(&[], "keyed by its sequence").await;
    let consumer = NatsConsumer::new(options("test.invalid"));
    let counts = topic
        .consume(&consumer, counting(&runs, Duration::ZERO), |c| {
            c.keyless == 1 && c.processed == 1
        })
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_that_panics_or_outlives_its_deadline_runs_again_on_redelivery() {
    let topic = Topic::new("failures").await;
    topic.publish(&[("Idempotency-Key", "panics")], "p").await;
    topic.publish(&[("Idempotency-Key", "slow")], "s").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let handler = move |delivery: NatsDelivery| {
        let first = delivery.delivered == 1;
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
    let consumer = NatsConsumer::new(
        options("test.failures")
            .handler_timeout(Duration::from_millis(300))
            .retry_delay(Duration::from_millis(100)),
    );
    let counts = topic
        .consume(&consumer, plain(handler), |c| c.processed == 2)
        .await;
    assert_eq!(counts.failed, 2, "{counts:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 4, "{counts:?}");
}
