//! One AMQP delivery, start to answer: its key, its fingerprint, the engine's run, and
//! `basic.ack`, `basic.nack` with requeue after a pause, or `basic.reject` without requeue.

use std::sync::Arc;

use idem_consumer::{Counters, Disposition, Keying, Options, PayloadDigest, Run, Work, judge};
use lapin::Acker;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use tracing::Instrument;

use crate::key::{self, RabbitKeySource};
use crate::message::{DIGEST_DOMAIN, RabbitDelivery};

/// Processes one delivery and answers the broker: ack once the output is stored (or was
/// before), requeue after a pause when the key runs elsewhere or the run failed, reject without
/// requeue when no delivery can succeed.
pub(crate) async fn process<W: Work<RabbitDelivery>>(
    options: &Arc<Options>,
    counters: &Counters,
    work: &W,
    delivery: lapin::message::Delivery,
) {
    let lapin::message::Delivery {
        delivery_tag,
        exchange,
        routing_key,
        redelivered,
        properties,
        data,
        acker,
        ..
    } = delivery;
    // Every line logged for this delivery names it (never its key: keys are not logged).
    let span = tracing::warn_span!(
        "delivery", exchange = %exchange, routing_key = %routing_key, delivery_tag, redelivered
    );
    let key_header = options.idempotency().header_name().as_str().to_owned();
    let derived = key::derive(&properties, &key_header);
    let (key, source) = derived.map_or((None, RabbitKeySource::None), |(k, s)| (Some(k), s));
    let (key, protected) = match span.in_scope(|| Keying::of(options, counters, key)) {
        Keying::Key(key) => (key, true),
        Keying::Unprotected(throwaway) => (throwaway, false),
        Keying::Terminate => return answer(&acker, counters, Disposition::Terminate).await,
    };
    let run = Run {
        options: Arc::clone(options),
        digest: PayloadDigest::of(DIGEST_DOMAIN, &data),
        delivery: RabbitDelivery {
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
            payload: data,
            properties,
            key: protected.then(|| key.clone()),
            key_source: source,
            redelivered,
        },
        key,
        protected,
    };
    let ran = work.run(run).instrument(span.clone()).await;
    let verdict = span.in_scope(|| judge(options, counters, ran));
    answer(&acker, counters, verdict).await;
}

/// Tells the broker `verdict`; a message to deliver again is held for its pause first (AMQP
/// requeues at once). A failure is counted: the broker redelivers an unanswered message when
/// its channel closes, and the engine answers that delivery in turn.
async fn answer(acker: &Acker, counters: &Counters, verdict: Disposition) {
    let sent = match verdict {
        Disposition::Ack => acker.ack(BasicAckOptions::default()).await,
        Disposition::Retry(pause) => {
            tokio::time::sleep(pause).await;
            let requeue = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            acker.nack(requeue).await
        }
        Disposition::Terminate => acker.reject(BasicRejectOptions { requeue: false }).await,
    };
    if let Err(error) = sent {
        tracing::warn!(%error, ?verdict, "could not answer the broker");
        counters.ack_error();
    }
}
