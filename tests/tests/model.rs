//! Model-based property tests of every store: random sequences of claim, complete, release,
//! renew and purge over a few keys and a moving clock, run against the store and against a
//! reference model (a `BTreeMap` and the rules of the `Store` trait's documentation), answer for
//! answer. A failure shrinks to a short, readable sequence of operations.
//!
//! Each case uses keys of its own and a time window of its own, far after the previous case's,
//! so cases share one store (one PostgreSQL schema per backend, not one per case) without seeing
//! each other's records: the first thing a case does is purge everything earlier cases left.
//!
//! ```text
//! cargo test -p idem-tests --test model
//! PROPTEST_CASES=5000 cargo test -p idem-tests --test model   # longer
//! ```
//!
//! A new backend is one line in the `backends!` list at the bottom (and its `TestStore` impl).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

use bytes::Bytes;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};
use idem_runtime::{Fingerprint, RecordKey};
use idem_tests::TestStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const KEYS: u8 = 3;

/// One step of a sequence. Times are milliseconds from the step's "now".
#[derive(Debug, Clone)]
enum Step {
    Claim {
        key: u8,
        fp: u8,
        lease: i64,
        ttl: i64,
    },
    Complete {
        key: u8,
        who: Who,
        payload: u8,
        ttl: i64,
    },
    Release {
        key: u8,
        who: Who,
    },
    Renew {
        key: u8,
        who: Who,
        lease: i64,
    },
    Purge {
        limit: u32,
    },
    Advance {
        ms: i64,
    },
}

/// Which token a fenced write presents.
#[derive(Debug, Clone, Copy)]
enum Who {
    /// The last token a claim of the key presented.
    Latest,
    /// An earlier claim's token (the n-th, modulo how many there were).
    Earlier(u8),
    /// A token no claim presented.
    Stranger,
}

/// Times are whole multiples of half a second, so a lease or a record often ends exactly at
/// "now": the boundary every store must draw the same way.
fn half_seconds(range: std::ops::Range<i64>) -> impl Strategy<Value = i64> + Clone {
    range.prop_map(|n| n * 500)
}

