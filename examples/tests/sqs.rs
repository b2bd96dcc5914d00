//! The `sqs-orders` consumer (`idem_examples::sqs`), invoked in process as the Lambda runtime
//! invokes it (`LambdaEvent<SqsEvent>` in, `SqsBatchResponse` out), with SQS events as AWS
//! sends them (`tests/sqs/fixtures`). Its records live on a real store: a SQLite file always,
//! and a DynamoDB table on moto (the test harness starts it: `idem_tests::moto`). The
//! effect is real too: a row per shipment in a SQLite `orders_fulfilled` table, counted.
//! [`function`] runs the `sqs-orders` binary itself, against a Lambda Runtime API of its own.
//!
//! ```text
//! cargo test -p idem-examples --test sqs
//! ```

#[path = "sqs/function.rs"]
mod function;
#[path = "sqs/support.rs"]
mod support;

use idem_examples::sqs::{Failure, KeyFrom, OrdersTable, RecordOutcome};
use idem_tests::db::TestDatabase;
use idem_tests::logs::Logs;
use serde_json::json;
use support::{Backend, Bench, answer, fixture, ids, invoke, only};

const BATCH: [&str; 3] = ["o-1001", "o-1002", "o-1003"];

/// SQS delivers a batch again (its visibility timeout lapsed before the function answered):
/// every record is skipped, nothing ships twice, nothing is reported failed.
#[tokio::test]
async fn a_redelivered_batch_performs_each_effect_once() {
    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let first = consumer.process(fixture("batch")).await;
        assert_eq!((first.processed(), first.skipped()), (3, 0), "{backend:?}");
        let again = fixture("batch_redelivered");
        assert_eq!(invoke(&consumer, &again).await, Vec::<String>::new());
        let replay = consumer.process(again).await;
        assert_eq!(
            (replay.processed(), replay.skipped()),
            (0, 3),
            "{backend:?}"
        );
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 1, 1],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// A record no delivery can get past (the table refuses a quantity of 0) is reported done,
/// with a log line saying why, rather than failed and delivered again until the dead-letter
/// queue: `batchItemFailures` is empty, as AWS's JSON, and the others ship once. Nothing of it
/// is stored, so the batch redelivered rejects it again and ships nothing more.
#[tokio::test]
async fn a_record_the_table_refuses_is_rejected_and_reported_done() {
    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let event = fixture("bad_quantity");
        let bad = ids(&event)[1].clone();
        let logs = Logs::default();
        let capturing = logs.capture();
        let response = answer(&consumer, &event).await;
        drop(capturing);
        let none = json!({ "batchItemFailures": [] });
        assert_eq!(
            serde_json::to_value(&response).unwrap(),
            none,
            "{backend:?}"
        );
        let rejected = format!(
            "record rejected: no delivery can succeed, so it is reported done \
             message_id=\"{bad}\" reason=the shipment could not be written"
        );
        assert!(
            logs.text().contains(&rejected),
            "{backend:?}: {}",
            logs.text()
        );
        let orders = ["o-3001", "o-3002", "o-3003"];
        assert_eq!(
            bench.orders.shipments(&orders).await,
            [1, 0, 1],
            "{backend:?}"
        );

        let report = consumer.process(event).await;
        assert_eq!(
            (report.processed(), report.skipped(), report.rejected()),
            (0, 2, 1),
            "{backend:?}"
        );
        assert!(
            matches!(&report.records[1].outcome, RecordOutcome::Rejected(_)),
            "{backend:?}: {report:?}"
        );
        assert_eq!(report.failures().count(), 0, "{backend:?}");
        assert_eq!(
            bench.orders.shipments(&orders).await,
            [1, 0, 1],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// A record fails (the warehouse did not answer), so SQS delivers just it again: it ships
/// once, and a later redelivery of the whole batch ships nothing more.
#[tokio::test]
async fn a_failed_record_redelivered_alone_runs_once() {
    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let event = fixture("batch");
        let second = ids(&event)[1].clone();
        bench.orders.fail_next("o-1002");
        let failed = answer(&consumer, &event).await;
        let expected = json!({ "batchItemFailures": [{ "itemIdentifier": second }] });
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            expected,
            "{backend:?}"
        );
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 0, 1],
            "{backend:?}"
        );

        let redelivery = only(&event, &[&second]);
        assert_eq!(invoke(&consumer, &redelivery).await, Vec::<String>::new());
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 1, 1],
            "{backend:?}"
        );
        let whole = consumer.process(fixture("batch_redelivered")).await;
        assert_eq!((whole.processed(), whole.skipped()), (0, 3), "{backend:?}");
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 1, 1],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// A producer retried its send: two messages, two ids, one body. Keyed by body they ship
/// once, by message id twice (what message ids cannot catch).
#[tokio::test]
async fn a_retried_send_runs_once_by_body_and_twice_by_message_id() {
    for backend in Backend::all() {
        for (key_from, shipments) in [(KeyFrom::BodyFingerprint, 1), (KeyFrom::MessageId, 2)] {
            let bench = Bench::new(&backend).await;
            let consumer = bench.consumer(key_from.clone());
            let event = fixture("retried_send");
            assert_eq!(invoke(&consumer, &event).await, Vec::<String>::new());
            let count = bench.orders.shipments(&["o-2001"]).await;
            assert_eq!(count, [shipments], "{backend:?}, {key_from}");
            bench.discard().await;
        }
    }
}

