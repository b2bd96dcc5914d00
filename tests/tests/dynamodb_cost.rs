//! What each request costs on DynamoDB, counted: the calls the store makes for a fresh request, a
//! replay, a conflict, a reused key, a failed operation, a wait in flight and the renewals of a
//! long run, seen by an interceptor on the SDK client; and the capacity units they consume, from
//! the sizes of the items they write, by DynamoDB's published rules (a write: 1 WCU per started
//! KB of the larger of the item before and after, also when its condition fails; a strongly
//! consistent read: 1 RCU per started 4 KB). `docs/serverless.md` quotes these numbers. Against
//! the moto server the harness starts ([`idem_tests::moto`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::types::AttributeValue;
use idem_runtime::store::DynamoDbStore;
use idem_runtime::{Idempotency, OperationError, Outcome};
use idem_tests::Gate;
use idem_tests::db::unique_name;
use idem_tests::dynamodb::{delete_table, dynamodb_client, dynamodb_endpoint};

/// The DynamoDB operations the client sent, by name (`x-amz-target`), in order.
#[derive(Debug, Clone, Default)]
struct Sent(Arc<Mutex<Vec<String>>>);

impl Sent {
    /// What was sent since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Intercept for Sent {
    fn name(&self) -> &'static str {
        "count DynamoDB calls"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or(target);
        self.0.lock().unwrap().push(operation.to_owned());
        Ok(())
    }
}

/// An item's size as DynamoDB bills it: each attribute's name plus its value (strings and
/// binaries their length, numbers about one byte per two significant digits plus one).
fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| {
            name.len()
                + match value {
                    AttributeValue::S(s) => s.len(),
                    AttributeValue::B(b) => b.as_ref().len(),
                    AttributeValue::N(n) => {
                        let digits = n.trim_start_matches('-').replace('.', "");
                        let significant = digits.trim_start_matches('0').trim_end_matches('0');
                        significant.len().div_ceil(2) + 1
                    }
                    AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
                    other => panic!("the store writes no {other:?}"),
                }
        })
        .sum()
}

/// Write capacity units for an item of `bytes`: one per started KB.
fn wcu(bytes: usize) -> usize {
    bytes.div_ceil(1024).max(1)
}

/// The output of the operation: a 1 KB JSON document, the size of a typical API response.
/// Runs `charges.create` for `key` on a task, its operation held at `gate` until it opens.
fn spawn_gated(
    idempotency: Idempotency,
    key: &'static str,
    input: &'static str,
    gate: &Gate,
) -> tokio::task::JoinHandle<Result<Outcome<serde_json::Value>, OperationError<()>>> {
    let gate = gate.clone();
    tokio::spawn(async move {
        idempotency
            .operation("charges.create")
            .scope("acme")
            .run(key, input, move |_| async move {
                gate.pass().await;
                Ok::<_, ()>(output())
            })
            .await
    })
}

