//! A fixed number of in-process requests of one scenario, for instruction-level profiling:
//!
//! ```text
//! valgrind --tool=callgrind target/release/idem-bench-profile idem-fresh 1KB 2000
//! ```
//!
//! Scenarios: `bare`, `idem-fresh`, `idem-replay`, `peer-fresh`, `peer-replay`, `fingerprint`,
//! `sha256`; sizes as in the benches (`100B`, `1KB`, `10KB`, `1MB`). The store and router are
//! built, and replays primed, before the measured loop; subtract a run with 0 iterations to
//! leave only the loop.

use std::hint::black_box;
use std::process::ExitCode;

use axum::http::StatusCode;
use http::{HeaderValue, Method, Uri};
use idem_bench::inproc::{call, idem_router, request};
use idem_bench::{app, body, peer};
use idem_runtime::Fingerprint;
use sha2::{Digest, Sha256};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scenario, size, iters] = &args[..] else {
        eprintln!("usage: idem-bench-profile SCENARIO SIZE ITERATIONS");
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
    let (router, _gate) = idem_router(iters);
    let peer_router = peer::router();
    let (router, path, replay) = match scenario.as_str() {
        "bare" => (router, app::BARE, false),
        "idem-fresh" => (router, app::IDEM, false),
        "idem-replay" => (router, app::IDEM, true),
        "peer-fresh" => (peer_router, peer::PEER, false),
        "peer-replay" => (peer_router, peer::PEER, true),
        "fingerprint" => {
            let json = HeaderValue::from_static("application/json");
            let uri = Uri::from_static("/v1/orders");
            for _ in 0..iters {
                black_box(Fingerprint::of_request(
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
        for i in 0..iters {
            let key = if replay { u64::MAX } else { i };
            let status = call(&router, request(path, key, &body)).await;
            assert_eq!(status, StatusCode::CREATED);
        }
    });
    ExitCode::SUCCESS
}
