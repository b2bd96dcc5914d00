//! Operators' access through the handle (`Idempotency::records`) on the memory store, which the
//! `idem` command cannot reach (it lives in the application's process): records the programmatic
//! API made are listed under the scope `operation`, a running owner's record is refused and then
//! forced, and the forced owner's result is not stored. The other stores are driven through the
//! command (`idem-cli/tests/cli.rs`) and the conformance suite.

use idem_runtime::store::MemoryStore;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, RecordFilter, RecordState};
use idem_runtime::{Idempotency, IdempotencyKey, OperationError, Outcome};
use idem_tests::Gate;

fn key_of(key: &str) -> RecordKey {
    RecordKey::derive(
        "operation",
        "tenant-42",
        "jobs.submit",
        &IdempotencyKey::new(key).unwrap(),
    )
}

async fn submit(idempotency: &Idempotency, key: &str, gate: Option<&Gate>) -> (u32, bool) {
    let outcome = try_submit(idempotency, key, gate)
        .await
        .expect("the operation runs");
    let replayed = outcome.is_replayed();
    (outcome.into_inner(), replayed)
}

async fn try_submit(
    idempotency: &Idempotency,
    key: &str,
    gate: Option<&Gate>,
) -> Result<Outcome<u32>, OperationError<std::io::Error>> {
    let gate = gate.cloned();
    idempotency
        .operation("jobs.submit")
        .scope("tenant-42")
        .run(key, &7u32, |video| async move {
            if let Some(gate) = &gate {
                gate.pass().await;
            }
            Ok::<_, std::io::Error>(video + 1)
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_lists_forgets_purges_and_counts_the_memory_stores_records() {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let records = idempotency.records();
    assert_eq!(submit(&idempotency, "done", None).await, (8, false));
    let gate = Gate::default();
    let running = tokio::spawn({
        let (idempotency, gate) = (idempotency.clone(), gate.clone());
        async move { try_submit(&idempotency, "running", Some(&gate)).await }
    });
    gate.entered().await;

    let all = records.list(&RecordFilter::new(), 10).await.unwrap();
    assert_eq!(all.len(), 2);
    for record in &all {
        assert_eq!(
            (
                record.operation.as_str(),
                record.scope.as_str(),
                record.scope_value.as_str()
            ),
            ("jobs.submit", "operation", "tenant-42")
        );
    }
    let now = records.now();
    let state = |key| {
        all.iter()
            .find(|r| r.key == key_of(key))
            .map(|r| r.state(now))
    };
    assert_eq!(state("done"), Some(RecordState::Completed));
    assert_eq!(state("running"), Some(RecordState::InFlight));
    let detail = records.show(&key_of("done")).await.unwrap().expect("found");
    assert!(detail.payload.is_some_and(|p| !p.is_empty()));
    let stats = records.stats(&RecordFilter::new()).await.unwrap();
    assert_eq!(stats.total(RecordState::InFlight), 1);
    assert!(stats.oldest_in_flight.is_some());

    // Refused while its owner runs; forced, the owner is fenced out and its result not kept.
    let refused = records.forget(&key_of("running")).await.unwrap();
    assert!(matches!(refused, Forgotten::Leased(_)), "{refused:?}");
    let forced = records.force_forget(&key_of("running")).await.unwrap();
    assert!(matches!(forced, Forgotten::Deleted(_)), "{forced:?}");
    gate.open();
    let fenced = running.await.unwrap();
    assert!(
        matches!(fenced, Err(OperationError::LeaseLost)),
        "its caller learns its output was not stored: {fenced:?}"
    );
    assert_eq!(records.show(&key_of("running")).await.unwrap(), None);
    assert_eq!(
        submit(&idempotency, "running", None).await,
        (8, false),
        "runs again: nothing was stored"
    );

    // Purge: what purgeable counts is what goes.
    let filter = RecordFilter::new().operation("jobs.submit");
    assert_eq!(records.purgeable(&filter).await.unwrap(), 2);
    assert_eq!(records.purge(&filter).await.unwrap(), 2);
    assert!(records.list(&filter, 10).await.unwrap().is_empty());
    assert_eq!(
        submit(&idempotency, "done", None).await,
        (8, false),
        "runs again"
    );
}
