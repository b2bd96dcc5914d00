//! [`Consumer`]: pulls from a JetStream pull consumer, at most `concurrency` messages at a time,
//! each processed once per key, until told to stop.

use std::borrow::Cow;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::PullConsumer;
use futures_util::{FutureExt, StreamExt};
use idem_core::idempotency::Idempotency;
use idem_core::operation::{Lent, OperationError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::counts::{Counters, Counts};
use crate::key::KeyFrom;
use crate::message::{Delivery, HandlerError};
use crate::process::process;
use crate::settings::{Keyless, Settings};
use crate::work::{Atomic, Plain, Work};

/// How long one pull request waits for messages before the next is sent; also the longest a
/// stop waits for a pull already sent.
const PULL_WAIT: Duration = Duration::from_secs(2);
/// How long to wait before pulling again after the broker refused a pull (it is restarting).
const PULL_RETRY: Duration = Duration::from_millis(500);
/// How long a stop waits for the last answers to reach the server.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// JetStream's default ack wait, when the consumer's info says none.
const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);

/// Why [`Consumer::run`] or [`Consumer::run_atomic`] did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsumeError {
    /// `run_atomic` on an engine whose store lends no transactions on the handler's database
    /// ([`OperationError::AtomicUnsupported`]).
    #[error("the consumer cannot run in atomic mode")]
    Atomic(#[source] OperationError<Infallible>),
    /// The scope value holds a NUL byte, which not every store can keep.
    #[error("invalid scope value: it holds a NUL byte")]
    InvalidScope,
}

/// An idempotent JetStream consumer: see the [crate](crate) documentation.
#[derive(Clone)]
pub struct Consumer {
    settings: Settings,
    counters: Arc<Counters>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("operation", &self.settings.name)
            .field("concurrency", &self.settings.concurrency)
            .field("handler_timeout", &self.settings.handler_timeout)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer running its handler as the idempotent operation `operation` (its records'
    /// name, such as `"orders.create"`: keep it stable across deployments).
    ///
    /// # Panics
    /// When `operation` is not an operation name (1..=128 bytes, no control characters, no
    /// whitespace at either end).
    #[track_caller]
    pub fn new(idempotency: Idempotency, operation: impl Into<Cow<'static, str>>) -> Self {
        let name = operation.into();
        let _ = idempotency.operation(name.clone()); // checks the name now, not per message
        Self {
            settings: Settings {
                idempotency,
                name,
                scope: String::new(),
                ttl: idem_core::operation::Operation::DEFAULT_TTL,
                concurrency: 8,
                handler_timeout: Duration::from_secs(30),
                retry_delay: Duration::from_secs(1),
                key_from: KeyFrom::default(),
                keyless: Keyless::default(),
            },
            counters: Arc::default(),
        }
    }

    /// Whose keys these are: consumers with different scopes never share a record (default:
    /// one global scope).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.settings.scope = scope.into();
        self
    }

    /// How long a processed key is remembered and its redeliveries skipped (default 24 h).
    /// Keep it above the longest a message can come back: the stream's `max_age`, or how long
    /// publishers retry.
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let _ = self.settings.idempotency.operation("ttl").ttl(ttl); // checks the bounds
        self.settings.ttl = ttl;
        self
    }

    /// How many messages are processed at once (default 8); the consumer pulls no more than
    /// it has room for.
    ///
    /// # Panics
    /// When `concurrency` is 0.
    #[track_caller]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        assert!(concurrency > 0, "Consumer::concurrency must be at least 1");
        self.settings.concurrency = concurrency;
        self
    }

    /// The handler's deadline (default 30 s): a handler that outlives it is stopped and treated
    /// as failed (in atomic mode its transaction rolls back), and the message handed back.
    /// Keep the engine's `transaction_timeout` (atomic mode) and `lease` at or above it.
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.settings.handler_timeout = limit;
        self
    }

    /// How long a message whose run failed waits before JetStream delivers it again (the
    /// delay of its `nak`; default 1 s). A key in flight elsewhere waits the engine's
    /// `retry_after` instead.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.settings.retry_delay = delay;
        self
    }

    /// Which parts of a message may give its key (default [`KeyFrom::Any`]).
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.settings.key_from = key_from;
        self
    }

    /// What becomes of a message without a key (default [`Keyless::Terminate`]).
    pub fn keyless(mut self, keyless: Keyless) -> Self {
        self.settings.keyless = keyless;
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
        let work = Plain {
            handler: Arc::new(handler),
            types: PhantomData,
        };
        self.drive(consumer, work, stop).await
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
        let engine = self.settings.idempotency.engine();
        let lends = engine
            .lending()
            .is_some_and(|lending| L::lent(&lending).is_ok());
        if !lends {
            return Err(ConsumeError::Atomic(OperationError::AtomicUnsupported {
                store: engine.store_name(),
                database: L::DATABASE,
            }));
        }
        let work = Atomic {
            handler: Arc::new(handler),
            types: PhantomData,
        };
        self.drive(consumer, work, stop).await
    }

    /// The pull loop: a pull for as many messages as there is room for, each processed on a
    /// task of its own; on `stop`, the messages of the pull under way are handed back at once
    /// and the running ones finish.
    async fn drive<W: Work>(
        &self,
        consumer: &PullConsumer,
        work: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        if self.settings.scope.contains('\0') {
            return Err(ConsumeError::InvalidScope);
        }
        let ack_wait = match consumer.cached_info().config.ack_wait {
            Duration::ZERO => DEFAULT_ACK_WAIT,
            ack_wait => ack_wait,
        };
        let heartbeat = (ack_wait / 3).max(Duration::from_millis(100));
        let settings = Arc::new(self.settings.clone());
        let work = Arc::new(work);
        let room = Arc::new(Semaphore::new(settings.concurrency));
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
                let (settings, counters, work) = (
                    Arc::clone(&settings),
                    Arc::clone(&self.counters),
                    Arc::clone(&work),
                );
                running.spawn(async move {
                    process(&settings, &counters, &*work, message, heartbeat).await;
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
