//! A store that fails or stalls when the engine claims: fail closed, release what may have
//! landed, run once when the store is back; and many callers of one key while it flaps.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use super::faulty::{Call, Fault};
use super::rig::{Rig, SETTLE, fresh, replayed, retryable, unavailable};
use crate::error::StoreError;
use crate::operation::{OperationError, Outcome};
use crate::store::Store;

/// The store timeout of the cases that stall the store: short, so the suite stays quick, and
/// long enough that a store over loopback answers an ordinary call well within it.
const STALL_TIMEOUT: Duration = Duration::from_secs(1);

/// How much longer than its store timeout a call to a stalled store may take to return: ten
/// times. The engine answers at the timeout; the margin is for a loaded machine (a test runner
/// sharing its cores), not a tolerance of the engine's, which either answers near the timeout
/// or hangs.
const STALL_MARGIN: u32 = 10;

/// A claim the store fails without carrying it out: the operation does not run, the caller is
/// told the store is unavailable (a retryable answer, 503 on HTTP), as often as it retries
/// while the store is down; once the store is back the next attempt runs the operation, once.
pub async fn a_failed_claim_runs_nothing<S: Store>(store: S) {
    let rig = Rig::new(store);
    rig.faults.inject(Call::Claim, Fault::Blink);
    for _ in 0..3 {
        let refused = rig.attempt("claim-blink", Duration::ZERO, false).await;
        assert!(unavailable(&refused), "a failed claim: {refused:?}");
    }
    assert_eq!(rig.runs(), 0, "the operation ran although its claim failed");
    rig.faults.heal(Call::Claim);
    // Nothing landed: the key is free at once.
    let ran = rig.attempt("claim-blink", Duration::ZERO, false).await;
    assert_eq!(fresh(ran), 1);
    let again = rig.attempt("claim-blink", Duration::ZERO, false).await;
    assert_eq!(replayed(again), 1);
    assert_eq!(rig.runs(), 1);
}

/// A claim the store carried out but whose reply was lost: the caller is refused as for a
/// failed claim and the operation does not run; the claim that landed is released by its own
/// token, so the key frees within moments (well before the lease would lapse) and the next
/// attempt runs the operation, once.
pub async fn a_claim_whose_reply_is_lost_is_released<S: Store>(store: S) {
    let rig = Rig::new(store);
    rig.faults.inject_next(Call::Claim, Fault::LoseReply, 1);
    let refused = rig.attempt("claim-lost", Duration::ZERO, false).await;
    assert!(
        unavailable(&refused),
        "a claim whose reply was lost: {refused:?}"
    );
    assert_eq!(rig.runs(), 0, "the operation ran although its claim failed");
    let ran = rig
        .settle("claim-lost", "a claim whose reply was lost")
        .await;
    assert_eq!(fresh(ran), 1);
    let again = rig.attempt("claim-lost", Duration::ZERO, false).await;
    assert_eq!(replayed(again), 1);
    assert_eq!(rig.runs(), 1);
}

/// A store that stops answering altogether: the caller is refused as unavailable within the
/// store timeout (checked against ten times it, a bound for loaded machines), the operation
/// not run. The stalled claim runs on past its caller; once the store answers again it lands
/// and is released, so the key is usable and the next attempt runs the operation, once.
pub async fn a_stalled_store_fails_closed_within_the_store_timeout<S: Store>(store: S) {
    let rig = Rig::with(store, super::rig::LEASE, STALL_TIMEOUT);
    rig.faults.inject_all(&Call::ATTEMPT, Fault::Stall);
    let started = Instant::now();
    let refused = rig.attempt("stalled", Duration::ZERO, false).await;
    let took = started.elapsed();
    assert!(
        matches!(
            refused,
            Err(OperationError::Unavailable(StoreError::Timeout(_)))
        ),
        "a stalled claim: {refused:?}"
    );
    assert!(
        took < STALL_TIMEOUT * STALL_MARGIN,
        "a stalled store was answered in {took:?}, past {STALL_MARGIN} times its store \
         timeout of {STALL_TIMEOUT:?}: callers hang while the store does"
    );
    assert_eq!(
        rig.runs(),
        0,
        "the operation ran although its claim stalled"
    );
    assert!(
        rig.faults.stalled() > 0,
        "the claim stopped waiting for the store"
    );
    rig.faults.heal_all();
    let ran = rig.settle("stalled", "the store answered again").await;
    assert_eq!(fresh(ran), 1);
    let again = rig.attempt("stalled", Duration::ZERO, false).await;
    assert_eq!(replayed(again), 1);
    assert_eq!(rig.runs(), 1);
}

/// How many callers the flapping case runs at once.
const CALLERS: usize = 16;

/// Many callers retrying one key at once while the store flaps (calls failing outright, then
/// replies lost, then answered, by turns): the operation runs once; each attempt gets its
/// output, or a retryable refusal (in flight, store unavailable), and in the end every caller
/// gets the output of that one run, one of them fresh.
pub async fn concurrent_attempts_while_the_store_flaps_run_once<S: Store>(store: S) {
    let rig = Rig::new(store);
    let flapping = {
        let faults = rig.faults.clone();
        tokio::spawn(async move {
            for round in 0..12 {
                let fault = match round % 2 {
                    0 => Fault::Blink,
                    _ => Fault::LoseReply,
                };
                faults.inject_all(&Call::ATTEMPT, fault);
                tokio::time::sleep(Duration::from_millis(25)).await;
                faults.heal_all();
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        })
    };
    let mut callers = JoinSet::new();
    for _ in 0..CALLERS {
        let rig = rig.clone();
        callers.spawn(async move {
            let started = Instant::now();
            loop {
                let ran = rig
                    .attempt("flapping", Duration::from_millis(30), false)
                    .await;
                if !retryable(&ran) {
                    return ran;
                }
                assert!(
                    started.elapsed() < SETTLE * 2,
                    "a caller was still refused {:?} after the store flapped: {ran:?}",
                    SETTLE * 2
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    let mut fresh_runs = 0;
    while let Some(ran) = callers.join_next().await {
        match ran.expect("a caller panicked") {
            Ok(Outcome::Fresh(run)) => {
                fresh_runs += 1;
                assert_eq!(run, 1, "a second run");
            }
            Ok(Outcome::Replayed(run)) => assert_eq!(run, 1, "a replay of a second run"),
            Err(error) => panic!("a caller got an answer it cannot retry: {error:?}"),
        }
    }
    flapping.await.expect("the flapping task");
    rig.faults.heal_all();
    assert_eq!(rig.runs(), 1, "the operation ran more than once");
    assert_eq!(fresh_runs, 1, "callers told the operation ran for them");
}
