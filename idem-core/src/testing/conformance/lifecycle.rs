//! One record's life: claim, complete or release, replay, leases, fencing, expiry.

use super::support::*;
use crate::store::{ClaimRequest, Fence, Store};

/// A claimed and completed record replays its payload to every retry until it expires, and its
/// former owner's token writes nothing more.
pub async fn claim_complete_replay<S: Store + Clone>(store: S) {
    let (k, f, ok) = (key(1), fp(1), br#"{"id":"ch_1"}"#.as_slice());
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    let held = complete(&store, &k, token(1), ok, at(TTL)).await;
    assert_eq!(held, Fence::Held);
    // Every retry until expiry replays, whatever its token.
    for (t, now) in [(2, ms(1)), (3, HOUR), (4, TTL - ms(1))] {
        assert_eq!(
            claim(&store, &k, &f, token(t), at(now)).await,
            completed(f, ok)
        );
    }
    // The owner's token no longer writes: the record is completed, not in flight.
    let other = b"overwritten".as_slice();
    let late = complete(&store, &k, token(1), other, at(TTL)).await;
    assert_eq!(late, Fence::Lost);
    assert_eq!(renew(&store, &k, token(1), at(TTL)).await, Fence::Lost);
    assert_eq!(release(&store, &k, token(1)).await, Fence::Lost);
    assert_eq!(
        claim(&store, &k, &f, token(5), at(ms(2))).await,
        completed(f, ok)
    );
}

/// A completed record replays long after its claim's lease would have lapsed: completion ends
/// the lease.
pub async fn completed_records_are_never_taken_over<S: Store + Clone>(store: S) {
    let (k, f, ok) = (key(1), fp(1), b"done".as_slice());
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    assert_eq!(
        complete(&store, &k, token(1), ok, at(TTL)).await,
        Fence::Held
    );
    // Long after the claim's lease would have lapsed, the same request still replays.
    assert_eq!(
        claim(&store, &k, &f, token(2), at(LEASE * 10)).await,
        completed(f, ok)
    );
}

/// While the owner's lease runs, up to its last millisecond, a duplicate is told who holds the
/// record and changes nothing.
pub async fn in_flight_duplicates_are_reported<S: Store + Clone>(store: S) {
    let (k, f) = (key(1), fp(1));
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    let owner = in_flight(f, at(LEASE));
    assert_eq!(claim(&store, &k, &f, token(2), at(ms(1))).await, owner);
    // Up to the last millisecond of the lease.
    assert_eq!(
        claim(&store, &k, &f, token(3), at(LEASE - ms(1))).await,
        owner
    );
    // The duplicates changed nothing: the owner still holds the record.
    assert_eq!(
        renew(&store, &k, token(1), at(LEASE * 2)).await,
        Fence::Held
    );
}

/// A different request (another fingerprint) is reported the owner's fingerprint and never
/// takes the record over, even once the lease has lapsed.
pub async fn fingerprint_mismatch_while_in_flight<S: Store + Clone>(store: S) {
    let (k, mine, theirs) = (key(1), fp(1), fp(2));
    assert_eq!(
        claim(&store, &k, &mine, token(1), at(ms(0))).await,
        ACQUIRED
    );
    let owner = in_flight(mine, at(LEASE));
    // Reported with the owner's fingerprint, so the engine can answer 422.
    assert_eq!(claim(&store, &k, &theirs, token(2), at(ms(1))).await, owner);
    // A different request never takes over, even once the lease has lapsed.
    assert_eq!(claim(&store, &k, &theirs, token(2), at(LEASE)).await, owner);
    assert_eq!(claim(&store, &k, &theirs, token(2), at(HOUR)).await, owner);
    // The owner is still the owner.
    let ok = b"mine".as_slice();
    assert_eq!(
        complete(&store, &k, token(1), ok, at(TTL)).await,
        Fence::Held
    );
}

/// A different request finds the completed record with the fingerprint of the request that
/// produced it.
pub async fn fingerprint_mismatch_once_completed<S: Store + Clone>(store: S) {
    let (k, mine, theirs, ok) = (key(1), fp(1), fp(2), b"mine".as_slice());
    assert_eq!(
        claim(&store, &k, &mine, token(1), at(ms(0))).await,
        ACQUIRED
    );
    assert_eq!(
        complete(&store, &k, token(1), ok, at(TTL)).await,
        Fence::Held
    );
    assert_eq!(
        claim(&store, &k, &theirs, token(2), at(ms(1))).await,
        completed(mine, ok)
    );
    assert_eq!(
        claim(&store, &k, &theirs, token(2), at(LEASE * 2)).await,
        completed(mine, ok)
    );
}

/// At `lease_until` the same request takes a lapsed record over, again and again; only the
/// latest owner completes it.
pub async fn lapsed_lease_is_taken_over_by_the_same_request<S: Store + Clone>(store: S) {
    let (k, f) = (key(1), fp(1));
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    // `lease_until <= now` has lapsed: the boundary belongs to the next claimant.
    assert_eq!(claim(&store, &k, &f, token(2), at(LEASE)).await, TOOK_OVER);
    let second = in_flight(f, at(LEASE * 2));
    assert_eq!(
        claim(&store, &k, &f, token(3), at(LEASE + ms(1))).await,
        second
    );
    // And again, once the new owner's lease lapses in turn.
    assert_eq!(
        claim(&store, &k, &f, token(3), at(LEASE * 2)).await,
        TOOK_OVER
    );
    // Only the latest owner completes; its response is what retries get.
    let (old, new) = (b"second".as_slice(), b"third".as_slice());
    assert_eq!(
        complete(&store, &k, token(2), old, at(TTL)).await,
        Fence::Lost
    );
    assert_eq!(
        complete(&store, &k, token(3), new, at(TTL)).await,
        Fence::Held
    );
    assert_eq!(
        claim(&store, &k, &f, token(4), at(LEASE * 3)).await,
        completed(f, new)
    );
}

/// Renewal moves the lease: the record is in flight until the new `lease_until`, taken over
/// from then on.
pub async fn renew_extends_the_lease<S: Store + Clone>(store: S) {
    let (k, f) = (key(1), fp(1));
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    assert_eq!(
        renew(&store, &k, token(1), at(LEASE * 3)).await,
        Fence::Held
    );
    assert_eq!(
        claim(&store, &k, &f, token(2), at(LEASE * 2)).await,
        in_flight(f, at(LEASE * 3))
    );
    assert_eq!(
        claim(&store, &k, &f, token(2), at(LEASE * 3)).await,
        TOOK_OVER
    );
}

/// A displaced owner's late renewal, completion and release are refused and leave the new
/// owner's record as it was.
pub async fn displaced_owner_is_fenced_out<S: Store + Clone>(store: S) {
    let (k, f) = (key(1), fp(1));
    let (displaced, owner, other) = (token(1), token(2), token(3));
    assert_eq!(claim(&store, &k, &f, displaced, at(ms(0))).await, ACQUIRED);
    assert_eq!(claim(&store, &k, &f, owner, at(LEASE)).await, TOOK_OVER);
    let owners_record = in_flight(f, at(LEASE * 2));
    let now = at(LEASE + ms(1));

    // Each late write by the displaced owner is refused and leaves the new owner's record as is.
    assert_eq!(renew(&store, &k, displaced, at(HOUR)).await, Fence::Lost);
    assert_eq!(claim(&store, &k, &f, other, now).await, owners_record);
    let stale = b"stale".as_slice();
    assert_eq!(
        complete(&store, &k, displaced, stale, at(TTL)).await,
        Fence::Lost
    );
    assert_eq!(claim(&store, &k, &f, other, now).await, owners_record);
    assert_eq!(release(&store, &k, displaced).await, Fence::Lost);
    assert_eq!(claim(&store, &k, &f, other, now).await, owners_record);

    // The new owner's own writes go through.
    assert_eq!(renew(&store, &k, owner, at(LEASE * 4)).await, Fence::Held);
    assert_eq!(
        claim(&store, &k, &f, other, at(LEASE * 3)).await,
        in_flight(f, at(LEASE * 4))
    );
    let fresh = b"fresh".as_slice();
    assert_eq!(
        complete(&store, &k, owner, fresh, at(TTL)).await,
        Fence::Held
    );
    // A release arriving after completion cannot delete the stored response.
    assert_eq!(release(&store, &k, displaced).await, Fence::Lost);
    assert_eq!(release(&store, &k, owner).await, Fence::Lost);
    assert_eq!(
        claim(&store, &k, &f, other, at(LEASE * 5)).await,
        completed(f, fresh)
    );
}

/// Completion, renewal and release need a record and its owner's token: without either they
/// write (and create) nothing.
pub async fn fenced_writes_need_the_token_and_a_record<S: Store + Clone>(store: S) {
    let (k, f, ok) = (key(1), fp(1), b"ok".as_slice());
    // Nothing to write to: no record is created.
    assert_eq!(
        complete(&store, &k, token(1), ok, at(TTL)).await,
        Fence::Lost
    );
    assert_eq!(renew(&store, &k, token(1), at(LEASE)).await, Fence::Lost);
    assert_eq!(release(&store, &k, token(1)).await, Fence::Lost);
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    // A token that never owned the record writes nothing either.
    assert_eq!(
        complete(&store, &k, token(9), ok, at(TTL)).await,
        Fence::Lost
    );
    assert_eq!(renew(&store, &k, token(9), at(HOUR)).await, Fence::Lost);
    assert_eq!(release(&store, &k, token(9)).await, Fence::Lost);
    assert_eq!(
        claim(&store, &k, &f, token(2), at(ms(1))).await,
        in_flight(f, at(LEASE))
    );
}

/// A record does not exist from its `expires_at` on, completed or in flight with a live lease;
/// its old owner has lost it.
pub async fn expired_records_are_invisible<S: Store + Clone>(store: S) {
    // A completed record: replayed until `expires_at`, gone from then on.
    let (k, f, ok) = (key(1), fp(1), b"ok".as_slice());
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    assert_eq!(
        complete(&store, &k, token(1), ok, at(HOUR)).await,
        Fence::Held
    );
    assert_eq!(
        claim(&store, &k, &f, token(2), at(HOUR - ms(1))).await,
        completed(f, ok)
    );
    // Any request may claim it at `expires_at`, and it is a new record, not a takeover.
    assert_eq!(
        claim(&store, &k, &fp(2), token(2), at(HOUR)).await,
        ACQUIRED
    );
    assert_eq!(
        claim(&store, &k, &f, token(3), at(HOUR + ms(1))).await,
        in_flight(fp(2), at(HOUR + LEASE))
    );

    // An in-flight record past its expiry is gone too, even with its lease still running.
    let k2 = key(2);
    let held = store
        .claim(ClaimRequest {
            key: &k2,
            fingerprint: &f,
            token: token(4),
            now: at(ms(0)),
            lease_until: at(HOUR * 10),
            expires_at: at(HOUR),
            operation: OPERATION,
            scope: "global",
            scope_value: "",
            tenant: 0,
        })
        .await
        .unwrap();
    assert_eq!(held, ACQUIRED);
    assert_eq!(
        claim(&store, &k2, &fp(3), token(5), at(HOUR - ms(1))).await,
        in_flight(f, at(HOUR * 10))
    );
    assert_eq!(
        claim(&store, &k2, &fp(3), token(5), at(HOUR)).await,
        ACQUIRED
    );
    // Its old owner has lost it.
    assert_eq!(
        complete(&store, &k2, token(4), ok, at(TTL)).await,
        Fence::Lost
    );
}

/// Completion replaces the claim's expiry with its own.
pub async fn completion_sets_the_expiry<S: Store + Clone>(store: S) {
    let (k, f, ok) = (key(1), fp(1), b"ok".as_slice());
    // Claimed to expire in a day, completed to expire in an hour.
    assert_eq!(
        claim_until(&store, &k, &f, token(1), at(ms(0)), at(TTL)).await,
        ACQUIRED
    );
    assert_eq!(
        complete(&store, &k, token(1), ok, at(HOUR)).await,
        Fence::Held
    );
    assert_eq!(claim(&store, &k, &f, token(2), at(HOUR)).await, ACQUIRED);
}

/// A released record is gone, so the next request starts afresh; a second release does not
/// delete the new record.
pub async fn released_record_is_claimable_again<S: Store + Clone>(store: S) {
    let (k, f) = (key(1), fp(1));
    assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
    assert_eq!(release(&store, &k, token(1)).await, Fence::Held);
    // Gone: the next request, whatever it is, starts afresh.
    assert_eq!(
        claim(&store, &k, &fp(2), token(2), at(ms(1))).await,
        ACQUIRED
    );
    // A second release by the first owner does not delete the new record.
    assert_eq!(release(&store, &k, token(1)).await, Fence::Lost);
    assert_eq!(
        claim(&store, &k, &f, token(3), at(ms(2))).await,
        in_flight(fp(2), at(ms(1) + LEASE))
    );
}

/// What happens to one key's record never touches another's.
pub async fn keys_are_independent<S: Store + Clone>(store: S) {
    let (f, ok) = (fp(1), b"one".as_slice());
    assert_eq!(
        claim(&store, &key(1), &f, token(1), at(ms(0))).await,
        ACQUIRED
    );
    assert_eq!(
        claim(&store, &key(2), &f, token(1), at(ms(0))).await,
        ACQUIRED
    );
    assert_eq!(
        complete(&store, &key(1), token(1), ok, at(TTL)).await,
        Fence::Held
    );
    assert_eq!(
        claim(&store, &key(2), &f, token(2), at(ms(1))).await,
        in_flight(f, at(LEASE))
    );
    assert_eq!(release(&store, &key(2), token(1)).await, Fence::Held);
    assert_eq!(
        claim(&store, &key(1), &f, token(2), at(ms(2))).await,
        completed(f, ok)
    );
}
