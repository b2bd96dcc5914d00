//! What only the DynamoDB store has, beside the conformance suite and the model tests it passes
//! like every store: the item an operator reads, the table it creates (twice, harmlessly) or one
//! an operator made under another name, expiry decided on read, a result too large for an item,
//! and a DynamoDB that is unreachable or throttles: 503, the handler not run. Against the moto
//! server the harness starts ([`idem_tests::moto`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem_runtime::clock::{ManualClock, Timestamp};
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{RecordFilter, RecordState};
use idem_runtime::store::{
    Admin, Claim, ClaimRequest, Completion, DynamoDbStore, Fence, LeaseToken, Store,
};
use idem_runtime::{Idempotency, StoreError};
use idem_tests::db::unique_name;
use idem_tests::dynamodb::{
    delete_table, dynamodb_addr, dynamodb_client, dynamodb_endpoint, dynamodb_store_builder,
};
use idem_tests::{TcpProxy, TestStore};
use tower::ServiceExt;

/// Endpoints that count their runs. Routed by the tests below.
mod plain {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::extract::State;
    use axum::http::StatusCode;
    use idem_runtime::idempotent;

    #[idempotent(scope = "global")]
    pub(crate) async fn create(State(calls): State<Arc<AtomicUsize>>) -> StatusCode {
        calls.fetch_add(1, Ordering::SeqCst);
        StatusCode::CREATED
    }

    /// A response of 1 MiB: over what a DynamoDB item holds.
    #[idempotent(scope = "global")]
    pub(crate) async fn export(State(calls): State<Arc<AtomicUsize>>) -> (StatusCode, Vec<u8>) {
        calls.fetch_add(1, Ordering::SeqCst);
        let mut rng = fastrand::Rng::with_seed(7);
        (StatusCode::OK, (0..1 << 20).map(|_| rng.u8(..)).collect())
    }
}

#[derive(Clone, axum::extract::FromRef)]
struct App {
    idem: Idempotency,
    calls: Arc<AtomicUsize>,
}

const KEY: RecordKey = RecordKey::from_bytes([0xab; 32]);
const HOUR: Duration = Duration::from_secs(3600);
const LEASE: Duration = Duration::from_secs(30);

fn t(offset: Duration) -> Timestamp {
    Timestamp::from_millis(1_750_000_000_000).after(offset)
}

fn claim_at(now: Timestamp, token: i64, fp: &'static Fingerprint) -> ClaimRequest<'static> {
    ClaimRequest {
        key: &KEY,
        fingerprint: fp,
        token: LeaseToken::from_i64(token),
        now,
        lease_until: now.after(LEASE),
        expires_at: now.after(HOUR),
        operation: "dynamodb_store::create_charge",
        scope: "org",
        scope_value: "acme",
        tenant: 0,
    }
}

static FP: Fingerprint = Fingerprint::from_bytes([0xf1; 32]);

fn completion(now: Timestamp, payload: &[u8]) -> Completion<'_> {
    Completion {
        payload,
        status: Some(201),
        completed_at: now,
        expires_at: now.after(HOUR),
    }
}

fn app(idem: Idempotency, calls: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route("/create", post(plain::create))
        .route("/export", post(plain::export))
        .with_state(App { idem, calls })
}

async fn send(app: &Router, path: &str, key: &str) -> (StatusCode, Option<String>, Vec<u8>) {
    let request = Request::post(path).header("idempotency-key", key);
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let retry_after = response.headers().get("retry-after");
    let retry_after = retry_after.map(|v| v.to_str().unwrap().to_owned());
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, retry_after, body.to_vec())
}

