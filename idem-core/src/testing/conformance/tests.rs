//! The suite itself: the reference store passes all of it, a store with a payload limit skips
//! what it cannot keep, and a store that breaks the contract fails with its cases named.

use std::sync::Arc;

use super::*;
use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::records::{Forgotten, Record, RecordFilter, RecordStats};
use crate::store::{
    Capabilities, Claim, ClaimRequest, Completion, Fence, Found, LeaseToken, MemoryStore,
};

/// The memory store, with a payload limit, expiry by itself, or a contract it breaks: a renewal
/// that ignores the fence, claims that take records others hold. The fault suite's tests use it
/// too.
#[derive(Clone, Default)]
pub(crate) struct Altered {
    pub(crate) inner: MemoryStore,
    pub(crate) payload_limit: Option<usize>,
    /// Offers [`Capabilities::expires_by_itself`].
    pub(crate) expires_by_itself: bool,
    /// `renew` answers `Held` whoever asks, and changes nothing.
    pub(crate) unfenced_renewals: bool,
    /// `claim` acquires a record another owner holds instead of answering `InFlight`.
    pub(crate) claims_held_records: bool,
}

impl Store for Altered {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        match self.inner.claim(request).await? {
            Claim::InFlight { .. } if self.claims_held_records => {
                Ok(Claim::Acquired { took_over: true })
            }
            claim => Ok(claim),
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.inner.complete(key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.inner.release(key, token).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        if self.unfenced_renewals {
            return Ok(Fence::Held);
        }
        self.inner.renew(key, token, lease_until).await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_expired(now, limit).await
    }

    fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        if let Some(limit) = self.payload_limit {
            capabilities.limit_payload(limit);
        }
        if self.expires_by_itself {
            capabilities.expires_by_itself();
        }
    }
}

impl Admin for Altered {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        self.inner.list_records(filter, now, limit).await
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Found, StoreError> {
        self.inner.read_record(key).await
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        self.inner.forget_record(key, now, force).await
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        self.inner.purge_records(filter, now, limit).await
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        self.inner.record_stats(filter, now).await
    }
}

#[tokio::test]
async fn the_memory_store_passes_every_case() {
    let report = run_all(|| async { MemoryStore::new() }).await;
    assert_eq!(report.passed, CASES);
    assert!(report.skipped.is_empty());
}

#[tokio::test]
async fn a_store_with_a_payload_limit_skips_only_the_cases_that_store_more() {
    let limited = || async {
        Altered {
            payload_limit: Some(400 * 1024),
            ..Altered::default()
        }
    };
    let report = run_all(limited).await;
    assert_eq!(report.skipped, ["large_payloads_round_trip_exactly"]);
    assert_eq!(report.passed.len(), CASES.len() - 1);
    assert_eq!(payload_limit(&limited().await), Some(400 * 1024));
    assert_eq!(payload_limit(&MemoryStore::new()), None);
}

#[tokio::test]
async fn a_store_that_breaks_the_contract_fails_with_its_cases_named() {
    let unfenced = || async {
        Altered {
            unfenced_renewals: true,
            ..Altered::default()
        }
    };
    let failure = tokio::spawn(run_all(unfenced))
        .await
        .expect_err("an unfenced renewal must fail the suite")
        .into_panic();
    let message = crate::testing::message(&*failure).to_owned();
    for case in [
        "claim_complete_replay",
        "renew_extends_the_lease",
        "displaced_owner_is_fenced_out",
        "fenced_writes_need_the_token_and_a_record",
    ] {
        assert!(message.contains(&format!("`{case}`")), "{case}: {message}");
    }
    // The cases that never renew pass, and are not named.
    assert!(!message.contains("`keys_are_independent`"), "{message}");
    assert!(message.contains("conformance cases"), "{message}");
}

#[test]
fn cases_and_their_names_agree() {
    let cases = cases::<MemoryStore>();
    let names: Vec<_> = cases.iter().map(|case| case.name).collect();
    assert_eq!(names, CASES);
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "no case listed twice");
    assert_eq!(
        case::<MemoryStore>("large_payloads_round_trip_exactly").map(|c| c.largest_payload),
        Some(LARGE_PAYLOAD)
    );
    assert!(case::<MemoryStore>("nope").is_none());
    let large = case::<MemoryStore>("large_payloads_round_trip_exactly").unwrap();
    assert!(large.fits(None));
    assert!(large.fits(Some(LARGE_PAYLOAD)));
    assert!(!large.fits(Some(LARGE_PAYLOAD - 1)));
}
