//! The payments service's HTTP contract, end to end over TCP against the real
//! binary on its default store (a SQLite file per test).

mod common;

use common::{Server, charge};
use serde_json::json;
use tokio::task::JoinSet;

const CHARGES: &str = "/v1/charges";

async fn list(server: &Server, org: &str) -> Vec<serde_json::Value> {
    let list = server.get(CHARGES).org(org).send().await;
    assert_eq!(list.status, 200, "{}", list.text());
    let doc = list.json();
    assert_eq!(doc["object"], "list");
    doc["data"].as_array().expect("data is an array").clone()
}

/// Sends `request` `n` times at once; checks that exactly one ran and every other answer is its
/// replay or a 409 in progress. Returns the body of the charge.
async fn burst(request: &common::Call, n: usize) -> Vec<u8> {
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let call = request.clone();
        tasks.spawn(async move { (0, call.send().await) });
    }
    let created = common::settle_burst(tasks, 1).await;
    // After the burst, a retry replays the same charge.
    let retry = request.clone().send().await;
    assert_eq!(retry.status, 201);
    assert!(retry.is_replay());
    assert_eq!(retry.body, created.body);
    retry.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_execute_the_handler_once() {
    // Slow enough that duplicates find the first one running (409), fast enough for CI.
    let server = Server::builder().env("SLOW_MS", "400").start();
    let slow = server
        .post(CHARGES)
        .org("acme")
        .key("burst-slow")
        .json(&charge(1234, "tok_slow"));
    let slow = burst(&slow, 30).await;
    // A fast handler: duplicates mostly arrive after it finished (replays).
    let fast = server
        .post(CHARGES)
        .org("acme")
        .key("burst-fast")
        .json(&charge(4321, "tok_visa"));
    let fast = burst(&fast, 30).await;

    let charges = list(&server, "acme").await;
    let parse = |body: &[u8]| serde_json::from_slice::<serde_json::Value>(body).unwrap();
    assert_eq!(
        charges,
        vec![parse(&fast), parse(&slow)],
        "one charge per key, newest first"
    );
    assert_eq!(server.counter("charges.create", "executed").await, 2);
}

#[tokio::test]
async fn a_charge_is_201_and_its_retry_replays_it_byte_for_byte() {
    let server = Server::start();
    let body = json!({
        "amount": 2000, "currency": "usd", "source": "tok_visa", "description": "order 1001"
    });
    let request = server
        .post(CHARGES)
        .org("acme")
        .key("order-1001")
        .json(&body);

    let first = request.clone().send().await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.is_replay());
    assert_eq!(first.header("content-type"), Some("application/json"));
    let charge = first.json();
    let id = charge["id"].as_str().expect("an id");
    assert!(id.starts_with("ch_") && id.len() > 3, "{id}");
    assert_eq!(
        first.header("location"),
        Some(format!("/v1/charges/{id}").as_str())
    );
    assert_eq!(charge["object"], "charge");
    assert_eq!(charge["amount"], 2000);
    assert_eq!(charge["currency"], "usd");
    assert_eq!(charge["status"], "succeeded");
    assert_eq!(charge["description"], "order 1001");
    assert!(charge["created"].as_i64().is_some_and(|t| t > 0));

    let retry = request.send().await;
    assert_eq!(retry.status, 201);
    assert!(retry.is_replay(), "Idempotent-Replayed: true");
    assert_eq!(retry.body, first.body, "the body is byte-identical");
    assert_eq!(retry.replayable_headers(), first.replayable_headers());

    // JSON key order and whitespace do not make a different request.
    let reordered = server
        .post(CHARGES)
        .org("acme")
        .key("order-1001")
        .header("Content-Type", "application/json")
        .raw_body(
            r#"{ "source":"tok_visa", "description":"order 1001","currency":"usd","amount":2000 }"#,
        )
        .send()
        .await;
    assert_eq!(reordered.status, 201);
    assert!(reordered.is_replay());
    assert_eq!(reordered.body, first.body);

    let location = server
        .get(&format!("/v1/charges/{id}"))
        .org("acme")
        .send()
        .await;
    assert_eq!(location.status, 200);
    assert_eq!(location.json(), charge);
    assert_eq!(list(&server, "acme").await, vec![charge]);
}

