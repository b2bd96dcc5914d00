//! `MemoryStore`'s bounds, as its documentation states them: at most `max_records` live records
//! and `max_bytes` of them (payload plus a fixed overhead per record), one tenant at most its
//! `tenant_share` of the room it could use (what it holds plus what is free), so a new tenant
//! finds room however many came before; a claim that would go over fails with
//! `StoreError::Full` saying when the earliest record expires, rather than evicting a record a
//! retry may need;
//! expired records make room on the next claim that needs it. (Its record rules are the
//! conformance suite's and the model tests'.) Times are explicit: no sleeps.
//!
//! ```text
//! cargo test -p idem-tests --test memory_store
//! ```

use std::time::Duration;

use idem_runtime::StoreError;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, MemoryStore, Store};

/// What a record costs the byte budget besides its payload (documented as a fixed overhead).
const OVERHEAD: usize = 256;

const T0: i64 = 1_000_000;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn key(n: u8) -> RecordKey {
    let mut bytes = [n; 32];
    bytes[31] = 0xa5;
    RecordKey::from_bytes(bytes)
}

fn fp() -> Fingerprint {
    Fingerprint::of_bytes(b"the request")
}

/// A claim of `key(n)` by `tenant` at `now`, leased until the record `expires`.
async fn claim(
    store: &MemoryStore,
    n: u8,
    tenant: u64,
    now: i64,
    expires: i64,
) -> Result<Claim, StoreError> {
    claim_leased(store, n, tenant, now, expires, expires).await
}

async fn claim_leased(
    store: &MemoryStore,
    n: u8,
    tenant: u64,
    now: i64,
    lease: i64,
    expires: i64,
) -> Result<Claim, StoreError> {
    store
        .claim(ClaimRequest {
            key: &key(n),
            fingerprint: &fp(),
            token: LeaseToken::from_i64(i64::from(n)),
            now: at(now),
            lease_until: at(lease),
            expires_at: at(expires),
            operation: "memory::bounds",
            scope: "global",
            scope_value: "",
            tenant,
        })
        .await
}

async fn acquired(store: &MemoryStore, n: u8, tenant: u64, now: i64, expires: i64) {
    let claim = claim(store, n, tenant, now, expires).await;
    assert!(
        matches!(claim, Ok(Claim::Acquired { took_over: false })),
        "claim of {n} by tenant {tenant}: {claim:?}"
    );
}

/// The claim is refused as full; returns the `limit` and `retry_after` it reported.
async fn refused(store: &MemoryStore, n: u8, tenant: u64, now: i64) -> (usize, Option<Duration>) {
    match claim(store, n, tenant, now, now + 100_000).await {
        Err(StoreError::Full { limit, retry_after }) => (limit, retry_after),
        other => panic!("claim of {n} by tenant {tenant} should be refused as full: {other:?}"),
    }
}

async fn complete(store: &MemoryStore, n: u8, payload: &[u8], now: i64, expires: i64) -> Fence {
    store
        .complete(
            &key(n),
            LeaseToken::from_i64(i64::from(n)),
            Completion {
                payload,
                status: Some(200),
                completed_at: at(now),
                expires_at: at(expires),
            },
        )
        .await
        .unwrap()
}

async fn release(store: &MemoryStore, n: u8) -> Fence {
    store
        .release(&key(n), LeaseToken::from_i64(i64::from(n)))
        .await
        .unwrap()
}

/// The cases, in a module whose name lets `cargo test memory` pick them with the memory backend's
/// cases of the other suites (as the mutation runs in docs/mutation/core-and-stores.md do).
mod memory {
    use super::*;

