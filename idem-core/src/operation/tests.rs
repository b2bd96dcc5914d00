//! An operation under an invocation's deadline, and in an engine without background work, as a
//! serverless function runs them: the engine's test clock stands for the wall clock, tokio's
//! paused time for the waits, and a store that fails on demand for the store blinking. And an
//! attempt on either side of its spawn (it is polled first in its caller's poll, and moves to a
//! task of its own once it waits) when its caller leaves or its store panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::{Clock, ManualClock};
use crate::engine::InvocationDeadline;
use crate::error::StoreError;
use crate::idempotency::Idempotency;
use crate::operation::{OperationError, Outcome};
use crate::store::MemoryStore;
use crate::testing::faults::{Call, Fault, Faulty};

const LEASE: Duration = Duration::from_secs(30);
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// The memory store behind the fault suite's wrapper: its calls fail, stall or panic as a
/// test tells them to, and it counts them.
type Flaky = Faulty<MemoryStore>;

fn flaky() -> Flaky {
    Faulty::new(MemoryStore::new())
}

/// Completions and releases fail (as an unreachable store's do) while `failing`.
fn fail_writes(store: &Flaky, failing: bool) {
    for call in [Call::Complete, Call::Release] {
        match failing {
            true => store.faults().inject(call, Fault::Blink),
            false => store.faults().heal(call),
        }
    }
}

/// Every call the store was made.
fn calls_to(store: &Flaky) -> u64 {
    store.faults().all_calls()
}

fn engine(store: &Flaky, clock: &ManualClock, background_work: bool) -> Idempotency {
    Idempotency::builder()
        .store(store.clone())
        .clock(clock.clone())
        .lease(LEASE)
        .store_timeout(STORE_TIMEOUT)
        .background_work(background_work)
        .build()
        .unwrap()
}

fn deadline_in(clock: &ManualClock, ahead: Duration) -> InvocationDeadline {
    InvocationDeadline::from_epoch_millis(clock.now().after(ahead).as_millis())
}

type Ran = Result<Outcome<u32>, OperationError<std::io::Error>>;

/// Runs `charge` under `key` and returns `run`, the run's number, as its output.
async fn charge(
    idempotency: &Idempotency,
    deadline: Option<InvocationDeadline>,
    run: u32,
    fail: bool,
) -> Ran {
    let mut operation = idempotency.operation("charges.create");
    if let Some(deadline) = deadline {
        operation = operation.deadline(deadline);
    }
    operation
        .run("k1", "amount=2000", move |_| async move {
            match fail {
                true => Err(std::io::Error::other("declined")),
                false => Ok(run),
            }
        })
        .await
}

/// Starts a run whose operation hangs (an invocation that times out); returns once it is
/// claimed.
async fn hang(idempotency: &Idempotency, deadline: Option<InvocationDeadline>) {
    let hanging = idempotency.clone();
    tokio::spawn(async move {
        let mut operation = hanging.operation("charges.create");
        if let Some(deadline) = deadline {
            operation = operation.deadline(deadline);
        }
        let _ = operation
            .run("k1", "amount=2000", |_| async {
                std::future::pending::<Result<u32, std::io::Error>>().await
            })
            .await;
    });
    // Let the claim land.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn in_flight(ran: &Ran) -> bool {
    matches!(ran, Err(OperationError::InFlight { .. }))
}

/// A Lambda invocation that times out mid-run: its key frees a margin after the deadline, not
/// when the configured lease would have lapsed.
#[tokio::test(start_paused = true)]
async fn a_timed_out_invocations_key_frees_after_its_deadline() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    hang(
        &idempotency,
        Some(deadline_in(&clock, Duration::from_secs(3))),
    )
    .await;
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));
    clock.advance(Duration::from_millis(3_900)); // within the margin
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));
    clock.advance(Duration::from_millis(200)); // 4.1 s: the deadline and its margin are past
    let retried = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(2));
}

/// An invocation with minutes left renews its lease as usual, but never past its deadline: once
/// the invocation could no longer be running, its key frees.
#[tokio::test(start_paused = true)]
async fn renewals_never_outlive_the_invocation() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    hang(
        &idempotency,
        Some(deadline_in(&clock, Duration::from_secs(100))),
    )
    .await;
    // Both clocks move together; the owner renews every 10 s.
    for _ in 0..10 {
        clock.advance(Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(10)).await;
    }
    // 100 s: 70 s past the first lease, held by the renewals.
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));
    clock.advance(Duration::from_millis(1_100));
    tokio::time::advance(Duration::from_millis(1_100)).await;
    let retried = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(2));
}

