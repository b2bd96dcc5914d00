//! Single-request rules: keys, fingerprints, replay, what is stored and what is not.

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Method, Request, StatusCode};

use crate::support::{Setup, harness, harness_with, post_json, send};

pub(crate) async fn requests_without_a_key_run_every_time(setup: Setup) {
    let h = harness(setup).await;
    for call in 1..=3 {
        let reply = h.send(post_json("/charges", None, r#"{"amount":1}"#)).await;
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.json()["call"], call);
        assert!(!reply.replayed());
    }
    assert_eq!(h.calls(), 3);
}

pub(crate) async fn safe_methods_never_touch_the_store(setup: Setup) {
    let h = harness(setup).await;
    for method in [Method::GET, Method::HEAD, Method::OPTIONS, Method::GET] {
        let request = Request::builder()
            .method(method.clone())
            .uri("/charges")
            .header("idempotency-key", "get-key")
            .header("content-type", "application/json")
            .header("x-org", "acme")
            .body(Body::from("{}"))
            .unwrap();
        let reply = h.send(request).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{method}");
        assert!(!reply.replayed(), "{method}");
    }
    assert_eq!(
        h.calls(),
        4,
        "safe methods run every time, with or without a key"
    );
    // The key was never claimed: a POST with it executes.
    let reply = h.send(post_json("/charges", Some("get-key"), "{}")).await;
    assert!(!reply.replayed());
    assert_eq!(h.calls(), 5);
}

pub(crate) async fn required_key_missing_is_400(setup: Setup) {
    let h = harness(setup).await;
    let reply = h.send(post_json("/payouts", None, "{}")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code(), "idempotency_key_missing");
    assert_eq!(h.calls(), 0);
    let reply = h.send(post_json("/payouts", Some("p1"), "{}")).await;
    assert_eq!(reply.status, StatusCode::CREATED);
}

pub(crate) async fn invalid_keys_are_400_and_do_not_run(setup: Setup) {
    let h = harness(setup).await;
    let long = "k".repeat(256);
    for bad in [
        "",
        "has space",
        "caf\u{e9}",
        long.as_str(),
        "\"unterminated",
    ] {
        let mut request = post_json("/charges", None, "{}");
        request.headers_mut().insert(
            "idempotency-key",
            axum::http::HeaderValue::from_bytes(bad.as_bytes()).unwrap(),
        );
        let reply = h.send(request).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(reply.code(), "idempotency_key_invalid", "{bad:?}");
    }
    let mut twice = post_json("/charges", Some("a"), "{}");
    twice
        .headers_mut()
        .append("idempotency-key", "b".parse().unwrap());
    let reply = h.send(twice).await;
    assert_eq!(reply.code(), "idempotency_key_invalid");
    assert_eq!(h.calls(), 0);
    // The longest valid key works.
    let reply = h
        .send(post_json("/charges", Some(&"k".repeat(255)), "{}"))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
}

pub(crate) async fn quoted_and_bare_keys_are_one_key(setup: Setup) {
    let h = harness(setup).await;
    let first = h.send(post_json("/charges", Some("\"k-1\""), "{}")).await;
    let second = h.send(post_json("/charges", Some("k-1"), "{}")).await;
    assert!(!first.replayed());
    assert!(second.replayed());
    assert_eq!(first.body, second.body);
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn replay_is_byte_identical_and_marked(setup: Setup) {
    let h = harness(setup).await;
    let body = r#"{"amount":100}"#;
    let first = h.send(post_json("/charges", Some("k"), body)).await;
    let second = h.send(post_json("/charges", Some("k"), body)).await;
    let third = h.send(post_json("/charges", Some("k"), body)).await;
    assert_eq!(h.calls(), 1, "the handler runs once");
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    for replay in [&second, &third] {
        assert!(replay.replayed());
        assert_eq!(replay.status, first.status);
        assert_eq!(replay.body, first.body);
        let values = |r: &crate::support::Reply, name: &str| -> Vec<String> {
            r.headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(values(replay, "x-multi"), ["first", "second"]);
        assert_eq!(values(replay, "x-call"), ["1"]);
        assert_eq!(
            values(replay, "content-type"),
            values(&first, "content-type")
        );
    }
}

pub(crate) async fn json_bodies_are_canonicalised(setup: Setup) {
    let h = harness(setup).await;
    h.send(post_json(
        "/charges",
        Some("k"),
        r#"{"amount":1,"currency":"usd"}"#,
    ))
    .await;
    let reply = h
        .send(post_json(
            "/charges",
            Some("k"),
            "{ \"currency\" : \"usd\",\n \"amount\": 1 }",
        ))
        .await;
    assert!(
        reply.replayed(),
        "key order and whitespace do not make a different request"
    );
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn reused_key_with_another_body_is_422(setup: Setup) {
    let h = harness(setup).await;
    h.send(post_json("/charges", Some("k"), r#"{"amount":1}"#))
        .await;
    let reply = h
        .send(post_json("/charges", Some("k"), r#"{"amount":2}"#))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply.code(), "idempotency_key_reused");
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn reused_key_on_another_query_is_422(setup: Setup) {
    let h = harness(setup).await;
    let form = |query: &str| {
        Request::post(format!("/forms/7?{query}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("idempotency-key", "k")
            .header("x-org", "acme")
            .body(Body::from("a=1"))
            .unwrap()
    };
    assert_eq!(h.send(form("x=1")).await.status, StatusCode::OK);
    assert_eq!(h.send(form("x=2")).await.code(), "idempotency_key_reused");
    assert!(h.send(form("x=1")).await.replayed());
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn extractor_rejections_are_not_stored(setup: Setup) {
    let h = harness(setup).await;
    let malformed = h.send(post_json("/charges", Some("k"), "{not json")).await;
    assert!(malformed.status.is_client_error());
    assert!(!malformed.replayed());
    assert_eq!(h.calls(), 0);
    // The client fixes the body and retries with the same key: it runs, it is not a reuse.
    let fixed = h
        .send(post_json("/charges", Some("k"), r#"{"amount":1}"#))
        .await;
    assert_eq!(fixed.status, StatusCode::CREATED);
    assert_eq!(h.calls(), 1);
    // A custom extractor's rejection is not stored either.
    let no_org = Request::post("/forms/1")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("idempotency-key", "f")
        .body(Body::from("a=1"))
        .unwrap();
    assert_eq!(h.send(no_org).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn client_errors_are_stored_and_replayed(setup: Setup) {
    let h = harness(setup).await;
    let body = r#"{"status":402}"#;
    let first = h.send(post_json("/charges", Some("k"), body)).await;
    let second = h.send(post_json("/charges", Some("k"), body)).await;
    assert_eq!(first.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(second.status, StatusCode::PAYMENT_REQUIRED);
    assert!(second.replayed());
    assert_eq!(first.body, second.body);
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn server_errors_release_the_key(setup: Setup) {
    let h = harness(setup).await;
    let body = r#"{"status":503}"#;
    let first = h.send(post_json("/charges", Some("k"), body)).await;
    assert_eq!(first.status, StatusCode::SERVICE_UNAVAILABLE);
    let second = h.send(post_json("/charges", Some("k"), body)).await;
    assert!(!second.replayed());
    assert_eq!(h.calls(), 2, "a 5xx is not stored: the retry runs again");
    // After release the key is free for a different request too.
    let other = h
        .send(post_json("/charges", Some("k"), r#"{"amount":5}"#))
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
}

pub(crate) async fn set_cookie_and_hop_by_hop_headers_are_not_replayed(setup: Setup) {
    let h = harness(setup).await;
    let first = h.send(post_json("/charges", Some("k"), "{}")).await;
    assert_eq!(
        first.headers["set-cookie"], "session=secret",
        "the first client gets its cookie"
    );
    let replay = h.send(post_json("/charges", Some("k"), "{}")).await;
    assert!(replay.replayed());
    for name in ["set-cookie", "connection", "x-hop"] {
        assert!(
            replay.headers.get(name).is_none(),
            "{name} must not be replayed"
        );
    }
}

pub(crate) async fn oversized_body_is_413_and_runs_nothing(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone().layer(DefaultBodyLimit::max(1024));
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(2048));
    let reply = send(&router, post_json("/charges", Some("k"), &big)).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code(), "payload_too_large");
    assert_eq!(h.calls(), 0);
    // Nothing was claimed: the key still works for a request within the limit.
    let reply = send(&router, post_json("/charges", Some("k"), "{}")).await;
    assert_eq!(reply.status, StatusCode::CREATED);
}

pub(crate) async fn unresolved_scope_is_401(setup: Setup) {
    let h = harness(setup).await;
    let mut request = post_json("/charges", Some("k"), "{}");
    request.headers_mut().remove("x-org");
    let reply = h.send(request).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.code(), "idempotency_scope_unresolved");
    assert_eq!(h.calls(), 0);
}

pub(crate) async fn scopes_isolate_tenants(setup: Setup) {
    let h = harness(setup).await;
    let as_org = |org: &str| {
        let mut request = post_json("/charges", Some("shared-key"), "{}");
        request.headers_mut().insert("x-org", org.parse().unwrap());
        request
    };
    assert!(!h.send(as_org("acme")).await.replayed());
    assert!(!h.send(as_org("globex")).await.replayed());
    assert!(h.send(as_org("globex")).await.replayed());
    assert_eq!(h.calls(), 2, "one execution per tenant");
}

pub(crate) async fn endpoints_do_not_share_keys(setup: Setup) {
    let h = harness(setup).await;
    let text = |uri: &str| {
        Request::post(uri)
            .header("idempotency-key", "k")
            .body(Body::from("hello"))
            .unwrap()
    };
    assert!(!h.send(text("/text")).await.replayed());
    assert!(!h.send(text("/text-twin")).await.replayed());
    assert!(h.send(text("/text-twin")).await.replayed());
    assert_eq!(h.calls(), 2);
}

pub(crate) async fn custom_header_name(setup: Setup) {
    let name = HeaderName::from_static("x-idempotency-key");
    let h = harness_with(setup, |b| b.header_name(name.clone())).await;
    let request = || {
        Request::post("/text")
            .header("x-idempotency-key", "k")
            .body(Body::from("a"))
            .unwrap()
    };
    h.send(request()).await;
    assert!(h.send(request()).await.replayed());
    // The default header is now just another header.
    let default = Request::post("/text")
        .header("idempotency-key", "k")
        .body(Body::from("a"))
        .unwrap();
    assert!(!h.send(default).await.replayed());
    assert_eq!(h.calls(), 2);
}

pub(crate) async fn every_extractor_kind_works(setup: Setup) {
    let h = harness(setup).await;
    let form = || {
        Request::post("/forms/42?q=1")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("idempotency-key", "form")
            .header("x-org", "acme")
            .body(Body::from("name=ada"))
            .unwrap()
    };
    let first = h.send(form()).await;
    assert_eq!(
        std::str::from_utf8(&first.body).unwrap(),
        r#"1 42 acme {"q": "1"} {"name": "ada"}"#
    );
    assert!(h.send(form()).await.replayed());
    let bytes = || {
        Request::post("/bytes")
            .header("idempotency-key", "b")
            .body(Body::from(vec![0u8, 255, 1]))
            .unwrap()
    };
    assert_eq!(&h.send(bytes()).await.body[..], b"2 3");
    assert!(h.send(bytes()).await.replayed());
    let text = || {
        Request::post("/text")
            .header("idempotency-key", "t")
            .body(Body::from("hi"))
            .unwrap()
    };
    assert_eq!(&h.send(text()).await.body[..], b"3 hi");
    assert!(h.send(text()).await.replayed());
    assert_eq!(h.calls(), 3);
}
