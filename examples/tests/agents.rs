//! The agents service's HTTP contract, end to end over TCP against the real binary: one
//! idempotency layer over `/api`, keys in `X-Idempotency-Key` per user, on SQLite and PostgreSQL.

mod common;

use common::{Call, PgDatabase, Server, ServerBuilder, resolve};
use serde_json::{Value, json};
use tokio::task::JoinSet;

fn agents() -> ServerBuilder {
    Server::builder().bin(env!("CARGO_BIN_EXE_agents"))
}

/// Authenticates as agent `name`.
fn as_agent(call: Call, name: &str) -> Call {
    call.header("Authorization", &format!("Bearer agent_{name}"))
}

fn act(server: &Server, agent: &str, dweller: &str, key: Option<&str>, action: &str) -> Call {
    let call = as_agent(server.post(&format!("/api/dwellers/{dweller}/act")), agent);
    with_key(call, key).json(&json!({ "action": action }))
}

fn with_key(call: Call, key: Option<&str>) -> Call {
    match key {
        Some(key) => call.header("X-Idempotency-Key", key),
        None => call,
    }
}

async fn dweller(server: &Server, id: &str) -> Value {
    let reply = as_agent(server.get(&format!("/api/dwellers/{id}")), "ada")
        .send()
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// Every route, its retries and its reads.
async fn contract(server: &Server) {
    let first = act(server, "ada", "d1", Some("act-1"), "wave").send().await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.is_replay());
    let action = first.json();
    assert!(
        action["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("act_"))
    );
    assert_eq!(
        (&action["dweller"], &action["action"], &action["seq"]),
        (&json!("d1"), &json!("wave"), &json!(1))
    );
    let retry = act(server, "ada", "d1", Some("act-1"), "wave").send().await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "byte for byte");
    assert_eq!(retry.replayable_headers(), first.replayable_headers());
    let second = act(server, "ada", "d1", Some("act-2"), "sit").send().await;
    assert_eq!(second.json()["seq"], 2);
    // Without a key an action runs every time.
    let keyless = act(server, "ada", "d1", None, "sit").send().await;
    assert_eq!(keyless.json()["seq"], 3);

    let beat = |key| {
        with_key(
            as_agent(server.post("/api/dwellers/d1/heartbeat"), "ada"),
            key,
        )
    };
    let first = beat(Some("beat-1")).send().await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json(), json!({ "dweller": "d1", "beats": 1 }));
    let retry = beat(Some("beat-1")).send().await;
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body);
    assert_eq!(beat(Some("beat-2")).send().await.json()["beats"], 2);

    let story = json!({ "title": "First light", "body": "d1 waved." });
    let post = || {
        let call = as_agent(server.post("/api/stories"), "ada");
        with_key(call, Some("story-1")).json(&story)
    };
    let created = post().send().await;
    assert_eq!(created.status, 201, "{}", created.text());
    let doc = created.json();
    assert!(
        doc["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("story_"))
    );
    assert_eq!(
        (&doc["title"], &doc["body"]),
        (&story["title"], &story["body"])
    );
    assert!(post().send().await.is_replay());

    assert_eq!(
        dweller(server, "d1").await,
        json!({ "id": "d1", "actions": 3, "beats": 2 }),
        "one write per key, however many retries"
    );
    assert_eq!(
        dweller(server, "nobody").await,
        json!({ "id": "nobody", "actions": 0, "beats": 0 })
    );
    let stories = as_agent(server.get("/api/stories"), "bob").send().await;
    assert_eq!(stories.status, 200);
    assert_eq!(stories.json(), json!({ "data": [doc] }));
    let health = server.get("/healthz").send().await;
    assert_eq!(health.status, 200);
}

#[tokio::test]
async fn every_route_keeps_its_contract_on_sqlite() {
    let server = agents().start();
    contract(&server).await;
}

#[tokio::test]
async fn every_route_keeps_its_contract_on_postgres() {
    let database = PgDatabase::create().await;
    let server = agents().env("DATABASE_URL", &database.url).start();
    contract(&server).await;
}

