//! A server SIGKILLed in the middle of `CreateTransfer` (`acct_slow`), restarted on the same
//! database: the client's retry with the same `request_id` leaves exactly one transfer. The
//! killed call's row was written in the engine's transaction and died uncommitted with the
//! process. On PostgreSQL the claim rode in that transaction too, so the retry runs at once; on
//! SQLite the claim committed first, and the retry is `ABORTED` until its lease lapses.

use std::time::{Duration, Instant};

use tonic::Code;

use super::support::{
    Database, ENGINE_DOMAIN, Transfer, assert_error_info, client, create, replayed, request_id,
    spawn_create, transfer, wait_for_output,
};

/// Long enough to be killed mid-way.
const SLOW_MS: &str = "3000";
/// How soon a dead owner's claim may be taken over.
const LEASE_MS: &str = "1500";
/// How long the retries may be `ABORTED` after the restart.
const TAKEOVER_DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_transfer_killed_mid_way_is_made_once() {
    a_transfer_killed_mid_way_is_made_once(&Database::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_transfer_killed_mid_way_is_made_once() {
    a_transfer_killed_mid_way_is_made_once(&Database::postgres().await).await;
}

async fn a_transfer_killed_mid_way_is_made_once(db: &Database) {
    let start = || {
        db.server()
            .env("SLOW_MS", SLOW_MS)
            .env("IDEM_LEASE_MS", LEASE_MS)
            .start()
    };
    let new = transfer(&request_id(), "acct_slow", 4200);
    let mut first = start();
    let running = spawn_create(&client(&first).await, "acme", &new);
    wait_for_output(&first, "transfer to acct_slow").await;
    first.kill();
    let lost = running.await.unwrap();
    assert!(lost.is_err(), "the call answered before the kill: {lost:?}");
    drop(first);
    assert_eq!(
        db.transfers().await,
        0,
        "the killed call's row died with it"
    );

    let second = start();
    let mut ledger = client(&second).await;
    let deadline = Instant::now() + TAKEOVER_DEADLINE;
    let mut aborted = 0;
    let made = loop {
        match create(&mut ledger, "acme", &new).await {
            Err(status) if status.code() == Code::Aborted => {
                assert_error_info(
                    &status,
                    Code::Aborted,
                    ENGINE_DOMAIN,
                    "IDEMPOTENCY_KEY_IN_PROGRESS",
                );
                aborted += 1;
                assert!(
                    Instant::now() < deadline,
                    "still ABORTED after {TAKEOVER_DEADLINE:?}: the dead claim was never taken over"
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            answer => break answer.expect("the retry runs the transfer"),
        }
    };
    eprintln!("ABORTED answers before the takeover: {aborted}");
    if matches!(db, Database::Postgres(_)) {
        assert_eq!(
            aborted, 0,
            "the claim died with the killed process's transaction"
        );
    }
    assert!(
        !replayed(made.metadata()),
        "the transfer ran in the new process"
    );
    let made: Transfer = made.into_inner();
    assert_eq!(db.transfers().await, 1, "exactly one transfer");

    let replay = create(&mut ledger, "acme", &new).await.unwrap();
    assert!(replayed(replay.metadata()));
    assert_eq!(replay.into_inner(), made);
    assert_eq!(db.transfers().await, 1);
}
