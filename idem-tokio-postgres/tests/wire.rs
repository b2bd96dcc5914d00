//! Atomic mode on the wire, through a proxy that frames PostgreSQL's protocol: a fresh request
//! costs the bare handler's round trips plus two (the claim rides with the `BEGIN`, the
//! completion with the `COMMIT`), and a connection cut between pipelined messages commits
//! nothing half: the retry runs once, or replays what committed.

#[path = "support/app.rs"]
mod app;
mod support;

use std::time::Duration;

use app::Harness;
use axum::http::StatusCode;
use serde_json::json;
use support::proxy::{Cut, Proxy, When, server_of};
use support::{Schemas, pool_at, url};

/// A harness whose store and handlers reach PostgreSQL through a proxy, on a pool of `max`.
async fn behind_proxy(schemas: &Schemas, max: usize) -> (Harness, Proxy) {
    let proxy = Proxy::start(server_of(&url()).await).await;
    let pool = pool_at(&proxy.url(&url()), max);
    (Harness::on(schemas, pool).await, proxy)
}

/// Round trips and statements per fresh request, on one pooled connection whose statements the
/// warm-up prepared, so the counts are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_atomic_request_costs_the_bare_round_trips_plus_two() {
    let schemas = Schemas::default();
    let (h, proxy) = behind_proxy(&schemas, 1).await;
    const N: u64 = 5;
    let mut per_request = Vec::new();
    for path in ["/bare", "/one", "/two"] {
        let warm = h.send(path, &format!("warm{path}"), json!({})).await;
        assert_eq!(warm.0, StatusCode::CREATED, "{path}: {:?}", warm.1);
        let before = proxy.counts();
        for i in 0..N {
            let reply = h.send(path, &format!("{path}-{i}"), json!({})).await;
            assert_eq!(reply.0, StatusCode::CREATED);
        }
        let spent = proxy.counts().since(before);
        assert_eq!(spent.connections, 0, "{path}: one warm connection");
        // Every statement was prepared by the warm-up, once on the connection, and every
        // parameter goes in binary.
        assert_eq!(
            (spent.parses, spent.text_binds),
            (0, 0),
            "{path}: {spent:?}"
        );
        assert_eq!(spent.round_trips % N, 0, "{path}: {spent:?}");
        assert_eq!(spent.statements % N, 0, "{path}: {spent:?}");
        per_request.push((path, spent.round_trips / N, spent.statements / N));
    }
    eprintln!("(path, round trips, statements) per fresh request: {per_request:?}");
    // The warm-up of each path prepared its statements once, with parameters bound in binary.
    assert_eq!(proxy.counts().text_binds, 0);
    assert_eq!(
        per_request,
        [
            // The INSERT.
            ("/bare", 1, 1),
            // BEGIN with the claim; the INSERT; the completion with COMMIT.
            ("/one", 3, 5),
            // The claim; BEGIN (and its timeouts) with the INSERT; the completion with COMMIT.
            ("/two", 3, 5),
        ]
    );
}

/// Cuts the connection at `BEGIN` or `COMMIT`, before the server gets it or with its answer
/// lost, in one commit and in two. Nothing commits half, and the key's effect happens once:
/// the retry runs (nothing had committed) or replays (everything had).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_between_pipelined_messages_commits_nothing_half() {
    let schemas = Schemas::default();
    let (h, proxy) = behind_proxy(&schemas, 2).await;
    let cases = [
        ("/one", "BEGIN", When::Before, false),
        ("/one", "BEGIN", When::AnswerLost, false),
        ("/one", "COMMIT", When::Before, false),
        ("/one", "COMMIT", When::AnswerLost, true),
        ("/two", "BEGIN", When::Before, false),
        ("/two", "BEGIN", When::AnswerLost, false),
        ("/two", "COMMIT", When::Before, false),
        ("/two", "COMMIT", When::AnswerLost, true),
    ];
    for (i, (path, prefix, when, committed)) in cases.into_iter().enumerate() {
        let key = format!("cut-{i}");
        let case = format!("{path} {prefix} {when:?}");
        let runs = h.runs();
        proxy.cut(Cut { prefix, when });
        let cut = h.send(path, &key, json!({ "name": key })).await;
        assert!(
            cut.0.is_server_error(),
            "{case}: the cut request fails: {:?}",
            cut
        );
        let written = h.names().await.iter().filter(|n| **n == key).count();
        assert_eq!(written, usize::from(committed), "{case}: all or nothing");
        let body = json!({ "name": key });
        let retry = h.settle(path, &key, body, Duration::from_secs(10)).await;
        assert_eq!(retry.0, StatusCode::CREATED, "{case}: {retry:?}");
        assert_eq!(retry.2, committed, "{case}: replayed only what committed");
        let written = h.names().await.iter().filter(|n| **n == key).count();
        assert_eq!(written, 1, "{case}: the effect happened once");
        // The handler ran once more for the retry, unless the cut came before it could run
        // (the claim's own BEGIN) or after its effect committed.
        let before_the_handler = path == "/one" && prefix == "BEGIN";
        let expected = if committed || before_the_handler {
            1
        } else {
            2
        };
        assert_eq!(h.runs() - runs, expected, "{case}");
        eprintln!("{case}: cut answered {}, retry {}", cut.0, retry.0);
    }
    assert_eq!(h.records().await.0, 0, "no claim left in flight");
}
