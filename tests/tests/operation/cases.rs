//! The programmatic API's rules, generic over the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem_runtime::clock::ManualClock;
use idem_runtime::{Idempotency, OperationError, Outcome, PayloadError};
use idem_tests::{Gate, TestStore};
use serde::{Deserialize, Serialize};

const LEASE: Duration = Duration::from_secs(30);

/// An engine on `store` with a manual clock, and a job counter the closures share.
pub(crate) struct Jobs {
    pub(crate) idempotency: Idempotency,
    pub(crate) clock: ManualClock,
    runs: Arc<AtomicU64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobId(pub(crate) u64);

#[derive(Serialize)]
pub(crate) struct Job {
    pub(crate) kind: &'static str,
    pub(crate) video: u32,
}

/// The same fields as [`Job`], declared in the other order: serialised differently.
#[derive(Serialize)]
struct JobReordered {
    video: u32,
    kind: &'static str,
}

#[derive(Debug)]
pub(crate) struct Refused;

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("refused")
    }
}

impl std::error::Error for Refused {}

pub(crate) type Result<T> = std::result::Result<Outcome<T>, OperationError<Refused>>;

pub(crate) const TRANSCODE: Job = Job {
    kind: "transcode",
    video: 7,
};

impl Jobs {
    pub(crate) fn new<S: TestStore>(store: S) -> Self {
        let clock = ManualClock::new();
        let idempotency = Idempotency::builder()
            .store(store)
            .lease(LEASE)
            .wait_timeout(Duration::from_secs(10))
            .retry_after(Duration::from_secs(2))
            .clock(clock.clone())
            .build()
            .expect("engine");
        Self {
            idempotency,
            clock,
            runs: Arc::default(),
        }
    }

    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(Ordering::SeqCst)
    }

    /// Submits `job` under `key` in `scope`: a new job id per run of the closure.
    pub(crate) async fn submit<I: Serialize + Send + 'static>(
        &self,
        scope: &str,
        key: &str,
        job: I,
    ) -> Result<JobId> {
        let runs = self.runs.clone();
        self.idempotency
            .operation("jobs::submit")
            .scope(scope)
            .run(key, job, |_| async move {
                Ok(JobId(runs.fetch_add(1, Ordering::SeqCst) + 1))
            })
            .await
    }

    /// Like [`Jobs::submit`], but the closure waits at `gate` first.
    async fn submit_gated(&self, key: &str, gate: Gate, wait: bool) -> Result<JobId> {
        let runs = self.runs.clone();
        self.idempotency
            .operation("jobs::submit")
            .wait(wait)
            .run(key, &TRANSCODE, |_| async move {
                gate.pass().await;
                Ok(JobId(runs.fetch_add(1, Ordering::SeqCst) + 1))
            })
            .await
    }
}

fn fresh<T: std::fmt::Debug>(result: Result<T>) -> T {
    match result {
        Ok(Outcome::Fresh(output)) => output,
        other => panic!("expected a fresh run, got {other:?}"),
    }
}

fn replayed<T: std::fmt::Debug>(result: Result<T>) -> T {
    match result {
        Ok(Outcome::Replayed(output)) => output,
        other => panic!("expected a replay, got {other:?}"),
    }
}

pub(crate) async fn fresh_then_replayed_with_the_same_output<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    let ran = jobs.submit("", "upload-1", &TRANSCODE).await.unwrap();
    assert!(!ran.is_replayed());
    let first = fresh(Ok(ran));
    let again = jobs.submit("", "upload-1", &TRANSCODE).await.unwrap();
    assert!(again.is_replayed());
    assert_eq!(again.get(), &first);
    assert_eq!(again.into_inner(), JobId(1));
    assert_eq!(jobs.runs(), 1, "the closure ran once");
    let other = fresh(jobs.submit("", "upload-2", &TRANSCODE).await);
    assert_eq!(other, JobId(2), "another key is another run");
}

