//! What the SQL stores share: reading a record that stopped a claim, and fenced writes.

use bytes::Bytes;

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::fingerprint::Fingerprint;
use crate::store::{Claim, Fence};

/// A fenced write held when it changed the owner's row; zero rows means another owner or none.
pub(crate) fn fence(rows_affected: Result<u64, sqlx::Error>) -> Result<Fence, StoreError> {
    match rows_affected.map_err(StoreError::unavailable)? {
        0 => Ok(Fence::Lost),
        _ => Ok(Fence::Held),
    }
}

/// A live record that a claim may not take, as the claim reports it. `completed_at` is NULL
/// for records completed before the store kept completion times.
pub(crate) fn held_by(
    fingerprint: Vec<u8>,
    state: String,
    lease_until: i64,
    response: Option<Vec<u8>>,
    completed_at: Option<i64>,
) -> Result<Claim, StoreError> {
    let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| StoreError::Corrupt("fingerprint is not 32 bytes".into()))?;
    match (state.as_str(), response) {
        ("completed", Some(payload)) => Ok(Claim::Completed {
            fingerprint,
            payload: Bytes::from(payload),
            completed_at: completed_at.map(Timestamp::from_millis),
        }),
        ("completed", None) => Err(StoreError::Corrupt(
            "completed record without a payload".into(),
        )),
        ("in_flight", _) => Ok(Claim::InFlight {
            fingerprint,
            lease_until: Timestamp::from_millis(lease_until),
        }),
        _ => Err(StoreError::Corrupt(
            format!("record in unknown state {state:?}").into(),
        )),
    }
}
