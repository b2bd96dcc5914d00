//! Bad input gets a clear answer, never a 500, a plain-text error or an echo of itself: NUL in
//! a JSON string or a path id (which PostgreSQL cannot store), bodies over the limit without an
//! idempotency key, paths that are not UTF-8, and megabyte-long values in a 400.

mod common;

use common::{PgDatabase, Response, Server, charge};
use serde_json::json;

/// The largest error body any of these may get: a problem document, not an echo.
const SMALL: usize = 1024;

#[track_caller]
fn assert_small_problem(response: &Response, status: u16, code: &str) {
    response.assert_problem(status, code);
    assert!(
        response.body.len() < SMALL,
        "a {}-byte error body",
        response.body.len()
    );
}

#[tokio::test]
async fn nul_in_a_json_string_or_a_path_id_is_a_client_error_on_postgres() {
    let database = PgDatabase::create().await;
    let server = Server::builder().env("DATABASE_URL", &database.url).start();
    let mut body = charge(500, "tok_visa");
    body["description"] = "order\u{0}1".into();
    for key in [None, Some("nul-1")] {
        let mut call = server.post("/v1/charges").org("acme").json(&body);
        if let Some(key) = key {
            call = call.key(key);
        }
        let response = call.send().await;
        let doc = response.assert_problem(400, "invalid_request");
        assert_eq!(doc["param"], "description", "{doc}");
    }

    let get = server.get("/v1/charges/ch_%00").org("acme").send().await;
    assert_small_problem(&get, 404, "resource_missing");
    let refund = server
        .post("/v1/charges/ch_%00/refunds")
        .org("acme")
        .key("nul-2")
        .send()
        .await;
    assert_small_problem(&refund, 404, "resource_missing");

    // Nothing was stored, and the server is fine.
    let list = server.get("/v1/charges").org("acme").send().await;
    assert_eq!(list.json()["data"], json!([]));
}

#[tokio::test]
async fn a_body_over_the_limit_without_a_key_is_a_problem() {
    let server = Server::start();
    // Content-Length alone is over the limit: the server answers without reading the body.
    let request = "POST /v1/charges HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
        Authorization: Bearer sk_test_acme\r\nContent-Type: application/json\r\n\
        Content-Length: 3000000\r\n\r\n";
    let response = server.raw(request.as_bytes()).await.response().await;
    assert_small_problem(&response, 413, "payload_too_large");
}

#[tokio::test]
async fn every_error_is_a_problem_document() {
    let server = Server::start();
    // Not UTF-8 once decoded: axum's own rejection, in plain text before.
    let not_utf8 = server.get("/v1/charges/%FF%FE").org("acme").send().await;
    assert_small_problem(&not_utf8, 400, "bad_request");
    let refund = server
        .post("/v1/charges/%FF/refunds")
        .org("acme")
        .key("utf8-1")
        .send()
        .await;
    assert_small_problem(&refund, 400, "bad_request");
    // The path is fine and the id names nothing.
    let unknown = server
        .get("/v1/charges/ch_unknown")
        .org("acme")
        .send()
        .await;
    assert_small_problem(&unknown, 404, "resource_missing");
    let method = server.raw(b"DELETE /v1/charges HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let method = method.await.response().await;
    assert_small_problem(&method, 405, "method_not_allowed");
}

#[tokio::test]
async fn errors_do_not_echo_long_values() {
    let server = Server::start();
    let long = "x".repeat(1_900_000);
    for (field, code) in [
        ("source", "invalid_request"),
        ("currency", "invalid_request"),
        ("description", "invalid_request"),
    ] {
        let mut body = charge(500, "tok_visa");
        body[field] = long.clone().into();
        let response = server
            .post("/v1/charges")
            .org("acme")
            .json(&body)
            .send()
            .await;
        assert_small_problem(&response, 400, code);
    }
    // serde's messages quote the body: an unknown field, a string where a number belongs.
    let unknown_field = format!(r#"{{"{long}": 1}}"#);
    let wrong_type = format!(r#"{{"amount": "{long}", "currency": "usd", "source": "tok_visa"}}"#);
    for raw in [unknown_field, wrong_type] {
        let response = server
            .post("/v1/charges")
            .org("acme")
            .header("Content-Type", "application/json")
            .raw_body(&raw)
            .send()
            .await;
        let doc = response.assert_problem(400, "invalid_json");
        assert!(response.body.len() < SMALL, "{}", &doc["detail"]);
        assert!(
            doc["detail"].as_str().unwrap().contains("line 1 column"),
            "{doc}"
        );
    }
    let path = format!("/v1/{}", "y".repeat(60_000));
    let no_route = server.get(&path).send().await;
    assert_small_problem(&no_route, 404, "resource_missing");
}