#[tokio::test]
async fn records_are_items_an_operator_reads() {
    let store = DynamoDbStore::fresh().await;
    let now = t(Duration::ZERO);
    assert_eq!(
        store.claim(claim_at(now, 7, &FP)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    let done = completion(now, b"{\"id\":\"ch_1\"}");
    assert_eq!(
        store
            .complete(&KEY, LeaseToken::from_i64(7), done)
            .await
            .unwrap(),
        Fence::Held
    );
    let item = store
        .client()
        .get_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S(KEY.to_hex()))
        .send()
        .await
        .unwrap();
    let item = item.item().expect("the record's item");
    let s = |name: &str| item[name].as_s().unwrap().clone();
    let n = |name: &str| item[name].as_n().unwrap().parse::<i64>().unwrap();
    assert_eq!(s("state"), "completed");
    assert_eq!(s("operation"), "dynamodb_store::create_charge");
    assert_eq!(
        (s("scope"), s("scope_value")),
        ("org".into(), "acme".into())
    );
    assert_eq!(n("status"), 201);
    assert_eq!(n("lease_token"), 7);
    assert_eq!(n("expires_at"), now.after(HOUR).as_millis());
    assert_eq!(n("expires_ttl"), now.after(HOUR).as_millis() / 1000);
    assert_eq!(
        item["payload"].as_b().unwrap().as_ref(),
        b"{\"id\":\"ch_1\"}"
    );
    assert_eq!(item["fingerprint"].as_b().unwrap().as_ref(), FP.as_bytes());

    let ttl = store
        .client()
        .describe_time_to_live()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_ttl"));
    let table = store
        .client()
        .describe_table()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    let billing = table.table().unwrap().billing_mode_summary().unwrap();
    assert_eq!(billing.billing_mode(), Some(&BillingMode::PayPerRequest));
    store.discard().await;
}

#[tokio::test]
async fn creating_the_table_twice_is_harmless_and_both_stores_share_it() {
    let endpoint = dynamodb_endpoint();
    let table = unique_name();
    let build = || {
        DynamoDbStore::builder(dynamodb_client(&endpoint))
            .table(table.clone())
            .create_table_if_missing(true)
            .build()
    };
    let first = build().await.unwrap();
    let second = build().await.unwrap();
    let now = t(Duration::ZERO);
    first.claim(claim_at(now, 1, &FP)).await.unwrap();
    assert!(matches!(
        second.claim(claim_at(now, 2, &FP)).await.unwrap(),
        Claim::InFlight { .. }
    ));
    first.discard().await;
}

#[tokio::test]
async fn a_table_an_operator_made_works_under_any_name_and_a_wrong_one_is_refused() {
    let endpoint = dynamodb_endpoint();
    let client = dynamodb_client(&endpoint);
    let make = |name: String, key: &'static str| {
        let client = client.clone();
        async move {
            client
                .create_table()
                .table_name(name)
                .attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(key)
                        .attribute_type(ScalarAttributeType::S)
                        .build()
                        .unwrap(),
                )
                .key_schema(
                    KeySchemaElement::builder()
                        .attribute_name(key)
                        .key_type(KeyType::Hash)
                        .build()
                        .unwrap(),
                )
                .billing_mode(BillingMode::PayPerRequest)
                .send()
                .await
                .unwrap();
        }
    };
    let own = format!("{}.payments-idem", unique_name());
    make(own.clone(), "pk").await;
    let store = DynamoDbStore::builder(client.clone())
        .table(own.clone())
        .build()
        .await
        .expect("an operator's table with key `pk`");
    let now = t(Duration::ZERO);
    assert_eq!(
        store.claim(claim_at(now, 1, &FP)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );

    let wrong = unique_name();
    make(wrong.clone(), "id").await;
    let refused = DynamoDbStore::builder(client.clone())
        .table(wrong.clone())
        .build()
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Config(m)) if m.contains("`pk`")),
        "{refused:?}"
    );
    let missing = DynamoDbStore::builder(client.clone())
        .table(unique_name())
        .build()
        .await;
    assert!(
        matches!(&missing, Err(StoreError::Config(m)) if m.contains("does not exist")),
        "{missing:?}"
    );
    let bad_name = DynamoDbStore::builder(client.clone())
        .table("a b")
        .build()
        .await;
    assert!(matches!(bad_name, Err(StoreError::Config(_))));
    delete_table(&client, &own).await;
    delete_table(&client, &wrong).await;
}

