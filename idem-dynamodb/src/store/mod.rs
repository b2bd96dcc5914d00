//! A store in Amazon DynamoDB: one item per record, claims by conditional `PutItem`, every
//! owner's write fenced by its lease token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

mod builder;
mod error;
mod fenced;
mod item;
mod records;

pub use builder::DynamoDbStoreBuilder;
use error::{condition_failed, failed};
use item::{
    EXPIRES_AT, IN_FLIGHT, LEASE_UNTIL, PK, STATE, Stored, TOKEN, key_value, millis, names, number,
    text,
};

/// How many times a claim goes round when the record changes under it (a takeover lost to
/// another claimant, a record deleted between two calls) before it gives up as unavailable.
const CLAIM_ROUNDS: usize = 4;

/// The condition every owner's write is fenced by: the caller's token, on a record in flight.
const FENCE: &str = "#lease_token = :token AND #state = :in_flight";

/// Records in an Amazon DynamoDB table, one item per record.
///
/// A claim is one conditional `PutItem` (the record is absent, or expired by the engine's
/// clock) with `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a claim that meets a live record
/// reads it in the same round trip and answers replay, in flight or key reused from it. The
/// same request taking over a lapsed lease makes one more call: an `UpdateItem` conditional on
/// the lapsed owner's token, which keeps the record's operation, scope and creation time, as
/// the other stores do. Completion, lease renewal and release are one `UpdateItem` or
/// `DeleteItem` each, conditional on the caller's lease token (`lease_token = :token` on a record
/// in flight), so an owner that was taken over cannot touch the new owner's record.
///
/// DynamoDB's TTL deletes expired items up to a few days late, so expiry is decided when a
/// record is read, by the engine's clock against `expires_at`; each item also carries
/// `expires_ttl` (epoch seconds, rounded up) for DynamoDB's TTL to delete it by. No sweeper is
/// needed (`Idempotency::spawn_sweeper` says so and ends).
///
/// # The table
///
/// Partition key `pk`, a string: the record key's 64 hex digits (no sort key). Attributes:
/// `state` (`in_flight` or `completed`), `fingerprint` (binary, 32 bytes), `lease_token`
/// (number), `owners` (number; more than 1 after a takeover), `lease_until` and `expires_at`
/// (milliseconds since the Unix epoch, the engine's clock), `expires_ttl` (seconds, for TTL),
/// `operation`, `scope`, `scope_value` (the tenant), `created_at`, and once completed
/// `completed_at`, `status` (HTTP faces) and `payload` (binary: the stored result). A record
/// whose result was too large to keep carries `too_large` (its size) instead of a payload.
///
/// [`DynamoDbStoreBuilder::create_table_if_missing`] creates the table on demand
/// (`PAY_PER_REQUEST`) with TTL on `expires_ttl`; a table an operator made works as well,
/// under any name, as long as its key is `pk` (string).
///
/// # Limits
///
/// An item holds at most 400 KB, so a stored result holds at most
/// [`MAX_PAYLOAD_BYTES`](Self::MAX_PAYLOAD_BYTES). The engine built on this store lowers its
/// `max_response_bytes` to fit (a larger HTTP response or gRPC reply is sent to its caller and
/// its retries get `409 idempotency_response_too_large`); a larger payload that still reaches
/// the store (the programmatic API) is refused with [`StoreError::TooLarge`], and the record
/// stays in flight until it expires: its retries get 409 and the operation never runs twice.
///
/// # Failures
///
/// Throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`,
/// `RequestLimitExceeded`), 5xx answers and unreachable endpoints are retried by the SDK within
/// the builder's [`timeout`](DynamoDbStoreBuilder::timeout) and
/// [`max_attempts`](DynamoDbStoreBuilder::max_attempts), then fail as
/// [`StoreError::Unavailable`] or [`StoreError::Timeout`]: the request gets 503 and
/// `Retry-After`, and its handler does not run. A claim whose reply was lost and that the SDK
/// sent again finds its own token and owns the record.
///
/// # Operators
///
/// The operators' methods serve `Idempotency::records` (the
/// `idem` command does not open DynamoDB tables yet). [`Admin::list_records`](idem_core::store::Admin::list_records),
/// [`Admin::record_stats`](idem_core::store::Admin::record_stats), [`Admin::purge_records`](idem_core::store::Admin::purge_records) and [`Store::purge_expired`] `Scan` the
/// whole table (strongly consistent, without payloads) and select in process: each costs a read
/// of every item, about one read unit per 4 KB scanned.
/// Reading and forgetting a record are one call each; a forget without force is conditional on
/// the record not being leased, and a purge deletes each record it chose only if it is still
/// that completed, live record.
///
/// ```no_run
/// use idem_dynamodb::DynamoDbStore;
///
/// # async fn run(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// // `client` from `aws_config::load_from_env().await`, say: credentials, region, HTTP client.
/// let store = DynamoDbStore::builder(client)
///     .table("idempotency")
///     .create_table_if_missing(true)
///     .build()
///     .await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DynamoDbStore {
    client: Client,
    table: Arc<str>,
    /// How long one operation may take, the SDK's retries included.
    timeout: Duration,
}

