//! A store that fails the renewals of a long operation's lease: a blink costs nothing, and an
//! owner cut off past its lease is told, not answered as if its output were stored.

use std::time::Duration;

use super::faulty::{Call, Fault};
use super::rig::{Rig, STORE_TIMEOUT, fresh, in_flight, replayed};
use crate::operation::{OperationError, Outcome};
use crate::store::Store;

/// A renewal the store fails once while a long operation runs: the owner renews again a third
/// of a lease later, long before the lease lapses, so no duplicate takes the record over; every
/// duplicate meanwhile is refused as in flight, the owner's output is stored, and a retry
/// replays it. The operation runs once.
pub async fn a_renewal_lost_to_a_blink_keeps_the_lease<S: Store>(store: S) {
    // Renewed every 500 ms; the first renewal fails, the second extends the lease 500 ms
    // before it would lapse; the operation ends 300 ms past the first lease.
    let lease = Duration::from_millis(1500);
    let rig = Rig::with(store, lease, STORE_TIMEOUT);
    rig.faults.inject_next(Call::Renew, Fault::Blink, 1);
    let owner = {
        let rig = rig.clone();
        tokio::spawn(async move {
            rig.attempt("renew-blink", Duration::from_millis(1800), false)
                .await
        })
    };
    rig.until("the operation starts", |rig| rig.runs() == 1)
        .await;
    while !owner.is_finished() {
        let duplicate = rig.attempt("renew-blink", Duration::ZERO, false).await;
        // Refused while the owner runs; the owner's output once it is stored.
        assert!(
            in_flight(&duplicate) || matches!(duplicate, Ok(Outcome::Replayed(1))),
            "a duplicate while the owner runs with its lease: {duplicate:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = owner.await.expect("the owner's task");
    assert_eq!(fresh(first), 1);
    assert_eq!(rig.faults.faulted(Call::Renew), 1, "no renewal failed");
    let retried = rig.attempt("renew-blink", Duration::ZERO, false).await;
    assert_eq!(replayed(retried), 1);
    assert_eq!(
        rig.runs(),
        1,
        "a duplicate took the record over and ran again"
    );
}

/// An owner whose every renewal fails, cut off from the store past its lease while its
/// operation runs: to the store it is a crashed owner, so a retry takes the record over and
/// runs the operation again (at least once, as after a crash). The first owner is not
/// answered as if its output were stored: its completion is fenced out, and it gets
/// [`OperationError::LeaseLost`]. Retries replay the output of the run that holds the record.
pub async fn an_owner_cut_off_past_its_lease_is_told_it_lost_it<S: Store>(store: S) {
    let lease = Duration::from_millis(600);
    let rig = Rig::with(store, lease, STORE_TIMEOUT);
    rig.faults.inject(Call::Renew, Fault::Blink);
    let owner = {
        let rig = rig.clone();
        tokio::spawn(async move {
            rig.attempt("renew-cut", Duration::from_millis(1500), false)
                .await
        })
    };
    rig.until("the operation starts", |rig| rig.runs() == 1)
        .await;
    let took_over = rig
        .settle("renew-cut", "the owner's lease lapsed unrenewed")
        .await;
    assert_eq!(fresh(took_over), 2, "the retry took the lapsed record over");
    let first = owner.await.expect("the owner's task");
    assert!(
        matches!(first, Err(OperationError::LeaseLost)),
        "an owner whose lease was taken over: {first:?}"
    );
    rig.faults.heal(Call::Renew);
    let retried = rig.attempt("renew-cut", Duration::ZERO, false).await;
    assert_eq!(replayed(retried), 2);
    assert_eq!(rig.runs(), 2);
}