pub(crate) async fn a_different_input_is_a_conflict<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    fresh(jobs.submit("", "k", &TRANSCODE).await);
    let other = Job {
        kind: "transcode",
        video: 8,
    };
    let conflict = jobs.submit("", "k", other).await;
    assert!(
        matches!(conflict, Err(OperationError::Conflict)),
        "{conflict:?}"
    );
    assert_eq!(jobs.runs(), 1);
    // The original input still replays.
    assert_eq!(replayed(jobs.submit("", "k", &TRANSCODE).await), JobId(1));
}

pub(crate) async fn input_field_order_does_not_matter<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    let first = fresh(jobs.submit("", "k", &TRANSCODE).await);
    let reordered = JobReordered {
        video: 7,
        kind: "transcode",
    };
    assert_ne!(
        serde_json::to_string(&reordered).unwrap(),
        serde_json::to_string(&TRANSCODE).unwrap(),
        "the two serialise differently"
    );
    assert_eq!(replayed(jobs.submit("", "k", reordered).await), first);
    assert_eq!(jobs.runs(), 1);
}

pub(crate) async fn an_in_flight_duplicate_is_refused<S: TestStore>(store: S) {
    let jobs = Arc::new(Jobs::new(store));
    let gate = Gate::default();
    let first = tokio::spawn({
        let (jobs, gate) = (jobs.clone(), gate.clone());
        async move { jobs.submit_gated("k", gate, false).await }
    });
    gate.entered().await;
    let duplicate = jobs.submit("", "k", &TRANSCODE).await;
    match duplicate {
        Err(OperationError::InFlight { retry_after }) => {
            assert_eq!(
                retry_after,
                Duration::from_secs(2),
                "the engine's retry_after"
            )
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
    gate.open();
    assert_eq!(fresh(first.await.unwrap()), JobId(1));
    assert_eq!(replayed(jobs.submit("", "k", &TRANSCODE).await), JobId(1));
    assert_eq!(jobs.runs(), 1);
}

pub(crate) async fn a_waiting_duplicate_gets_the_output<S: TestStore>(store: S) {
    let jobs = Arc::new(Jobs::new(store));
    let gate = Gate::default();
    let first = tokio::spawn({
        let (jobs, gate) = (jobs.clone(), gate.clone());
        async move { jobs.submit_gated("k", gate, false).await }
    });
    gate.entered().await;
    let waiter = tokio::spawn({
        let (jobs, gate) = (jobs.clone(), gate.clone());
        async move { jobs.submit_gated("k", gate, true).await }
    });
    gate.open();
    let first = fresh(first.await.unwrap());
    assert_eq!(replayed(waiter.await.unwrap()), first);
    assert_eq!(jobs.runs(), 1, "the waiter did not run the closure");
}

pub(crate) async fn an_error_releases_the_key<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    let failed: Result<JobId> = jobs
        .idempotency
        .operation("jobs::submit")
        .run("k", &TRANSCODE, |_| async { Err(Refused) })
        .await;
    assert!(
        matches!(failed, Err(OperationError::Failed(Refused))),
        "{failed:?}"
    );
    assert_eq!(
        fresh(jobs.submit("", "k", &TRANSCODE).await),
        JobId(1),
        "the retry ran"
    );
    assert_eq!(replayed(jobs.submit("", "k", &TRANSCODE).await), JobId(1));
}

pub(crate) async fn a_panic_releases_the_key<S: TestStore>(store: S) {
    let jobs = Arc::new(Jobs::new(store));
    let crashed = tokio::spawn({
        let jobs = jobs.clone();
        async move {
            let _: Result<JobId> = jobs
                .idempotency
                .operation("jobs::submit")
                .run("k", &TRANSCODE, |_| async { panic!("fault injected") })
                .await;
        }
    })
    .await;
    let panic = crashed
        .expect_err("the panic reaches the caller")
        .into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"fault injected"));
    assert_eq!(
        fresh(jobs.submit("", "k", &TRANSCODE).await),
        JobId(1),
        "the retry ran"
    );
}