#[tokio::test]
async fn expiry_is_decided_on_read_while_the_item_is_still_there() {
    let store = DynamoDbStore::fresh().await;
    let now = t(Duration::ZERO);
    store.claim(claim_at(now, 1, &FP)).await.unwrap();
    store
        .complete(&KEY, LeaseToken::from_i64(1), completion(now, b"first"))
        .await
        .unwrap();
    let later = now.after(2 * HOUR);
    // DynamoDB's TTL has not deleted it (moto never does; DynamoDB takes up to days).
    let info = store
        .read_record(&KEY)
        .await
        .unwrap()
        .expect("still stored");
    assert_eq!(info.state(later), RecordState::Expired);
    let expired = RecordFilter::new().state(RecordState::Expired);
    assert_eq!(
        store.list_records(&expired, later, 10).await.unwrap().len(),
        1
    );
    // A new request claims it afresh, as if it were gone.
    assert_eq!(
        store.claim(claim_at(later, 2, &FP)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    assert_eq!(store.purge_expired(later, 10).await.unwrap(), 0);
    store.discard().await;
}

#[tokio::test]
async fn a_completion_too_large_for_an_item_is_refused_and_never_runs_twice() {
    let store = DynamoDbStore::fresh().await;
    let now = t(Duration::ZERO);
    store.claim(claim_at(now, 1, &FP)).await.unwrap();
    let big = vec![7u8; DynamoDbStore::MAX_PAYLOAD_BYTES + 1];
    let refused = store
        .complete(&KEY, LeaseToken::from_i64(1), completion(now, &big))
        .await;
    assert!(
        matches!(refused, Err(StoreError::TooLarge { size, .. }) if size == big.len()),
        "{refused:?}"
    );
    // The record stays in flight, its lease to its expiry: a retry after the lease would have
    // lapsed is still in flight, and only a request after the expiry runs again.
    let retry = store
        .claim(claim_at(now.after(LEASE * 2), 2, &FP))
        .await
        .unwrap();
    assert!(matches!(retry, Claim::InFlight { .. }), "{retry:?}");
    let after = store
        .claim(claim_at(now.after(HOUR * 2), 3, &FP))
        .await
        .unwrap();
    assert_eq!(after, Claim::Acquired { took_over: false });
    // A payload of exactly the limit is kept, beside the rest of the record.
    let fits = vec![8u8; DynamoDbStore::MAX_PAYLOAD_BYTES];
    assert_eq!(
        store
            .complete(
                &KEY,
                LeaseToken::from_i64(3),
                completion(now.after(HOUR * 2), &fits)
            )
            .await
            .unwrap(),
        Fence::Held
    );
    let payload = store.read_record(&KEY).await.unwrap().unwrap().payload;
    assert_eq!(payload.unwrap().len(), fits.len());
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_what_an_item_holds_is_sent_once_and_its_retries_get_409() {
    let store = DynamoDbStore::fresh().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let idem = Idempotency::builder().store(store.clone()).build().unwrap();
    let app = app(idem, calls.clone());
    let (status, _, body) = send(&app, "/export", "big").await;
    assert_eq!((status, body.len()), (StatusCode::OK, 1 << 20));
    let (status, _, problem) = send(&app, "/export", "big").await;
    assert_eq!(status, StatusCode::CONFLICT);
    let problem: serde_json::Value = serde_json::from_slice(&problem).unwrap();
    assert_eq!(problem["code"], "idempotency_response_too_large");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the export ran once");
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_dynamodb_fails_closed_with_503_and_the_handler_does_not_run() {
    let endpoint = dynamodb_endpoint();
    let proxy = TcpProxy::start(dynamodb_addr(&endpoint)).await;
    let store = dynamodb_store_builder(&format!("http://{}", proxy.addr()))
        .timeout(Duration::from_millis(600))
        .max_attempts(2)
        .build()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let idem = Idempotency::builder()
        .store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = app(idem, calls.clone());
    assert_eq!(send(&app, "/create", "before").await.0, StatusCode::CREATED);

    proxy.set_up(false);
    let started = std::time::Instant::now();
    let (status, retry_after, _) = send(&app, "/create", "during").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(retry_after.is_some(), "503 says when to retry");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the store's timeout"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler did not run");
    let failed = store.claim(claim_at(t(Duration::ZERO), 9, &FP)).await;
    assert!(
        matches!(
            failed,
            Err(StoreError::Unavailable(_) | StoreError::Timeout(_))
        ),
        "{failed:?}"
    );

    proxy.set_up(true);
    assert_eq!(send(&app, "/create", "after").await.0, StatusCode::CREATED);
    assert_eq!(send(&app, "/create", "after").await.0, StatusCode::CREATED);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "before, after: once each");
    store.discard().await;
}

/// A DynamoDB endpoint that describes a ready table and throttles every other call, counting
/// them: DynamoDB's own protocol and error codes, from a server of the test's own (moto does
/// not throttle).
async fn throttling_dynamodb(code: &'static str) -> (String, Arc<AtomicUsize>) {
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;

    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let answer = move |headers: HeaderMap| {
        let counted = counted.clone();
        async move {
            let target = headers
                .get("x-amz-target")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let json = [("content-type", "application/x-amz-json-1.0")];
            match target.as_str() {
                "DynamoDB_20120810.DescribeTable" => (
                    StatusCode::OK,
                    json,
                    r#"{"Table":{"TableName":"idempotency","TableStatus":"ACTIVE",
                        "KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],
                        "AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}]}}"#
                        .to_owned(),
                )
                    .into_response(),
                "DynamoDB_20120810.DescribeTimeToLive" => (
                    StatusCode::OK,
                    json,
                    r#"{"TimeToLiveDescription":{"TimeToLiveStatus":"ENABLED",
                        "AttributeName":"expires_ttl"}}"#
                        .to_owned(),
                )
                    .into_response(),
                _ => {
                    counted.fetch_add(1, Ordering::SeqCst);
                    (
                        StatusCode::BAD_REQUEST,
                        json,
                        format!(
                            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{code}",
                                "message":"The level of configured provisioned throughput for the table was exceeded."}}"#
                        ),
                    )
                        .into_response()
                }
            }
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, Router::new().fallback(answer))
            .await
            .unwrap();
    });
    (format!("http://{addr}"), calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_retried_a_bounded_number_of_times_then_fails_closed() {
    for code in [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
    ] {
        let (endpoint, calls) = throttling_dynamodb(code).await;
        let store = DynamoDbStore::builder(dynamodb_client(&endpoint))
            .max_attempts(3)
            .timeout(Duration::from_secs(10))
            .build()
            .await
            .unwrap();
        let failed = store.claim(claim_at(t(Duration::ZERO), 1, &FP)).await;
        let error = match failed {
            Err(StoreError::Unavailable(error)) => error,
            other => panic!("{code}: {other:?}"),
        };
        assert!(error.to_string().contains(code), "{code}: {error}");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "{code}: max_attempts calls"
        );

        let served = Arc::new(AtomicUsize::new(0));
        let idem = Idempotency::builder().store(store).build().unwrap();
        let (status, retry_after, _) = send(&app(idem, served.clone()), "/create", "k").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{code}");
        assert!(retry_after.is_some(), "{code}");
        assert_eq!(
            served.load(Ordering::SeqCst),
            0,
            "{code}: the handler did not run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_whose_replies_are_lost_are_sent_again_by_the_sdk_and_recognised() {
    let endpoint = dynamodb_endpoint();
    let proxy = TcpProxy::start(dynamodb_addr(&endpoint)).await;
    let store = dynamodb_store_builder(&format!("http://{}", proxy.addr()))
        .build()
        .await
        .unwrap();
    let now = t(Duration::ZERO);
    // The claim reached DynamoDB and took the record; its reply was lost. The SDK sends it
    // again, which finds the claimant's own token: the record is the caller's.
    proxy.lose_next_reply();
    assert_eq!(
        store.claim(claim_at(now, 5, &FP)).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    assert!(matches!(
        store.claim(claim_at(now, 6, &FP)).await.unwrap(),
        Claim::InFlight { .. }
    ));
    // The same for the completion: the record holds exactly what it wrote, under its token.
    proxy.lose_next_reply();
    let done = completion(now, b"{\"id\":\"ch_5\"}");
    assert_eq!(
        store
            .complete(&KEY, LeaseToken::from_i64(5), done)
            .await
            .unwrap(),
        Fence::Held
    );
    match store.claim(claim_at(now, 7, &FP)).await.unwrap() {
        Claim::Completed { payload, .. } => assert_eq!(&payload[..], b"{\"id\":\"ch_5\"}"),
        other => panic!("the completion must replay, got {other:?}"),
    }
    store.discard().await;
}
