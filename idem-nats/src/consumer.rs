//! [`Consumer`]: pulls from a JetStream pull consumer, at most `concurrency` messages at a time,
//! each processed once per key, until told to stop.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::PullConsumer;
use futures_util::{FutureExt, StreamExt};
use idem_consumer::{ConsumeError, Counters, Counts, HandlerError, Options, Work, atomic, plain};
use idem_core::operation::Lent;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::key::KeyFrom;
use crate::message::Delivery;
use crate::process::process;

/// How long one pull request waits for messages before the next is sent; also the longest a
/// stop waits for a pull already sent.
const PULL_WAIT: Duration = Duration::from_secs(2);
/// How long to wait before pulling again after the broker refused a pull (it is restarting).
const PULL_RETRY: Duration = Duration::from_millis(500);
/// How long a stop waits for the last answers to reach the server.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// JetStream's default ack wait, when the consumer's info says none.
const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// An idempotent JetStream consumer: see the [crate](crate) documentation.
#[derive(Clone)]
pub struct Consumer {
    options: Options,
    key_from: KeyFrom,
    counters: Arc<Counters>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("options", &self.options)
            .field("key_from", &self.key_from)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer with `options` (the engine, the operation, concurrency, the handler's
    /// deadline), keyed as [`KeyFrom::Any`] says.
    pub fn new(options: Options) -> Self {
        Self {
            options,
            key_from: KeyFrom::default(),
            counters: Arc::default(),
        }
    }

    /// Which parts of a message may give its key (default [`KeyFrom::Any`]).
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.key_from = key_from;
        self
    }

    /// How many deliveries ended each way so far.
    pub fn counts(&self) -> Counts {
        self.counters.snapshot()
    }

    /// Consumes `consumer`'s messages with `handler` until `stop` completes, then lets the
    /// messages being processed finish and returns the counts. `handler` runs at most once
    /// per key while the key's record lives; its output is stored, and handed to nobody
    /// again (a redelivery is acked without running it).
    pub async fn run<H, Fut, T, E>(
        &self,
        consumer: &PullConsumer,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError>
    where
        H: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, HandlerError<E>>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        self.options.check()?;
        self.drive(consumer, plain(handler), stop).await
    }

    /// [`run`](Self::run) in atomic mode: `handler` is handed a transaction of the engine's
    /// store (idem-runtime's `Tx<Sqlite>` or `Tx<Postgres>`), and its writes commit together
    /// with the key's record, or neither does. A crash at any point leaves both or neither;
    /// a failure, a panic or the handler deadline rolls them back.
    pub async fn run_atomic<H, L, Fut, T, E>(
        &self,
        consumer: &PullConsumer,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError>
    where
        H: Fn(L, Delivery) -> Fut + Send + Sync + 'static,
        L: Lent,
        Fut: Future<Output = Result<T, HandlerError<E>>> + Send + 'static,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        self.options.check_atomic::<L>()?;
        self.drive(consumer, atomic(handler), stop).await
    }

    /// The pull loop: a pull for as many messages as there is room for, each processed on a
    /// task of its own; on `stop`, the messages of the pull under way are handed back at once
    /// and the running ones finish.
    async fn drive<W: Work<Delivery>>(
        &self,
        consumer: &PullConsumer,
        work: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        let ack_wait = match consumer.cached_info().config.ack_wait {
            Duration::ZERO => DEFAULT_ACK_WAIT,
            ack_wait => ack_wait,
        };
        let heartbeat = (ack_wait / 3).max(Duration::from_millis(100));
        let options = Arc::new(self.options.clone());
        let work = Arc::new(work);
        let room = Arc::new(Semaphore::new(options.concurrency_limit()));
        let mut running = JoinSet::new();
        let mut stop = std::pin::pin!(stop.fuse());
        let mut stopping = false;
        // The connection the answers go out on, flushed before returning: a process that exits
        // right after `run` must not leave its last acks in the client's buffer.
        let mut client = None;
        while !stopping {
            let first = tokio::select! {
                _ = &mut stop => break,
                permit = Arc::clone(&room).acquire_owned() => permit.expect("never closed"),
            };
            let wanted = room.available_permits() + 1;
            let pull = consumer
                .batch()
                .max_messages(wanted)
                .expires(PULL_WAIT)
                .messages()
                .await;
            let mut batch = match pull {
                Ok(batch) => batch,
                Err(error) => {
                    tracing::warn!(%error, "pull failed; pulling again shortly");
                    drop(first);
                    tokio::select! {
                        _ = &mut stop => break,
                        _ = tokio::time::sleep(PULL_RETRY) => continue,
                    }
                }
            };
            let mut first = Some(first);
            loop {
                let next = tokio::select! {
                    _ = &mut stop, if !stopping => { stopping = true; continue }
                    next = batch.next() => next,
                };
                let message = match next {
                    None => break,
                    Some(Ok(message)) => message,
                    Some(Err(error)) => {
                        tracing::warn!(%error, "pull ended early");
                        break;
                    }
                };
                client.get_or_insert_with(|| message.context.client());
                if stopping {
                    // Pulled after the stop: handed back for another consumer at once.
                    let _ = message.ack_with(AckKind::Nak(None)).await;
                    continue;
                }
                let permit = match first.take() {
                    Some(permit) => permit,
                    None => Arc::clone(&room)
                        .acquire_owned()
                        .await
                        .expect("never closed"),
                };
                let (options, counters, work) = (
                    Arc::clone(&options),
                    Arc::clone(&self.counters),
                    Arc::clone(&work),
                );
                let key_from = self.key_from;
                running.spawn(async move {
                    process(&options, key_from, &counters, &*work, message, heartbeat).await;
                    drop(permit);
                });
            }
            while running.try_join_next().is_some() {}
        }
        tracing::info!(
            running = running.len(),
            "stopping: letting the running messages finish"
        );
        while running.join_next().await.is_some() {}
        if let Some(client) = client {
            let flushed = tokio::time::timeout(FLUSH_WAIT, client.flush()).await;
            if !matches!(flushed, Ok(Ok(()))) {
                tracing::warn!(
                    "the last answers may not have reached JetStream; it redelivers those"
                );
            }
        }
        Ok(self.counts())
    }
}