    #[tokio::test]
    async fn a_full_store_refuses_new_keys_says_when_room_frees_and_takes_them_once_it_has() {
        let store = MemoryStore::new().max_records(2).tenant_share(1.0);
        assert!(store.is_empty());
        acquired(&store, 1, 7, 0, 10_000).await;
        assert!(!store.is_empty());
        acquired(&store, 2, 7, 0, 20_000).await;
        assert_eq!(store.len(), 2);

        // Full: the limit is the configured one, and room frees when the earliest record expires.
        let (limit, retry_after) = refused(&store, 3, 7, 4_000).await;
        assert_eq!(limit, 2);
        assert_eq!(retry_after, Some(Duration::from_secs(6)));
        // Never less than a second, even when the record expires sooner.
        let (_, retry_after) = refused(&store, 3, 7, 9_600).await;
        assert_eq!(retry_after, Some(Duration::from_secs(1)));
        // The records it holds are still answered: nothing was evicted.
        assert!(matches!(
            claim(&store, 1, 7, 9_600, 10_000).await,
            Ok(Claim::InFlight { .. })
        ));
        assert_eq!(store.len(), 2);

        // A record whose expiry is now has expired: the claim that needs its room drops it.
        acquired(&store, 3, 7, 10_000, 50_000).await;
        assert_eq!(store.len(), 2);
        let (_, retry_after) = refused(&store, 4, 7, 10_000).await;
        assert_eq!(retry_after, Some(Duration::from_secs(10)));
        // Long after an expiry, too.
        acquired(&store, 4, 7, 25_000, 60_000).await;
        assert_eq!(store.len(), 2);
    }

    #[tokio::test]
    async fn by_default_one_tenant_may_hold_a_tenth_of_256_mib() {
        let store = MemoryStore::new();
        let response = vec![b'r'; 1 << 20];
        let mut held = 0;
        for n in 1..=40 {
            if claim(&store, n, 7, 0, 60_000).await.is_err() {
                break;
            }
            assert_eq!(complete(&store, n, &response, 0, 60_000).await, Fence::Held);
            held += 1;
        }
        // 25.6 MiB: 25 responses of 1 MiB, and the one in flight when the share ran out.
        assert!((25..=26).contains(&held), "{held} responses of 1 MiB held");
        // Another tenant still has its own tenth.
        acquired(&store, 100, 8, 0, 60_000).await;
    }

    #[tokio::test]
    async fn a_released_record_gives_its_room_back_and_a_strangers_release_does_not() {
        let store = MemoryStore::with_capacity(1).tenant_share(1.0);
        acquired(&store, 1, 7, 0, 60_000).await;
        refused(&store, 2, 7, 0).await;
        // Another token cannot release the record, so the room stays taken.
        let stranger = store
            .release(&key(1), LeaseToken::from_i64(99))
            .await
            .unwrap();
        assert_eq!(stranger, Fence::Lost);
        refused(&store, 2, 7, 0).await;
        assert_eq!(release(&store, 1).await, Fence::Held);
        assert!(store.is_empty());
        assert_eq!(store.bytes(), 0);
        acquired(&store, 2, 7, 0, 60_000).await;
    }

