//! The engine's rules, through the gRPC face.

use std::collections::HashMap;
use std::time::Duration;

use idem_runtime::InvocationDeadline;
use idem_runtime::clock::Clock;
use prost::Message;
use tonic::Code;
use tonic_types::StatusExt;

use crate::service::{ChargeRequest, Part, Payments};
use crate::support::*;

pub(crate) async fn calls_without_a_key_run_every_time(store: Store) {
    let (service, _) = service(store).await;
    for _ in 0..2 {
        let (_, replayed) = ok(service.charge(call(charge("", 100))).await);
        assert!(!replayed);
    }
    assert_eq!(service.calls.get(), 2);
}

pub(crate) async fn a_retry_gets_the_stored_message_and_metadata_marked_replayed(store: Store) {
    let (service, _) = service(store).await;
    let first = service.charge(call(charge("k1", 100))).await.unwrap();
    let retry = service.charge(call(charge("k1", 100))).await.unwrap();
    assert_eq!(service.calls.get(), 1, "ran once");
    assert_eq!(first.get_ref(), retry.get_ref());
    assert!(!replayed(first.metadata()) && replayed(retry.metadata()));
    assert_eq!(retry.metadata().get("x-run").unwrap(), "1");
    let trace = retry.metadata().get_bin("x-trace-bin").unwrap();
    assert_eq!(trace.to_bytes().unwrap().as_ref(), b"\x00\xff");
}

pub(crate) async fn a_key_in_the_field_or_the_metadata_is_one_request(store: Store) {
    let (service, _) = service(store).await;
    let (first, _) = ok(service.charge(call(charge("k1", 100))).await);
    let by_metadata = with_metadata(call(charge("", 100)), "idempotency-key", "k1");
    let (again, replayed) = ok(service.charge(by_metadata).await);
    assert!(replayed);
    assert_eq!(first, again);
    let both = with_metadata(call(charge("k1", 100)), "idempotency-key", "k1");
    assert!(ok(service.charge(both).await).1);
    assert_eq!(service.calls.get(), 1);
}

pub(crate) async fn keys_that_disagree_or_are_malformed_are_invalid_argument(store: Store) {
    let (service, _) = service(store).await;
    let disagree = with_metadata(call(charge("k1", 100)), "idempotency-key", "k2");
    let twice = with_metadata(
        with_metadata(call(charge("", 100)), "idempotency-key", "k1"),
        "idempotency-key",
        "k1",
    );
    // Each message names where the bad key was read, never a header.
    let field = "the idempotency key in the `request_id` field is invalid";
    let entry = "the idempotency key in the `idempotency-key` metadata entry is invalid";
    let requests = [
        (
            disagree,
            "in the `request_id` field and the `idempotency-key` metadata entry",
        ),
        (twice, entry),
        (call(charge("has space", 100)), field),
        (call(charge(&"k".repeat(256), 100)), field),
        (
            with_metadata(call(charge("", 100)), "idempotency-key", "has space"),
            entry,
        ),
    ];
    for (request, says) in requests {
        let status = failed(service.charge(request).await);
        assert_answer(
            &status,
            Code::InvalidArgument,
            "IDEMPOTENCY_KEY_INVALID",
            false,
        );
        assert!(status.message().contains(says), "{says}: {status:?}");
        assert!(!status.message().contains("header"), "{status:?}");
    }
    let missing = failed(service.charge_keyed(call(charge("", 100))).await);
    assert_answer(
        &missing,
        Code::InvalidArgument,
        "IDEMPOTENCY_KEY_MISSING",
        false,
    );
    assert_eq!(
        missing.message(),
        "this method requires an idempotency key in the `request_id` field or the \
         `idempotency-key` metadata entry"
    );
    let own_entry = with_metadata(call(charge("", 100)), "x-charge-key", "has space");
    let status = failed(service.charge_by_metadata(own_entry).await);
    assert!(
        status
            .message()
            .starts_with("the idempotency key in the `x-charge-key` metadata entry is invalid"),
        "{status:?}"
    );
    assert_eq!(service.calls.get(), 0, "nothing ran");
}