#[tokio::test]
async fn reusing_a_key_with_a_different_body_is_422() {
    let server = Server::start();
    let first = server
        .post(CHARGES)
        .org("acme")
        .key("order-2")
        .json(&charge(2000, "tok_visa"))
        .send()
        .await;
    assert_eq!(first.status, 201);
    let reused = server
        .post(CHARGES)
        .org("acme")
        .key("order-2")
        .json(&charge(9900, "tok_visa"))
        .send()
        .await;
    reused.assert_problem(422, "idempotency_key_reused");
    assert_eq!(list(&server, "acme").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_duplicate_is_409_with_retry_after() {
    let server = Server::builder().env("SLOW_MS", "1500").start();
    let request = server
        .post(CHARGES)
        .org("acme")
        .key("slow-1")
        .json(&charge(500, "tok_slow"));
    let (a, b) = tokio::join!(request.clone().send(), request.clone().send());
    let (created, conflict) = if a.status == 201 { (a, b) } else { (b, a) };
    assert_eq!(created.status, 201, "{}", created.text());
    assert!(!created.is_replay());
    conflict.assert_problem(409, "idempotency_key_in_progress");
    let retry_after: u64 = conflict
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("Retry-After in seconds");
    assert!(retry_after >= 1);

    // Retrying after the first finished gets its answer.
    let retry = request.send().await;
    assert_eq!(retry.status, 201);
    assert!(retry.is_replay());
    assert_eq!(retry.body, created.body);
    assert_eq!(list(&server, "acme").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_duplicate_waits_for_the_first_refund() {
    let server = Server::builder().env("SLOW_MS", "1000").start();
    let created = server
        .post(CHARGES)
        .org("acme")
        .key("slow-charge")
        .json(&charge(500, "tok_slow"))
        .send()
        .await;
    assert_eq!(created.status, 201);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let refunds = format!("/v1/charges/{id}/refunds");

    // Refunds of a tok_slow charge take SLOW_MS; the duplicate waits instead of getting 409.
    let request = server
        .post(&refunds)
        .org("acme")
        .key("refund-1")
        .json(&json!({ "amount": 300 }));
    let (a, b) = tokio::join!(request.clone().send(), request.clone().send());
    assert_eq!(
        (a.status, b.status),
        (201, 201),
        "{} / {}",
        a.text(),
        b.text()
    );
    assert_eq!(a.body, b.body, "both get the first refund");
    assert_eq!(
        usize::from(a.is_replay()) + usize::from(b.is_replay()),
        1,
        "one ran, one was replayed"
    );
    let refund = a.json();
    assert!(refund["id"].as_str().unwrap().starts_with("re_"));
    assert_eq!(refund["object"], "refund");
    assert_eq!(refund["amount"], 300);
    assert_eq!(refund["charge"], id.as_str());

    // Only one refund happened: 200 remain, and all of it is refunded by default.
    let rest = server
        .post(&refunds)
        .org("acme")
        .key("refund-2")
        .send()
        .await;
    assert_eq!(rest.status, 201, "{}", rest.text());
    assert_eq!(rest.json()["amount"], 200);
    assert_eq!(server.counter("charge_refunds.create", "executed").await, 2);
}

#[tokio::test]
async fn refunds_enforce_what_remains_and_who_owns_the_charge() {
    let server = Server::start();
    let created = server
        .post(CHARGES)
        .org("acme")
        .key("c1")
        .json(&charge(100, "tok_visa"))
        .send()
        .await;
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let refunds = format!("/v1/charges/{id}/refunds");

    let too_much = server
        .post(&refunds)
        .org("acme")
        .key("r-too-much")
        .json(&json!({ "amount": 150 }))
        .send()
        .await;
    let doc = too_much.assert_problem(409, "refund_exceeds_charge");
    assert_eq!(doc["remaining"], 100);

    let invalid = server
        .post(&refunds)
        .org("acme")
        .key("r-zero")
        .json(&json!({ "amount": 0 }))
        .send()
        .await;
    invalid.assert_problem(400, "invalid_request");

    let full = server.post(&refunds).org("acme").key("r-full").send().await;
    assert_eq!(full.status, 201);
    assert_eq!(full.json()["amount"], 100);

    let again = server
        .post(&refunds)
        .org("acme")
        .key("r-again")
        .send()
        .await;
    again.assert_problem(409, "charge_already_refunded");

    let unknown = server
        .post("/v1/charges/ch_doesnotexist/refunds")
        .org("acme")
        .key("r-unknown")
        .send()
        .await;
    unknown.assert_problem(404, "resource_missing");

    // Another org's charge does not exist for you.
    let foreign = server
        .post(&refunds)
        .org("globex")
        .key("r-foreign")
        .send()
        .await;
    foreign.assert_problem(404, "resource_missing");
    let foreign_get = server
        .get(&format!("/v1/charges/{id}"))
        .org("globex")
        .send()
        .await;
    foreign_get.assert_problem(404, "resource_missing");
}

#[tokio::test]
async fn a_declined_charge_is_402_stored_and_replayed() {
    let server = Server::start();
    let request = server
        .post(CHARGES)
        .org("acme")
        .key("declined-1")
        .json(&charge(700, "tok_chargeDeclined"));
    let first = request.clone().send().await;
    let doc = first.assert_problem(402, "card_declined");
    let id = doc["charge"].as_str().expect("the failed charge's id");

    let retry = request.send().await;
    assert_eq!(retry.status, 402);
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body);

    let charges = list(&server, "acme").await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0]["id"], id);
    assert_eq!(charges[0]["status"], "failed");
}

#[tokio::test]
async fn a_processor_outage_is_503_not_stored_and_the_retry_runs_again() {
    let server = Server::start();
    let request = server
        .post(CHARGES)
        .org("acme")
        .key("outage-1")
        .json(&charge(700, "tok_processorOutage"));
    for _ in 0..2 {
        let response = request.clone().send().await;
        response.assert_problem(503, "processor_unavailable");
        assert!(!response.is_replay(), "a 5xx is never replayed");
        assert!(response.header("retry-after").is_some());
    }
    assert_eq!(server.counter("charges.create", "released").await, 2);
    assert!(list(&server, "acme").await.is_empty(), "nothing is stored");

    // The key is free: the client may retry with a working card.
    let retry = server
        .post(CHARGES)
        .org("acme")
        .key("outage-1")
        .json(&charge(700, "tok_visa"))
        .send()
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert!(!retry.is_replay());
}

#[tokio::test]
async fn payouts_require_a_key() {
    let server = Server::start();
    let missing = server
        .post("/v1/payouts")
        .org("acme")
        .json(&json!({ "amount": 1000 }))
        .send()
        .await;
    missing.assert_problem(400, "idempotency_key_missing");

    let request = server
        .post("/v1/payouts")
        .org("acme")
        .key("payout-1")
        .json(&json!({ "amount": 1000 }));
    let first = request.clone().send().await;
    assert_eq!(first.status, 201, "{}", first.text());
    let payout = first.json();
    assert!(payout["id"].as_str().unwrap().starts_with("po_"));
    assert_eq!(payout["object"], "payout");
    assert_eq!(payout["amount"], 1000);
    let retry = request.send().await;
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body);

    let invalid = server
        .post("/v1/payouts")
        .org("acme")
        .key("payout-2")
        .json(&json!({ "amount": -1 }))
        .send()
        .await;
    invalid.assert_problem(400, "invalid_request");
}

