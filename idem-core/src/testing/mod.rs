//! What a store's tests share (feature `testing`): a clock near a fixed instant, distinct keys,
//! and a claim request for a minute's lease; [`conformance`], the suite every store runs to
//! prove it keeps the [`Store`] contract; and [`model`], the model-based
//! property test every store runs too, random sequences of operations checked answer for answer
//! against a reference model, which a store of one's own runs from a `#[test]` with
//! `idem_core::testing::model::check(|| async { MyStore::new() }, 256)`; and [`faults`], the
//! suite that drives the real engine over the store while chosen calls blink, lose their
//! replies or stall ([`faults::Faulty`]), checking that nothing runs twice, that the engine
//! fails closed and that it recovers by itself:
//! `idem_core::testing::faults::run_all(|| async { MyStore::new() })`.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::task::Poll;

use crate::clock::Timestamp;
use crate::fingerprint::Fingerprint;
use crate::key::RecordKey;
use crate::store::{BoxFuture, Capabilities, ClaimRequest, LeaseToken, Store};

pub mod conformance;
pub mod faults;
pub mod model;

/// The instant the tests' clocks count from, in milliseconds since the Unix epoch.
pub const T0: i64 = 1_700_000_000_250;

/// `ms` milliseconds after [`T0`].
pub fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

/// A key whose last four bytes are `i`.
pub fn key(i: u32) -> RecordKey {
    let mut bytes = [0; 32];
    bytes[28..].copy_from_slice(&i.to_be_bytes());
    RecordKey::from_bytes(bytes)
}

/// The fingerprint every request of these tests has.
pub const FINGERPRINT: Fingerprint = Fingerprint::from_bytes([7; 32]);

/// A claim of `key` under `token` at `now`, for a minute's lease and a life of `ttl`, of the
/// operation `op` in `(scope, scope_value)`.
pub fn request<'a>(
    key: &'a RecordKey,
    token: i64,
    now: i64,
    ttl: i64,
    (scope, scope_value): (&'a str, &'a str),
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint: &FINGERPRINT,
        token: LeaseToken::from_i64(token),
        now: at(now),
        lease_until: at(now + 60_000),
        expires_at: at(now + ttl),
        operation: "op",
        scope,
        scope_value,
        tenant: 0,
    }
}

/// What `store` offers the engine beyond the calls every store answers, as an engine built on
/// it sees it: what its [`Store::offer_capabilities`] fills in.
pub fn capabilities_of<S: Store>(store: S) -> Capabilities {
    let mut capabilities = Capabilities::default();
    std::sync::Arc::new(store).offer_capabilities(&mut capabilities);
    capabilities
}

/// Polls `case` to its end, catching a panic on any poll as the case's failure.
pub(crate) async fn catch_unwind(
    mut case: BoxFuture<'static, ()>,
) -> Result<(), Box<dyn Any + Send>> {
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| case.as_mut().poll(cx))) {
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
    .await
}

/// A panic's message, when it has one.
pub(crate) fn message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}
