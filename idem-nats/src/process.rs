//! One delivery, start to ack: its key, its fingerprint, the engine's run with `in_progress`
//! heartbeats, and the answer the broker gets.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use idem_consumer::{
    Counters, Disposition, Ended, Keying, Options, PayloadDigest, Run, Work, judge,
};
use tokio::time::{Instant, interval_at};
use tracing::Instrument;

use crate::key::{self, KeyFrom, NatsKeySource};
use crate::message::{DIGEST_DOMAIN, NatsDelivery};

/// Processes one delivery and answers the broker: ack once the output is stored (or was stored
/// before), `nak` with a delay when the key runs elsewhere or the run failed, `AckTerm` when no
/// delivery can succeed.
pub(crate) async fn process<W: Work<NatsDelivery>>(
    options: &Arc<Options>,
    key_from: KeyFrom,
    counters: &Counters,
    work: &W,
    message: jetstream::Message,
    heartbeat: Duration,
) {
    let Ok(info) = message.info() else {
        // Not a JetStream delivery (no ack subject): there is nothing to answer.
        tracing::warn!(subject = %message.subject, "message without JetStream metadata ignored");
        counters.ended(Ended::Failed);
        return;
    };
    let (stream, sequence, delivered) =
        (info.stream.to_owned(), info.stream_sequence, info.delivered);
    let key_header = options.idempotency().header_name().as_str().to_owned();
    // Every line logged for this delivery names it (never its key: keys are not logged).
    let span =
        tracing::warn_span!("delivery", %stream, sequence, delivered, subject = %message.subject);
    let derived = key::derive(
        key_from,
        &key_header,
        message.headers.as_ref(),
        &stream,
        sequence,
    );
    let (key, source) = derived.map_or((None, NatsKeySource::None), |(k, s)| (Some(k), s));
    let (key, protected) = match span.in_scope(|| Keying::of(options, counters, key)) {
        Keying::Key(key) => (key, true),
        Keying::Unprotected(throwaway) => (throwaway, false),
        Keying::Terminate => return answer(&message, counters, AckKind::Term).await,
    };
    let delivery = NatsDelivery {
        subject: message.subject.to_string(),
        payload: message.payload.clone(),
        headers: message.headers.clone(),
        key: protected.then(|| key.clone()),
        key_source: source,
        stream: stream.clone(),
        stream_sequence: sequence,
        delivered,
    };
    let run = Run {
        options: Arc::clone(options),
        key: key.clone(),
        protected,
        digest: PayloadDigest::of(DIGEST_DOMAIN, &message.payload),
        delivery,
    };
    let ran = with_heartbeats(&message, counters, work.run(run), heartbeat)
        .instrument(span.clone())
        .await;
    let kind = match span.in_scope(|| judge(options, counters, ran)) {
        Disposition::Retry(delay) => AckKind::Nak(Some(delay)),
        Disposition::Terminate => AckKind::Term,
        Disposition::Ack => AckKind::Ack,
    };
    answer(&message, counters, kind).await;
}

/// Awaits the run, telling JetStream every `every` that the message is still being worked on
/// (`+WPI`), so its ack wait does not run out under a slow handler.
async fn with_heartbeats<T>(
    message: &jetstream::Message,
    counters: &Counters,
    run: impl Future<Output = T>,
    every: Duration,
) -> T {
    let mut run = std::pin::pin!(run);
    let mut beats = interval_at(Instant::now() + every, every);
    loop {
        tokio::select! {
            ran = &mut run => return ran,
            _ = beats.tick() => answer(message, counters, AckKind::Progress).await,
        }
    }
}

/// Sends `kind` for the delivery; a failure is counted (JetStream redelivers an unanswered
/// message once its ack wait runs out, and the engine answers that delivery in turn).
async fn answer(message: &jetstream::Message, counters: &Counters, kind: AckKind) {
    if let Err(error) = message.ack_with(kind).await {
        tracing::warn!(%error, ?kind, "could not answer JetStream");
        counters.ack_error();
    }
}
