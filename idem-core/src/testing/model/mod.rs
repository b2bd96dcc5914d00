//! The model-based property test of a store: random sequences of claim, complete, release,
//! renew and purge over a few keys and a moving clock, run against the store and against a
//! reference model (a `BTreeMap` and the rules of the [`Store`] trait's documentation), answer
//! for answer. A failure shrinks, with proptest, to a short, readable sequence of [`Step`]s.
//!
//! The [conformance suite](super::conformance) checks the cases someone wrote down; this checks
//! the orders nobody thought of: a takeover after a renewal after a bounded purge, a completion
//! by a displaced owner at the very instant a lease lapses. Every built-in store runs it
//! (`tests/tests/model.rs` in the repository); a store written elsewhere runs it with one call,
//! from a plain `#[test]` (it drives the store on a Tokio runtime of its own):
//!
//! ```
//! use idem_core::store::MemoryStore;
//! use idem_core::testing::model;
//!
//! // In a `#[test]` of the store's crate, with its own store in place of this one:
//! let report = model::check(|| async { MemoryStore::new() }, 64);
//! assert!(report.cases > 0);
//! ```
//!
//! `cases` is how many random sequences run; the environment variable `PROPTEST_CASES`, when
//! set, overrides it (`PROPTEST_CASES=5000 cargo test` for a longer run). The other variables
//! proptest reads apply too (`PROPTEST_RNG_SEED`, `PROPTEST_MAX_SHRINK_ITERS`, …); failures are
//! not persisted to files.
//!
//! Every case uses keys of its own and a time window of its own, far after every earlier case's
//! in the process, so all cases share one store without seeing each other's records: the first
//! thing a case does is purge everything earlier cases left. The store must hold no other
//! records (the model counts what a purge takes): give it a fresh one. A store on a server that
//! must be cleaned up afterwards makes its store itself and calls [`run`] on its runtime, as the
//! repository's own tests do; [`replay`] runs one sequence, for a regression test of a failure.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};

use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tokio::runtime::Runtime;

use crate::clock::Timestamp;
use crate::key::RecordKey;
use crate::store::{ClaimRequest, Completion, LeaseToken, Store};

mod reference;
mod steps;

pub use steps::{Step, Who};

use reference::{Model, fingerprint};
use steps::KEYS;

/// What a run did when every case passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checked {
    /// How many random sequences ran and passed.
    pub cases: u32,
    /// How many steps they held in all.
    pub steps: u64,
}