fn output() -> serde_json::Value {
    serde_json::json!({ "id": "ch_1", "receipt": "x".repeat(1000) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_costs_what_the_guide_says() {
    let endpoint = dynamodb_endpoint();
    let sent = Sent::default();
    let plain = dynamodb_client(&endpoint);
    let counted = Client::from_conf(
        plain
            .config()
            .to_builder()
            .interceptor(sent.clone())
            .build(),
    );
    let table = unique_name();
    let store = DynamoDbStore::builder(counted)
        .table(&table)
        .create_table_if_missing(true)
        .build()
        .await
        .expect("moto serves DynamoDB");
    let idempotency_store = store.clone();
    let idempotency = Idempotency::builder().store(store).build().unwrap();
    let charges = || idempotency.operation("charges.create").scope("acme");
    sent.take();

    // Fresh: the claim's conditional PutItem, then the completion's UpdateItem.
    let ran = charges()
        .run("k1", "order-1", |_| async { Ok::<_, ()>(output()) })
        .await
        .expect("runs");
    assert!(!ran.is_replayed());
    assert_eq!(sent.take(), ["PutItem", "UpdateItem"], "a fresh request");

    // The items those writes left, read without counting.
    let items = plain
        .scan()
        .table_name(&table)
        .consistent_read(true)
        .send()
        .await
        .expect("scan");
    let completed = item_bytes(&items.items()[0]);
    let mut claimed = items.items()[0].clone();
    for attribute in ["payload", "status", "completed_at"] {
        claimed.remove(attribute);
    }
    claimed.insert("state".into(), AttributeValue::S("in_flight".into()));
    let claimed = item_bytes(&claimed);
    assert!(
        (1024..2048).contains(&completed),
        "a 1 KB output makes an item of 1-2 KB: {completed} B"
    );
    assert!(claimed < 1024, "a claim fits in 1 KB: {claimed} B");
    let fresh = wcu(claimed) + wcu(completed);
    assert_eq!(fresh, 3, "1 WCU to claim, 2 to complete");

    // A replay, a reused key: one PutItem whose condition fails and returns the stored item
    // (ReturnValuesOnConditionCheckFailure): no read is made, and the failed write is billed by
    // the stored item's size.
    let replay = charges()
        .run("k1", "order-1", |_| async { Ok::<_, ()>(output()) })
        .await
        .expect("replays");
    assert!(replay.is_replayed());
    assert_eq!(sent.take(), ["PutItem"], "a replay");
    assert_eq!(wcu(completed), 2);
    let reused = charges()
        .run("k1", "order-2", |_| async { Ok::<_, ()>(output()) })
        .await;
    assert!(
        matches!(reused, Err(OperationError::Conflict)),
        "{reused:?}"
    );
    assert_eq!(sent.take(), ["PutItem"], "a reused key");

    // A duplicate while the first runs: one PutItem (billed by the claim's size), 409.
    let gate = Gate::default();
    let first = spawn_gated(idempotency.clone(), "k2", "order-3", &gate);
    gate.entered().await;
    assert_eq!(sent.take(), ["PutItem"], "the first claim");
    let duplicate = charges()
        .run("k2", "order-3", |_| async { Ok::<_, ()>(output()) })
        .await;
    assert!(
        matches!(duplicate, Err(OperationError::InFlight { .. })),
        "{duplicate:?}"
    );
    assert_eq!(sent.take(), ["PutItem"], "a duplicate in flight");
    gate.open();
    let completed_first = first.await.unwrap().expect("the first run completes");
    assert!(!completed_first.is_replayed());
    assert_eq!(sent.take(), ["UpdateItem"], "the first run's completion");

    // A failed operation frees its key: the claim, then a DeleteItem fenced by its token.
    let failed = charges()
        .run("k3", "order-4", |_| async {
            Err::<serde_json::Value, _>("declined")
        })
        .await;
    assert!(
        matches!(failed, Err(OperationError::Failed(_))),
        "{failed:?}"
    );
    assert_eq!(sent.take(), ["PutItem", "DeleteItem"], "a failed operation");

    // A run longer than a third of its lease renews it: one UpdateItem per renewal, each
    // fenced by the owner's token. The gate holds the run until two renewals went out.
    let renewing = Idempotency::builder()
        .store(idempotency_store.clone())
        .lease(Duration::from_millis(600))
        .build()
        .unwrap();
    let gate = Gate::default();
    let long = spawn_gated(renewing, "k4", "order-5", &gate);
    gate.entered().await;
    let mut calls = sent.take();
    while calls.iter().filter(|c| *c == "UpdateItem").count() < 2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        calls.extend(sent.take());
    }
    gate.open();
    let ran = long.await.unwrap().expect("the long run completes");
    assert!(!ran.is_replayed());
    calls.extend(sent.take());
    assert_eq!(
        calls.first().map(String::as_str),
        Some("PutItem"),
        "{calls:?}"
    );
    assert!(
        calls[1..].iter().all(|c| c == "UpdateItem"),
        "renewals and the completion are UpdateItems, nothing else: {calls:?}"
    );

    eprintln!(
        "DynamoDB per request, 1 KB output: fresh {fresh} WCU (claim {claimed} B, completed \
         {completed} B); replay, reused or in flight 1 write request each ({} WCU for a replay); \
         0 RCU",
        wcu(completed)
    );
    delete_table(&plain, &table).await;
}
