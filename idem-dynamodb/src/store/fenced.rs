//! The writes a claimant or an owner makes besides a fresh claim: a takeover of a lapsed lease,
//! and the updates fenced by the owner's lease token (completion, renewal, and the refusal of a
//! result too large for an item).

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::error::{condition_failed, is_item_too_large};
use super::item::{
    COMPLETED, COMPLETED_AT, EXPIRES_AT, IN_FLIGHT, Item, LEASE_UNTIL, OWNERS, PAYLOAD, PK, STATE,
    STATUS, Stored, TOKEN, TOO_LARGE, TTL, key_value, millis, names, number, text, ttl_seconds,
};
use super::{DynamoDbStore, FENCE};
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{ClaimRequest, Completion, Fence, LeaseToken};

impl DynamoDbStore {
    /// Takes over `held`, in flight under a lapsed lease of the same request: the new token,
    /// lease and expiry, one more owner, if the lapsed owner's token is still there and its lease
    /// still lapsed. `false` when the record changed meanwhile.
    pub(super) async fn take_over(
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
    pub(super) async fn fenced_update(
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
    pub(super) async fn refuse_too_large(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: &Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let size = completion.payload.len();
        tracing::error!(
            key = %key.prefix(),
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

    /// Completes `key`'s record if `token` still owns it (see [`Store::complete`]); a payload
    /// over the limit is refused ([`refuse_too_large`](Self::refuse_too_large)).
    pub(super) async fn write_completion(
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
}