/// A retried send whose body differs (the producer stamps its send time): only a field of
/// the body, the order id, tells it is the same order.
#[tokio::test]
async fn a_restamped_retry_runs_once_by_field_and_twice_by_body() {
    for backend in Backend::all() {
        let by_field = KeyFrom::Field("order_id".into());
        for (key_from, shipments) in [(by_field, 1), (KeyFrom::BodyFingerprint, 2)] {
            let bench = Bench::new(&backend).await;
            let consumer = bench.consumer(key_from.clone());
            let report = consumer.process(fixture("retried_send_restamped")).await;
            assert_eq!(report.failures().count(), 0, "{backend:?}, {key_from}");
            let count = bench.orders.shipments(&["o-2002"]).await;
            assert_eq!(count, [shipments], "{backend:?}, {key_from}");
            bench.discard().await;
        }
    }
}

/// Keyed by `order_id`, a body without one, and a body that is not JSON, cannot be keyed; nor,
/// keyed by message id, can a record whose `messageId` is empty. No delivery of them can be,
/// so each is rejected: reported done (not in `batchItemFailures`, so SQS does not deliver it
/// again until its dead-letter queue), with a WARN naming its `messageId` and why, and nothing
/// of it is claimed or stored. The others ship.
#[tokio::test]
async fn a_record_without_a_key_is_rejected_and_reported_done() {
    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::Field("order_id".into()));
        let event = fixture("field_missing");
        let all = ids(&event);
        let logs = Logs::default();
        let capturing = logs.capture();
        assert_eq!(invoke(&consumer, &event).await, Vec::<String>::new());
        drop(capturing);
        let reasons = [
            (
                &all[1],
                "no idempotency key: the body has no `order_id` field",
            ),
            (&all[2], "no idempotency key: the body is not a JSON object"),
        ];
        for (id, why) in reasons {
            let line = format!(
                "record rejected: no delivery can succeed, so it is reported done \
                 message_id=\"{id}\" reason={why}"
            );
            let log = logs.text();
            let warned = log
                .lines()
                .any(|l| l.contains(" WARN ") && l.contains(&line));
            assert!(warned, "{backend:?}: {line}\n{log}");
        }
        let orders = ["o-4001", "o-4004"];
        assert_eq!(bench.orders.shipments(&orders).await, [1, 1], "{backend:?}");
        assert_eq!(bench.orders.table.total().await.unwrap(), 2, "{backend:?}");
        assert_eq!(
            bench.records().await,
            2,
            "{backend:?}: the two orders' only"
        );

        let report = consumer.process(event).await;
        assert_eq!(
            (
                report.skipped(),
                report.rejected(),
                report.failures().count()
            ),
            (2, 2, 0),
            "{backend:?}"
        );

        // An empty `messageId` is no id: keyed by it, the record is rejected too, and the
        // batch answered, where a failure it could not name failed the whole invocation.
        let mut unnamed = only(&fixture("batch"), &[&ids(&fixture("batch"))[0]]);
        unnamed.records[0].message_id = Some(String::new());
        let by_id = bench.consumer(KeyFrom::MessageId);
        assert_eq!(invoke(&by_id, &unnamed).await, Vec::<String>::new());
        let report = by_id.process(unnamed).await;
        assert_eq!(
            report.records[0].outcome,
            RecordOutcome::Rejected("no idempotency key: the record has no messageId".into()),
            "{backend:?}"
        );
        assert_eq!(
            bench.orders.shipments(&BATCH[..1]).await,
            [0],
            "{backend:?}"
        );
        assert_eq!(bench.records().await, 2, "{backend:?}");
        bench.discard().await;
    }
}

