//! What the cases share: times, keys, fingerprints, tokens, payloads, and store calls that
//! unwrap.

use std::time::Duration;

use bytes::Bytes;

use crate::clock::Timestamp;
use crate::fingerprint::Fingerprint;
use crate::key::RecordKey;
use crate::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

pub(super) const LEASE: Duration = Duration::from_secs(30);
pub(super) const TTL: Duration = Duration::from_secs(24 * 3600);
pub(super) const HOUR: Duration = Duration::from_secs(3600);
/// The operation every record of the suite belongs to.
pub(super) const OPERATION: &str = "conformance::create";
/// The scope and tenant every record of the suite is claimed in.
pub(super) const SCOPE: &str = "org";
pub(super) const SCOPE_VALUE: &str = "acme";
/// The status code kept beside every payload [`complete`] stores.
pub(super) const STATUS: u16 = 201;

/// The suite's epoch plus `offset`: every time in the suite is one of these.
pub(super) fn at(offset: Duration) -> Timestamp {
    Timestamp::from_millis(1_750_000_000_000).after(offset)
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn key(n: u8) -> RecordKey {
    RecordKey::from_bytes([n; 32])
}

/// Fingerprints do not share byte patterns with keys, so a store mixing them up fails.
pub(super) fn fp(n: u8) -> Fingerprint {
    let mut bytes = [n; 32];
    bytes[0] = 0xf0;
    Fingerprint::from_bytes(bytes)
}

pub(super) fn token(n: i64) -> LeaseToken {
    // Negative and large values too: tokens are any i64.
    LeaseToken::from_i64(n.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as i64))
}

/// Claims `key` at `now` with the default lease and TTL.
pub(super) async fn claim<S: Store>(
    store: &S,
    key: &RecordKey,
    fingerprint: &Fingerprint,
    token: LeaseToken,
    now: Timestamp,
) -> Claim {
    claim_until(store, key, fingerprint, token, now, now.after(TTL)).await
}

/// Claims `key` at `now` with the default lease, expiring at `expires_at`.
pub(super) async fn claim_until<S: Store>(
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

pub(super) const ACQUIRED: Claim = Claim::Acquired { took_over: false };
pub(super) const TOOK_OVER: Claim = Claim::Acquired { took_over: true };

pub(super) fn in_flight(fingerprint: Fingerprint, lease_until: Timestamp) -> Claim {
    Claim::InFlight {
        fingerprint,
        lease_until,
    }
}

/// What a claim finds once [`complete`] stored `payload`.
pub(super) fn completed(fingerprint: Fingerprint, payload: &[u8]) -> Claim {
    Claim::Completed {
        fingerprint,
        payload: Bytes::copy_from_slice(payload),
        completed_at: Some(at(ms(0))),
    }
}

/// Completes `key` with `payload` and status [`STATUS`], completed at the epoch.
pub(super) async fn complete<S: Store>(
    store: &S,
    key: &RecordKey,
    token: LeaseToken,
    payload: &[u8],
    expires_at: Timestamp,
) -> Fence {
    complete_with(store, key, token, payload, Some(STATUS), expires_at).await
}

/// Completes `key` with `payload` and `status`, completed at the epoch.
pub(super) async fn complete_with<S: Store>(
    store: &S,
    key: &RecordKey,
    token: LeaseToken,
    payload: &[u8],
    status: Option<u16>,
    expires_at: Timestamp,
) -> Fence {
    let completion = Completion {
        payload,
        status,
        completed_at: at(ms(0)),
        expires_at,
    };
    store
        .complete(key, token, completion)
        .await
        .expect("complete")
}

pub(super) async fn release<S: Store>(store: &S, key: &RecordKey, token: LeaseToken) -> Fence {
    store.release(key, token).await.expect("release")
}

pub(super) async fn renew<S: Store>(
    store: &S,
    key: &RecordKey,
    token: LeaseToken,
    until: Timestamp,
) -> Fence {
    store.renew(key, token, until).await.expect("renew")
}

pub(super) async fn purge<S: Store>(store: &S, now: Timestamp, limit: u32) -> u64 {
    store.purge_expired(now, limit).await.expect("purge")
}

/// Stores `payload` with `status` under key `n` and reads it back through a replaying claim.
pub(super) async fn round_trip<S: Store>(
    store: &S,
    n: u8,
    payload: &[u8],
    status: Option<u16>,
) -> Bytes {
    let (k, f) = (key(n), fp(n));
    assert_eq!(claim(store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    let held = complete_with(store, &k, token(1), payload, status, at(TTL)).await;
    assert_eq!(held, Fence::Held);
    match claim(store, &k, &f, token(2), at(ms(1))).await {
        Claim::Completed {
            fingerprint,
            payload,
            completed_at,
        } => {
            assert_eq!(fingerprint, f);
            assert_eq!(completed_at, Some(at(ms(0))));
            payload
        }
        other => panic!("expected a completed record, got {other:?}"),
    }
}
