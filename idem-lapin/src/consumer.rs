//! [`RabbitConsumer`]: consumes a queue, its prefetch set to the concurrency, each message
//! processed once per key, until told to stop; on a channel it is given, or on channels it opens
//! again whenever the connection is lost.

use std::future::Future;
use std::time::Duration;

use idem_consumer::{ConsumeError, Core, Counts, Options, Work};
use lapin::Channel;

use crate::consume::{Consuming, Ended};
use crate::message::RabbitDelivery;

/// The first pause before opening a channel again after one was lost; each failed attempt
/// doubles it, up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
/// The longest pause between two attempts to reconnect.
const RECONNECT_MAX: Duration = Duration::from_secs(5);

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
    /// transaction of the engine's store, idem-runtime's `Tx<Sqlite>`, `Tx<Postgres>` or
    /// `Tx<MySql>`, whose writes commit with the key's record, or neither does). It runs at
    /// most once per key while the key's record lives.
    ///
    /// A lost channel or connection ends the call with [`ConsumeError::Broker`] once the
    /// running messages have finished (RabbitMQ requeues the ones they held):
    /// [`run_reconnecting`](Self::run_reconnecting) opens a new one instead.
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
        let mut consuming = Consuming::new(&self.core, handler, stop);
        let ended = consuming.on(channel, queue).await;
        consuming.finish().await;
        match ended {
            Ended::Lost(error) => {
                tracing::warn!(%error, "the consumption ended");
                Err(ConsumeError::Broker(Box::new(error)))
            }
            Ended::Stopped | Ended::Cancelled => Ok(self.core.counts()),
        }
    }

    /// Consumes `queue` as [`run`](Self::run) does, on a channel `connect` opens (a
    /// connection and a channel on it, and whatever the queue needs declared), and opens
    /// another whenever the channel or its connection is lost (the broker restarted, the
    /// network failed) or the broker cancelled the consumption: after a pause of 200 ms that
    /// doubles with each failed attempt up to 5 s, logged at WARN, until one succeeds or
    /// `stop` completes.
    ///
    /// What the lost channel held is requeued by RabbitMQ and delivered again; the messages
    /// still being processed finish, but their acks cannot reach the broker. A message is
    /// acked only once its output is stored, so its redelivery finds the key complete (acked,
    /// not run) or still in flight (handed back until it completes): nothing is processed
    /// twice. `concurrency` bounds the
    /// messages processed at once across the old channel and the new.
    ///
    /// Fails with [`ConsumeError::Broker`] only when the first `connect` does (the broker
    /// refuses the credentials, say), before anything is consumed.
    pub async fn run_reconnecting<W, C, F, E>(
        &self,
        mut connect: C,
        queue: &str,
        handler: W,
        stop: impl Future<Output = ()>,
    ) -> Result<Counts, ConsumeError>
    where
        W: Work<RabbitDelivery>,
        C: FnMut() -> F,
        F: Future<Output = Result<Channel, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        handler.check(self.core.options())?;
        let mut consuming = Consuming::new(&self.core, handler, stop);
        let mut channel = match consuming.unless_stopped(connect()).await {
            None => return Ok(self.core.counts()),
            Some(Ok(channel)) => channel,
            Some(Err(error)) => return Err(ConsumeError::Broker(Box::new(error))),
        };
        loop {
            match consuming.on(&channel, queue).await {
                Ended::Stopped => break,
                Ended::Cancelled => tracing::warn!("the broker cancelled the consumption"),
                Ended::Lost(error) => tracing::warn!(%error, "the channel to RabbitMQ was lost"),
            }
            drop(channel);
            match reconnect(&mut consuming, &mut connect).await {
                Some(reopened) => channel = reopened,
                None => break,
            }
        }
        consuming.finish().await;
        Ok(self.core.counts())
    }
}

/// Opens a channel with `connect`, pausing before each attempt (longer after each failure),
/// until one succeeds (`Some`) or the stop comes (`None`).
async fn reconnect<W, S, C, F, E>(
    consuming: &mut Consuming<W, S>,
    connect: &mut C,
) -> Option<Channel>
where
    W: Work<RabbitDelivery>,
    S: Future<Output = ()>,
    C: FnMut() -> F,
    F: Future<Output = Result<Channel, E>>,
    E: std::error::Error,
{
    let mut pause = RECONNECT_FIRST;
    loop {
        consuming.pause(pause).await;
        match consuming.unless_stopped(connect()).await? {
            Ok(channel) => {
                tracing::info!("reconnected to RabbitMQ: consuming again");
                return Some(channel);
            }
            Err(error) => {
                pause = (pause * 2).min(RECONNECT_MAX);
                tracing::warn!(%error, retry_in = ?pause, "could not reconnect to RabbitMQ");
            }
        }
    }
}