/// How the store failed the model: the first answer that differed, in the shortest failing
/// sequence shrinking found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Divergence {
    /// The step whose answers differed, with the store's answer (or error) and the model's.
    pub message: String,
    /// The failing sequence, shrunk; [`replay`] runs it again. Empty when proptest gave up
    /// before any case failed.
    pub steps: Vec<Step>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the store differs from the model: {}", self.message)?;
        if !self.steps.is_empty() {
            write!(
                f,
                "\nfailing sequence ({} steps; idem_core::testing::model::replay runs it again):",
                self.steps.len()
            )?;
            for (i, step) in self.steps.iter().enumerate() {
                write!(f, "\n  {i}: {step:?}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Divergence {}

/// Runs `cases` random sequences (`PROPTEST_CASES` overrides) on the store `fresh` makes, on a
/// current-thread Tokio runtime of its own, and returns what ran.
///
/// Call it from a plain `#[test]`, not from inside a Tokio runtime (a `#[tokio::test]`).
///
/// # Panics
/// When the store differs from the model, with the [`Divergence`]: the differing answers and the
/// shrunk sequence. Also when called inside a Tokio runtime, and when `fresh` panics.
pub fn check<S, F, Fut>(fresh: F, cases: u32) -> Checked
where
    S: Store,
    F: FnOnce() -> Fut,
    Fut: Future<Output = S>,
{
    assert!(
        tokio::runtime::Handle::try_current().is_err(),
        "idem_core::testing::model::check runs a Tokio runtime of its own: \
         call it from a #[test], not from inside a runtime (#[tokio::test])"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let store = runtime.block_on(fresh());
    run(&runtime, &store, cases).unwrap_or_else(|failure| panic!("{failure}"))
}

/// Runs `cases` random sequences (`PROPTEST_CASES` overrides) on `store`, each to its end on
/// `runtime` (the runtime the store was made on), and returns what ran or how it failed.
///
/// [`check`] with a store the caller made and cleans up itself. Call it outside `runtime`, from
/// a thread that can block.
pub fn run<S: Store>(runtime: &Runtime, store: &S, cases: u32) -> Result<Checked, Divergence> {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    run_with(runtime, store, config)
}

/// [`run`] with proptest's `config` as it is.
fn run_with<S: Store>(runtime: &Runtime, store: &S, config: Config) -> Result<Checked, Divergence> {
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    let steps = Cell::new(0);
    let result = runner.run(&steps::sequence(), |sequence| {
        steps.set(steps.get() + sequence.len() as u64);
        runtime
            .block_on(run_case(store, &sequence))
            .map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => Ok(Checked {
            cases,
            steps: steps.get(),
        }),
        Err(TestError::Fail(reason, steps)) => Err(Divergence {
            message: reason.message().to_owned(),
            steps,
        }),
        Err(TestError::Abort(reason)) => Err(Divergence {
            message: format!("proptest gave up: {}", reason.message()),
            steps: Vec::new(),
        }),
    }
}

/// Runs one sequence on `store` and on the model, as one case of [`run`] does (keys and a time
/// window of its own, after a purge of what earlier cases left), failing at the first answer
/// that differs. For a regression test of a sequence a failure printed.
///
/// # Errors
/// The [`Divergence`] when an answer differs, when the store returns an error, or when a step names
/// a key outside `0..3`.
pub async fn replay<S: Store>(store: &S, steps: &[Step]) -> Result<(), Divergence> {
    run_case(store, steps).await.map_err(|message| Divergence {
        message,
        steps: steps.to_vec(),
    })
}

/// Time windows: each case starts far after every earlier one, so a purge at its start clears
/// whatever they left (every earlier record has expired by then).
static WINDOW: AtomicI64 = AtomicI64::new(0);
const WINDOW_MS: i64 = 1_000_000_000;

/// Runs `steps` on `store` and on the model, failing at the first answer that differs.
async fn run_case<S: Store>(store: &S, steps: &[Step]) -> Result<(), String> {
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
        .map_err(|e| format!("purge before the case: {e}"))?;
    let mut model = Model::default();
    let mut tokens: BTreeMap<u8, Vec<i64>> = BTreeMap::new();
    let mut next_token = window.wrapping_mul(1_000_003);
    let at = Timestamp::from_millis;
    for (i, step) in steps.iter().enumerate() {
        let fail = |what: String| format!("step {i} {step:?}: {what}");
        let key_of = |key: u8| {
            keys.get(usize::from(key))
                .ok_or_else(|| fail(format!("no key {key}: steps use keys 0..{KEYS}")))
        };
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
                let record = key_of(key)?;
                next_token = next_token.wrapping_add(0x9e37_79b9);
                let token = next_token;
                tokens.entry(key).or_default().push(token);
                let expected = model.claim(key, fp, token, now, now + lease, now + ttl);
                let got = store
                    .claim(ClaimRequest {
                        key: record,
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
                agree(got, expected).map_err(fail)?;
            }
            Step::Complete {
                key,
                who,
                payload,
                ttl,
            } => {
                let record = key_of(key)?;
                let token = token_of(key, who);
                let bytes = vec![payload; 1 + payload as usize % 5];
                let expected = model.fenced(key, token, |r| {
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
                    .complete(record, LeaseToken::from_i64(token), completion)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                agree(got, expected).map_err(fail)?;
            }
            Step::Release { key, who } => {
                let record = key_of(key)?;
                let token = token_of(key, who);
                let expected = model.release(key, token);
                let got = store
                    .release(record, LeaseToken::from_i64(token))
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                agree(got, expected).map_err(fail)?;
            }
            Step::Renew { key, who, lease } => {
                let record = key_of(key)?;
                let token = token_of(key, who);
                let expected = model.fenced(key, token, |r| r.lease_until = Some(now + lease));
                let got = store
                    .renew(record, LeaseToken::from_i64(token), at(now + lease))
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                agree(got, expected).map_err(fail)?;
            }
            Step::Purge { limit } => {
                // Which expired records a bounded purge takes is the store's choice: when it
                // cannot take them all, a second purge takes the rest, so the model stays exact.
                let expired = model.expired(now) as u64;
                let first = store
                    .purge_expired(at(now), limit)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                agree(first, expired.min(u64::from(limit))).map_err(fail)?;
                let rest = store
                    .purge_expired(at(now), u32::MAX)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                if first + rest != expired {
                    return Err(fail(format!(
                        "the store purged {first} then {rest} more, the model {expired} in all"
                    )));
                }
                model.records.retain(|_, r| r.expires_at > now);
            }
            Step::Advance { ms } => now += ms,
        }
    }
    Ok(())
}

/// `Ok` when the store's answer is the model's.
fn agree<T: PartialEq + fmt::Debug>(got: T, expected: T) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "the store answered {got:?}, the model {expected:?}"
        ))
    }
}

#[cfg(test)]
mod tests;