#[tokio::test]
async fn requests_without_a_valid_api_key_are_401_and_not_stored() {
    let server = Server::start();
    let body = charge(100, "tok_visa");
    let malformed = [
        None,
        Some("Bearer"),
        Some("Bearer sk_test_"),
        Some("Bearer sk_live_acme"),
        Some("Basic c2tfdGVzdF9hY21lOg=="),
        Some("Bearer sk_test_ac/me"),
    ];
    for auth in malformed {
        let mut call = server.post(CHARGES).key("auth-1").json(&body);
        if let Some(auth) = auth {
            call = call.header("Authorization", auth);
        }
        let response = call.send().await;
        let doc = response.assert_problem(401, "unauthorized");
        assert!(
            doc["detail"]
                .as_str()
                .is_some_and(|d| d.contains("sk_test_"))
        );
        assert_eq!(response.header("www-authenticate"), Some("Bearer"));

        let mut list = server.get(CHARGES);
        if let Some(auth) = auth {
            list = list.header("Authorization", auth);
        }
        list.send().await.assert_problem(401, "unauthorized");
    }
    // The rejections were not stored: the same key now runs.
    let ok = server
        .post(CHARGES)
        .org("acme")
        .key("auth-1")
        .json(&body)
        .send()
        .await;
    assert_eq!(ok.status, 201);
    assert!(!ok.is_replay());
}