pub(crate) async fn a_metadata_keyed_method_reads_its_own_entry(store: Store) {
    let (service, _) = service(store).await;
    let keyed = || with_metadata(call(charge("", 100)), "x-charge-key", "m1");
    assert!(!ok(service.charge_by_metadata(keyed()).await).1);
    assert!(ok(service.charge_by_metadata(keyed()).await).1);
    // The field is not a key source of this method: each of these runs.
    ok(service.charge_by_metadata(call(charge("m1", 100))).await);
    assert_eq!(service.calls.get(), 2);
}

/// A request with many map entries, maps inside map values, and its list in `items` order.
fn rich(key: &str, order: &[usize], items: &[&str]) -> ChargeRequest {
    let mut labels = HashMap::new();
    let mut parts = HashMap::new();
    for &n in order {
        labels.insert(format!("label{n}"), format!("value{n}"));
        let mut notes = HashMap::new();
        for m in order {
            notes.insert(*m as i32, format!("note{m}"));
        }
        parts.insert(format!("part{n}"), Part { notes });
    }
    ChargeRequest {
        labels,
        parts,
        items: items.iter().map(|s| (*s).to_owned()).collect(),
        ..charge(key, 100)
    }
}

pub(crate) async fn map_order_field_order_and_unknown_fields_never_make_a_conflict(store: Store) {
    let (service, _) = service(store).await;
    let forward: Vec<usize> = (0..24).collect();
    let backward: Vec<usize> = (0..24).rev().collect();
    ok(service
        .charge(call(rich("k1", &forward, &["a", "b"])))
        .await);
    for _ in 0..5 {
        // Fresh maps: `HashMap`s seeded anew, so prost writes their entries in another order.
        let (_, replayed) = ok(service
            .charge(call(rich("k1", &backward, &["a", "b"])))
            .await);
        assert!(replayed);
    }
    // The same message as another client writes it: fields by number in reverse (each field's
    // occurrences kept in order: `items` is a list), plus a field this server does not know;
    // decoded as tonic would.
    let encoded = rich("k1", &forward, &["a", "b"]).encode_to_vec();
    let mut by_number: Vec<(u8, &[u8])> = fields(&encoded)
        .into_iter()
        .map(|field| (field[0] >> 3, field))
        .collect();
    by_number.sort_by_key(|(number, _)| std::cmp::Reverse(*number));
    let mut wire = Vec::new();
    for (_, field) in by_number {
        wire.extend_from_slice(field);
    }
    wire.extend_from_slice(&[0xf8, 0x06, 0x01]); // field 111, varint 1
    let decoded = ChargeRequest::decode(&wire[..]).unwrap();
    assert!(ok(service.charge(call(decoded)).await).1);
    assert_eq!(service.calls.get(), 1);
    // A list in another order is another request.
    let reordered = failed(
        service
            .charge(call(rich("k1", &forward, &["b", "a"])))
            .await,
    );
    assert_answer(
        &reordered,
        Code::FailedPrecondition,
        "IDEMPOTENCY_KEY_REUSED",
        false,
    );
}

/// The top-level fields of an encoding, as byte ranges (tags and lengths of one byte).
fn fields(encoded: &[u8]) -> Vec<&[u8]> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < encoded.len() {
        let start = at;
        let key = encoded[at];
        at += 1;
        match key & 7 {
            0 => {
                while encoded[at] & 0x80 != 0 {
                    at += 1;
                }
                at += 1;
            }
            2 => {
                let mut len = 0usize;
                let mut shift = 0;
                loop {
                    let byte = encoded[at];
                    at += 1;
                    len |= usize::from(byte & 0x7f) << shift;
                    shift += 7;
                    if byte & 0x80 == 0 {
                        break;
                    }
                }
                at += len;
            }
            other => panic!("wire type {other} not used by the test message"),
        }
        fields.push(&encoded[start..at]);
    }
    fields
}

pub(crate) async fn a_key_reused_with_another_request_is_failed_precondition(store: Store) {
    let (service, _) = service(store).await;
    ok(service.charge(call(charge("k1", 100))).await);
    let status = failed(service.charge(call(charge("k1", 999))).await);
    assert_answer(
        &status,
        Code::FailedPrecondition,
        "IDEMPOTENCY_KEY_REUSED",
        false,
    );
    assert_eq!(service.calls.get(), 1);
}

