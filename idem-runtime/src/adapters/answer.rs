//! The engine's answer, as every face reads it: the work's own reply, a stored result to
//! replay, or the reason the engine answered itself. One mapping, so the faces cannot drift.

use std::panic::resume_unwind;
use std::time::Duration;

use idem_core::engine::{Answer, RolledBack};
use idem_core::error::StoreError;
use idem_core::rejection::Rejection;

/// What a face sends back for an attempt, before it is put in the face's own terms.
pub(crate) enum Settled<R, P> {
    /// The work's own reply (it ran in this attempt).
    Ran(R),
    /// A stored result, decoded.
    Replay(P),
    /// The engine's own answer.
    Refused(Rejection),
}

/// `answer` for a face; `retry_after` is the engine's, for answers that carry none of their
/// own. A panic of the work resumes here, on the caller's task.
pub(crate) fn settle<R, P, E>(answer: Answer<R, P, E>, retry_after: Duration) -> Settled<R, P> {
    let rejection = match answer {
        Answer::Ran(reply, _) => return Settled::Ran(reply),
        Answer::Replay(stored) => return Settled::Replay(stored),
        Answer::Panicked(panic) => resume_unwind(panic),
        Answer::RolledBack(RolledBack::LeaseLost) => Rejection::InProgress { retry_after },
        Answer::RolledBack(RolledBack::Failed(_) | RolledBack::Deadline(_))
        | Answer::Corrupt(_) => Rejection::StoreUnavailable { retry_after },
        Answer::Reused => Rejection::KeyReused,
        Answer::InFlight { retry_after } => Rejection::InProgress { retry_after },
        Answer::Unavailable {
            error: StoreError::Full { .. },
            retry_after,
        } => Rejection::StoreFull { retry_after },
        Answer::Unavailable { retry_after, .. } => Rejection::StoreUnavailable { retry_after },
    };
    Settled::Refused(rejection)
}
