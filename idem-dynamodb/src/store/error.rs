//! What the SDK's failures become: [`StoreError`]s that make the engine fail closed (503 and
//! `Retry-After`, the handler not run), and the conditional-check failures that are answers.

use std::fmt;
use std::time::Duration;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::item::Item;
use idem_core::error::StoreError;

/// A DynamoDB call that failed: which, DynamoDB's error code if it answered, and the SDK's
/// account of it with its causes.
#[derive(Debug)]
pub(super) struct DynamoDbError {
    operation: &'static str,
    code: Option<String>,
    message: String,
}

impl fmt::Display for DynamoDbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(
                f,
                "DynamoDB {} failed ({code}): {}",
                self.operation, self.message
            ),
            None => write!(f, "DynamoDB {} failed: {}", self.operation, self.message),
        }
    }
}

impl std::error::Error for DynamoDbError {}

/// Error codes DynamoDB answers when it sheds load. The SDK retries them within the store's
/// attempts; past those the request fails closed like any outage.
pub(super) const THROTTLED: [&str; 4] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "Throttling",
];

/// Whether DynamoDB refused an item for its size (`ValidationException`, "Item size has
/// exceeded the maximum allowed size", or "Item size to update has exceeded ...").
pub(super) fn is_item_too_large<E: ProvideErrorMetadata>(
    error: &SdkError<E, impl fmt::Debug>,
) -> bool {
    error.as_service_error().is_some_and(|e| {
        e.code() == Some("ValidationException")
            && e.message().is_some_and(|m| m.contains("Item size"))
    })
}

/// A failed call as a [`StoreError`]: the SDK's timeout (its operation timeout, set by the
/// store's builder) as [`StoreError::Timeout`], anything else (throttling once the SDK's retries
/// are spent, a refused connection, a 5xx, a missing table) as [`StoreError::Unavailable`].
pub(super) fn failed<E, R>(
    operation: &'static str,
    timeout: Duration,
    error: SdkError<E, R>,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    if matches!(error, SdkError::TimeoutError(_)) {
        return StoreError::Timeout(timeout);
    }
    let code = error
        .as_service_error()
        .and_then(|e| e.code())
        .map(str::to_owned);
    if let Some(code) = &code
        && THROTTLED.contains(&code.as_str())
    {
        tracing::warn!(operation, code, "DynamoDB throttled the idempotency store");
    }
    StoreError::unavailable(DynamoDbError {
        operation,
        code,
        message: DisplayErrorContext(&error).to_string(),
    })
}

/// A conditional write's failure: `Ok` with the item as it was (`None` when there was none) if
/// the condition did not hold (`ReturnValuesOnConditionCheckFailure=ALL_OLD`), the failure as a
/// [`StoreError`] otherwise. `old` picks the item out of the operation's
/// `ConditionalCheckFailedException`, and answers `None` for any other error.
pub(super) fn condition_failed<E, R>(
    operation: &'static str,
    timeout: Duration,
    error: SdkError<E, R>,
    old: impl FnOnce(&E) -> Option<Option<&Item>>,
) -> Result<Option<Item>, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    match error.as_service_error().and_then(old) {
        Some(item) => Ok(item.cloned()),
        None => Err(failed(operation, timeout, error)),
    }
}
