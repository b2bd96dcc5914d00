//! An idempotent SQS batch consumer for AWS Lambda: each record's [`Effect`] runs at most once
//! per key, records already done are skipped, and only the failed ones are reported back as
//! `batchItemFailures`, so SQS redelivers just those.
//!
//! ```
//! use aws_lambda_events::event::sqs::SqsEvent;
//! use idem_examples::sqs::{Consumer, KeyFrom, OrdersTable};
//! use idem_runtime::{Idempotency, store::SqliteStore};
//! use lambda_runtime::{Context, LambdaEvent};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lambda_runtime::Error> {
//! let db = sqlx::SqlitePool::connect("sqlite::memory:").await?;
//! let idempotency = Idempotency::builder()
//!     .store(SqliteStore::from_pool(db.clone()).await?)
//!     .build()?;
//! let orders = OrdersTable::sqlite(db).await?;
//! let consumer = Consumer::new(idempotency, "orders.fulfil", orders)
//!     .key_from(KeyFrom::Field("order_id".into()));
//!
//! let event: SqsEvent = serde_json::from_str(r#"{"Records": [
//!     {"messageId": "m-1", "body": "{\"order_id\": \"o-7\", \"sku\": \"mug\", \"quantity\": 1}"},
//!     {"messageId": "m-2", "body": "{\"order_id\": \"o-7\", \"sku\": \"mug\", \"quantity\": 1}"},
//!     {"messageId": "m-3", "body": "{\"sku\": \"mug\", \"quantity\": 1}"}
//! ]}"#)?;
//! let response = consumer.handle(LambdaEvent::new(event, Context::default())).await?;
//! // m-2 is a retried send of m-1 (one order, one shipment); m-3 has no order_id, so no
//! // delivery of it can be keyed: it is rejected (logged), not failed.
//! assert!(response.batch_item_failures.is_empty());
//! assert_eq!(consumer.effect().shipments("o-7").await?, 1);
//! # Ok(()) }
//! ```
//!
//! # What happens to a record
//!
//! Records are processed one after the other, in the batch's order, each through
//! [`Idempotency::operation`] under its key ([`KeyFrom`]):
//!
//! | the key's record | the record is | reported |
//! |---|---|---|
//! | absent or expired | processed: the effect runs, its output is stored | done |
//! | completed | skipped: the effect does not run | done |
//! | in flight (another invocation runs it) | left alone | failed: redelivered later |
//! | no key (no `messageId`, field missing, body not JSON) | left alone: nothing claimed or stored, the effect does not run; a log line says why | done: SQS does not deliver it again |
//! | the effect fails | the key is released | failed: the redelivery runs it again |
//! | the effect [rejects](Effect::rejects) the record (its body is not an order, a value the database refuses) | the key is released, with a log line saying why | done: SQS does not deliver it again |
//! | the store fails | nothing claimed, the effect does not run (fail closed) | failed, and so are the batch's later records, not tried |
//!
//! A failure never stops the other records. The answer names the failed records'
//! `messageId`s in `batchItemFailures`; a failed record without one (SQS always sends one)
//! fails the whole invocation instead, so the batch comes back whole and its done records are
//! skipped.
//!
//! # What it promises
//!
//! While a key's record lives ([`Consumer::ttl`], 24 hours by default: keep it above the
//! queue's retention, or the longest a producer retries), its effect runs to completion at
//! most once, whatever SQS redelivers and however many invocations run at once. An invocation
//! that dies mid-effect leaves the key in flight until its lease lapses: through
//! [`Consumer::handle`] the lease ends with the invocation's deadline (plus a second), so a
//! timed-out invocation's records free as soon as it can no longer be running; otherwise the
//! engine's `lease` (30 s).
//! The redelivery after that runs the effect again, so an effect that can be cut off half-way
//! should be a transaction. On Lambda, build the engine with
//! [`background_work(false)`](idem_runtime::Builder::background_work), as `sqs-orders` does:
//! every write then settles before the batch is answered. Standard queues only: a FIFO
//! queue also needs the records after a failed one in its message group reported failed, which
//! this consumer does not do.

mod effect;
mod key;
mod orders;
mod report;

use std::borrow::Cow;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use idem_runtime::{Idempotency, InvocationDeadline, OperationError, Outcome};
use lambda_runtime::LambdaEvent;

pub use effect::{Effect, Message};
pub use key::{KeyFrom, NoKey, ParseKeyFromError};
pub use orders::{Fulfilment, Order, OrderError, OrdersTable};
pub use report::{BatchReport, Failure, RecordOutcome, RecordReport, UnnamedFailure};

/// Processes SQS batches through an [`Effect`], once per key: see the [module](self).
///
/// Cheap to clone (the engine and the effect are shared).
#[derive(Debug)]
pub struct Consumer<E> {
    idempotency: Idempotency,
    effect: Arc<E>,
    operation: Cow<'static, str>,
    scope: String,
    key_from: KeyFrom,
    ttl: Duration,
}

impl<E> Clone for Consumer<E> {
    fn clone(&self) -> Self {
        Self {
            idempotency: self.idempotency.clone(),
            effect: Arc::clone(&self.effect),
            operation: self.operation.clone(),
            scope: self.scope.clone(),
            key_from: self.key_from.clone(),
            ttl: self.ttl,
        }
    }
}