#[tokio::test]
async fn keys_are_isolated_per_org() {
    let server = Server::start();
    let body = charge(2500, "tok_visa");
    let acme = server
        .post(CHARGES)
        .org("acme")
        .key("shared")
        .json(&body)
        .send()
        .await;
    let globex = server
        .post(CHARGES)
        .org("globex")
        .key("shared")
        .json(&body)
        .send()
        .await;
    assert_eq!((acme.status, globex.status), (201, 201));
    assert!(!acme.is_replay() && !globex.is_replay());
    assert_ne!(acme.json()["id"], globex.json()["id"], "two charges");
    assert_eq!(list(&server, "acme").await, vec![acme.json()]);
    assert_eq!(list(&server, "globex").await, vec![globex.json()]);
}

#[tokio::test]
async fn invalid_charges_are_400_problems() {
    let server = Server::start();
    let cases = [
        (charge(0, "tok_visa"), "amount"),
        (charge(-5, "tok_visa"), "amount"),
        (
            json!({ "amount": 5, "currency": "eur", "source": "tok_visa" }),
            "currency",
        ),
        (charge(5, "tok_amex"), "source"),
    ];
    for (i, (body, param)) in cases.into_iter().enumerate() {
        let response = server
            .post(CHARGES)
            .org("acme")
            .key(&format!("invalid-{i}"))
            .json(&body)
            .send()
            .await;
        let doc = response.assert_problem(400, "invalid_request");
        assert_eq!(doc["param"], param, "{body}");
    }
    let not_json = server
        .post(CHARGES)
        .org("acme")
        .header("Content-Type", "application/json")
        .raw_body("{\"amount\": ")
        .send()
        .await;
    not_json.assert_problem(400, "invalid_json");
    assert!(list(&server, "acme").await.is_empty());
}

#[tokio::test]
async fn the_list_is_newest_first_and_per_org() {
    let server = Server::start();
    let mut ids = Vec::new();
    for i in 0..3 {
        let response = server
            .post(CHARGES)
            .org("acme")
            .json(&charge(100 + i, "tok_visa"))
            .send()
            .await;
        assert_eq!(response.status, 201, "a charge without a key runs normally");
        ids.push(response.json()["id"].clone());
    }
    ids.reverse();
    let listed: Vec<_> = list(&server, "acme")
        .await
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(listed, ids);
    let page = server
        .get("/v1/charges?limit=2")
        .org("acme")
        .send()
        .await
        .json();
    assert_eq!(page["has_more"], true);
    assert_eq!(page["data"].as_array().unwrap().len(), 2);
    assert!(list(&server, "globex").await.is_empty());
}

#[tokio::test]
async fn metrics_count_executed_and_replayed_requests() {
    let server = Server::start();
    let request = server
        .post(CHARGES)
        .org("acme")
        .key("metered")
        .json(&charge(100, "tok_visa"));
    assert_eq!(request.clone().send().await.status, 201);
    assert!(request.send().await.is_replay());

    let metrics = server.get("/metrics").send().await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|ct| ct.starts_with("text/plain"))
    );
    let text = metrics.text();
    assert!(
        text.lines()
            .any(|l| l.starts_with("idempotency_requests_total{")
                && l.contains("endpoint=\"charges.create\"")
                && l.contains("outcome=\"executed\"")),
        "{text}"
    );
    assert_eq!(
        common::counter(&text, "charges.create", "executed"),
        1,
        "{text}"
    );
    assert_eq!(
        common::counter(&text, "charges.create", "replayed"),
        1,
        "{text}"
    );
}

#[tokio::test]
async fn healthz_is_200_and_unknown_routes_are_problem_404() {
    let server = Server::start();
    let health = server.get("/healthz").send().await;
    assert_eq!(health.status, 200);
    server
        .get("/v2/nothing")
        .send()
        .await
        .assert_problem(404, "resource_missing");
}
