//! A record as a DynamoDB item: the attribute names, the item a claim writes, and the decoding
//! of an item read back (a claim's conflict, an operator's read or scan).

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use bytes::Bytes;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::{RecordKey, unhex};
use idem_core::store::records::{Record, RecordTimes};
use idem_core::store::{ClaimRequest, LeaseToken};

/// An item: attribute name to value.
pub(super) type Item = HashMap<String, AttributeValue>;

/// The partition key: the record key's 64 hex digits (a string).
pub(super) const PK: &str = "pk";
/// `in_flight` or `completed`.
pub(super) const STATE: &str = "state";
/// The request's fingerprint (binary, 32 bytes).
pub(super) const FINGERPRINT: &str = "fingerprint";
/// The owner's fencing token (a number: any `i64`).
pub(super) const TOKEN: &str = "lease_token";
/// How many owners the record had: more than 1 after a takeover.
pub(super) const OWNERS: &str = "owners";
/// When the owner's lease lapses, in milliseconds since the epoch (the engine's clock).
pub(super) const LEASE_UNTIL: &str = "lease_until";
/// When the record stops existing for requests, in milliseconds (the engine's clock).
pub(super) const EXPIRES_AT: &str = "expires_at";
/// `expires_at` in whole seconds, rounded up: the attribute DynamoDB's TTL deletes by.
pub(super) const TTL: &str = "expires_ttl";
pub(super) const OPERATION: &str = "operation";
pub(super) const SCOPE: &str = "scope";
pub(super) const SCOPE_VALUE: &str = "scope_value";
pub(super) const CREATED_AT: &str = "created_at";
pub(super) const COMPLETED_AT: &str = "completed_at";
/// The status code kept for operators (HTTP faces), once completed.
pub(super) const STATUS: &str = "status";
/// The stored result (binary), once completed.
pub(super) const PAYLOAD: &str = "payload";
/// Set instead of a payload on a record whose result was too large to store: its size.
pub(super) const TOO_LARGE: &str = "too_large";

pub(super) const IN_FLIGHT: &str = "in_flight";
pub(super) const COMPLETED: &str = "completed";

/// Every attribute but the payload: what a listing reads (`ProjectionExpression`).
pub(super) const INFO: [&str; 14] = [
    PK,
    STATE,
    FINGERPRINT,
    TOKEN,
    OWNERS,
    LEASE_UNTIL,
    EXPIRES_AT,
    OPERATION,
    SCOPE,
    SCOPE_VALUE,
    CREATED_AT,
    COMPLETED_AT,
    STATUS,
    TOO_LARGE,
];

/// The expression placeholder of attribute `name` (`#state`): expressions name every attribute
/// through one, as several (`state`, `status`, `owners`...) are DynamoDB reserved words.
pub(super) fn name(name: &str) -> String {
    format!("#{name}")
}

/// The placeholders of `names`, to pass as `ExpressionAttributeNames`.
pub(super) fn names<'a>(names: impl IntoIterator<Item = &'a str>) -> HashMap<String, String> {
    names.into_iter().map(|n| (name(n), n.to_owned())).collect()
}

pub(super) fn key_value(key: &RecordKey) -> AttributeValue {
    AttributeValue::S(key.to_hex())
}

pub(super) fn number(n: i64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

pub(super) fn millis(at: Timestamp) -> AttributeValue {
    number(at.as_millis())
}

pub(super) fn text(s: &str) -> AttributeValue {
    AttributeValue::S(s.to_owned())
}

/// The TTL attribute's value for a record expiring at `at`: seconds since the epoch, rounded
/// up, so DynamoDB never deletes a record the engine still sees.
pub(super) fn ttl_seconds(at: Timestamp) -> AttributeValue {
    number(at.as_millis().div_euclid(1000) + i64::from(at.as_millis().rem_euclid(1000) > 0))
}

/// The item a claim of an absent or expired record writes: in flight, owned by the claimant.
pub(super) fn claim_item(request: &ClaimRequest<'_>) -> Item {
    let mut item = Item::with_capacity(13);
    item.insert(PK.into(), key_value(request.key));
    item.insert(STATE.into(), text(IN_FLIGHT));
    item.insert(
        FINGERPRINT.into(),
        AttributeValue::B(Blob::new(request.fingerprint.as_bytes().to_vec())),
    );
    item.insert(TOKEN.into(), number(request.token.as_i64()));
    item.insert(OWNERS.into(), number(1));
    item.insert(LEASE_UNTIL.into(), millis(request.lease_until));
    item.insert(EXPIRES_AT.into(), millis(request.expires_at));
    item.insert(TTL.into(), ttl_seconds(request.expires_at));
    item.insert(OPERATION.into(), text(request.operation));
    item.insert(SCOPE.into(), text(request.scope));
    item.insert(SCOPE_VALUE.into(), text(request.scope_value));
    item.insert(CREATED_AT.into(), millis(request.now));
    item
}

/// A record as read from its item.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) key: RecordKey,
    pub(super) completed: bool,
    pub(super) fingerprint: Fingerprint,
    pub(super) token: LeaseToken,
    pub(super) owners: i64,
    pub(super) lease_until: Timestamp,
    pub(super) expires_at: Timestamp,
    pub(super) created_at: Timestamp,
    pub(super) completed_at: Option<Timestamp>,
    pub(super) status: Option<u16>,
    pub(super) operation: String,
    pub(super) scope: String,
    pub(super) scope_value: String,
    /// The stored result, when the item was read with it.
    pub(super) payload: Option<Bytes>,
}