pub(crate) async fn final_statuses_are_stored_and_replayed(store: Store) {
    let (service, _) = service(store).await;
    let codes = [
        ("invalid_argument", Code::InvalidArgument),
        ("failed_precondition", Code::FailedPrecondition),
        ("not_found", Code::NotFound),
        ("already_exists", Code::AlreadyExists),
        ("permission_denied", Code::PermissionDenied),
        ("out_of_range", Code::OutOfRange),
    ];
    for (n, (outcome, code)) in codes.into_iter().enumerate() {
        let request = || {
            let mut message = charge(&format!("final-{n}"), 100);
            message.outcome = outcome.into();
            call(message)
        };
        let first = failed(service.charge(request()).await);
        let retry = failed(service.charge(request()).await);
        assert_eq!((first.code(), retry.code()), (code, code));
        assert_eq!(retry.message(), first.message());
        assert_eq!(retry.details(), first.details(), "details kept");
        let reason = retry
            .get_error_details()
            .error_info()
            .unwrap()
            .reason
            .clone();
        assert_eq!(reason, format!("RUN_{}", n + 1));
        assert_eq!(retry.metadata().get("x-run"), first.metadata().get("x-run"));
        assert!(replayed(retry.metadata()) && !replayed(first.metadata()));
    }
    assert_eq!(service.calls.get(), codes.len(), "each ran once");
}

pub(crate) async fn other_statuses_release_the_key(store: Store) {
    let (service, _) = service(store).await;
    let outcomes = [
        ("unavailable", Code::Unavailable),
        ("internal", Code::Internal),
        ("unknown", Code::Unknown),
        ("deadline_exceeded", Code::DeadlineExceeded),
        ("resource_exhausted", Code::ResourceExhausted),
        ("cancelled", Code::Cancelled),
        ("aborted", Code::Aborted),
    ];
    for (outcome, code) in outcomes {
        let key = format!("released-{outcome}");
        let mut message = charge(&key, 100);
        message.outcome = outcome.into();
        let status = failed(service.charge(call(message)).await);
        assert_eq!(status.code(), code, "the method's own status");
        assert!(!replayed(status.metadata()));
        // The retry runs again, and its answer is stored.
        let (_, replayed) = ok(service.charge(call(charge(&key, 100))).await);
        assert!(!replayed, "{outcome}: the retry ran");
    }
    assert_eq!(service.calls.get(), 2 * outcomes.len());
}

pub(crate) async fn panics_release_the_key(store: Store) {
    let (service, _) = service(store).await;
    let mut message = charge("k1", 100);
    message.outcome = "panic".into();
    let owned = service.clone();
    let panicked = tokio::spawn(async move { owned.charge(call(message)).await }).await;
    assert!(panicked.unwrap_err().is_panic());
    let (_, replayed) = ok(service.charge(call(charge("k1", 100))).await);
    assert!(!replayed);
    assert_eq!(service.calls.get(), 2);
}

pub(crate) async fn an_in_flight_duplicate_is_aborted_with_retry_info(store: Store) {
    let (service, _) = service(store).await;
    let mut message = charge("k1", 100);
    message.outcome = "gate".into();
    let first = {
        let (service, message) = (service.clone(), message.clone());
        tokio::spawn(async move { service.charge(call(message)).await })
    };
    service.gate.entered().await;
    let status = failed(service.charge(call(message.clone())).await);
    assert_answer(&status, Code::Aborted, "IDEMPOTENCY_KEY_IN_PROGRESS", true);
    service.gate.open();
    let (charge, _) = ok(first.await.unwrap());
    let (again, replayed) = ok(service.charge(call(message)).await);
    assert!(replayed);
    assert_eq!(charge, again);
    assert_eq!(service.calls.get(), 1);
}