/// The local emulator's deadline (a time in 1970), or one past the longest invocation, is not
/// believed: the configured lease applies, and the claim does not expire at once.
#[tokio::test(start_paused = true)]
async fn an_unbelievable_deadline_leaves_the_configured_lease() {
    let far = InvocationDeadline::MAX_AHEAD + InvocationDeadline::MARGIN + Duration::from_secs(1);
    let deadlines = |clock: &ManualClock| {
        [
            InvocationDeadline::from_epoch_millis(600_000),
            deadline_in(clock, far),
        ]
    };
    for case in 0..2 {
        let (store, clock) = (flaky(), ManualClock::new());
        let idempotency = engine(&store, &clock, false);
        hang(&idempotency, Some(deadlines(&clock)[case])).await;
        assert!(in_flight(&charge(&idempotency, None, 2, false).await));
        clock.advance(LEASE - Duration::from_secs(1));
        assert!(
            in_flight(&charge(&idempotency, None, 2, false).await),
            "case {case}"
        );
        clock.advance(Duration::from_secs(2)); // the lease lapsed, nobody renewed it
        let retried = charge(&idempotency, None, 2, false).await.unwrap();
        assert_eq!(retried, Outcome::Fresh(2), "case {case}");
    }
}

/// Without background work, a completion the store fails is retried before the caller gets
/// its output: the first retry after the answer replays it, and nothing is left running.
#[tokio::test(start_paused = true)]
async fn a_completion_the_store_blinked_on_is_stored_before_the_answer() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    fail_writes(&store, true);
    let healer = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            fail_writes(&store, false);
        })
    };
    let first = charge(&idempotency, None, 1, false).await.unwrap();
    healer.await.unwrap();
    assert_eq!(first, Outcome::Fresh(1));
    let calls = calls_to(&store);
    let again = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(again, Outcome::Replayed(1));
    assert_eq!(
        calls_to(&store),
        calls + 1,
        "one claim, that found the result"
    );
}

/// A completion that still fails when the time for retries is up: the caller gets its output
/// (the operation ran), nothing retries after the answer, duplicates are refused until the
/// lease ends, and a retry after it runs the operation again, as after a crash.
#[tokio::test(start_paused = true)]
async fn a_completion_that_cannot_be_written_is_given_up_before_the_answer() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    fail_writes(&store, true);
    let first = charge(&idempotency, None, 1, false).await.unwrap();
    assert_eq!(first, Outcome::Fresh(1));
    let calls = calls_to(&store);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(calls_to(&store), calls, "nothing ran after the answer");
    fail_writes(&store, false);
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));
    clock.advance(LEASE);
    assert_eq!(
        charge(&idempotency, None, 2, false).await.unwrap(),
        Outcome::Fresh(2)
    );
}

/// A failed operation's release that the store blinked on is retried before the error is
/// returned: the caller's retry runs at once.
#[tokio::test(start_paused = true)]
async fn a_release_the_store_blinked_on_is_made_before_the_answer() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    fail_writes(&store, true);
    let healer = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            fail_writes(&store, false);
        })
    };
    let failed = charge(&idempotency, None, 1, true).await;
    healer.await.unwrap();
    assert!(matches!(failed, Err(OperationError::Failed(_))));
    let retried = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(2));
}

/// A claim whose reply was lost (it landed, the caller was told the store failed) is released
/// before the refusal is returned, its release retried while the store blinks: the retry runs
/// at once, not after the lease.
#[tokio::test(start_paused = true)]
async fn a_claim_the_store_failed_is_released_before_the_refusal() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    store.faults().inject_next(Call::Claim, Fault::LoseReply, 1);
    fail_writes(&store, true);
    let healer = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(120)).await;
            fail_writes(&store, false);
        })
    };
    let refused = charge(&idempotency, None, 1, false).await;
    assert!(matches!(refused, Err(OperationError::Unavailable(_))));
    let retried = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(2));
    healer.await.unwrap();
}

/// A claim whose reply comes after the caller stopped waiting (503): the release of that claim,
/// once it is answered, is made before the caller gets its 503, so the retry runs at once.
#[tokio::test(start_paused = true)]
async fn a_claim_answered_after_its_caller_gave_up_is_released_before_the_refusal() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    let slow = Fault::Delay(STORE_TIMEOUT + Duration::from_secs(1));
    store.faults().inject_next(Call::Claim, slow, 1);
    let refused = charge(&idempotency, None, 1, false).await;
    assert!(matches!(
        refused,
        Err(OperationError::Unavailable(StoreError::Timeout(_)))
    ));
    let retried = charge(&idempotency, None, 2, false).await.unwrap();
    assert_eq!(retried, Outcome::Fresh(2));
}

/// A result the store refuses as too large is not retried before the answer (it would be
/// refused again): the caller gets its output after one try, and nothing runs after.
#[tokio::test(start_paused = true)]
async fn a_result_refused_as_too_large_is_not_retried_before_the_answer() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    let too_large = || StoreError::TooLarge { size: 8, limit: 1 };
    store
        .faults()
        .inject(Call::Complete, Fault::Fail(too_large));
    let started = tokio::time::Instant::now();
    let first = charge(&idempotency, None, 1, false).await.unwrap();
    assert_eq!(first, Outcome::Fresh(1));
    assert_eq!(store.faults().calls(Call::Complete), 1);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no backoff before the answer"
    );
    let calls = calls_to(&store);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(calls_to(&store), calls, "nothing ran after the answer");
}

