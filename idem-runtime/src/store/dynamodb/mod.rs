//! A store in Amazon DynamoDB: one item per record, claims by conditional `PutItem`, every
//! owner's write fenced by its lease token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use bytes::Bytes;

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::records::{Forgotten, RecordFilter, RecordInfo, RecordStats};
use crate::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

mod builder;
mod error;
mod item;
mod records;

pub use builder::DynamoDbStoreBuilder;
use error::{condition_failed, failed, is_item_too_large};
use item::{
    COMPLETED, COMPLETED_AT, EXPIRES_AT, IN_FLIGHT, Item, LEASE_UNTIL, OWNERS, PAYLOAD, PK, STATE,
    STATUS, Stored, TOKEN, TOO_LARGE, TTL, key_value, millis, names, number, text, ttl_seconds,
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
/// needed ([`Idempotency::spawn_sweeper`](crate::Idempotency::spawn_sweeper) says so and ends).
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
/// The operators' methods serve [`Idempotency::records`](crate::Idempotency::records) (the
/// `idem` command does not open DynamoDB tables yet). [`Store::list_records`],
/// [`Store::record_stats`], [`Store::purge_records`] and [`Store::purge_expired`] `Scan` the
/// whole table (strongly consistent, without payloads) and select in process: each costs a read
/// of every item, about one read unit per 4 KB scanned.
/// Reading and forgetting a record are one call each; a forget without force is conditional on
/// the record not being leased, and a purge deletes each record it chose only if it is still
/// that completed, live record.
///
/// ```no_run
/// use idem_runtime::{Idempotency, store::DynamoDbStore};
///
/// # async fn run(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
/// // `client` from `aws_config::load_from_env().await`, say: credentials, region, HTTP client.
/// let store = DynamoDbStore::builder(client)
///     .table("idempotency")
///     .create_table_if_missing(true)
///     .build()
///     .await?;
/// let idempotency = Idempotency::builder().store(store).build()?;
/// # let _ = idempotency;
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
    /// # async fn run(client: aws_sdk_dynamodb::Client) -> Result<(), idem_runtime::StoreError> {
    /// use std::time::Duration;
    /// use idem_runtime::store::DynamoDbStore;
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

    /// Takes over `held`, in flight under a lapsed lease of the same request: the new token,
    /// lease and expiry, one more owner, if the lapsed owner's token is still there and its lease
    /// still lapsed. `false` when the record changed meanwhile.
    async fn take_over(
        &self,
        request: &ClaimRequest<'_>,
        held: &Stored,
    ) -> Result<bool, StoreError> {
        let update = self
            .client
            .update_item()
            .table_name(&*self.table)
            .key(PK, key_value(request.key))
            .update_expression(
                "SET #lease_token = :new_token, #lease_until = :lease_until, \
                 #expires_at = :expires_at, #expires_ttl = :ttl, #owners = #owners + :one",
            )
            .condition_expression(format!("{FENCE} AND #lease_until <= :now"))
            .set_expression_attribute_names(Some(names([
                TOKEN,
                STATE,
                LEASE_UNTIL,
                EXPIRES_AT,
                TTL,
                OWNERS,
            ])))
            .expression_attribute_values(":token", number(held.token.as_i64()))
            .expression_attribute_values(":in_flight", text(IN_FLIGHT))
            .expression_attribute_values(":now", millis(request.now))
            .expression_attribute_values(":new_token", number(request.token.as_i64()))
            .expression_attribute_values(":lease_until", millis(request.lease_until))
            .expression_attribute_values(":expires_at", millis(request.expires_at))
            .expression_attribute_values(":ttl", ttl_seconds(request.expires_at))
            .expression_attribute_values(":one", number(1))
            .send()
            .await;
        match update {
            Ok(_) => Ok(true),
            Err(error) => {
                condition_failed("UpdateItem", self.timeout, error, |e| match e {
                    UpdateItemError::ConditionalCheckFailedException(e) => Some(e.item()),
                    _ => None,
                })?;
                Ok(false)
            }
        }
    }

    /// A fenced `UpdateItem` setting `set` (with `values`) on `key`'s record: `Held` when the
    /// caller's token was there, else `Lost` with the record as it was.
    async fn fenced_update(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        set: &str,
        attributes: &[&str],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Result<(), Option<Item>>, SdkError<UpdateItemError, HttpResponse>> {
        let mut update = self
            .client
            .update_item()
            .table_name(&*self.table)
            .key(PK, key_value(key))
            .update_expression(set)
            .condition_expression(FENCE)
            .set_expression_attribute_names(Some(names(
                [TOKEN, STATE].into_iter().chain(attributes.iter().copied()),
            )))
            .expression_attribute_values(":token", number(token.as_i64()))
            .expression_attribute_values(":in_flight", text(IN_FLIGHT))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (name, value) in values {
            update = update.expression_attribute_values(name, value);
        }
        match update.send().await {
            Ok(_) => Ok(Ok(())),
            Err(error) => match error.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                    Ok(Err(e.item().cloned()))
                }
                _ => Err(error),
            },
        }
    }

    /// A completion whose payload is over [`MAX_PAYLOAD_BYTES`](Self::MAX_PAYLOAD_BYTES): the
    /// record stays in flight, its lease extended to the completion's expiry and its size noted
    /// in `too_large`, so no retry runs the operation again before the record expires. Fenced
    /// like any completion: [`StoreError::TooLarge`] when the caller still owned the record.
    async fn refuse_too_large(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: &Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let size = completion.payload.len();
        tracing::error!(
            key = %key.short(),
            size,
            limit = Self::MAX_PAYLOAD_BYTES,
            "result too large for a DynamoDB item; the record stays in flight until it expires"
        );
        let pinned = self
            .fenced_update(
                key,
                token,
                "SET #lease_until = :expires_at, #expires_at = :expires_at, \
                 #expires_ttl = :ttl, #too_large = :size",
                &[LEASE_UNTIL, EXPIRES_AT, TTL, TOO_LARGE],
                vec![
                    (":expires_at", millis(completion.expires_at)),
                    (":ttl", ttl_seconds(completion.expires_at)),
                    (":size", number(i64::try_from(size).unwrap_or(i64::MAX))),
                ],
            )
            .await
            .map_err(|e| self.failed("UpdateItem", e))?;
        match pinned {
            Ok(()) => Err(StoreError::TooLarge {
                size,
                limit: Self::MAX_PAYLOAD_BYTES,
            }),
            Err(_) => Ok(Fence::Lost),
        }
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
        if completion.payload.len() > Self::MAX_PAYLOAD_BYTES {
            return self.refuse_too_large(key, token, &completion).await;
        }
        let mut set = String::from(
            "SET #state = :completed, #payload = :payload, #completed_at = :completed_at, \
             #expires_at = :expires_at, #expires_ttl = :ttl",
        );
        let mut values = vec![
            (":completed", text(COMPLETED)),
            (
                ":payload",
                AttributeValue::B(Blob::new(completion.payload.to_vec())),
            ),
            (":completed_at", millis(completion.completed_at)),
            (":expires_at", millis(completion.expires_at)),
            (":ttl", ttl_seconds(completion.expires_at)),
        ];
        // DynamoDB refuses a placeholder the expressions do not use: `#status` only with one.
        let mut attributes = vec![PAYLOAD, COMPLETED_AT, EXPIRES_AT, TTL];
        if let Some(status) = completion.status {
            set.push_str(", #status = :status");
            values.push((":status", number(i64::from(status))));
            attributes.push(STATUS);
        }
        let written = self
            .fenced_update(key, token, &set, &attributes, values)
            .await;
        match written {
            Ok(Ok(())) => Ok(Fence::Held),
            // The SDK sent this completion again after its reply was lost: the record holds
            // exactly what it writes, under the caller's token.
            Ok(Err(Some(old)))
                if Stored::decode(&old).is_ok_and(|held| {
                    held.completed
                        && held.token == token
                        && held.completed_at == Some(completion.completed_at)
                        && held.expires_at == completion.expires_at
                        && held.payload.as_deref() == Some(completion.payload)
                }) =>
            {
                Ok(Fence::Held)
            }
            Ok(Err(_)) => Ok(Fence::Lost),
            Err(error) if is_item_too_large(&error) => {
                self.refuse_too_large(key, token, &completion).await
            }
            Err(error) => Err(self.failed("UpdateItem", error)),
        }
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

    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecordInfo>, StoreError> {
        self.list(filter, now, limit).await
    }

    async fn read_record(
        &self,
        key: &RecordKey,
    ) -> Result<Option<(RecordInfo, Option<Bytes>)>, StoreError> {
        self.read(key).await
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        self.forget(key, now, force).await
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        self.purge(filter, now, limit).await
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        self.stats(filter, now).await
    }

    fn needs_sweeping(&self) -> bool {
        false
    }

    fn max_payload_bytes(&self) -> Option<usize> {
        Some(Self::MAX_PAYLOAD_BYTES)
    }
}
