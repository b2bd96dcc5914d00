//! What the cases share: times, keys, fingerprints, responses, and store calls that unwrap.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use idem_runtime::clock::Timestamp;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};
use idem_runtime::{Fingerprint, RecordKey, StoredResponse};

pub(crate) const LEASE: Duration = Duration::from_secs(30);
pub(crate) const TTL: Duration = Duration::from_secs(24 * 3600);
pub(crate) const HOUR: Duration = Duration::from_secs(3600);
/// The operation every record of the suite belongs to.
pub(crate) const OPERATION: &str = "conformance::create";
/// The scope and tenant every record of the suite is claimed in.
pub(crate) const SCOPE: &str = "org";
pub(crate) const SCOPE_VALUE: &str = "acme";

/// The suite's epoch plus `offset`: every time in the suite is one of these.
pub(crate) fn at(offset: Duration) -> Timestamp {
    Timestamp::from_millis(1_750_000_000_000).after(offset)
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(crate) fn key(n: u8) -> RecordKey {
    RecordKey::from_bytes([n; 32])
}

/// Fingerprints do not share byte patterns with keys, so a store mixing them up fails.
pub(crate) fn fp(n: u8) -> Fingerprint {
    let mut bytes = [n; 32];
    bytes[0] = 0xf0;
    Fingerprint::from_bytes(bytes)
}

pub(crate) fn token(n: i64) -> LeaseToken {
    // Negative and large values too: tokens are any i64.
    LeaseToken::from_i64(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as i64))
}

pub(crate) fn response(body: &'static str) -> StoredResponse {
    StoredResponse::new(
        StatusCode::CREATED,
        [
            header("content-type", "application/json"),
            header("location", "/v1/charges/ch_1"),
        ],
        Bytes::from_static(body.as_bytes()),
    )
}

pub(crate) fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    )
}

/// Claims `key` at `now` with the default lease and TTL.
pub(crate) async fn claim<S: Store>(
    store: &S,
    key: &RecordKey,
    fingerprint: &Fingerprint,
    token: LeaseToken,
    now: Timestamp,
) -> Claim {
    claim_until(store, key, fingerprint, token, now, now.after(TTL)).await
}

/// Claims `key` at `now` with the default lease, expiring at `expires_at`.
pub(crate) async fn claim_until<S: Store>(
    store: &S,
    key: &RecordKey,
    fingerprint: &Fingerprint,
    token: LeaseToken,
    now: Timestamp,
    expires_at: Timestamp,
) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint,
            token,
            now,
            lease_until: now.after(LEASE),
            expires_at,
            operation: OPERATION,
            scope: SCOPE,
            scope_value: SCOPE_VALUE,
            tenant: 0,
        })
        .await
        .expect("claim")
}

pub(crate) const ACQUIRED: Claim = Claim::Acquired { took_over: false };
pub(crate) const TOOK_OVER: Claim = Claim::Acquired { took_over: true };

pub(crate) fn in_flight(fingerprint: Fingerprint, lease_until: Timestamp) -> Claim {
    Claim::InFlight {
        fingerprint,
        lease_until,
    }
}

pub(crate) fn completed(fingerprint: Fingerprint, response: &StoredResponse) -> Claim {
    Claim::Completed {
        fingerprint,
        payload: Bytes::from(response.encode()),
        completed_at: Some(at(ms(0))),
    }
}

pub(crate) async fn complete<S: Store>(
    store: &S,
    key: &RecordKey,
    token: LeaseToken,
    response: &StoredResponse,
    expires_at: Timestamp,
) -> Fence {
    let payload = response.encode();
    let completion = Completion {
        payload: &payload,
        status: Some(response.status().as_u16()),
        completed_at: at(ms(0)),
        expires_at,
    };
    store
        .complete(key, token, completion)
        .await
        .expect("complete")
}

pub(crate) async fn release<S: Store>(store: &S, key: &RecordKey, token: LeaseToken) -> Fence {
    store.release(key, token).await.expect("release")
}

pub(crate) async fn renew<S: Store>(
    store: &S,
    key: &RecordKey,
    token: LeaseToken,
    until: Timestamp,
) -> Fence {
    store.renew(key, token, until).await.expect("renew")
}

pub(crate) async fn purge<S: Store>(store: &S, now: Timestamp, limit: u32) -> u64 {
    store.purge_expired(now, limit).await.expect("purge")
}

/// Stores `stored` under a fresh key and reads it back through a replaying claim.
pub(crate) async fn round_trip<S: Store>(
    store: &S,
    n: u8,
    stored: &StoredResponse,
) -> StoredResponse {
    let (k, f) = (key(n), fp(n));
    assert_eq!(claim(store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    let held = complete(store, &k, token(1), stored, at(TTL)).await;
    assert_eq!(held, Fence::Held);
    match claim(store, &k, &f, token(2), at(ms(1))).await {
        Claim::Completed {
            fingerprint,
            payload,
            ..
        } => {
            assert_eq!(fingerprint, f);
            StoredResponse::decode(&payload).expect("the payload decodes")
        }
        other => panic!("expected a completed record, got {other:?}"),
    }
}