#[tokio::test]
async fn requests_without_a_valid_token_are_401_and_not_stored() {
    let server = agents().start();
    let bad = [
        None,
        Some("Bearer agent_"),
        Some("Bearer sk_test_ada"),
        Some("Basic YWdlbnRfYWRhOg=="),
    ];
    for authorization in bad {
        let mut call = server.post("/api/dwellers/d1/act");
        if let Some(value) = authorization {
            call = call.header("Authorization", value);
        }
        let call = with_key(call, Some("k")).json(&json!({ "action": "wave" }));
        let reply = call.send().await;
        reply.assert_problem(401, "unauthorized");
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
        server
            .get("/api/stories")
            .send()
            .await
            .assert_problem(401, "unauthorized");
    }
    let ok = act(&server, "ada", "d1", Some("k"), "wave").send().await;
    assert_eq!(ok.status, 201);
    assert!(!ok.is_replay(), "the 401s were not stored");
}

#[tokio::test]
async fn keys_are_per_user_and_reused_keys_are_422() {
    let server = agents().start();
    let ada = act(&server, "ada", "d1", Some("k"), "wave").send().await;
    let bob = act(&server, "bob", "d1", Some("k"), "wave").send().await;
    assert!(
        !ada.is_replay() && !bob.is_replay(),
        "one key space per user"
    );
    assert_eq!(ada.json()["seq"], 1);
    assert_eq!(bob.json()["seq"], 2, "both acted on the dweller");
    for other in [
        act(&server, "ada", "d1", Some("k"), "dance"),
        act(&server, "ada", "d2", Some("k"), "wave"),
    ] {
        other
            .send()
            .await
            .assert_problem(422, "idempotency_key_reused");
    }
    // Only `X-Idempotency-Key` carries keys: `Idempotency-Key` is just a header here.
    for _ in 0..2 {
        let plain = act(&server, "ada", "d3", None, "wave")
            .header("Idempotency-Key", "k2")
            .send()
            .await;
        assert!(!plain.is_replay());
    }
    assert_eq!(dweller(&server, "d3").await["actions"], 2);
}