    #[tokio::test]
    async fn records_expiring_together_free_their_room_one_by_one() {
        let store = MemoryStore::with_capacity(2).tenant_share(1.0);
        acquired(&store, 1, 7, 0, 10_000).await;
        acquired(&store, 2, 7, 0, 10_000).await;
        assert_eq!(release(&store, 1).await, Fence::Held);
        acquired(&store, 3, 7, 0, 30_000).await;
        // Record 2 still holds its room until 10 s, whatever happened to record 1.
        let (_, retry_after) = refused(&store, 4, 7, 0).await;
        assert_eq!(retry_after, Some(Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn a_completed_record_holds_its_payload_until_its_new_expiry() {
        let store = MemoryStore::with_capacity(1).tenant_share(1.0);
        acquired(&store, 1, 7, 0, 60_000).await;
        assert_eq!(store.bytes(), OVERHEAD);
        assert_eq!(
            complete(&store, 1, &[b'x'; 1000], 500, 30_000).await,
            Fence::Held
        );
        assert_eq!(store.bytes(), OVERHEAD + 1000);
        assert_eq!(store.len(), 1);
        // The room frees when the completed record expires (30 s), not when the claim said (60 s).
        let (_, retry_after) = refused(&store, 2, 7, 1_000).await;
        assert_eq!(retry_after, Some(Duration::from_secs(29)));
        // Completed once: a second completion with the same token is fenced out and changes nothing.
        assert_eq!(
            complete(&store, 1, b"other", 2_000, 90_000).await,
            Fence::Lost
        );
        assert_eq!(store.bytes(), OVERHEAD + 1000);
        match claim(&store, 1, 7, 2_000, 90_000).await {
            Ok(Claim::Completed { payload, .. }) => assert_eq!(&payload[..], &[b'x'; 1000][..]),
            other => panic!("expected the stored payload, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_takeover_keeps_one_record_that_expires_when_the_new_claim_says() {
        let store = MemoryStore::with_capacity(1).tenant_share(1.0);
        let first = claim_leased(&store, 1, 7, 0, 1_000, 10_000).await;
        assert!(matches!(first, Ok(Claim::Acquired { took_over: false })));
        // The lease (1 s) ran out: the same request takes the record over, with a new expiry.
        let again = claim_leased(&store, 1, 7, 2_000, 3_000, 40_000).await;
        assert!(
            matches!(again, Ok(Claim::Acquired { took_over: true })),
            "{again:?}"
        );
        assert_eq!(store.len(), 1);
        assert_eq!(store.bytes(), OVERHEAD);
        let (_, retry_after) = refused(&store, 2, 7, 2_000).await;
        assert_eq!(retry_after, Some(Duration::from_secs(38)));
        // An expired record of the same key is replaced, not counted twice.
        acquired(&store, 1, 7, 40_000, 80_000).await;
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn the_byte_budget_counts_payloads_and_a_fixed_overhead_per_record() {
        // Room for exactly four records in flight.
        let store = MemoryStore::new().max_bytes(4 * OVERHEAD).tenant_share(1.0);
        for n in 1..=4 {
            acquired(&store, n, 7, 0, 60_000).await;
        }
        assert_eq!(store.bytes(), 4 * OVERHEAD);
        let (_, retry_after) = refused(&store, 5, 7, 0).await;
        assert_eq!(retry_after, Some(Duration::from_secs(60)));
        assert_eq!(release(&store, 4).await, Fence::Held);
        // A stored payload takes room too: three records and 200 bytes leave no room for a fourth.
        assert_eq!(complete(&store, 3, &[0; 200], 0, 60_000).await, Fence::Held);
        assert_eq!(store.bytes(), 3 * OVERHEAD + 200);
        refused(&store, 5, 7, 0).await;
    }

    #[tokio::test]
    async fn a_tenant_holds_its_share_of_the_room_it_could_use() {
        // 10 records, a share of 0.3: alone, a tenant may hold three.
        let store = MemoryStore::new().max_records(10).tenant_share(0.3);
        // Tenant 2 holds one, which expires first (5 s).
        acquired(&store, 10, 2, 0, 5_000).await;
        // Tenant 1 could use the other nine: 0.3 of them is two.
        acquired(&store, 1, 1, 0, 20_000).await;
        acquired(&store, 2, 1, 0, 21_000).await;
        let (limit, retry_after) = refused(&store, 3, 1, 0).await;
        assert_eq!(limit, 10);
        assert_eq!(
            retry_after,
            Some(Duration::from_secs(5)),
            "room frees when the earliest record expires, whoever holds it"
        );
        // Tenant 2's record expired: it is dropped to make room, and tenant 1 may hold three.
        acquired(&store, 3, 1, 6_000, 60_000).await;
        refused(&store, 4, 1, 6_000).await;
        // Giving one record back gives the tenant one claim, not a fresh share.
        assert_eq!(release(&store, 1).await, Fence::Held);
        acquired(&store, 4, 1, 6_000, 60_000).await;
        refused(&store, 5, 1, 6_000).await;
    }

    #[tokio::test]
    async fn a_tenant_holds_its_share_of_the_bytes_it_could_use() {
        // 8 records' worth of bytes, a share of a half: alone, four records in flight.
        let store = MemoryStore::new().max_bytes(8 * OVERHEAD).tenant_share(0.5);
        for n in 1..=4 {
            acquired(&store, n, 1, 0, 60_000).await;
        }
        refused(&store, 5, 1, 0).await;
        // The next tenant could use the four left: two. The next, the two left: one. And a
        // tenant holding nothing may always claim one record while there is room.
        acquired(&store, 11, 2, 0, 60_000).await;
        acquired(&store, 12, 2, 0, 60_000).await;
        refused(&store, 13, 2, 0).await;
        acquired(&store, 21, 3, 0, 60_000).await;
        refused(&store, 22, 3, 0).await;
        acquired(&store, 31, 4, 0, 60_000).await;
        // Now the store itself is full, for every tenant.
        let (_, retry_after) = refused(&store, 41, 5, 0).await;
        assert_eq!(retry_after, Some(Duration::from_secs(60)));
    }

    #[tokio::test]
    async fn fifty_self_named_tenants_at_their_limit_leave_room_for_the_next() {
        // The defaults: 100 000 records, a share of a tenth. Each tenant claims until refused,
        // as a client naming itself anew (`sk_test_<anything>`) would.
        let store = MemoryStore::new();
        let mut n: u32 = 0;
        // A record key per claim.
        let mut claim_as = |tenant: u64| {
            n += 1;
            let store = store.clone();
            let key = RecordKey::from_bytes(std::array::from_fn(|i| (n >> (8 * (i % 4))) as u8));
            async move {
                let fingerprint = fp();
                let claim = ClaimRequest {
                    key: &key,
                    fingerprint: &fingerprint,
                    token: LeaseToken::random(),
                    now: at(0),
                    lease_until: at(60_000),
                    expires_at: at(86_400_000),
                    operation: "charges.create",
                    scope: "org",
                    scope_value: "",
                    tenant,
                };
                store.claim(claim).await
            }
        };
        let mut held = Vec::new();
        for tenant in 1..=50 {
            let mut records = 0;
            while claim_as(tenant).await.is_ok() {
                records += 1;
            }
            held.push(records);
        }
        // The first took its tenth; each later one a tenth of what was left.
        assert_eq!(held[0], 10_000, "{held:?}");
        assert!(held.windows(2).all(|w| w[0] >= w[1]), "{held:?}");
        let free = 100_000 - store.len();
        assert!(free > 400, "{free} records free: {held:?}");
        // A tenant that had nothing is served, and not just once: 50 requests a day.
        for n in 0..50 {
            assert!(
                claim_as(99).await.is_ok(),
                "the victim's claim {n} is served"
            );
        }
    }

    #[tokio::test]
    async fn purging_takes_at_most_the_limit_and_only_expired_records() {
        let store = MemoryStore::new();
        for n in 1..=5 {
            acquired(&store, n, 7, 0, 10_000).await;
        }
        acquired(&store, 6, 7, 0, 10_001).await;
        assert_eq!(store.purge_expired(at(10_000), 2).await.unwrap(), 2);
        assert_eq!(store.len(), 4);
        assert_eq!(store.purge_expired(at(10_000), 100).await.unwrap(), 3);
        assert_eq!(store.len(), 1);
        assert_eq!(store.bytes(), OVERHEAD);
        assert_eq!(store.purge_expired(at(10_000), 100).await.unwrap(), 0);
        assert_eq!(store.purge_expired(at(10_001), 0).await.unwrap(), 0);
        assert_eq!(store.purge_expired(at(10_001), 1).await.unwrap(), 1);
        assert!(store.is_empty());
    }
}
