//! The retry loop over real TCP, against a scripted loopback server that answers each request
//! with the next scripted reply (or closes the connection, or never answers) and records what
//! it received. The payments example's end-to-end tests (examples/tests/client.rs) prove the
//! same against the real server.

#[path = "retries/scripted.rs"]
mod scripted;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_client::reqwest::{self, Body, StatusCode};
use idem_client::{
    Client, DEFAULT_MAX_RESPONSE_BYTES, Error, IdempotencyKey, RetryNote, RetryPolicy, RetryReason,
};
use scripted::{Reply, Scripted};

/// Fast retries, and every note kept.
fn client(policy: RetryPolicy) -> (Client, Arc<Mutex<Vec<RetryNote>>>) {
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = notes.clone();
    let client = Client::builder(reqwest::Client::new())
        .policy(
            policy
                .initial_backoff(Duration::from_millis(5))
                .max_backoff(Duration::from_millis(20)),
        )
        .on_retry(move |note| log.lock().unwrap().push(note.clone()))
        .build();
    (client, notes)
}

const IN_PROGRESS: &str = r#"{"status":409,"code":"idempotency_key_in_progress"}"#;
const PROBLEM: &[(&str, &str)] = &[("content-type", "application/problem+json")];

#[tokio::test]
async fn every_attempt_of_an_operation_carries_one_key_until_the_answer_arrives() {
    let server = Scripted::start(vec![
        Reply::Close,
        Reply::Answer(502, &[], "bad gateway"),
        Reply::Answer(409, &[("retry-after", "0")], IN_PROGRESS),
        Reply::Answer(503, &[("retry-after", "0")], ""),
        Reply::Answer(201, &[("idempotent-replayed", "true")], r#"{"id":"ch_1"}"#),
    ])
    .await;
    let (client, notes) = client(RetryPolicy::default().max_attempts(5));
    let outcome = client
        .send(client.post(&server.url).body(r#"{"amount":1}"#))
        .await
        .unwrap();

    assert_eq!(outcome.status(), StatusCode::CREATED);
    assert!(outcome.is_success());
    assert!(outcome.replayed());
    assert_eq!(outcome.headers()["idempotent-replayed"], "true");
    assert_eq!(outcome.attempts(), 5);
    assert!(!outcome.retries_exhausted());
    assert_eq!(outcome.text(), r#"{"id":"ch_1"}"#);
    assert_eq!(outcome.body().as_ref(), br#"{"id":"ch_1"}"#);
    let key = outcome.key().expect("a POST has a key").as_str().to_owned();
    uuid_v4(&key);
    let received = server.received();
    assert_eq!(received.len(), 5);
    for request in &received {
        assert_eq!(request.header("idempotency-key"), Some(key.as_str()));
        assert_eq!(
            request
                .headers
                .iter()
                .filter(|(n, _)| n == "idempotency-key")
                .count(),
            1
        );
    }

    let notes = notes.lock().unwrap().clone();
    let reasons: Vec<_> = notes
        .iter()
        .map(|n| (n.attempt, n.from_retry_after))
        .collect();
    assert_eq!(reasons, [(1, false), (2, false), (3, true), (4, true)]);
    assert!(matches!(notes[0].reason, RetryReason::Connection(_)));
    assert_eq!(
        notes[2].reason,
        RetryReason::Status {
            status: StatusCode::CONFLICT,
            code: Some("idempotency_key_in_progress".into())
        }
    );
    assert_eq!(notes[3].delay, Duration::ZERO, "Retry-After: 0 is honoured");
    assert!(notes.iter().all(|n| n.delay <= Duration::from_millis(20)));
    assert_eq!(outcome.into_body().as_ref(), br#"{"id":"ch_1"}"#);
}

fn uuid_v4(key: &str) {
    let parts: Vec<_> = key.split('-').map(str::len).collect();
    assert_eq!(parts, [8, 4, 4, 4, 12], "{key}");
    assert_eq!(&key[14..15], "4", "version 4: {key}");
}

#[tokio::test]
async fn client_errors_are_answered_at_once() {
    for status in [400, 401, 403, 404, 409, 413, 422] {
        let body = r#"{"code":"idempotency_key_reused"}"#;
        let server = Scripted::start(vec![
            Reply::Answer(status, PROBLEM, body),
            Reply::Answer(201, &[], "{}"),
        ])
        .await;
        let (client, notes) = client(RetryPolicy::default());
        let outcome = client
            .send(client.post(&server.url).body("{}"))
            .await
            .unwrap();
        assert_eq!(outcome.status().as_u16(), status);
        assert!(!outcome.is_success());
        assert_eq!(outcome.attempts(), 1, "{status} is not retried");
        assert_eq!(
            outcome.problem_code().as_deref(),
            Some("idempotency_key_reused")
        );
        assert_eq!(server.received().len(), 1, "{status}");
        assert!(notes.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn attempts_are_bounded_and_the_last_answer_is_returned() {
    let server = Scripted::start(vec![Reply::Answer(503, &[], "down"); 5]).await;
    let (client, notes) = client(RetryPolicy::default().max_attempts(3));
    let outcome = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap();
    assert_eq!(outcome.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(outcome.attempts(), 3);
    assert!(outcome.retries_exhausted());
    assert_eq!(server.received().len(), 3);
    assert_eq!(
        notes.lock().unwrap().len(),
        2,
        "a note per retry, none after the last"
    );
}

#[tokio::test]
async fn no_wait_starts_that_would_end_past_the_total_time() {
    // The server asks for 5 s; the operation may take 300 ms: the client stops instead of
    // sleeping past its budget.
    let server = Scripted::start(vec![Reply::Answer(503, &[("retry-after", "5")], "")]).await;
    let policy = RetryPolicy::default().max_elapsed(Duration::from_millis(300));
    let (client, _) = client(policy);
    let outcome = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap();
    assert_eq!(outcome.attempts(), 1);
    assert!(outcome.retries_exhausted());
}

#[tokio::test]
async fn internal_errors_are_retried_unless_turned_off() {
    for (retry, attempts) in [(true, 2), (false, 1)] {
        let server = Scripted::start(vec![
            Reply::Answer(500, &[], "oops"),
            Reply::Answer(200, &[], "ok"),
        ])
        .await;
        let (client, _) = client(RetryPolicy::default().retry_internal_errors(retry));
        let outcome = client
            .send(client.post(&server.url).body("{}"))
            .await
            .unwrap();
        assert_eq!(outcome.attempts(), attempts, "retry 500: {retry}");
    }
}

#[tokio::test]
async fn a_hung_attempt_times_out_and_is_retried_with_the_same_key() {
    let server = Scripted::start(vec![Reply::Hang, Reply::Answer(201, &[], "{}")]).await;
    let policy = RetryPolicy::default().attempt_timeout(Duration::from_millis(200));
    let (client, notes) = client(policy);
    let outcome = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap();
    assert_eq!(outcome.status(), StatusCode::CREATED);
    assert_eq!(outcome.attempts(), 2);
    let received = server.received();
    assert_eq!(
        received[0].header("idempotency-key"),
        received[1].header("idempotency-key")
    );
    assert_eq!(
        notes.lock().unwrap()[0].reason,
        RetryReason::Timeout(Duration::from_millis(200))
    );
}

#[tokio::test]
async fn without_any_answer_the_error_names_the_key_to_retry_with() {
    let server = Scripted::start(vec![Reply::Close, Reply::Close]).await;
    let (client, _) = client(RetryPolicy::default().max_attempts(2));
    let error = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::NoResponse { attempts: 2, .. }),
        "{error:?}"
    );
    assert_eq!(error.attempts(), 2);
    let sent = server.received()[0]
        .header("idempotency-key")
        .unwrap()
        .to_owned();
    assert_eq!(error.key().map(IdempotencyKey::as_str), Some(sent.as_str()));
}

#[tokio::test]
async fn safe_methods_are_retried_without_a_key() {
    let server = Scripted::start(vec![
        Reply::Answer(503, &[], ""),
        Reply::Answer(200, &[], "[]"),
    ])
    .await;
    let (client, _) = client(RetryPolicy::default());
    let key = IdempotencyKey::new("ignored-for-get").unwrap();
    let outcome = client
        .send_with_key(client.get(&server.url), key)
        .await
        .unwrap();
    assert_eq!(outcome.attempts(), 2);
    assert!(outcome.key().is_none());
    for request in server.received() {
        assert_eq!(request.method, "GET");
        assert_eq!(request.header("idempotency-key"), None);
    }
}

#[tokio::test]
async fn the_callers_key_and_header_name_are_used() {
    let server = Scripted::start(vec![
        Reply::Answer(502, &[], ""),
        Reply::Answer(201, &[], "{}"),
        Reply::Answer(201, &[], "{}"),
    ])
    .await;
    let client = Client::builder(reqwest::Client::new())
        .header_name(reqwest::header::HeaderName::from_static(
            "x-idempotency-key",
        ))
        .policy(RetryPolicy::default().initial_backoff(Duration::from_millis(1)))
        .build();
    let key = IdempotencyKey::new("order-1001").unwrap();
    let outcome = client
        .send_with_key(client.put(&server.url).body("{}"), key)
        .await
        .unwrap();
    assert_eq!(outcome.key().unwrap().as_str(), "order-1001");
    // A key already on the request is the operation's key.
    let request = client
        .delete(&server.url)
        .header("x-idempotency-key", "order-1002");
    let outcome = client.send(request).await.unwrap();
    assert_eq!(outcome.key().unwrap().as_str(), "order-1002");

    let keys: Vec<_> = server
        .received()
        .iter()
        .map(|r| {
            (
                r.header("x-idempotency-key").map(str::to_owned),
                r.header("idempotency-key").is_some(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            (Some("order-1001".to_owned()), false),
            (Some("order-1001".to_owned()), false),
            (Some("order-1002".to_owned()), false),
        ]
    );
}

#[tokio::test]
async fn what_cannot_be_sent_safely_is_refused_before_sending() {
    let server = Scripted::start(vec![Reply::Answer(201, &[], "{}"); 3]).await;
    let (client, _) = client(RetryPolicy::default());

    // A stream cannot be sent twice: refused, not sent once.
    let stream = client
        .post(&server.url)
        .body(Body::wrap(String::from("{}")));
    let error = client.send(stream).await.unwrap_err();
    assert!(matches!(error, Error::BodyNotReplayable), "{error:?}");
    assert_eq!(error.attempts(), 0);
    assert!(error.to_string().contains("stream"), "{error}");

    // A key the server would refuse.
    let bad = client
        .post(&server.url)
        .header("idempotency-key", "two words");
    assert!(matches!(client.send(bad).await, Err(Error::InvalidKey(_))));
    let twice = client
        .post(&server.url)
        .header("idempotency-key", "a")
        .header("idempotency-key", "b");
    assert!(matches!(
        client.send(twice).await,
        Err(Error::InvalidKey(_))
    ));

    assert!(server.received().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn a_response_over_the_limit_is_an_error_not_a_retry() {
    let body = "x".repeat(64).leak();
    let server = Scripted::start(vec![Reply::Answer(200, &[], body); 2]).await;
    let client = Client::builder(reqwest::Client::new())
        .max_response_bytes(16)
        .build();
    let error = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::ResponseTooLarge {
                limit: 16,
                attempts: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.attempts(), 1);
    assert!(error.key().is_some());
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn a_response_of_exactly_the_limit_is_read_with_or_without_its_length() {
    const SIXTEEN: &str = "0123456789abcdef";
    let server = Scripted::start(vec![
        Reply::Answer(200, &[], SIXTEEN),
        Reply::Chunked(&["0123456789", "abcdef"]),
        Reply::Chunked(&["0123456789", "abcdefg"]),
    ])
    .await;
    let client = Client::builder(reqwest::Client::new())
        .max_response_bytes(SIXTEEN.len())
        .build();
    for framing in ["Content-Length", "chunked"] {
        let outcome = client
            .send(client.post(&server.url).body("{}"))
            .await
            .unwrap_or_else(|e| panic!("{framing}: {e:?}"));
        assert_eq!(outcome.text(), SIXTEEN, "{framing}");
    }
    // One byte over, found only as it arrives.
    let error = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::ResponseTooLarge { limit: 16, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_default_limit_is_8_mib() {
    assert_eq!(DEFAULT_MAX_RESPONSE_BYTES, 8_388_608, "as documented");
    let whole: &'static str = "x".repeat(DEFAULT_MAX_RESPONSE_BYTES).leak();
    let over: &'static str = "x".repeat(DEFAULT_MAX_RESPONSE_BYTES + 1).leak();
    let server = Scripted::start(vec![
        Reply::Answer(200, &[], whole),
        Reply::Answer(200, &[], over),
    ])
    .await;
    let client = Client::new(reqwest::Client::new());
    let outcome = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap();
    assert_eq!(outcome.body().len(), DEFAULT_MAX_RESPONSE_BYTES);
    let error = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::ResponseTooLarge { limit, .. } if limit == DEFAULT_MAX_RESPONSE_BYTES),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_request_reqwest_refuses_to_send_is_not_retried() {
    let (client, notes) = client(RetryPolicy::default());
    // The URL parses, so the request builds; reqwest refuses its scheme when it is sent.
    let error = client
        .send(client.post("ftp://127.0.0.1:9/op").body("{}"))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Build(_)), "{error:?}");
    assert_eq!(error.attempts(), 0);
    assert!(notes.lock().unwrap().is_empty());
}

#[tokio::test]
async fn too_many_redirects_end_the_operation_without_a_retry() {
    let to_self: &[(&str, &str)] = &[("location", "/op")];
    let server = Scripted::start(vec![
        Reply::Answer(307, to_self, ""),
        Reply::Answer(307, to_self, ""),
        Reply::Answer(201, &[], "{}"),
    ])
    .await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::limited(1))
        .build()
        .unwrap();
    let client = Client::new(http);
    let error = client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap_err();
    // The same request would be redirected the same way: no second attempt.
    assert!(
        matches!(error, Error::NoResponse { attempts: 1, .. }),
        "{error:?}"
    );
    assert_eq!(
        server.received().len(),
        2,
        "the request and its one redirect"
    );
}

#[tokio::test]
async fn a_lost_connection_is_explained_by_its_causes_each_once() {
    let server = Scripted::start(vec![Reply::Close, Reply::Answer(201, &[], "{}")]).await;
    let (client, notes) = client(RetryPolicy::default());
    client
        .send(client.post(&server.url).body("{}"))
        .await
        .unwrap();
    let notes = notes.lock().unwrap().clone();
    let RetryReason::Connection(why) = &notes[0].reason else {
        panic!("{:?}", notes[0].reason);
    };
    let causes: Vec<&str> = why.split(": ").collect();
    assert!(causes.len() > 1, "the error and what caused it: {why}");
    assert!(causes[0].contains(&server.url), "{why}");
    for (i, cause) in causes.iter().enumerate() {
        assert!(!causes[..i].contains(cause), "{cause:?} twice in {why}");
    }
}

#[tokio::test]
async fn the_client_keeps_what_it_was_built_with() {
    let server = Scripted::start(vec![Reply::Answer(200, &[], "{}")]).await;
    let mut tenant = reqwest::header::HeaderMap::new();
    tenant.insert("x-tenant", "acme".parse().unwrap());
    let http = reqwest::Client::builder()
        .default_headers(tenant)
        .build()
        .unwrap();
    let policy = RetryPolicy::default().max_attempts(9);
    let client = Client::builder(http).policy(policy.clone()).build();
    assert_eq!(client.policy(), &policy);
    assert_eq!(client.header_name(), "idempotency-key");
    client.http().get(&server.url).send().await.unwrap();
    assert_eq!(server.received()[0].header("x-tenant"), Some("acme"));
}
