//! The payments example as Stripe's clients see it, end to end over TCP against the real
//! binary: form bodies with bracketed keys (the same pairs in another order are a replay, a
//! changed value a reused key), Stripe's routes (`POST /v1/refunds`, paging with
//! `starting_after`), and under `ERROR_FORMAT=stripe` every error in Stripe's envelope, with
//! Stripe's type and `Stripe-Should-Retry`: the service's own, the engine's, axum's rejections
//! and the server loop's 408 and 503. The SDKs themselves run in `examples/sdk/run.sh`.

mod common;

use std::time::Duration;

use common::{Response, Server, charge};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FORM: &str = "application/x-www-form-urlencoded";
const CHARGES: &str = "/v1/charges";

fn stripe_server() -> common::ServerBuilder {
    Server::builder().env("ERROR_FORMAT", "stripe")
}

/// Asserts Stripe's envelope with `status`, `kind` (the error's `type`) and `code`, and the
/// `Stripe-Should-Retry` header; returns the error object.
#[track_caller]
fn assert_stripe(response: &Response, status: u16, kind: &str, code: &str, retry: bool) -> Value {
    let text = String::from_utf8_lossy(&response.body);
    assert_eq!(response.status, status, "{text}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let error = response.json()["error"].clone();
    assert_eq!(error["type"], kind, "{text}");
    assert_eq!(error["code"], code, "{text}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{text}"
    );
    let expected = if retry { "true" } else { "false" };
    assert_eq!(
        response.header("stripe-should-retry"),
        Some(expected),
        "{text}"
    );
    error
}

async fn list(server: &Server, org: &str, query: &str) -> Value {
    let list = server
        .get(&format!("{CHARGES}{query}"))
        .org(org)
        .send()
        .await;
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()
}

#[tokio::test]
async fn a_form_in_another_order_is_a_replay_and_a_changed_value_a_reused_key() {
    let server = Server::start();
    let form = |body: &str| {
        server
            .post(CHARGES)
            .org("acme")
            .key("form-1")
            .header("Content-Type", FORM)
            .raw_body(body)
    };
    // As stripe-node sends it: brackets as they are.
    let first =
        form("amount=2000&currency=usd&source=tok_visa&metadata[order]=42&description=order+42")
            .send()
            .await;
    assert_eq!(first.status, 201, "{}", first.text());
    let created = first.json();
    assert_eq!(created["amount"], 2000);
    assert_eq!(created["description"], "order 42");
    assert_eq!(created["metadata"], json!({ "order": "42" }));

    // As stripe-python sends it, in another order: brackets and spaces percent-encoded.
    let reordered = form(
        "metadata%5Border%5D=42&description=order%2042&source=tok_visa&currency=usd&amount=2000",
    )
    .send()
    .await;
    assert_eq!(reordered.status, 201);
    assert!(reordered.is_replay(), "the same pairs are the same request");
    assert_eq!(reordered.body, first.body);

    for changed in [
        "amount=2001&currency=usd&source=tok_visa&metadata[order]=42&description=order+42",
        "amount=2000&currency=usd&source=tok_visa&metadata[order]=43&description=order+42",
    ] {
        form(changed)
            .send()
            .await
            .assert_problem(422, "idempotency_key_reused");
    }
    let charges = list(&server, "acme", "").await;
    assert_eq!(
        charges["data"],
        json!([created]),
        "one charge, with its metadata"
    );

    // A form the route cannot take is a 400 that names the problem, not stored.
    let bad = server
        .post(CHARGES)
        .org("acme")
        .key("form-2")
        .header("Content-Type", FORM)
        .raw_body("amount=2000&amount=2001&currency=usd&source=tok_visa")
        .send()
        .await;
    let doc = bad.assert_problem(400, "invalid_form");
    assert!(
        doc["detail"].as_str().unwrap().contains("multiple values"),
        "{doc}"
    );
}

#[tokio::test]
async fn stripes_routes_refund_by_body_and_page_with_starting_after() {
    let server = Server::start();
    let mut ids = Vec::new();
    for amount in [100, 200, 300] {
        let created = server
            .post(CHARGES)
            .org("acme")
            .json(&charge(amount, "tok_visa"))
            .send()
            .await;
        assert_eq!(created.status, 201);
        ids.push(created.json()["id"].as_str().unwrap().to_owned());
    }
    let newest_first = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = list(&server, "acme", "?limit=2").await;
    assert_eq!(
        (first["has_more"].clone(), first["url"].clone()),
        (json!(true), json!(CHARGES))
    );
    assert_eq!(newest_first(&first), [ids[2].clone(), ids[1].clone()]);
    let second = list(
        &server,
        "acme",
        &format!("?limit=2&starting_after={}", ids[1]),
    )
    .await;
    assert_eq!(second["has_more"], false);
    assert_eq!(newest_first(&second), [ids[0].clone()]);
    // Another org's charge is no place to start.
    let elsewhere = server
        .get(&format!("{CHARGES}?starting_after={}", ids[1]))
        .org("globex")
        .send()
        .await;
    let doc = elsewhere.assert_problem(400, "resource_missing");
    assert_eq!(doc["param"], "starting_after");

    let refund = |body: String, key: &str| {
        server
            .post("/v1/refunds")
            .org("acme")
            .key(key)
            .header("Content-Type", FORM)
            .raw_body(&body)
    };
    let refunded = refund(format!("charge={}&amount=50", ids[0]), "refund-1")
        .send()
        .await;
    assert_eq!(refunded.status, 201, "{}", refunded.text());
    let doc = refunded.json();
    assert_eq!(
        (doc["object"].clone(), doc["amount"].clone()),
        (json!("refund"), json!(50))
    );
    assert_eq!(doc["charge"], ids[0].as_str());
    let again = refund(format!("amount=50&charge={}", ids[0]), "refund-1")
        .send()
        .await;
    assert!(again.is_replay());
    assert_eq!(again.body, refunded.body);
    // The rest, on the other route: one refund record per route and key.
    let rest = server
        .post(&format!("/v1/charges/{}/refunds", ids[0]))
        .org("acme")
        .key("refund-1")
        .send()
        .await;
    assert_eq!(
        (rest.status, rest.json()["amount"].clone()),
        (201, json!(50))
    );
    let unknown = refund("charge=ch_000000000000000000000000".into(), "refund-2")
        .send()
        .await;
    let doc = unknown.assert_problem(400, "resource_missing");
    assert_eq!(doc["param"], "charge");
}

#[tokio::test]
async fn in_stripes_format_the_engines_answers_are_idempotency_errors() {
    let server = stripe_server().env("SLOW_MS", "1500").start();
    let request = |amount: i64, key: &str| {
        server
            .post(CHARGES)
            .org("acme")
            .key(key)
            .json(&charge(amount, "tok_slow"))
    };
    let running = request(500, "stripe-1").start().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let duplicate = request(500, "stripe-1").send().await;
    assert_stripe(
        &duplicate,
        409,
        "idempotency_error",
        "idempotency_key_in_progress",
        true,
    );
    assert_eq!(duplicate.header("retry-after"), Some("1"));
    let first = running.response().await;
    assert_eq!(first.status, 201, "{}", first.text());

    // Stripe answers a reused key 400, where its SDKs raise IdempotencyError.
    let reused = request(501, "stripe-1").send().await;
    assert_stripe(
        &reused,
        400,
        "idempotency_error",
        "idempotency_key_reused",
        false,
    );

    let invalid = request(500, &"k".repeat(300)).send().await;
    assert_stripe(
        &invalid,
        400,
        "invalid_request_error",
        "idempotency_key_invalid",
        false,
    );
    let payout = server
        .post("/v1/payouts")
        .org("acme")
        .json(&json!({ "amount": 100 }))
        .send()
        .await;
    assert_stripe(
        &payout,
        400,
        "invalid_request_error",
        "idempotency_key_missing",
        false,
    );
}

#[tokio::test]
async fn in_stripes_format_every_error_of_the_service_is_enveloped() {
    let server = stripe_server().start();
    let post = |body: &Value, key: &str| server.post(CHARGES).org("acme").key(key).json(body);

    let declined = post(&charge(700, "tok_chargeDeclined"), "decline-1");
    let first = declined.clone().send().await;
    let error = assert_stripe(&first, 402, "card_error", "card_declined", false);
    assert!(
        error["charge"].as_str().unwrap().starts_with("ch_"),
        "{error}"
    );
    let replay = declined.send().await;
    assert!(replay.is_replay());
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("stripe-should-retry"), Some("false"));

    let outage = post(&charge(700, "tok_processorOutage"), "outage-1")
        .send()
        .await;
    assert_stripe(&outage, 503, "api_error", "processor_unavailable", true);
    assert_eq!(outage.header("retry-after"), Some("1"));

    let eur = json!({ "amount": 5, "currency": "eur", "source": "tok_visa" });
    let error = assert_stripe(
        &post(&eur, "eur-1").send().await,
        400,
        "invalid_request_error",
        "invalid_request",
        false,
    );
    assert_eq!(error["param"], "currency");

    let text = server
        .post(CHARGES)
        .org("acme")
        .header("Content-Type", "text/plain")
        .raw_body("amount=5")
        .send()
        .await;
    assert_stripe(
        &text,
        415,
        "invalid_request_error",
        "unsupported_media_type",
        false,
    );
    let anonymous = server.get(CHARGES).send().await;
    assert_stripe(
        &anonymous,
        401,
        "invalid_request_error",
        "unauthorized",
        false,
    );
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
    let missing = server
        .get("/v1/charges/ch_000000000000000000000000")
        .org("acme")
        .send()
        .await;
    assert_stripe(
        &missing,
        404,
        "invalid_request_error",
        "resource_missing",
        false,
    );

    let id = first.json()["error"]["charge"].as_str().unwrap().to_owned();
    let refund = server
        .post(&format!("/v1/charges/{id}/refunds"))
        .org("acme")
        .send()
        .await;
    assert_stripe(
        &refund,
        409,
        "invalid_request_error",
        "charge_not_refundable",
        false,
    );

    // axum's own rejections, replaced by the outer middleware.
    let not_utf8 = server.get("/v1/charges/%FF%FE").org("acme").send().await;
    assert_stripe(
        &not_utf8,
        400,
        "invalid_request_error",
        "bad_request",
        false,
    );
    let method = server.raw(b"DELETE /v1/charges HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let method = method.await.response().await;
    assert_stripe(
        &method,
        405,
        "invalid_request_error",
        "method_not_allowed",
        false,
    );
}

/// Opens a connection and sends `bytes` on it; the server's whole answer once it closes.
async fn answer_to(server: &Server, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    tokio::time::timeout(common::STEP_TIMEOUT, read)
        .await
        .expect("the server closed the connection")
        .unwrap();
    String::from_utf8(answer).unwrap()
}

#[tokio::test]
async fn in_stripes_format_the_server_loops_answers_are_enveloped_too() {
    let server = stripe_server()
        .env("BODY_TIMEOUT_MS", "1000")
        .env("MAX_CONNECTIONS", "1")
        .start();
    let head = "POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_acme\r\n\
        Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"amount\":";
    let mut held = TcpStream::connect(server.addr()).await.unwrap();
    held.write_all(head.as_bytes()).await.unwrap();
    // The one slot is taken: the next connection is shed.
    let shed = answer_to(&server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(shed.starts_with("HTTP/1.1 503 "), "{shed}");
    for expected in [
        "content-type: application/json",
        "stripe-should-retry: true",
        "retry-after: 1",
        r#"{"error":{"code":"server_busy""#,
        r#""type":"api_error""#,
    ] {
        assert!(shed.contains(expected), "{expected} in {shed}");
    }
    // The held body never arrives: 408, in the same envelope.
    let mut timed_out = Vec::new();
    let read = held.read_to_end(&mut timed_out);
    tokio::time::timeout(common::STEP_TIMEOUT, read)
        .await
        .unwrap()
        .unwrap();
    let timed_out = String::from_utf8(timed_out).unwrap();
    assert!(timed_out.starts_with("HTTP/1.1 408 "), "{timed_out}");
    for expected in [
        "stripe-should-retry: true",
        r#""code":"request_body_timeout""#,
        r#""type":"invalid_request_error""#,
    ] {
        assert!(timed_out.contains(expected), "{expected} in {timed_out}");
    }
}
