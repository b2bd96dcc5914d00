//! [`NatsConsumer`]: pulls from a JetStream pull consumer, at most `concurrency` messages at a time,
//! each processed once per key, until told to stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::AckKind;
use async_nats::jetstream::consumer::PullConsumer;
use futures_util::{FutureExt, StreamExt};
use idem_consumer::{ConsumeError, Core, Counts, Options, Work};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::key::KeyFrom;
use crate::message::NatsDelivery;
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
#[derive(Debug, Clone)]
pub struct NatsConsumer {
    core: Core,
    key_from: KeyFrom,
}

impl NatsConsumer {
    /// A consumer with `options` (the engine, the operation, concurrency, the handler's
    /// deadline), keyed as [`KeyFrom::Any`] says.
    pub fn new(options: Options) -> Self {
        Self {
            core: Core::new(options),
            key_from: KeyFrom::default(),
        }
    }

    /// Which parts of a message may give its key (default [`KeyFrom::Any`]).
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.key_from = key_from;
        self
    }

    /// Its options and counters: [`Core::counts`] (how many deliveries ended each way so
    /// far), [`Core::stop_when`].
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Consumes `consumer`'s messages with `handler` until `stop` completes, then lets the
    /// messages being processed finish and returns the counts. The handler is [`plain`] (its
    /// output is stored) or [`atomic`] (handed a transaction of the engine's store,
    /// idem-runtime's `Tx<Sqlite>`, `Tx<Postgres>` or `Tx<MySql>`, whose writes commit with
    /// the key's record, or neither does: a crash at any point leaves both or neither, and a
    /// failure, a panic or the handler deadline rolls them back). It runs at most once per key
    /// while the key's record lives; a redelivery is acked without running it.
    ///
    /// [`plain`]: idem_consumer::plain
    /// [`atomic`]: idem_consumer::atomic
    pub async fn run<W: Work<NatsDelivery>>(
        &self,
        consumer: &PullConsumer,
        handler: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        handler.check(self.core.options())?;
        self.drive(consumer, handler, stop).await
    }

    /// The pull loop: a pull for as many messages as there is room for, each processed on a
    /// task of its own; on `stop`, the messages of the pull under way are handed back at once
    /// and the running ones finish.
    async fn drive<W: Work<NatsDelivery>>(
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
        let options = Arc::new(self.core.options().clone());
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
                    Arc::clone(self.core.counters()),
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
        Ok(self.core.counts())
    }
}
