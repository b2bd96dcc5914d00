//! What operators do with records, on every store: list and filter them, read one with its
//! payload, forget one (refused while its owner runs, fenced when forced), purge a window of
//! one operation's completed records, and count them. `MemoryStore` is the reference.

use bytes::Bytes;

use super::support::*;
use crate::clock::Timestamp;
use crate::key::RecordKey;
use crate::store::records::{Forgotten, Record, RecordFilter, RecordState, RecordStats};
use crate::store::{Admin, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

/// Who a record belongs to: operation, scope, scope value.
type Owner = (&'static str, &'static str, &'static str);

const CHARGES: Owner = ("charges.create", "org", "acme");
const REFUNDS: Owner = ("refunds.create", "org", "globex");
const JOBS: Owner = ("jobs.enqueue", "operation", "queue-7");

async fn claim_as<S: Store>(
    store: &S,
    n: u8,
    (operation, scope, scope_value): Owner,
    now: Timestamp,
    expires_at: Timestamp,
) -> LeaseToken {
    let t = token(i64::from(n));
    let claimed = store
        .claim(ClaimRequest {
            key: &key(n),
            fingerprint: &fp(n),
            token: t,
            now,
            lease_until: now.after(LEASE),
            expires_at,
            operation,
            scope,
            scope_value,
            tenant: 0,
        })
        .await
        .expect("claim");
    assert_eq!(claimed, ACQUIRED);
    t
}

/// Completes `n` at `now` with status 201 and the payload `n` repeated, live for a day.
async fn complete_at<S: Store>(store: &S, n: u8, t: LeaseToken, now: Timestamp) -> Fence {
    let payload = payload(n);
    let completion = Completion {
        payload: &payload,
        status: Some(201),
        completed_at: now,
        expires_at: now.after(TTL),
    };
    store
        .complete(&key(n), t, completion)
        .await
        .expect("complete")
}

fn payload(n: u8) -> Vec<u8> {
    vec![n; 40 + usize::from(n)]
}

async fn list<S: Admin>(store: &S, filter: &RecordFilter, now: Timestamp) -> Vec<Record> {
    store.list_records(filter, now, 100).await.expect("list")
}

fn keys(records: &[Record]) -> Vec<RecordKey> {
    records.iter().map(|r| r.key).collect()
}

/// Three records: 1 completed (charges, at 1 s), 2 in flight (refunds, claimed at 2 s), 3 in
/// flight and expiring at one hour (jobs, claimed at 3 s).
async fn three<S: Store>(store: &S) -> LeaseToken {
    let t1 = claim_as(store, 1, CHARGES, at(ms(0)), at(TTL)).await;
    assert_eq!(complete_at(store, 1, t1, at(ms(1000))).await, Fence::Held);
    let t2 = claim_as(store, 2, REFUNDS, at(ms(2000)), at(TTL)).await;
    claim_as(store, 3, JOBS, at(ms(3000)), at(HOUR)).await;
    t2
}

/// Listings show each record's operation, scope, state, status and times, oldest first, bounded
/// by the limit; expired records show as expired until removed.
pub async fn records_list_what_operators_read<S: Store + Admin + Clone>(store: S) {
    three(&store).await;
    let now = at(ms(4000));
    let all = list(&store, &RecordFilter::new(), now).await;
    assert_eq!(keys(&all), [key(1), key(2), key(3)], "oldest first");
    let (done, running) = (&all[0], &all[1]);
    assert_eq!(
        (
            done.operation.as_str(),
            done.scope.as_str(),
            done.scope_value.as_str()
        ),
        CHARGES
    );
    assert_eq!(done.state(now), RecordState::Completed);
    assert_eq!(done.status, Some(201));
    assert_eq!(done.created_at, at(ms(0)));
    assert_eq!(done.completed_at, Some(at(ms(1000))));
    assert_eq!(done.lease_until, None, "a completed record has no lease");
    assert_eq!(done.expires_at, at(ms(1000)).after(TTL));
    assert_eq!(
        (
            running.operation.as_str(),
            running.scope.as_str(),
            running.scope_value.as_str()
        ),
        REFUNDS
    );
    assert_eq!(running.state(now), RecordState::InFlight);
    assert_eq!((running.status, running.completed_at), (None, None));
    assert_eq!(running.created_at, at(ms(2000)));
    assert_eq!(running.lease_until, Some(at(ms(2000)).after(LEASE)));
    assert!(running.is_leased(now));
    assert_eq!(all[2].scope, "operation");
    // The limit takes the oldest.
    let two = store
        .list_records(&RecordFilter::new(), now, 2)
        .await
        .unwrap();
    assert_eq!(keys(&two), [key(1), key(2)]);
    // An hour on, the jobs record has expired and is listed as such until removed.
    let later = at(HOUR);
    let states: Vec<_> = list(&store, &RecordFilter::new(), later)
        .await
        .iter()
        .map(|r| r.state(later))
        .collect();
    assert_eq!(
        states,
        [
            RecordState::Completed,
            RecordState::InFlight,
            RecordState::Expired
        ]
    );
}

/// Record filters select by operation, state, scope, scope value, creation time and completion
/// window, and combine.
pub async fn filters_select_by_operation_state_scope_and_age<S: Store + Admin + Clone>(store: S) {
    three(&store).await;
    let now = at(HOUR);
    let select = async |filter: RecordFilter| keys(&list(&store, &filter, now).await);
    assert_eq!(
        select(RecordFilter::new().operation("charges.create")).await,
        [key(1)]
    );
    assert_eq!(select(RecordFilter::new().operation("nope")).await, []);
    let state = |s| RecordFilter::new().state(s);
    assert_eq!(select(state(RecordState::Completed)).await, [key(1)]);
    assert_eq!(select(state(RecordState::InFlight)).await, [key(2)]);
    assert_eq!(select(state(RecordState::Expired)).await, [key(3)]);
    assert_eq!(
        select(RecordFilter::new().scope("org")).await,
        [key(1), key(2)]
    );
    let globex = RecordFilter::new().scope("org").scope_value("globex");
    assert_eq!(select(globex).await, [key(2)]);
    assert_eq!(
        select(RecordFilter::new().scope_value("acme")).await,
        [key(1)]
    );
    // Created at or before 2 s.
    let old = RecordFilter::new().created_before(at(ms(2000)));
    assert_eq!(select(old).await, [key(1), key(2)]);
    // Completed in [1 s, 2 s), and the window's end is excluded.
    let window = |from, to| RecordFilter::new().completed_between(at(ms(from)), at(ms(to)));
    assert_eq!(select(window(1000, 2000)).await, [key(1)]);
    assert_eq!(select(window(0, 1000)).await, []);
    // Conditions combine.
    let both = RecordFilter::new()
        .operation("refunds.create")
        .state(RecordState::Completed);
    assert_eq!(select(both).await, []);
}

/// Reading a record returns what a listing shows, with its payload once completed and none
/// while in flight.
pub async fn a_record_is_read_with_its_payload<S: Store + Admin + Clone>(store: S) {
    three(&store).await;
    let done = store.read_record(&key(1)).await.unwrap().expect("record 1");
    assert_eq!(done.key, key(1));
    assert_eq!(done.status, Some(201));
    assert_eq!(done.payload, Some(Bytes::from(self::payload(1))));
    let running = store.read_record(&key(2)).await.unwrap().expect("record 2");
    assert_eq!(running.state(at(ms(4000))), RecordState::InFlight);
    assert_eq!(running.payload, None, "nothing stored while in flight");
    assert_eq!(store.read_record(&key(9)).await.unwrap(), None);
    // What one record reads is what a listing shows.
    let listed = list(
        &store,
        &RecordFilter::new().operation("refunds.create"),
        at(ms(4000)),
    )
    .await;
    assert_eq!(listed, [running]);
}

/// Forgetting without force refuses a record whose lease is live and deletes completed and
/// lapsed ones, so their key runs again.
pub async fn forget_refuses_a_live_owner_and_deletes_the_rest<S: Store + Admin + Clone>(store: S) {
    let t2 = three(&store).await;
    let now = at(ms(4000));
    // The refunds owner is running: refused, and it still completes.
    match store.forget_record(&key(2), now, false).await.unwrap() {
        Forgotten::Leased(record) => {
            assert_eq!(record.lease_until, Some(at(ms(2000)).after(LEASE)));
        }
        other => panic!("a live owner's record must be refused, got {other:?}"),
    }
    assert_eq!(complete_at(&store, 2, t2, now).await, Fence::Held);
    // Completed: deleted, and the next request runs again.
    let forgotten = store.forget_record(&key(1), now, false).await.unwrap();
    assert!(
        matches!(forgotten, Forgotten::Deleted(ref r) if r.key == key(1)),
        "{forgotten:?}"
    );
    assert_eq!(store.read_record(&key(1)).await.unwrap(), None);
    assert_eq!(
        claim(&store, &key(1), &fp(1), token(11), now).await,
        ACQUIRED
    );
    // Once its lease lapsed, an in-flight record is forgotten without force.
    let lapsed = at(ms(3000)).after(LEASE);
    let forgotten = store.forget_record(&key(3), lapsed, false).await.unwrap();
    assert!(matches!(forgotten, Forgotten::Deleted(_)), "{forgotten:?}");
    assert_eq!(
        store.forget_record(&key(3), lapsed, false).await.unwrap(),
        Forgotten::Absent
    );
}

/// A forced forget deletes a running record; its owner's later writes find nothing of theirs,
/// before and after a new claim.
pub async fn forced_forget_fences_the_owner_out<S: Store + Admin + Clone>(store: S) {
    let t2 = three(&store).await;
    let now = at(ms(4000));
    let forgotten = store.forget_record(&key(2), now, true).await.unwrap();
    assert!(matches!(forgotten, Forgotten::Deleted(_)), "{forgotten:?}");
    // The old owner's writes find no record of theirs, and create none.
    assert_eq!(
        renew(&store, &key(2), t2, now.after(LEASE)).await,
        Fence::Lost
    );
    assert_eq!(complete_at(&store, 2, t2, now).await, Fence::Lost);
    assert_eq!(store.read_record(&key(2)).await.unwrap(), None);
    // A retry claims the key afresh; the old owner cannot touch the new record either.
    let fresh = token(22);
    assert_eq!(claim(&store, &key(2), &fp(2), fresh, now).await, ACQUIRED);
    assert_eq!(complete_at(&store, 2, t2, now).await, Fence::Lost);
    assert_eq!(release(&store, &key(2), t2).await, Fence::Lost);
    assert_eq!(complete_at(&store, 2, fresh, now).await, Fence::Held);
    match claim(&store, &key(2), &fp(2), token(23), now).await {
        Claim::Completed { payload, .. } => assert_eq!(payload, Bytes::from(self::payload(2))),
        other => panic!("the new owner's result must replay, got {other:?}"),
    }
}

/// Purging records deletes at most `limit` completed ones the filter selects, never one in flight.
pub async fn purge_takes_completed_records_of_one_window<S: Store + Admin + Clone>(store: S) {
    // Charges completed at 10, 20, 30 and 40 s; one in flight; a refund completed at 20 s.
    for (n, done) in [(1u8, 10_000), (2, 20_000), (3, 30_000), (4, 40_000)] {
        let t = claim_as(&store, n, CHARGES, at(ms(0)), at(TTL)).await;
        assert_eq!(complete_at(&store, n, t, at(ms(done))).await, Fence::Held);
    }
    claim_as(&store, 5, CHARGES, at(ms(0)), at(TTL)).await;
    let t6 = claim_as(&store, 6, REFUNDS, at(ms(0)), at(TTL)).await;
    assert_eq!(
        complete_at(&store, 6, t6, at(ms(20_000))).await,
        Fence::Held
    );
    let now = at(ms(50_000));
    let window = RecordFilter::new()
        .operation("charges.create")
        .completed_between(at(ms(20_000)), at(ms(40_000)));
    assert_eq!(
        store.purge_records(&window, now, 1).await.unwrap(),
        1,
        "bounded"
    );
    assert_eq!(store.purge_records(&window, now, 10).await.unwrap(), 1);
    assert_eq!(store.purge_records(&window, now, 10).await.unwrap(), 0);
    let left = keys(&list(&store, &RecordFilter::new(), now).await);
    assert_eq!(left, [key(1), key(4), key(5), key(6)]);
    // Never a record in flight, whatever the filter says.
    let running = RecordFilter::new().state(RecordState::InFlight);
    assert_eq!(store.purge_records(&running, now, 10).await.unwrap(), 0);
    let charges = RecordFilter::new().operation("charges.create");
    assert_eq!(store.purge_records(&charges, now, 10).await.unwrap(), 2);
    let left = keys(&list(&store, &RecordFilter::new(), now).await);
    assert_eq!(left, [key(5), key(6)]);
    // A purged key runs again.
    assert_eq!(
        claim(&store, &key(2), &fp(2), token(12), now).await,
        ACQUIRED
    );
}

/// Record stats count by operation and state under a filter, with the oldest in-flight record's
/// creation time.
pub async fn stats_count_by_operation_and_state<S: Store + Admin + Clone>(store: S) {
    three(&store).await;
    claim_as(&store, 4, REFUNDS, at(ms(2500)), at(TTL)).await;
    let now = at(HOUR);
    let stats = store.record_stats(&RecordFilter::new(), now).await.unwrap();
    let mut expected = RecordStats::new();
    expected.add_count("charges.create", RecordState::Completed, 1);
    expected.add_count("refunds.create", RecordState::InFlight, 2);
    expected.add_count("jobs.enqueue", RecordState::Expired, 1);
    expected.saw_in_flight(at(ms(2000)));
    assert_eq!(stats, expected);
    let refunds = RecordFilter::new().operation("refunds.create");
    let stats = store.record_stats(&refunds, now).await.unwrap();
    assert_eq!(stats.total(RecordState::InFlight), 2);
    assert_eq!(stats.total(RecordState::Completed), 0);
    let empty = store
        .record_stats(&RecordFilter::new().operation("nope"), now)
        .await
        .unwrap();
    assert_eq!(empty, RecordStats::new());
}
