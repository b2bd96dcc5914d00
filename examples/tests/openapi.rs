//! `GET /openapi.json` documents the idempotency of every idempotent route, and what the
//! document promises about bodies holds on the wire. The contract test
//! (`examples/contract/run.sh`) checks the rest of the document against the server.

mod common;

use common::{Server, resolve};
use serde_json::{Value, json};

const IDEMPOTENT: [(&str, &str, bool); 4] = [
    ("/v1/charges", "post", false),
    ("/v1/refunds", "post", false),
    ("/v1/charges/{id}/refunds", "post", false),
    ("/v1/payouts", "post", true),
];

#[tokio::test]
async fn every_idempotent_route_documents_the_key_and_the_engine_answers() {
    let server = Server::start();
    let response = server.get("/openapi.json").send().await;
    assert_eq!(response.status, 200);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let doc = response.json();

    for (path, method, required) in IDEMPOTENT {
        let operation = &doc["paths"][path][method];
        let key: Vec<&Value> = operation["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{method} {path} has parameters"))
            .iter()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "header")
            .collect();
        assert_eq!(key.len(), 1, "{method} {path}: one header parameter");
        assert_eq!(key[0]["name"], "Idempotency-Key", "{method} {path}");
        assert_eq!(key[0]["required"], required, "{method} {path}");

        for status in ["400", "409", "422", "503"] {
            let answer = resolve(&doc, &operation["responses"][status]);
            assert_eq!(
                answer["content"]["application/problem+json"]["schema"]["$ref"],
                "#/components/schemas/Problem",
                "{method} {path} {status}"
            );
            let retry_after = !answer["headers"]["Retry-After"].is_null();
            assert_eq!(
                retry_after,
                status == "409" || status == "503",
                "{method} {path} {status}: Retry-After"
            );
        }
        assert!(
            resolve(&doc, &operation["responses"]["409"])["description"]
                .as_str()
                .unwrap()
                .contains("idempotency_key_in_progress"),
            "{method} {path}"
        );
    }

    // Reads are not idempotent operations: no key, no engine answers.
    for (path, method) in [("/v1/charges", "get"), ("/v1/charges/{id}", "get")] {
        let operation = &doc["paths"][path][method];
        assert!(operation["responses"]["422"].is_null(), "{method} {path}");
        let parameters = operation["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            parameters.iter().all(|p| p["in"] != "header"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn oversized_bodies_are_documented_problems_with_or_without_a_key() {
    let server = Server::start();
    let doc = server.get("/openapi.json").send().await.json();
    let documented = &doc["paths"]["/v1/charges"]["post"]["responses"]["413"]["content"];
    assert!(documented["application/problem+json"].is_object());

    let big = json!({ "amount": 100, "currency": "usd", "source": "tok_visa",
                      "description": "x".repeat(3 * 1024 * 1024) });
    // The harness writes the whole body before it reads, as Python's `requests` does: the
    // server reads what arrives after its early 413, so the answer is not lost to a reset.
    for key in [None, Some("big-1")] {
        let mut call = server.post("/v1/charges").org("acme").json(&big);
        if let Some(key) = key {
            call = call.key(key);
        }
        let response = call.send().await;
        response.assert_problem(413, "payload_too_large");
    }
}

#[tokio::test]
async fn bodies_are_documented_as_json_or_forms_with_bracketed_members() {
    let server = Server::start();
    let doc = server.get("/openapi.json").send().await.json();
    for (path, schema) in [
        ("/v1/charges", "NewCharge"),
        ("/v1/refunds", "NewChargeRefund"),
        ("/v1/payouts", "NewPayout"),
    ] {
        let content = &doc["paths"][path]["post"]["requestBody"]["content"];
        for media in ["application/json", "application/x-www-form-urlencoded"] {
            let reference = format!("#/components/schemas/{schema}");
            assert_eq!(
                content[media]["schema"]["$ref"], reference,
                "{path} {media}"
            );
        }
    }
    for (path, method) in [("/v1/charges", "get"), ("/healthz", "get")] {
        let operation = doc["paths"][path][method].as_object().unwrap();
        assert!(!operation.contains_key("requestBody"), "{method} {path}");
    }
    let form = &doc["paths"]["/v1/charges"]["post"]["requestBody"]["content"]["application/x-www-form-urlencoded"];
    assert_eq!(
        form["encoding"],
        json!({ "metadata": { "style": "deepObject", "explode": true } })
    );
}

#[tokio::test]
async fn in_stripes_format_errors_are_documented_as_they_are_sent() {
    let server = Server::builder().env("ERROR_FORMAT", "stripe").start();
    let response = server.get("/openapi.json").send().await;
    assert!(!response.text().contains("application/problem+json"));
    let doc = response.json();
    for (path, method, _) in IDEMPOTENT {
        let responses = &doc["paths"][path][method]["responses"];
        assert!(
            responses["422"].is_null(),
            "{method} {path}: 422 is answered 400"
        );
        assert!(
            responses["400"]["description"]
                .as_str()
                .unwrap()
                .contains("idempotency_key_reused"),
            "{method} {path}"
        );
        for status in ["400", "409", "503"] {
            let answer = resolve(&doc, &responses[status]);
            assert_eq!(
                answer["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/StripeError",
                "{method} {path} {status}"
            );
            assert!(
                answer["headers"]["Stripe-Should-Retry"].is_object(),
                "{method} {path} {status}"
            );
        }
    }
    let kinds = &doc["components"]["schemas"]["StripeError"]["properties"]["error"]["properties"]["type"]
        ["enum"];
    assert_eq!(
        kinds,
        &json!([
            "api_error",
            "card_error",
            "idempotency_error",
            "invalid_request_error"
        ])
    );
}