/// Another invocation is fulfilling an order when its message comes again (SQS delivered it
/// twice, to two invocations): the second reports it failed (SQS retries it later) and ships
/// the rest; once the first has finished, the retry is skipped. One shipment each.
#[tokio::test]
async fn a_record_in_flight_elsewhere_is_reported_failed() {
    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let event = fixture("batch");
        let second = ids(&event)[1].clone();
        let gate = bench.orders.hold("o-1002");
        let first_invocation = tokio::spawn({
            let (consumer, event) = (consumer.clone(), only(&event, &[&second]));
            async move { invoke(&consumer, &event).await }
        });
        gate.entered().await; // the first invocation holds o-1002's key, mid-effect

        let report = consumer.process(fixture("batch_redelivered")).await;
        let failed: Vec<_> = report.failures().collect();
        assert_eq!(
            failed,
            [(Some(second.as_str()), &Failure::InFlight)],
            "{backend:?}"
        );
        assert_eq!(report.processed(), 2, "{backend:?}");

        gate.open();
        assert_eq!(first_invocation.await.unwrap(), Vec::<String>::new());
        let retry = consumer.process(only(&event, &[&second])).await;
        assert_eq!(
            retry.records[0].outcome,
            RecordOutcome::Skipped,
            "{backend:?}"
        );
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 1, 1],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// An invocation times out mid-effect (here: its effect is held past its deadline, as a frozen
/// process would hold it). Its record frees a margin after the invocation's deadline, not after
/// the engine's 30-second lease: the redelivery is refused while that invocation could still be
/// running, then runs the effect. The late invocation's completion is fenced out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_invocations_record_frees_after_its_deadline() {
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use lambda_runtime::{Context, LambdaEvent};

    for backend in Backend::all() {
        let bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let event = fixture("batch");
        let second = ids(&event)[1].clone();
        let gate = bench.orders.hold("o-1002");
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let mut context = Context::default();
        context.deadline = u64::try_from(now_ms).unwrap() + 1000;
        let timed_out = tokio::spawn({
            let (consumer, event) = (consumer.clone(), only(&event, &[&second]));
            async move { consumer.handle(LambdaEvent::new(event, context)).await }
        });
        gate.entered().await;
        let early = consumer.process(only(&event, &[&second])).await;
        assert_eq!(
            early.records[0].outcome,
            RecordOutcome::Failed(Failure::InFlight),
            "{backend:?}: refused while the invocation may still run"
        );

        // The deadline (1 s) plus its margin (1 s), far below the engine's 30 s lease.
        let started = Instant::now();
        let redelivered = loop {
            let report = consumer.process(only(&event, &[&second])).await;
            match &report.records[0].outcome {
                RecordOutcome::Failed(Failure::InFlight)
                    if started.elapsed() < Duration::from_secs(15) =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                outcome => break outcome.clone(),
            }
        };
        assert_eq!(redelivered, RecordOutcome::Processed, "{backend:?}");

        gate.open();
        // Its completion is fenced out (another owner holds the record): it reports the record
        // failed, and that redelivery is skipped.
        let late = timed_out
            .await
            .unwrap()
            .expect("the late invocation answers");
        let late: Vec<_> = late
            .batch_item_failures
            .iter()
            .map(|f| &f.item_identifier)
            .collect();
        assert_eq!(late, [&second], "{backend:?}");
        let after = consumer.process(only(&event, &[&second])).await;
        assert_eq!(
            after.records[0].outcome,
            RecordOutcome::Skipped,
            "{backend:?}"
        );
        // Two shipments: the timed-out invocation's effect happened (at least once, as after
        // any crash mid-effect), and the redelivery's. The record kept the redelivery's.
        assert_eq!(
            bench.orders.shipments(&["o-1002"]).await,
            [2],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// The idempotency store is down: every record is reported failed and nothing ships (fail
/// closed: no effect without a claim). When it is back, the redelivered batch ships once.
#[tokio::test]
async fn a_store_outage_fails_every_record_and_runs_nothing() {
    for backend in Backend::all() {
        let mut bench = Bench::new(&backend).await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let event = fixture("batch");
        bench.store_down().await;
        let report = consumer.process(event.clone()).await;
        for (_, failure) in report.failures() {
            assert!(
                matches!(failure, Failure::StoreUnavailable(_)),
                "{backend:?}: {failure}"
            );
        }
        assert_eq!(invoke(&consumer, &event).await, ids(&event), "{backend:?}");
        assert_eq!(bench.orders.table.total().await.unwrap(), 0, "{backend:?}");

        bench.store_up().await;
        let consumer = bench.consumer(KeyFrom::MessageId);
        let redelivered = fixture("batch_redelivered");
        assert_eq!(invoke(&consumer, &redelivered).await, Vec::<String>::new());
        assert_eq!(invoke(&consumer, &redelivered).await, Vec::<String>::new());
        assert_eq!(
            bench.orders.shipments(&BATCH).await,
            [1, 1, 1],
            "{backend:?}"
        );
        bench.discard().await;
    }
}

/// A failed record without a `messageId` (keyed by its body, whose effect failed) cannot be
/// named in `batchItemFailures`: the invocation fails, so SQS redelivers the whole batch,
/// whose done records are then skipped.
#[tokio::test]
async fn a_failed_record_without_a_message_id_fails_the_invocation() {
    let bench = Bench::new(&Backend::Sqlite).await;
    let consumer = bench.consumer(KeyFrom::BodyFingerprint);
    let mut event = fixture("batch");
    event.records[2].message_id = None;
    bench.orders.fail_next("o-1003");
    let invocation = lambda_runtime::LambdaEvent::new(event.clone(), Default::default());
    let error = consumer.handle(invocation).await.unwrap_err();
    assert!(error.to_string().contains("without a messageId"), "{error}");
    assert_eq!(bench.orders.shipments(&BATCH).await, [1, 1, 0]);

    let report = consumer.process(event).await;
    assert_eq!((report.processed(), report.skipped()), (1, 2));
    assert_eq!(bench.orders.shipments(&BATCH).await, [1, 1, 1]);
    bench.discard().await;
}

/// The orders table on PostgreSQL (`DATABASE_URL=postgres://...` for `sqs-orders`): the same
/// shipments, once each; and every record no delivery can get past is rejected, reported done
/// rather than failed: a quantity of 0, a NUL in text (which PostgreSQL cannot store), a
/// quantity beyond 64 bits, a body that is no JSON.
#[tokio::test]
async fn the_orders_table_ships_once_on_postgres_too() {
    let database = TestDatabase::create().await;
    let orders = OrdersTable::postgres(database.pool().await).await.unwrap();
    let bench = Bench::new(&Backend::Sqlite).await;
    let consumer = bench.consumer_of(KeyFrom::MessageId, orders.clone());
    let first = consumer.process(fixture("batch")).await;
    let again = consumer.process(fixture("batch_redelivered")).await;
    assert_eq!((first.processed(), again.skipped()), (3, 3));
    let report = consumer.process(fixture("bad_quantity")).await;
    assert_eq!(
        (report.processed(), report.rejected()),
        (2, 1),
        "{report:?}"
    );
    let bad = [
        r#"{"order_id":"o-4001","sku":"m\u0000g","quantity":1}"#,
        r#"{"order_id":"o-4002","sku":"mug","quantity":18446744073709551616}"#,
        "not json",
    ];
    let records: Vec<_> = bad
        .iter()
        .enumerate()
        .map(|(n, body)| json!({ "messageId": format!("bad-{n}"), "body": body }))
        .collect();
    let event = serde_json::from_value(json!({ "Records": records })).unwrap();
    let report = consumer.process(event).await;
    assert_eq!(report.rejected(), bad.len(), "{report:?}");
    assert_eq!(report.response().unwrap().batch_item_failures.len(), 0);
    for order in BATCH.into_iter().chain(["o-3001", "o-3003"]) {
        assert_eq!(orders.shipments(order).await.unwrap(), 1, "{order}");
    }
    assert_eq!(orders.total().await.unwrap(), 5);
    bench.discard().await;
    database.drop().await;
}