/// A failed operation whose release still fails when the time for retries is up: the caller
/// gets its error, nothing retries after the answer, and the key runs again once the lease ends.
#[tokio::test(start_paused = true)]
async fn a_release_that_cannot_be_written_leaves_the_key_until_the_lease_ends() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, false);
    fail_writes(&store, true);
    let failed = charge(&idempotency, None, 1, true).await;
    assert!(matches!(failed, Err(OperationError::Failed(_))));
    let calls = calls_to(&store);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(calls_to(&store), calls, "nothing ran after the answer");
    fail_writes(&store, false);
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));
    clock.advance(LEASE);
    assert_eq!(
        charge(&idempotency, None, 2, false).await.unwrap(),
        Outcome::Fresh(2)
    );
}

/// A store that panics in its claim, before the attempt first waits (in its caller's poll) or
/// after (on its task), refuses the request as a failed store does, the operation not run,
/// instead of unwinding into the caller; the same key runs once the store behaves.
#[tokio::test]
async fn a_claim_that_panics_is_refused_on_either_side_of_the_spawn() {
    for after_waiting in [false, true] {
        let (store, clock) = (flaky(), ManualClock::new());
        let idempotency = engine(&store, &clock, true);
        let panic = Fault::Panic { after_waiting };
        store.faults().inject(Call::Claim, panic);
        let refused = charge(&idempotency, None, 1, false).await;
        assert!(
            matches!(refused, Err(OperationError::Unavailable(_))),
            "panicking after waiting: {after_waiting}: {refused:?}"
        );
        store.faults().heal(Call::Claim);
        let ran = charge(&idempotency, None, 2, false).await.unwrap();
        assert_eq!(ran, Outcome::Fresh(2));
        let again = charge(&idempotency, None, 3, false).await.unwrap();
        assert_eq!(again, Outcome::Replayed(2));
    }
}

/// Work that began in its caller's poll and then waits is on a task of its own by the time the
/// caller can leave: dropping the caller leaves it running, its output is stored, and the
/// retry replays it.
#[tokio::test]
async fn work_that_began_in_its_callers_poll_outlives_the_caller() {
    let (store, clock) = (flaky(), ManualClock::new());
    let idempotency = engine(&store, &clock, true);
    let (entered, gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (entered_by_work, gate_for_work) = (entered.clone(), gate.clone());
    let operation = idempotency.operation("charges.create");
    let mut caller = Box::pin(operation.run("k1", "amount=2000", move |_| async move {
        entered_by_work.notify_one();
        gate_for_work.notified().await;
        Ok::<_, std::io::Error>(1)
    }));
    tokio::select! {
        ran = &mut caller => panic!("the work cannot end before its gate opens: {ran:?}"),
        () = entered.notified() => {}
    }
    drop(caller);
    assert!(in_flight(&charge(&idempotency, None, 2, false).await));

    gate.notify_one();
    let replayed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match charge(&idempotency, None, 2, false).await {
                ran if in_flight(&ran) => tokio::task::yield_now().await,
                ran => break ran,
            }
        }
    })
    .await
    .expect("the work the caller left finishes and stores its output");
    assert_eq!(replayed.unwrap(), Outcome::Replayed(1));
}

#[tokio::test]
async fn a_scope_value_no_store_can_keep_is_refused_before_the_claim() {
    let store = flaky();
    let idempotency = engine(&store, &ManualClock::new(), true);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let refused = idempotency
        .operation("jobs::submit")
        .scope("acme\0admin")
        .run("k-1", 7, move |n: i32| async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(n)
        })
        .await;
    assert!(
        matches!(refused, Err(OperationError::InvalidScope)),
        "{refused:?}"
    );
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(calls_to(&store), 0, "nothing was claimed");
}

#[tokio::test]
async fn a_ready_fingerprint_is_compared_in_place_of_the_input() {
    use crate::fingerprint::Fingerprint;
    let store = flaky();
    let idempotency = engine(&store, &ManualClock::new(), true);
    let run = |input: i32, fingerprint: Option<Fingerprint>| {
        let operation = idempotency.operation("jobs::submit");
        let operation = match fingerprint {
            Some(fingerprint) => operation.fingerprint(fingerprint),
            None => operation,
        };
        operation.run(
            "k-1",
            input,
            |n: i32| async move { Ok::<_, std::io::Error>(n) },
        )
    };
    assert_eq!(run(1, None).await.unwrap(), Outcome::Fresh(1));
    // The fingerprint the engine takes of the input itself, handed over ready: the same run.
    let of_input = Fingerprint::of_json(b"1");
    assert_eq!(run(1, Some(of_input)).await.unwrap(), Outcome::Replayed(1));
    // The input is not compared once a fingerprint is given: another input, the same run.
    assert_eq!(run(2, Some(of_input)).await.unwrap(), Outcome::Replayed(1));
    let other = run(1, Some(Fingerprint::of_bytes(b"1"))).await;
    assert!(matches!(other, Err(OperationError::Conflict)), "{other:?}");
}