impl Stored {
    /// Decodes `item`. [`StoreError::Corrupt`] when an attribute every record has is missing or
    /// of the wrong type (an item another program wrote into the table, say).
    pub(super) fn decode(item: &Item) -> Result<Self, StoreError> {
        let pk = item.get(PK).and_then(|v| v.as_s().ok());
        let corrupt = |what: &str| {
            StoreError::Corrupt(format!("item {}: {what}", pk.map_or("?", |s| s)).into())
        };
        let key = pk
            .and_then(|s| unhex(s.as_bytes()))
            .map(RecordKey::from_bytes)
            .ok_or_else(|| corrupt("pk is not 64 hex digits"))?;
        let string = |attr: &str| item.get(attr).and_then(|v| v.as_s().ok());
        let int = |attr: &str| -> Result<Option<i64>, StoreError> {
            match item.get(attr) {
                None => Ok(None),
                Some(v) => v
                    .as_n()
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .map(Some)
                    .ok_or_else(|| corrupt(&format!("{attr} is not an integer"))),
            }
        };
        let required = |attr: &str| int(attr)?.ok_or_else(|| corrupt(&format!("no {attr}")));
        let completed = match string(STATE).map(String::as_str) {
            Some(IN_FLIGHT) => false,
            Some(COMPLETED) => true,
            _ => return Err(corrupt("state is neither in_flight nor completed")),
        };
        let fingerprint = item
            .get(FINGERPRINT)
            .and_then(|v| v.as_b().ok())
            .and_then(|b| <[u8; 32]>::try_from(b.as_ref()).ok())
            .map(Fingerprint::from_bytes)
            .ok_or_else(|| corrupt("fingerprint is not 32 bytes"))?;
        let payload = match item.get(PAYLOAD) {
            None => None,
            Some(AttributeValue::B(blob)) => Some(Bytes::copy_from_slice(blob.as_ref())),
            Some(_) => return Err(corrupt("payload is not binary")),
        };
        let status = int(STATUS)?
            .map(|s| u16::try_from(s).map_err(|_| corrupt("status is not a status code")))
            .transpose()?;
        Ok(Self {
            key,
            completed,
            fingerprint,
            token: LeaseToken::from_i64(required(TOKEN)?),
            owners: int(OWNERS)?.unwrap_or(1),
            lease_until: Timestamp::from_millis(required(LEASE_UNTIL)?),
            expires_at: Timestamp::from_millis(required(EXPIRES_AT)?),
            created_at: Timestamp::from_millis(int(CREATED_AT)?.unwrap_or(0)),
            completed_at: int(COMPLETED_AT)?.map(Timestamp::from_millis),
            status,
            operation: string(OPERATION).cloned().unwrap_or_default(),
            scope: string(SCOPE).cloned().unwrap_or_default(),
            scope_value: string(SCOPE_VALUE).cloned().unwrap_or_default(),
            payload,
        })
    }

    /// What an operator reads of it.
    pub(super) fn info(&self) -> Record {
        Record::new(
            self.key,
            &self.operation,
            &self.scope,
            &self.scope_value,
            self.completed,
            self.status,
            RecordTimes {
                created_at: self.created_at,
                completed_at: self.completed_at,
                lease_until: self.lease_until,
                expires_at: self.expires_at,
            },
        )
    }

    /// Whether it exists for requests at `now`.
    pub(super) fn live(&self, now: Timestamp) -> bool {
        self.expires_at > now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_rounds_up_to_the_next_second() {
        let secs = |ms| ttl_seconds(Timestamp::from_millis(ms));
        assert_eq!(secs(1_000), number(1));
        assert_eq!(secs(1_001), number(2));
        assert_eq!(secs(0), number(0));
    }
}
