//! What the engine's answer for one delivery means to the broker ([`Disposition`]) and to the counts
//! ([`Ended`]), logged once, the same way for every broker.

use std::time::Duration;

use idem_core::operation::{OperationError, Outcome};

use crate::counts::{Counters, Ended};
use crate::handler::HandlerError;
use crate::options::Options;
use crate::work::{HandlerFailure, Ran};

/// What a face tells its broker about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Done: its output is stored (now or before). JetStream `+ACK`, AMQP `basic.ack`.
    Ack,
    /// Not done: deliver it again after this long. JetStream `-NAK` with that delay; AMQP
    /// `basic.nack` with requeue after that pause.
    Retry(Duration),
    /// Never deliver it again: no delivery can succeed. JetStream `+TERM`; AMQP `basic.reject`
    /// without requeue.
    Terminate,
}

/// The answer for a delivery the engine ran (or refused), counted in `counters` and logged in
/// the caller's span.
pub fn judge<T, E: std::fmt::Display>(
    options: &Options,
    counters: &Counters,
    ran: Ran<T, E>,
) -> Disposition {
    let again = Disposition::Retry(options.retry_wait());
    let (ended, answer) = match ran {
        Ok(Outcome::Fresh(_)) => {
            tracing::debug!("message processed");
            (Ended::Processed, Disposition::Ack)
        }
        Ok(Outcome::Replayed(_)) => {
            tracing::info!("message skipped: its key was processed before");
            (Ended::Replayed, Disposition::Ack)
        }
        Err(OperationError::InFlight { retry_after }) => {
            tracing::debug!("message handed back: its key is being processed elsewhere");
            (Ended::HandedBack, Disposition::Retry(retry_after))
        }
        Err(OperationError::Conflict) => {
            tracing::warn!(
                "message terminated: its idempotency key was used before with another payload"
            );
            (Ended::KeyReused, Disposition::Terminate)
        }
        Err(OperationError::Failed(HandlerFailure::Handler(HandlerError::Poison(error)))) => {
            tracing::warn!(%error, "message terminated: the handler says no delivery can succeed");
            (Ended::Poison, Disposition::Terminate)
        }
        Err(OperationError::InvalidKey(error)) => {
            tracing::warn!(%error, "message terminated: its idempotency key is invalid");
            (Ended::Keyless, Disposition::Terminate)
        }
        // The record is complete, but its output is not this program's type: the work was done.
        Err(OperationError::Corrupt(error)) => {
            tracing::warn!(%error, "message acked: processed before, its stored output does not decode");
            (Ended::Replayed, Disposition::Ack)
        }
        Err(OperationError::Failed(failure)) => {
            tracing::warn!(error = %failure, "message handed back: the handler failed");
            (Ended::Failed, again)
        }
        Err(error) => {
            tracing::warn!(%error, "message handed back: it was not processed");
            (Ended::Failed, again)
        }
    };
    counters.ended(ended);
    answer
}
