//! What became of a batch's records: [`BatchReport`], and the `batchItemFailures` answer
//! SQS reads from it.

use std::fmt;

use aws_lambda_events::event::sqs::SqsBatchResponse;

/// What became of each record of a batch, in the batch's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// One entry per record.
    pub records: Vec<RecordReport>,
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReport {
    /// The record's `messageId` (SQS always sends one).
    pub message_id: Option<String>,
    /// Processed, skipped, rejected or failed.
    pub outcome: RecordOutcome,
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The effect ran now, and its output is stored under the record's key.
    Processed,
    /// The key's effect had already run (a redelivery, or a retried send): it did not run
    /// again. Not a failure: SQS deletes the record.
    Skipped,
    /// No delivery can succeed: no idempotency key can be derived from the record (see
    /// [`NoKey`](super::NoKey)), or the effect [rejects](super::Effect::rejects) it (its body
    /// is not what the effect takes, or holds a value the database refuses). Reported done, so
    /// SQS deletes it rather than delivering it again until the dead-letter queue; the log says
    /// why, and nothing is stored, so a duplicate is rejected the same way.
    Rejected(String),
    /// Not done: reported in `batchItemFailures`, so SQS delivers the record again after its
    /// visibility timeout (and, past the queue's `maxReceiveCount`, to its dead-letter queue).
    Failed(Failure),
}

/// Why a record failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Another invocation holds the key and is running its effect now: SQS redelivers the
    /// record later, when that run has finished (then it is skipped) or its lease has lapsed.
    InFlight,
    /// The idempotency store failed, so nothing was claimed and the effect did not run (fail
    /// closed). After a store failure the batch's later records are not tried: they fail with
    /// this too.
    StoreUnavailable(String),
    /// The effect returned an error: the key was released, so a redelivery runs it again.
    Effect(String),
    /// Anything else the engine refused (a lease lost to a takeover, a stored output that no
    /// longer decodes): the record is delivered again.
    Other(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InFlight => f.write_str("in flight in another invocation"),
            Self::StoreUnavailable(why) => write!(f, "idempotency store unavailable: {why}"),
            Self::Effect(why) => write!(f, "the effect failed: {why}"),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// A record without a `messageId` failed: `batchItemFailures` cannot name it, so the whole
/// batch is reported failed (its records already done are skipped on redelivery).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a record without a messageId failed ({0}): the whole batch is delivered again")]
pub struct UnnamedFailure(pub Failure);

impl BatchReport {
    /// The records that were processed now.
    pub fn processed(&self) -> usize {
        self.count(|outcome| matches!(outcome, RecordOutcome::Processed))
    }

    /// The records that were skipped, already done.
    pub fn skipped(&self) -> usize {
        self.count(|outcome| matches!(outcome, RecordOutcome::Skipped))
    }

    /// The records that were rejected, as no delivery can succeed.
    pub fn rejected(&self) -> usize {
        self.count(|outcome| matches!(outcome, RecordOutcome::Rejected(_)))
    }

    /// The records that failed, with why.
    pub fn failures(&self) -> impl Iterator<Item = (Option<&str>, &Failure)> {
        self.records
            .iter()
            .filter_map(|record| match &record.outcome {
                RecordOutcome::Failed(failure) => Some((record.message_id.as_deref(), failure)),
                _ => None,
            })
    }

    /// What the function answers SQS: the failed records' ids as `batchItemFailures` (the
    /// event source mapping needs `FunctionResponseTypes: ["ReportBatchItemFailures"]`), or an
    /// error when a failed record has no id to name.
    pub fn response(&self) -> Result<SqsBatchResponse, UnnamedFailure> {
        let mut response = SqsBatchResponse::default();
        for (message_id, failure) in self.failures() {
            match message_id {
                Some(id) if !id.is_empty() => response.add_failure(id),
                _ => return Err(UnnamedFailure(failure.clone())),
            }
        }
        Ok(response)
    }

    fn count(&self, select: impl Fn(&RecordOutcome) -> bool) -> usize {
        self.records.iter().filter(|r| select(&r.outcome)).count()
    }
}