fn step() -> impl Strategy<Value = Step> {
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

/// A record as the `Store` documentation defines it.
#[derive(Debug, Clone)]
struct Record {
    fp: u8,
    token: i64,
    expires_at: i64,
    /// `Some(lease_until)` in flight, `None` completed.
    lease_until: Option<i64>,
    payload: Vec<u8>,
    /// When it completed (meaningless in flight).
    completed_at: i64,
}

/// The reference model: what every store must answer.
#[derive(Debug, Default)]
struct Model {
    records: BTreeMap<u8, Record>,
}

impl Model {
    fn claim(
        &mut self,
        key: u8,
        fp: u8,
        token: i64,
        now: i64,
        lease_until: i64,
        expires_at: i64,
    ) -> Claim {
        let fresh = Record {
            fp,
            token,
            expires_at,
            lease_until: Some(lease_until),
            payload: Vec::new(),
            completed_at: 0,
        };
        match self.records.get_mut(&key).filter(|r| r.expires_at > now) {
            None => {
                self.records.insert(key, fresh);
                Claim::Acquired { took_over: false }
            }
            Some(r) => match r.lease_until {
                None => Claim::Completed {
                    fingerprint: fingerprint(r.fp),
                    payload: Bytes::from(r.payload.clone()),
                    completed_at: Some(Timestamp::from_millis(r.completed_at)),
                },
                Some(lease) if lease > now || r.fp != fp => Claim::InFlight {
                    fingerprint: fingerprint(r.fp),
                    lease_until: Timestamp::from_millis(lease),
                },
                Some(_) => {
                    *r = fresh;
                    Claim::Acquired { took_over: true }
                }
            },
        }
    }

    /// Applies `f` to the record if `token` owns it in flight (expired or not: fencing is by
    /// token and state alone).
    fn fenced(&mut self, key: u8, token: i64, f: impl FnOnce(&mut Self)) -> Fence {
        match self.records.get(&key) {
            Some(r) if r.token == token && r.lease_until.is_some() => {
                f(self);
                Fence::Held
            }
            _ => Fence::Lost,
        }
    }

    fn expired(&self, now: i64) -> usize {
        self.records
            .values()
            .filter(|r| r.expires_at <= now)
            .count()
    }
}

fn fingerprint(n: u8) -> Fingerprint {
    let mut bytes = [n; 32];
    bytes[0] = 0xf0;
    Fingerprint::from_bytes(bytes)
}

/// Time windows: each case starts far after every earlier one, so a purge at its start clears
/// whatever they left (every earlier record has expired by then).
static WINDOW: AtomicI64 = AtomicI64::new(0);
const WINDOW_MS: i64 = 1_000_000_000;

/// Runs `steps` on `store` and on the model, failing at the first answer that differs.
async fn run_case<S: Store>(store: &S, steps: &[Step]) -> Result<(), TestCaseError> {
    let window = WINDOW.fetch_add(1, Ordering::SeqCst) + 1;
    let mut now = 1_750_000_000_000 + window * WINDOW_MS;
    let keys: Vec<RecordKey> = (0..KEYS)
        .map(|k| {
            let mut bytes = [k; 32];
            bytes[..8].copy_from_slice(&window.to_be_bytes());
            RecordKey::from_bytes(bytes)
        })
        .collect();
    store
        .purge_expired(Timestamp::from_millis(now), u32::MAX)
        .await
        .map_err(|e| TestCaseError::fail(format!("purge before the case: {e}")))?;
    let mut model = Model::default();
    let mut tokens: BTreeMap<u8, Vec<i64>> = BTreeMap::new();
    let mut next_token = window.wrapping_mul(1_000_003);
    let at = Timestamp::from_millis;
    for (i, step) in steps.iter().enumerate() {
        let fail = |what: String| TestCaseError::fail(format!("step {i} {step:?}: {what}"));
        let token_of = |key: u8, who: Who| {
            let issued = tokens.get(&key).map(Vec::as_slice).unwrap_or_default();
            match who {
                Who::Latest => issued.last().copied(),
                Who::Earlier(n) if !issued.is_empty() => Some(issued[n as usize % issued.len()]),
                _ => None,
            }
            .unwrap_or(i64::MIN + 7)
        };
        match *step {
            Step::Claim {
                key,
                fp,
                lease,
                ttl,
            } => {
                next_token = next_token.wrapping_add(0x9e37_79b9);
                let token = next_token;
                tokens.entry(key).or_default().push(token);
                let expected = model.claim(key, fp, token, now, now + lease, now + ttl);
                let got = store
                    .claim(ClaimRequest {
                        key: &keys[key as usize],
                        fingerprint: &fingerprint(fp),
                        token: LeaseToken::from_i64(token),
                        now: at(now),
                        lease_until: at(now + lease),
                        expires_at: at(now + ttl),
                        operation: "model::step",
                        scope: "global",
                        scope_value: "",
                        tenant: 0,
                    })
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    expected,
                    "step {} {:?} (left: the store, right: the model)",
                    i,
                    step
                );
            }
            Step::Complete {
                key,
                who,
                payload,
                ttl,
            } => {
                let token = token_of(key, who);
                let bytes = vec![payload; 1 + payload as usize % 5];
                let expected = model.fenced(key, token, |m| {
                    let r = m.records.get_mut(&key).expect("fenced on a record");
                    r.lease_until = None;
                    r.expires_at = now + ttl;
                    r.payload = bytes.clone();
                    r.completed_at = now;
                });
                let completion = Completion {
                    payload: &bytes,
                    status: Some(201),
                    completed_at: at(now),
                    expires_at: at(now + ttl),
                };
                let got = store
                    .complete(&keys[key as usize], LeaseToken::from_i64(token), completion)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    expected,
                    "step {} {:?} (left: the store, right: the model)",
                    i,
                    step
                );
            }
            Step::Release { key, who } => {
                let token = token_of(key, who);
                let expected = model.fenced(key, token, |m| {
                    m.records.remove(&key);
                });
                let got = store
                    .release(&keys[key as usize], LeaseToken::from_i64(token))
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    expected,
                    "step {} {:?} (left: the store, right: the model)",
                    i,
                    step
                );
            }
            Step::Renew { key, who, lease } => {
                let token = token_of(key, who);
                let expected = model.fenced(key, token, |m| {
                    let r = m.records.get_mut(&key).expect("fenced on a record");
                    r.lease_until = Some(now + lease);
                });
                let got = store
                    .renew(
                        &keys[key as usize],
                        LeaseToken::from_i64(token),
                        at(now + lease),
                    )
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(
                    got,
                    expected,
                    "step {} {:?} (left: the store, right: the model)",
                    i,
                    step
                );
            }
            Step::Purge { limit } => {
                // Which expired records a bounded purge takes is the store's choice: when it
                // cannot take them all, a second purge takes the rest, so the model stays exact.
                let expired = model.expired(now) as u64;
                let first = store
                    .purge_expired(at(now), limit)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(
                    first,
                    expired.min(u64::from(limit)),
                    "step {} {:?} (left: the store, right: the model)",
                    i,
                    step
                );
                let rest = store
                    .purge_expired(at(now), u32::MAX)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(first + rest, expired, "step {} {:?}: the rest", i, step);
                model.records.retain(|_, r| r.expires_at > now);
            }
            Step::Advance { ms } => now += ms,
        }
    }
    Ok(())
}

/// Runs `cases` random sequences (`PROPTEST_CASES` overrides) on one fresh store of `S`.
fn check<S: TestStore>(cases: u32) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let store = runtime.block_on(S::fresh());
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let steps = proptest::collection::vec(step(), 1..40);
    let result = runner.run(&steps, |steps| runtime.block_on(run_case(&store, &steps)));
    runtime.block_on(store.discard());
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// One test per backend: `backends! { name: StoreType => cases, ... }`; `if available` after
/// the count skips the test when it is false (a server the process has none of outside CI).
macro_rules! backends {
    ($($name:ident: $store:ty => $cases:expr $(, if $available:expr)?);+ $(;)?) => {
        $(
            #[test]
            fn $name() {
                $(if !$available {
                    return;
                })?
                check::<$store>($cases);
            }
        )+
    };
}

backends! {
    memory: idem_runtime::store::MemoryStore => 512;
    sqlite: idem_runtime::store::SqliteStore => 96;
    postgres: idem_runtime::store::PostgresStore => 96;
    redis: idem_runtime::store::RedisStore => 96;
    bucket: idem_runtime::store::BucketStore => 96;
    dynamodb: idem_runtime::store::DynamoDbStore => 96,
        if idem_tests::dynamodb::dynamodb_endpoint().is_some();
}
