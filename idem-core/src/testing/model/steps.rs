//! The operations a sequence is made of, and the strategy that draws them.

use proptest::prelude::*;

/// How many keys a sequence works on: few, so that operations meet on the same records.
pub(super) const KEYS: u8 = 3;

/// One step of a sequence. Keys are `0..3`, fingerprints `0..2`; durations are milliseconds
/// from the step's "now", whole multiples of half a second.
///
/// A failing sequence is printed as these steps (`Claim { key: 0, fp: 1, lease: 500, ttl: 500 }`),
/// which is also how to write one back into a regression test for [`replay`](super::replay),
/// with `use idem_core::testing::model::{Step::*, Who::*};`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// [`Store::claim`](crate::store::Store::claim) of `key` with fingerprint `fp`, under a new
    /// token, for a lease of `lease` and a life of `ttl`.
    Claim {
        /// Which key.
        key: u8,
        /// Which fingerprint.
        fp: u8,
        /// The lease to grant, from now.
        lease: i64,
        /// When the record expires, from now.
        ttl: i64,
    },
    /// [`Store::complete`](crate::store::Store::complete) of `key` under `who`'s token, with a
    /// payload made of the byte `payload` and a life of `ttl`.
    Complete {
        /// Which key.
        key: u8,
        /// Whose token the write presents.
        who: Who,
        /// The payload's byte (the payload is 1 to 5 of it).
        payload: u8,
        /// When the completed record expires, from now.
        ttl: i64,
    },
    /// [`Store::release`](crate::store::Store::release) of `key` under `who`'s token.
    Release {
        /// Which key.
        key: u8,
        /// Whose token the write presents.
        who: Who,
    },
    /// [`Store::renew`](crate::store::Store::renew) of `key` under `who`'s token, to a lease of
    /// `lease`.
    Renew {
        /// Which key.
        key: u8,
        /// Whose token the write presents.
        who: Who,
        /// The new lease, from now.
        lease: i64,
    },
    /// [`Store::purge_expired`](crate::store::Store::purge_expired) with `limit`, then again
    /// without one: how many the first takes and how many both take are checked.
    Purge {
        /// The first purge's limit.
        limit: u32,
    },
    /// The clock moves on by `ms` milliseconds.
    Advance {
        /// How far.
        ms: i64,
    },
}

/// Which token a fenced write ([`Step::Complete`], [`Step::Release`], [`Step::Renew`]) presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The token of the key's last claim (whatever that claim answered).
    Latest,
    /// An earlier claim's token: the n-th of the key's claims, modulo how many there were.
    Earlier(u8),
    /// A token no claim presented.
    Stranger,
}

/// Times are whole multiples of half a second, so a lease or a record often ends exactly at
/// "now": the boundary every store must draw the same way.
fn half_seconds(range: std::ops::Range<i64>) -> impl Strategy<Value = i64> + Clone {
    range.prop_map(|n| n * 500)
}

/// One step, claims and completions more often than the rest.
pub(super) fn step() -> impl Strategy<Value = Step> {
    let key = 0..KEYS;
    let who = prop_oneof![
        4 => Just(Who::Latest),
        2 => any::<u8>().prop_map(Who::Earlier),
        1 => Just(Who::Stranger),
    ];
    prop_oneof![
        4 => (key.clone(), 0..2u8, half_seconds(1..8), half_seconds(1..40))
            .prop_map(|(key, fp, lease, ttl)| Step::Claim { key, fp, lease, ttl }),
        3 => (key.clone(), who.clone(), any::<u8>(), half_seconds(1..40))
            .prop_map(|(key, who, payload, ttl)| Step::Complete { key, who, payload, ttl }),
        1 => (key.clone(), who.clone()).prop_map(|(key, who)| Step::Release { key, who }),
        2 => (key, who, half_seconds(1..8)).prop_map(|(key, who, lease)| Step::Renew { key, who, lease }),
        1 => prop_oneof![Just(1u32), Just(2), Just(1_000)].prop_map(|limit| Step::Purge { limit }),
        3 => half_seconds(0..12).prop_map(|ms| Step::Advance { ms }),
    ]
}

/// A sequence of 1 to 39 steps.
pub(super) fn sequence() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..40)
}
