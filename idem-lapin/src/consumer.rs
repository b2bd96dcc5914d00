//! [`RabbitConsumer`]: consumes a queue on a lapin channel, its prefetch set to the concurrency,
//! each message processed once per key, until told to stop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use idem_consumer::{ConsumeError, Core, Counts, Options, Work};
use lapin::Channel;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::task::JoinSet;

use crate::message::RabbitDelivery;
use crate::process::process;

/// How long a stop waits for the broker to end the consumption it cancelled.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// An idempotent RabbitMQ consumer: see the [crate](crate) documentation.
#[derive(Debug, Clone)]
pub struct RabbitConsumer {
    core: Core,
}

impl RabbitConsumer {
    /// A consumer with `options` (the engine, the operation, concurrency, the handler's
    /// deadline).
    pub fn new(options: Options) -> Self {
        Self {
            core: Core::new(options),
        }
    }

    /// Its options and counters: [`Core::counts`] (how many deliveries ended each way so
    /// far), [`Core::stop_when`].
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// Consumes `queue` on `channel` with `handler` until `stop` completes, then cancels the
    /// consumption, requeues what the broker sent after that, lets the messages being
    /// processed finish, and returns the counts. The channel's prefetch is set to the
    /// concurrency. The handler is [`plain`] (its output is stored) or [`atomic`] (handed a
    /// transaction of the engine's store, idem-runtime's `Tx<Sqlite>` or `Tx<Postgres>`,
    /// whose writes commit with the key's record, or neither does). It runs at most once per
    /// key while the key's record lives.
    ///
    /// [`plain`]: idem_consumer::plain
    /// [`atomic`]: idem_consumer::atomic
    pub async fn run<W: Work<RabbitDelivery>>(
        &self,
        channel: &Channel,
        queue: &str,
        handler: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        handler.check(self.core.options())?;
        self.drive(channel, queue, handler, stop).await
    }

    /// The consume loop: each delivery processed on a task of its own (the prefetch bounds
    /// how many); on `stop`, the consumption is cancelled and the running ones finish.
    async fn drive<W: Work<RabbitDelivery>>(
        &self,
        channel: &Channel,
        queue: &str,
        work: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError> {
        let broker = |error: lapin::Error| ConsumeError::Broker(Box::new(error));
        let prefetch = u16::try_from(self.core.options().concurrency_limit()).unwrap_or(u16::MAX);
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
        let (options, work) = (Arc::new(self.core.options().clone()), Arc::new(work));
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
                Arc::clone(self.core.counters()),
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
            None => Ok(self.core.counts()),
        }
    }
}
