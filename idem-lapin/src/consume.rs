//! The consume loop on one channel ([`Consuming::on`]), and what outlives a channel: the handler,
//! the room for `concurrency` messages, the deliveries still being processed, the stop.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::Fuse;
use idem_consumer::{Core, Counters, Options, Work};
use lapin::Channel;
use lapin::options::{BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::message::RabbitDelivery;
use crate::process::process;

/// How long a stop waits for the broker to end the consumption it cancelled.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// How a consumption on one channel ended.
pub(crate) enum Ended {
    /// Told to stop: the consumption was cancelled.
    Stopped,
    /// The broker ended the consumption without being asked (the queue was deleted, say).
    Cancelled,
    /// The channel or its connection failed, or the consumption could not start.
    Lost(lapin::Error),
}

/// What a consumer's loop keeps from one channel to the next.
pub(crate) struct Consuming<W, S: Future<Output = ()>> {
    options: Arc<Options>,
    counters: Arc<Counters>,
    work: Arc<W>,
    /// One permit per message processed at once: the prefetch bounds each channel, this bounds
    /// the channels together (a lost channel's messages may still be running).
    room: Arc<Semaphore>,
    running: JoinSet<()>,
    stop: Pin<Box<Fuse<S>>>,
    stopping: bool,
}

impl<W: Work<RabbitDelivery>, S: Future<Output = ()>> Consuming<W, S> {
    /// A loop for `core`'s consumer running `work` until `stop` completes.
    pub(crate) fn new(core: &Core, work: W, stop: S) -> Self {
        let options = Arc::new(core.options().clone());
        Self {
            room: Arc::new(Semaphore::new(options.concurrency_limit())),
            options,
            counters: Arc::clone(core.counters()),
            work: Arc::new(work),
            running: JoinSet::new(),
            stop: Box::pin(futures_util::FutureExt::fuse(stop)),
            stopping: false,
        }
    }

    /// Waits `pause`, or less if the stop comes first.
    pub(crate) async fn pause(&mut self, pause: Duration) {
        if self.stopping {
            return;
        }
        tokio::select! {
            _ = &mut self.stop => self.stopping = true,
            _ = tokio::time::sleep(pause) => {}
        }
    }

    /// Awaits `future`, unless the stop comes first (`None`).
    pub(crate) async fn unless_stopped<T>(&mut self, future: impl Future<Output = T>) -> Option<T> {
        if self.stopping {
            return None;
        }
        tokio::select! {
            _ = &mut self.stop => {
                self.stopping = true;
                None
            }
            done = future => Some(done),
        }
    }

    /// Consumes `queue` on `channel`, its prefetch set to the concurrency, each delivery
    /// processed on a task of its own, until the stop (the consumption is cancelled, and what
    /// the broker sent after that requeued) or the channel's end.
    pub(crate) async fn on(&mut self, channel: &Channel, queue: &str) -> Ended {
        let prefetch = u16::try_from(self.options.concurrency_limit()).unwrap_or(u16::MAX);
        if let Err(error) = channel
            .basic_qos(prefetch, BasicQosOptions::default())
            .await
        {
            return Ended::Lost(error);
        }
        let tag = format!("idem-{}", uuid::Uuid::new_v4());
        let consumed = channel
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await;
        let mut deliveries = match consumed {
            Ok(deliveries) => deliveries,
            Err(error) => return Ended::Lost(error),
        };
        let mut cancelled = false;
        loop {
            if self.stopping && !cancelled {
                cancelled = true;
                let cancel =
                    channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default());
                if let Err(error) = cancel.await {
                    tracing::warn!(%error, "could not cancel the consumption");
                }
            }
            let next = tokio::select! {
                _ = &mut self.stop, if !self.stopping => {
                    self.stopping = true;
                    continue;
                }
                next = deliveries.next() => next,
                _ = tokio::time::sleep(CANCEL_WAIT), if cancelled => return Ended::Stopped,
            };
            let delivery = match next {
                None if self.stopping => return Ended::Stopped,
                None => return Ended::Cancelled,
                Some(Ok(delivery)) => delivery,
                Some(Err(error)) => return Ended::Lost(error),
            };
            if self.stopping {
                // Sent after the stop: back to the queue for another consumer at once.
                let requeue = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                let _ = delivery.acker.nack(requeue).await;
                continue;
            }
            let (options, counters, work, room) = (
                Arc::clone(&self.options),
                Arc::clone(&self.counters),
                Arc::clone(&self.work),
                Arc::clone(&self.room),
            );
            self.running.spawn(async move {
                let _permit = room.acquire_owned().await.expect("never closed");
                process(&options, &counters, &*work, delivery).await;
            });
            while self.running.try_join_next().is_some() {}
        }
    }

    /// Lets the deliveries still being processed finish and answer.
    pub(crate) async fn finish(mut self) {
        tracing::info!(
            running = self.running.len(),
            "stopping: letting the running messages finish"
        );
        while self.running.join_next().await.is_some() {}
    }
}
