//! [`Consumer`]: consumes a queue on a lapin channel, its prefetch set to the concurrency,
//! each message processed once per key, until told to stop.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use idem_consumer::{ConsumeError, Counters, Counts, HandlerError, Options, Work, atomic, plain};
use idem_core::operation::Lent;
use lapin::Channel;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;

use crate::message::Delivery;
use crate::process::process;

/// How long a stop waits for the broker to end the consumption it cancelled.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// An idempotent RabbitMQ consumer: see the [crate](crate) documentation.
#[derive(Clone)]
pub struct Consumer {
    options: Options,
    counters: Arc<Counters>,
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("options", &self.options)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A consumer with `options` (the engine, the operation, concurrency, the handler's
    /// deadline).
    pub fn new(options: Options) -> Self {
        Self {
            options,
            counters: Arc::default(),
        }
    }

    /// How many deliveries ended each way so far.
    pub fn counts(&self) -> Counts {
        self.counters.snapshot()
    }

    /// Consumes `queue` on `channel` with `handler` until `stop` completes, then cancels the
    /// consumption, requeues what the broker sent after that, lets the messages being
    /// processed finish, and returns the counts. The channel's prefetch is set to the
    /// concurrency. `handler` runs at most once per key while the key's record lives.
    pub async fn run<H, Fut, T, E>(
        &self,
        channel: &Channel,
        queue: &str,
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
        self.drive(channel, queue, plain(handler), stop).await
    }

    /// [`run`](Self::run) in atomic mode: `handler` is handed a transaction of the engine's
    /// store (idem-runtime's `Tx<Sqlite>` or `Tx<Postgres>`), and its writes commit together
    /// with the key's record, or neither does.
    pub async fn run_atomic<H, L, Fut, T, E>(
        &self,
        channel: &Channel,
        queue: &str,
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
        self.drive(channel, queue, atomic(handler), stop).await
    }

    /// The consume loop: each delivery processed on a task of its own (the prefetch bounds
    /// how many); on `stop`, the consumption is cancelled and the running ones finish.
    async fn drive<W: Work<Delivery>>(
        &self,
        channel: &Channel,
        queue: &str,
        work: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        let broker = |error: lapin::Error| ConsumeError::Broker(Box::new(error));
        let prefetch = u16::try_from(self.options.concurrency_limit()).unwrap_or(u16::MAX);
        channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
            .map_err(broker)?;
        let tag = format!("idem-{}", uuid::Uuid::new_v4());
        let mut deliveries = channel
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(broker)?;
        let (options, work) = (Arc::new(self.options.clone()), Arc::new(work));
        let mut running = JoinSet::new();
        let mut stop = std::pin::pin!(stop.fuse());
        let mut stopping = false;
        let mut lost = None;
        loop {
            let next = tokio::select! {
                _ = &mut stop, if !stopping => {
                    stopping = true;
                    if let Err(error) = channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()).await {
                        tracing::warn!(%error, "could not cancel the consumption");
                    }
                    continue;
                }
                next = deliveries.next() => next,
                _ = tokio::time::sleep(CANCEL_WAIT), if stopping => None,
            };
            let delivery = match next {
                None => break,
                Some(Ok(delivery)) => delivery,
                Some(Err(error)) => {
                    tracing::warn!(%error, "the consumption ended");
                    lost = Some(error);
                    break;
                }
            };
            if stopping {
                // Sent after the stop: back to the queue for another consumer at once.
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                let _ = delivery.acker.nack(requeue).await;
                continue;
            }
            let (options, counters, work) = (
                Arc::clone(&options),
                Arc::clone(&self.counters),
                Arc::clone(&work),
            );
            running.spawn(async move { process(&options, &counters, &*work, delivery).await });
            while running.try_join_next().is_some() {}
        }
        tracing::info!(
            running = running.len(),
            "stopping: letting the running messages finish"
        );
        while running.join_next().await.is_some() {}
        match lost {
            Some(error) => Err(broker(error)),
            None => Ok(self.counts()),
        }
    }
}