impl DynamoDbStore {
    /// The table used unless [`DynamoDbStoreBuilder::table`] names another.
    pub const DEFAULT_TABLE: &'static str = "idempotency";
    /// How long one operation may take, retries included, unless
    /// [`DynamoDbStoreBuilder::timeout`] says otherwise.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// How many attempts the SDK makes at one call unless
    /// [`DynamoDbStoreBuilder::max_attempts`] says otherwise.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
    /// The largest payload a record keeps: DynamoDB's 400 KB item, less 8 KiB for the rest of
    /// the record (its key, times, operation, scope and scope value).
    pub const MAX_PAYLOAD_BYTES: usize = 400 * 1024 - 8 * 1024;

    /// Configures a store on the DynamoDB `client` reaches. The client is the application's
    /// (from `aws-config`, with its credentials, region and HTTP client); the builder sets its
    /// retries and timeouts on a copy.
    ///
    /// ```no_run
    /// # async fn run(client: aws_sdk_dynamodb::Client) -> Result<(), idem_core::error::StoreError> {
    /// use std::time::Duration;
    /// use idem_dynamodb::DynamoDbStore;
    ///
    /// let store = DynamoDbStore::builder(client)
    ///     .table("payments-idempotency")
    ///     .timeout(Duration::from_secs(1))
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn builder(client: Client) -> DynamoDbStoreBuilder {
        DynamoDbStoreBuilder::new(client)
    }

    /// The table the records live in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The client the store calls DynamoDB with: the application's, with the builder's retries
    /// and timeouts.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn failed<E, R>(&self, operation: &'static str, error: SdkError<E, R>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        failed(operation, self.timeout, error)
    }
}

impl fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("table", &self.table)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Store for DynamoDbStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        for _ in 0..CLAIM_ROUNDS {
            let put = self
                .client
                .put_item()
                .table_name(&*self.table)
                .set_item(Some(item::claim_item(&request)))
                .condition_expression("attribute_not_exists(#pk) OR #expires_at <= :now")
                .set_expression_attribute_names(Some(names([PK, EXPIRES_AT])))
                .expression_attribute_values(":now", millis(request.now))
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let Err(error) = put else {
                return Ok(Claim::Acquired { took_over: false });
            };
            let old = condition_failed("PutItem", self.timeout, error, |e| match e {
                PutItemError::ConditionalCheckFailedException(e) => Some(e.item()),
                _ => None,
            })?;
            // No item: it went between the check and the answer. Go round.
            let Some(old) = old else { continue };
            let held = Stored::decode(&old)?;
            if !held.live(request.now) {
                continue;
            }
            if held.completed {
                let payload = held.payload.ok_or_else(|| {
                    StoreError::Corrupt(
                        format!("item {}: completed without a payload", held.key.to_hex()).into(),
                    )
                })?;
                return Ok(Claim::Completed {
                    fingerprint: held.fingerprint,
                    payload,
                    completed_at: held.completed_at,
                });
            }
            if held.token == request.token {
                // This very claim, sent again by the SDK after its reply was lost.
                return Ok(Claim::Acquired {
                    took_over: held.owners > 1,
                });
            }
            if held.lease_until > request.now || held.fingerprint != *request.fingerprint {
                return Ok(Claim::InFlight {
                    fingerprint: held.fingerprint,
                    lease_until: held.lease_until,
                });
            }
            if self.take_over(&request, &held).await? {
                return Ok(Claim::Acquired { took_over: true });
            }
        }
        Err(StoreError::unavailable(std::io::Error::other(format!(
            "the record changed under {CLAIM_ROUNDS} claims in a row"
        ))))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.write_completion(key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&*self.table)
            .key(PK, key_value(key))
            .condition_expression(FENCE)
            .set_expression_attribute_names(Some(names([TOKEN, STATE])))
            .expression_attribute_values(":token", number(token.as_i64()))
            .expression_attribute_values(":in_flight", text(IN_FLIGHT))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(Fence::Held),
            Err(error) => {
                condition_failed("DeleteItem", self.timeout, error, |e| match e {
                    DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item()),
                    _ => None,
                })?;
                Ok(Fence::Lost)
            }
        }
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let renewed = self
            .fenced_update(
                key,
                token,
                "SET #lease_until = :lease_until",
                &[LEASE_UNTIL],
                vec![(":lease_until", millis(lease_until))],
            )
            .await
            .map_err(|e| self.failed("UpdateItem", e))?;
        Ok(if renewed.is_ok() {
            Fence::Held
        } else {
            Fence::Lost
        })
    }

    /// DynamoDB's TTL deletes expired records by itself (late); this deletes, now, up to
    /// `limit` records expired by the engine's clock. It scans the whole table: the sweeper
    /// never calls it on this store.
    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.purge_expired_now(now, limit).await
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        capabilities.expires_by_itself();
        capabilities.limit_payload(Self::MAX_PAYLOAD_BYTES);
    }
}