#[tokio::test]
async fn refused_bodies_are_problems_and_free_the_key() {
    let server = agents().start();
    let call =
        as_agent(server.post("/api/dwellers/d1/act"), "ada").header("X-Idempotency-Key", "k");
    let malformed = call
        .clone()
        .header("Content-Type", "application/json")
        .raw_body("{\"action\": ")
        .send()
        .await;
    malformed.assert_problem(400, "invalid_json");
    let empty = act(&server, "ada", "d1", Some("k"), " ").send().await;
    empty.assert_problem(400, "invalid_request");
    let bad_id = act(&server, "ada", "d.1", Some("k2"), "wave").send().await;
    bad_id.assert_problem(400, "invalid_request");
    // The client fixes the body and retries with the same key: it runs once.
    let fixed = act(&server, "ada", "d1", Some("k"), "wave").send().await;
    assert_eq!(fixed.status, 201, "{}", fixed.text());
    assert!(!fixed.is_replay());
    assert_eq!(fixed.json()["seq"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_duplicate_is_409_request_is_being_processed() {
    let server = agents().env("SLOW_MS", "1500").start();
    let request = act(&server, "ada", "d1", Some("slow-1"), "slow");
    let first = request.clone().start().await;
    // The first is on the wire before the duplicate; it sleeps SLOW_MS before it writes.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let duplicate = request.clone().send().await;
    let doc = duplicate.assert_problem(409, "idempotency_key_in_progress");
    let detail = doc["detail"].as_str().unwrap();
    assert!(detail.contains("Request is being processed"), "{detail}");
    assert!(duplicate.header("retry-after").is_some());
    let first = first.response().await;
    assert_eq!(first.status, 201);
    let retry = request.send().await;
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body);
    assert_eq!(dweller(&server, "d1").await["actions"], 1);
}

/// A burst of duplicates of one slow action, and distinct actions on the same dweller at the
/// same time: each key writes once, and the dweller's counts are consecutive.
async fn concurrent_actions_write_once_with_consistent_seqs(server: &Server) {
    let mut burst = JoinSet::new();
    for _ in 0..12 {
        let call = act(server, "ada", "d1", Some("burst"), "slow");
        burst.spawn(async move { (0, call.send().await) });
    }
    let mut distinct = JoinSet::new();
    for i in 0..6 {
        let call = act(server, "ada", "d1", Some(&format!("other-{i}")), "wave");
        distinct.spawn(async move { call.send().await });
    }
    let burst = common::settle_burst(burst, 1).await;
    let mut seqs = vec![serde_json::from_slice::<Value>(&burst.body).unwrap()["seq"].clone()];
    while let Some(reply) = distinct.join_next().await {
        let reply = reply.unwrap();
        assert_eq!(reply.status, 201, "{}", reply.text());
        seqs.push(reply.json()["seq"].clone());
    }
    let mut seqs: Vec<i64> = seqs.iter().map(|s| s.as_i64().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=7).collect::<Vec<_>>(),
        "one row per key, numbered 1..=7"
    );
    assert_eq!(dweller(server, "d1").await["actions"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_act_once_on_sqlite() {
    let server = agents().env("SLOW_MS", "400").start();
    concurrent_actions_write_once_with_consistent_seqs(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_act_once_on_postgres() {
    let database = PgDatabase::create().await;
    let server = agents()
        .env("SLOW_MS", "400")
        .env("DATABASE_URL", &database.url)
        .start();
    concurrent_actions_write_once_with_consistent_seqs(&server).await;
}

#[tokio::test]
async fn the_openapi_document_gives_the_layers_routes_its_key_and_answers() {
    let server = agents().start();
    let response = server.get("/openapi.json").send().await;
    assert_eq!(response.status, 200, "no token needed");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let doc = response.json();
    let header_parameters = |path: &str, method: &str| -> Vec<Value> {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is documented");
        let parameters = operation["parameters"].as_array().cloned();
        (parameters.unwrap_or_default().iter())
            .map(|p| resolve(&doc, p).clone())
            .filter(|p| p["in"] == "header")
            .collect()
    };

    // Behind the layer: every POST under /api.
    for path in [
        "/api/dwellers/{id}/act",
        "/api/dwellers/{id}/heartbeat",
        "/api/stories",
    ] {
        let key = header_parameters(path, "post");
        assert_eq!(key.len(), 1, "POST {path}: {key:?}");
        assert_eq!(key[0]["name"], "X-Idempotency-Key", "POST {path}");
        assert_eq!(
            key[0]["required"], false,
            "POST {path}: the key is optional"
        );
        let responses = &doc["paths"][path]["post"]["responses"];
        for status in ["400", "409", "422", "503"] {
            let answer = resolve(&doc, &responses[status]);
            assert_eq!(
                answer["content"]["application/problem+json"]["schema"]["$ref"],
                "#/components/schemas/Problem",
                "POST {path} {status}"
            );
        }
        let in_progress = resolve(&doc, &responses["409"]);
        assert!(in_progress["headers"]["Retry-After"].is_object());
        assert!(
            (in_progress["description"].as_str().unwrap()).contains("idempotency_key_in_progress")
        );
    }
    // Reads and the health check: no key, no engine answers.
    for (path, method) in [
        ("/api/dwellers/{id}", "get"),
        ("/api/stories", "get"),
        ("/healthz", "get"),
    ] {
        assert!(
            header_parameters(path, method).is_empty(),
            "{method} {path}"
        );
        let responses = &doc["paths"][path][method]["responses"];
        for status in ["409", "422"] {
            assert!(responses[status].is_null(), "{method} {path} {status}");
        }
    }
    // Described once, referenced from each operation.
    let parameters = doc["components"]["parameters"].as_object().unwrap();
    assert_eq!(parameters["IdempotencyKey"]["name"], "X-Idempotency-Key");
    let act = &doc["paths"]["/api/dwellers/{id}/act"]["post"];
    assert_eq!(
        act["responses"]["422"]["$ref"],
        "#/components/responses/IdempotencyKeyReused"
    );
}
