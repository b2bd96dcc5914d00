//! A fixed number of in-process requests of one scenario, for instruction-level profiling:
//!
//! ```text
//! valgrind --tool=callgrind target/release/idem-bench-profile idem-fresh 1KB 2000 [PRELOAD]
//! ```
//!
//! With `PRELOAD`, the memory store first holds that many completed records (see
//! [`idem_bench::preload`]), a tenth of them expiring over the next minute, and the loop purges
//! expired records (batches of 1 000) every 1 000 requests as a sweeper would: compare with a
//! run without it to see whether a request costs more in a full store. The loop's wall time per
//! request is printed on stderr.
//!
//! Scenarios: `bare`, `idem-fresh`, `idem-replay`, `layer-fresh` (the bare handler under
//! `IdempotencyLayer`), `peer-fresh`, `peer-replay`, `fingerprint`,
//! `sha256`; sizes as in the benches (`100B`, `1KB`, `10KB`, `1MB`). The store and router are
//! built, and replays primed, before the measured loop; subtract a run with 0 iterations to
//! leave only the loop.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use http::{HeaderValue, Method, Uri};
use idem_bench::inproc::{self, call, request};
use idem_bench::{app, body, peer, preload};
use idem_runtime::__private::fingerprint_of_request;
use sha2::{Digest, Sha256};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (scenario, size, iters, preload) = match &args[..] {
        [scenario, size, iters] => (scenario, size, iters, "0"),
        [scenario, size, iters, preload] => (scenario, size, iters, preload.as_str()),
        _ => {
            eprintln!("usage: idem-bench-profile SCENARIO SIZE ITERATIONS [PRELOAD]");
            return ExitCode::from(2);
        }
    };
    let Ok(preload) = preload.parse::<u64>() else {
        eprintln!("PRELOAD: a number");
        return ExitCode::from(2);
    };
    let Some((_, len)) = body::SIZES.iter().find(|(label, _)| label == size) else {
        eprintln!("unknown size {size}");
        return ExitCode::from(2);
    };
    let Ok(iters) = iters.parse::<u64>() else {
        eprintln!("ITERATIONS: a number");
        return ExitCode::from(2);
    };
    let body = body::json(*len);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = inproc::store(iters + preload);
    let plan = preload::Plan {
        n: preload,
        expiring: preload / 10,
        expiring_over: Duration::from_secs(60),
    };
    if let Err(e) = rt.block_on(preload::memory(&store, plan)) {
        eprintln!("{e}");
        return ExitCode::FAILURE;
    }
    let idempotency = inproc::idempotency_on(store);
    let router = app::router(idempotency.clone(), Arc::default());
    let peer_router = peer::router();
    let (router, path, replay) = match scenario.as_str() {
        "bare" => (router, app::BARE, false),
        "idem-fresh" => (router, app::IDEM, false),
        "idem-replay" => (router, app::IDEM, true),
        "layer-fresh" => (router, app::LAYER, false),
        "peer-fresh" => (peer_router, peer::PEER, false),
        "peer-replay" => (peer_router, peer::PEER, true),
        "fingerprint" => {
            let json = HeaderValue::from_static("application/json");
            let uri = Uri::from_static("/v1/orders");
            for _ in 0..iters {
                black_box(fingerprint_of_request(
                    &Method::POST,
                    &uri,
                    Some(&json),
                    black_box(&body),
                ));
            }
            return ExitCode::SUCCESS;
        }
        "sha256" => {
            for _ in 0..iters {
                black_box(Sha256::digest(black_box(&body[..])));
            }
            return ExitCode::SUCCESS;
        }
        other => {
            eprintln!("unknown scenario {other}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async {
        if replay {
            assert_eq!(
                call(&router, request(path, u64::MAX, &body)).await,
                StatusCode::CREATED
            );
        }
        let started = std::time::Instant::now();
        for i in 0..iters {
            let key = if replay { u64::MAX } else { i };
            let status = call(&router, request(path, key, &body)).await;
            assert_eq!(status, StatusCode::CREATED);
            if preload > 0 && i % 1000 == 999 {
                // What a sweeper does between requests.
                while idempotency
                    .purge_expired(1000)
                    .await
                    .is_ok_and(|n| n >= 1000)
                {}
            }
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / iters.max(1) as f64;
        eprintln!("{scenario} {size} preload={preload}: {per:.2} µs per request");
    });
    ExitCode::SUCCESS
}
