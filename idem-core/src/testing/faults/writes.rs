//! A store that fails or stalls when the owner writes its result or frees its key: the write
//! lands later, in the background, and the key never runs twice meanwhile.

use std::time::Duration;

use tokio::time::Instant;

use super::faulty::{Call, Fault};
use super::rig::{LEASE, Rig, fresh, in_flight, replayed};
use crate::operation::OperationError;
use crate::store::Store;

/// A completion the store fails while it is down: the caller gets its output all the same
/// (the operation ran); duplicates are refused as in flight meanwhile, never run; the engine
/// retries the completion in the background, and once the store is back a retry of the key
/// replays the first output. The operation never runs twice.
pub async fn a_completion_lost_to_a_blink_lands_later<S: Store>(store: S) {
    let rig = Rig::new(store);
    rig.faults.inject(Call::Complete, Fault::Blink);
    let first = rig.attempt("complete-blink", Duration::ZERO, false).await;
    assert_eq!(fresh(first), 1);
    let duplicate = rig.attempt("complete-blink", Duration::ZERO, false).await;
    assert!(
        in_flight(&duplicate),
        "a duplicate while the completion is retried: {duplicate:?}"
    );
    rig.until("the engine retries the completion", |rig| {
        rig.faults.faulted(Call::Complete) >= 2
    })
    .await;
    rig.faults.heal(Call::Complete);
    let retried = rig
        .settle("complete-blink", "the store took completions again")
        .await;
    assert_eq!(replayed(retried), 1);
    assert_eq!(rig.runs(), 1, "the operation ran twice");
}

/// A completion the store carried out but whose reply was lost: the engine, not knowing it
/// landed, tries again and finds its result stored; a retry of the key replays the first
/// output, and the operation never runs twice.
pub async fn a_completion_whose_reply_is_lost_replays_the_first_output<S: Store>(store: S) {
    let rig = Rig::new(store);
    rig.faults.inject_next(Call::Complete, Fault::LoseReply, 1);
    let first = rig.attempt("complete-lost", Duration::ZERO, false).await;
    assert_eq!(fresh(first), 1);
    let retried = rig
        .settle("complete-lost", "a completion whose reply was lost")
        .await;
    assert_eq!(replayed(retried), 1);
    assert_eq!(rig.runs(), 1, "the operation ran twice");
}

/// A completion the store stalls on past the store timeout: the caller gets its output (it
/// ran) within about the timeout, not when the store answers; duplicates are refused as in
/// flight; once the store answers, the completion lands and a retry replays the first output.
pub async fn a_stalled_completion_lands_once_the_store_answers<S: Store>(store: S) {
    let timeout = Duration::from_secs(1);
    let rig = Rig::with(store, LEASE, timeout);
    rig.faults.inject(Call::Complete, Fault::Stall);
    let started = Instant::now();
    let first = rig.attempt("complete-stall", Duration::ZERO, false).await;
    let took = started.elapsed();
    assert_eq!(fresh(first), 1);
    // Generous, as for a stalled claim: the engine answers at the timeout.
    assert!(
        took < timeout * 10,
        "a stalled completion held its caller {took:?} (store timeout {timeout:?})"
    );
    let duplicate = rig.attempt("complete-stall", Duration::ZERO, false).await;
    assert!(
        in_flight(&duplicate),
        "a duplicate while the completion stalls: {duplicate:?}"
    );
    rig.faults.heal(Call::Complete);
    let retried = rig
        .settle("complete-stall", "the store answered the completion")
        .await;
    assert_eq!(replayed(retried), 1);
    assert_eq!(rig.runs(), 1, "the operation ran twice");
}

/// An operation that fails must free its key so a retry runs it again. A release the store
/// fails while it is down: the caller gets the operation's error; the key stays in flight
/// (duplicates are refused, never run) while the engine retries the release in the
/// background; once the store is back the key frees (well before its lease would lapse) and a
/// retry runs the operation again, once.
pub async fn a_release_lost_to_a_blink_frees_the_key_once_the_store_is_back<S: Store>(store: S) {
    let rig = Rig::new(store);
    rig.faults.inject(Call::Release, Fault::Blink);
    let failed = rig.attempt("release-blink", Duration::ZERO, true).await;
    assert!(
        matches!(failed, Err(OperationError::Failed(_))),
        "the operation's own error: {failed:?}"
    );
    let duplicate = rig.attempt("release-blink", Duration::ZERO, false).await;
    assert!(
        in_flight(&duplicate),
        "a duplicate while the release is retried: {duplicate:?}"
    );
    rig.until("the engine retries the release", |rig| {
        rig.faults.faulted(Call::Release) >= 2
    })
    .await;
    assert_eq!(rig.runs(), 1);
    rig.faults.heal(Call::Release);
    let retried = rig
        .settle("release-blink", "the store took releases again")
        .await;
    assert_eq!(
        fresh(retried),
        2,
        "the retry runs the failed operation again"
    );
    let again = rig.attempt("release-blink", Duration::ZERO, false).await;
    assert_eq!(replayed(again), 2);
    assert_eq!(rig.runs(), 2, "the operation ran once more than its retry");
}