pub(crate) async fn a_lapsed_lease_is_taken_over<S: TestStore>(store: S) {
    let jobs = Arc::new(Jobs::new(store));
    let gate = Gate::default();
    let stale = tokio::spawn({
        let (jobs, gate) = (jobs.clone(), gate.clone());
        async move { jobs.submit_gated("k", gate, false).await }
    });
    gate.entered().await; // running, and now looks crashed
    jobs.clock.advance(LEASE + Duration::from_secs(1));
    let taker = fresh(jobs.submit("", "k", &TRANSCODE).await);
    assert_eq!(taker, JobId(1), "the taker ran the closure");
    gate.open();
    let stale = stale.await.unwrap();
    assert!(matches!(stale, Err(OperationError::LeaseLost)), "{stale:?}");
    assert_eq!(
        replayed(jobs.submit("", "k", &TRANSCODE).await),
        taker,
        "the taker's output stays"
    );
}

pub(crate) async fn an_expired_record_runs_again<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    let ttl = Duration::from_secs(3600);
    let submit = || {
        let runs = jobs.runs.clone();
        jobs.idempotency
            .operation("jobs::submit")
            .ttl(ttl)
            .run("k", &TRANSCODE, |_| async move {
                Ok::<_, Refused>(JobId(runs.fetch_add(1, Ordering::SeqCst) + 1))
            })
    };
    assert_eq!(fresh(submit().await), JobId(1));
    jobs.clock.advance(ttl - Duration::from_secs(1));
    assert_eq!(replayed(submit().await), JobId(1), "still live");
    jobs.clock.advance(Duration::from_secs(1));
    assert_eq!(fresh(submit().await), JobId(2), "expired: a new run");
}

pub(crate) async fn scopes_and_operations_isolate<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    assert_eq!(
        fresh(jobs.submit("tenant-a", "k", &TRANSCODE).await),
        JobId(1)
    );
    assert_eq!(
        fresh(jobs.submit("tenant-b", "k", &TRANSCODE).await),
        JobId(2)
    );
    assert_eq!(fresh(jobs.submit("", "k", &TRANSCODE).await), JobId(3));
    let other_operation = jobs
        .idempotency
        .operation("jobs::cancel")
        .scope("tenant-a")
        .run("k", &TRANSCODE, |_| async { Ok::<_, Refused>(JobId(99)) })
        .await;
    assert_eq!(fresh(other_operation), JobId(99));
    assert_eq!(
        replayed(jobs.submit("tenant-a", "k", &TRANSCODE).await),
        JobId(1)
    );
    assert_eq!(
        replayed(jobs.submit("tenant-b", "k", &TRANSCODE).await),
        JobId(2)
    );
}

pub(crate) async fn an_output_of_another_type_is_corrupt<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    fresh(jobs.submit("", "k", &TRANSCODE).await);
    // Another version of the program reads the record with another output type.
    let read: Result<String> = jobs
        .idempotency
        .operation("jobs::submit")
        .run("k", &TRANSCODE, |_| async { Ok("never runs".to_owned()) })
        .await;
    match read {
        Err(OperationError::Corrupt(PayloadError::Json(_))) => {}
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert_eq!(jobs.runs(), 1);
    // The record is left as it is: the right type still replays it.
    assert_eq!(replayed(jobs.submit("", "k", &TRANSCODE).await), JobId(1));
}

pub(crate) async fn an_invalid_key_is_refused_before_the_store<S: TestStore>(store: S) {
    let jobs = Jobs::new(store);
    for bad in ["", "has space", &"k".repeat(256)] {
        let refused = jobs.submit("", bad, &TRANSCODE).await;
        assert!(
            matches!(refused, Err(OperationError::InvalidKey(_))),
            "{bad:?}: {refused:?}"
        );
    }
    assert_eq!(jobs.runs(), 0);
    // An `IdempotencyKey` works as well as a string; quoting is undone as for the header.
    let key = idem_runtime::IdempotencyKey::parse(b"\"k\"").unwrap();
    let runs = jobs.runs.clone();
    let with_key = jobs
        .idempotency
        .operation("jobs::submit")
        .run(&key, &TRANSCODE, |_| async move {
            Ok::<_, Refused>(JobId(runs.fetch_add(1, Ordering::SeqCst) + 1))
        })
        .await;
    assert_eq!(fresh(with_key), JobId(1));
    assert_eq!(replayed(jobs.submit("", "k", &TRANSCODE).await), JobId(1));
}