impl<E: Effect> Consumer<E> {
    /// A consumer running `effect` as the idempotent operation `operation` (its records' name,
    /// such as `"orders.fulfil"`: keep it stable across deployments), keyed by message id.
    ///
    /// # Panics
    /// When `operation` is not an operation name (1..=128 bytes, no control characters, no
    /// whitespace at either end).
    #[track_caller]
    pub fn new(
        idempotency: Idempotency,
        operation: impl Into<Cow<'static, str>>,
        effect: E,
    ) -> Self {
        let operation = operation.into();
        let _ = idempotency.operation(operation.clone()); // checks the name now, not per record
        Self {
            idempotency,
            effect: Arc::new(effect),
            operation,
            scope: String::new(),
            key_from: KeyFrom::default(),
            ttl: idem_runtime::Operation::DEFAULT_TTL,
        }
    }

    /// Where each record's key comes from (default [`KeyFrom::MessageId`]).
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.key_from = key_from;
        self
    }

    /// Whose keys these are: consumers with different scopes never share a record (default:
    /// one global scope).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// How long a done record's key is remembered, and its duplicates skipped (default 24 h).
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let _ = self.idempotency.operation(self.operation.clone()).ttl(ttl); // checks the bounds
        self.ttl = ttl;
        self
    }

    /// The effect.
    pub fn effect(&self) -> &E {
        &self.effect
    }

    /// The Lambda handler: processes the batch and answers the failed records'
    /// `batchItemFailures`. Give it to `lambda_runtime::run` with `service_fn`.
    ///
    /// The records' leases end with the invocation (its context's deadline, plus a margin; see
    /// [`InvocationDeadline`]): a record whose invocation timed out mid-effect frees when that
    /// invocation can no longer be running, and its redelivery runs it.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, lambda_runtime::Error> {
        let deadline = idem_runtime::lambda::invocation_deadline(&event.context);
        Ok(self
            .process_until(event.payload, deadline)
            .await
            .response()?)
    }

    /// Processes a batch: each record once per key, in order; what became of each.
    pub async fn process(&self, event: SqsEvent) -> BatchReport {
        self.process_until(event, None).await
    }

    /// [`process`](Self::process), the records' leases ended by `deadline` when given.
    async fn process_until(
        &self,
        event: SqsEvent,
        deadline: Option<InvocationDeadline>,
    ) -> BatchReport {
        let mut report = BatchReport::default();
        let mut store_down = None;
        for record in event.records {
            let outcome = match &store_down {
                Some(why) => RecordOutcome::Failed(Failure::StoreUnavailable(format!(
                    "not tried, the store failed earlier in this batch: {why}"
                ))),
                None => self.process_record(&record, deadline).await,
            };
            let message_id = record.message_id;
            let id = message_id.as_deref().unwrap_or("");
            match &outcome {
                RecordOutcome::Processed => tracing::info!(message_id = id, "record processed"),
                RecordOutcome::Skipped => {} // logged with the first run's output
                RecordOutcome::Rejected(why) => tracing::warn!(
                    message_id = id,
                    reason = %why,
                    "record rejected: no delivery can succeed, so it is reported done"
                ),
                RecordOutcome::Failed(failure) => {
                    if let (Failure::StoreUnavailable(why), None) = (failure, &store_down) {
                        store_down = Some(why.clone());
                    }
                    tracing::warn!(message_id = id, %failure, "record failed: SQS delivers it again")
                }
            }
            report.records.push(RecordReport {
                message_id,
                outcome,
            });
        }
        tracing::info!(
            processed = report.processed(),
            skipped = report.skipped(),
            rejected = report.rejected(),
            failed = report.failures().count(),
            "batch done"
        );
        report
    }

    async fn process_record(
        &self,
        record: &SqsMessage,
        deadline: Option<InvocationDeadline>,
    ) -> RecordOutcome {
        let body = record.body.clone().unwrap_or_default();
        let derived = match self.key_from.derive(record.message_id.as_deref(), &body) {
            Ok(derived) => derived,
            // No delivery of this record can have a key: failing it would have SQS deliver it
            // again and again, until its dead-letter queue. Nothing is claimed or stored.
            Err(why) => return RecordOutcome::Rejected(format!("no idempotency key: {why}")),
        };
        let message = Message {
            message_id: record.message_id.clone().unwrap_or_default(),
            body,
        };
        let effect = Arc::clone(&self.effect);
        let mut operation = self
            .idempotency
            .operation(self.operation.clone())
            .scope(self.scope.clone())
            .ttl(self.ttl);
        if let Some(deadline) = deadline {
            operation = operation.deadline(deadline);
        }
        let outcome = operation
            .run(derived.key, derived.input, move |_| async move {
                effect.apply(message).await
            })
            .await;
        match outcome {
            Ok(Outcome::Fresh(_)) => RecordOutcome::Processed,
            Ok(Outcome::Replayed(output)) => {
                let first_run = serde_json::to_string(&output).unwrap_or_default();
                let message_id = record.message_id.as_deref().unwrap_or("");
                tracing::info!(message_id, %first_run, "record skipped: already processed");
                RecordOutcome::Skipped
            }
            Err(OperationError::Failed(error)) if self.effect.rejects(&error) => {
                RecordOutcome::Rejected(chain(&error))
            }
            Err(error) => RecordOutcome::Failed(failure(error)),
        }
    }
}

/// The failure an operation's error stands for.
fn failure<E: StdError + 'static>(error: OperationError<E>) -> Failure {
    match error {
        OperationError::InFlight { .. } => Failure::InFlight,
        OperationError::Unavailable(error) => Failure::StoreUnavailable(chain(&error)),
        OperationError::Failed(error) => Failure::Effect(chain(&error)),
        other => Failure::Other(chain(&other)),
    }
}

/// An error and its sources, `: `-separated.
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
