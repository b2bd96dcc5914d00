//! One delivery, start to ack: its key, its fingerprint, the engine's run with `in_progress`
//! heartbeats, and the answer the broker gets.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use idem_core::operation::{OperationError, Outcome};
use tokio::time::{Instant, interval_at};

use crate::counts::{Counters, Ended};
use crate::key::{self, KeySource};
use crate::message::{Delivery, HandlerError, PayloadDigest};
use crate::settings::{Keyless, Settings};
use crate::work::{Failure, Ran, Run, Work};

/// Processes one delivery and answers the broker: ack once the output is stored (or was stored
/// before), `nak` with a delay when the key runs elsewhere or the run failed, `AckTerm` when no
/// delivery can succeed.
pub(crate) async fn process<W: Work>(
    settings: &Arc<Settings>,
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
    let key_header = settings.idempotency.header_name().as_str().to_owned();
    let derived = key::derive(
        settings.key_from,
        &key_header,
        message.headers.as_ref(),
        &stream,
        sequence,
    );
    let (key, source, protected) = match (derived, settings.keyless) {
        (Some((key, source)), _) => (key, source, true),
        (None, Keyless::Unprotected) => {
            counters.unprotected();
            let throwaway = format!("unprotected:{}", uuid::Uuid::new_v4());
            (throwaway, KeySource::None, false)
        }
        (None, Keyless::Terminate) => {
            tracing::warn!(
                %stream, sequence, subject = %message.subject,
                "message terminated: it has no idempotency key (no {key_header} or {} header)",
                key::NATS_MSG_ID
            );
            counters.ended(Ended::Keyless);
            answer(&message, counters, AckKind::Term).await;
            return;
        }
    };
    let delivery = Delivery {
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
        settings: Arc::clone(settings),
        key: key.clone(),
        protected,
        digest: PayloadDigest::of(&message.payload),
        delivery,
    };
    let ran = with_heartbeats(&message, counters, work.run(run), heartbeat).await;
    let span = tracing::info_span!("delivery", %stream, sequence, delivered, key = %key, source = source.as_str());
    let (ended, kind) = span.in_scope(|| judge(settings, ran));
    counters.ended(ended);
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

/// How the delivery ended, and what the broker is told, logged.
fn judge<T, E: std::fmt::Display>(settings: &Settings, ran: Ran<T, E>) -> (Ended, AckKind) {
    let again = AckKind::Nak(Some(settings.retry_delay));
    match ran {
        Ok(Outcome::Fresh(_)) => {
            tracing::debug!("message processed");
            (Ended::Processed, AckKind::Ack)
        }
        Ok(Outcome::Replayed(_)) => {
            tracing::info!("message skipped: its key was processed before");
            (Ended::Replayed, AckKind::Ack)
        }
        Err(OperationError::InFlight { retry_after }) => {
            tracing::debug!("message handed back: its key is being processed elsewhere");
            (Ended::HandedBack, AckKind::Nak(Some(retry_after)))
        }
        Err(OperationError::Conflict) => {
            tracing::warn!(
                "message terminated: its idempotency key was used before with another payload"
            );
            (Ended::KeyReused, AckKind::Term)
        }
        Err(OperationError::Failed(Failure::Handler(HandlerError::Poison(error)))) => {
            tracing::warn!(%error, "message terminated: the handler says no delivery can succeed");
            (Ended::Poison, AckKind::Term)
        }
        Err(OperationError::InvalidKey(error)) => {
            tracing::warn!(%error, "message terminated: its idempotency key is invalid");
            (Ended::Keyless, AckKind::Term)
        }
        // The record is complete, but its output is not this program's type: the work was done.
        Err(OperationError::Corrupt(error)) => {
            tracing::warn!(%error, "message acked: processed before, its stored output does not decode");
            (Ended::Replayed, AckKind::Ack)
        }
        Err(OperationError::Failed(failure)) => {
            tracing::warn!(error = %failure, "message handed back: the handler failed");
            (Ended::Failed, again)
        }
        Err(error) => {
            tracing::warn!(%error, "message handed back: it was not processed");
            (Ended::Failed, again)
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
