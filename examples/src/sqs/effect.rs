//! What a record does: the [`Effect`] trait, and the [`Message`] it is handed.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// One SQS record, as an [`Effect`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The SQS message id (`messageId`), or empty when the event carried none.
    pub message_id: String,
    /// The message's body, as sent (`body`; empty when the event carried none).
    pub body: String,
}

/// The work a record stands for: an order fulfilled, an email sent, a row written.
///
/// [`Consumer`](super::Consumer) runs it at most once per key while the key's record lives:
/// its output is stored, and a duplicate of the record is skipped with that output instead of
/// running it again. An error releases the key, so the record is reported failed and SQS's
/// redelivery runs it again; unless the effect [`rejects`](Effect::rejects) it, as an error
/// no delivery can get past.
///
/// It runs to its end on a task of its own even if the invocation stops waiting, so the effect
/// and its future are `Send + 'static` (the consumer keeps it in an `Arc`).
pub trait Effect: Send + Sync + 'static {
    /// What a run produces, stored and handed back when a duplicate is skipped (a shipment id,
    /// say). It must deserialise what it serialised, across deployments of the function.
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// Why a run failed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Does the work for `message`.
    fn apply(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;

    /// Whether `error` says the record can never succeed, however often SQS delivers it: its
    /// body is not what the effect takes, or holds a value the database refuses for good. Such
    /// a record is reported done, with a log line saying why, instead of failed and delivered
    /// again until the queue's redrive policy moves it to the dead-letter queue. No error is,
    /// unless the effect says so.
    fn rejects(&self, error: &Self::Error) -> bool {
        let _ = error;
        false
    }
}