pub(crate) async fn wait_mode_replays_the_first_reply(store: Store) {
    let (service, _) = service(store).await;
    let mut message = charge("k1", 100);
    message.outcome = "slow".into();
    let first = {
        let (service, message) = (service.clone(), message.clone());
        tokio::spawn(async move { service.charge_waiting(call(message)).await })
    };
    // The duplicate waits for the first call's reply instead of being refused.
    let mut duplicate = None;
    for _ in 0..200 {
        if service.calls.get() == 1 {
            duplicate = Some(service.charge_waiting(call(message.clone())).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (waited, replayed) = ok(duplicate.expect("the first call started"));
    assert!(replayed);
    assert_eq!(ok(first.await.unwrap()).0, waited);
    assert_eq!(service.calls.get(), 1);
}

pub(crate) async fn scopes_isolate_tenants_and_an_unknown_caller_is_unauthenticated(store: Store) {
    let (service, _) = service(store).await;
    let (acme, _) = ok(service.charge(from("acme", charge("k1", 100))).await);
    let (globex, replayed) = ok(service.charge(from("globex", charge("k1", 100))).await);
    assert!(!replayed, "another tenant's key is another record");
    assert_ne!(acme, globex);
    let anonymous = tonic::Request::new(charge("k1", 100));
    let status = failed(service.charge(anonymous).await);
    assert_answer(
        &status,
        Code::Unauthenticated,
        "IDEMPOTENCY_SCOPE_UNRESOLVED",
        false,
    );
    assert_eq!(service.calls.get(), 2);
}

pub(crate) async fn methods_do_not_share_keys(store: Store) {
    let (service, _) = service(store).await;
    ok(service.charge(call(charge("k1", 100))).await);
    let (_, replayed) = ok(service.refund(call(charge("k1", 100))).await);
    assert!(!replayed);
    assert_eq!(service.calls.get(), 2);
}

pub(crate) async fn a_dropped_call_runs_to_its_end_and_its_retry_replays(store: Store) {
    let (service, _) = service(store).await;
    let mut message = charge("k1", 100);
    message.outcome = "gate".into();
    let dropped = {
        let (service, message) = (service.clone(), message.clone());
        tokio::spawn(async move { service.charge(call(message)).await })
    };
    service.gate.entered().await;
    dropped.abort(); // the client hangs up: tonic drops the method's future
    assert!(dropped.await.unwrap_err().is_cancelled());
    service.gate.open();
    let mut replay = None;
    for _ in 0..200 {
        match service.charge(call(message.clone())).await {
            Err(status) if status.code() == Code::Aborted => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            reply => {
                replay = Some(reply);
                break;
            }
        }
    }
    let (_, replayed) = ok(replay.expect("the dropped call's reply was stored"));
    assert!(replayed);
    assert_eq!(service.calls.get(), 1, "the method ran once");
}

pub(crate) async fn completed_records_expire_after_their_ttl(store: Store) {
    let (service, clock) = service(store).await;
    ok(service.charge(call(charge("k1", 100))).await);
    clock.advance(Duration::from_secs(59 * 60));
    assert!(ok(service.charge(call(charge("k1", 100))).await).1);
    clock.advance(Duration::from_secs(2 * 60));
    assert!(
        !ok(service.charge(call(charge("k1", 100))).await).1,
        "ttl = 1h"
    );
    assert_eq!(service.calls.get(), 2);
}

/// An invocation's deadline in a call's extensions (a serverless platform's, inserted by a tower
/// layer) ends its claim's lease: a duplicate is aborted until a second after that deadline,
/// then takes the key over and runs (the timed-out invocation could no longer be running).
pub(crate) async fn a_deadline_in_the_extensions_ends_the_lease(store: Store) {
    let (service, clock) = service(store).await;
    let mut message = charge("k1", 100);
    message.outcome = "gate".into();
    let ends = clock.now().after(Duration::from_secs(3)).as_millis();
    let first = {
        let mut request = call(message.clone());
        let deadline = InvocationDeadline::from_epoch_millis(ends);
        request.extensions_mut().insert(deadline);
        let service = service.clone();
        tokio::spawn(async move { service.charge(request).await })
    };
    service.gate.entered().await;
    clock.advance(Duration::from_millis(3_900));
    let status = failed(service.charge(call(message.clone())).await);
    assert_answer(&status, Code::Aborted, "IDEMPOTENCY_KEY_IN_PROGRESS", true);
    clock.advance(Duration::from_millis(200));
    let second = {
        let service = service.clone();
        tokio::spawn(async move { service.charge(call(message)).await })
    };
    service.gate.entered().await; // the duplicate took the key over and runs
    service.gate.open();
    service.gate.open();
    ok(first.await.unwrap());
    ok(second.await.unwrap());
    assert_eq!(service.calls.get(), 2);
}
