//! A response larger than the replay limit streams to the client as the handler produces it:
//! 100 MB go through each HTTP face while the process holds a few megabytes more than before,
//! and the retry gets the documented `409 idempotency_response_too_large`.
//!
//! One test in this binary: it measures the process's peak resident memory (Linux's
//! `VmHWM`, reset through `/proc/self/clear_refs`), which nothing else may move meanwhile.
//!
//! ```text
//! cargo test -p idem-tests --test streaming
//! ```

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::response::Response;
use axum::routing::post;
use http_body::Frame;
use http_body_util::BodyExt;
use idem_runtime::IdempotencyLayer;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, idempotent};
use serde_json::Value;
use tower::ServiceExt;

/// The process's resident memory now and at its peak since the last reset, in bytes.
fn memory() -> (usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> usize {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Makes the peak the current resident memory.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 1_600; // 100 MiB
static DATA: [u8; CHUNK] = [b'x'; CHUNK];

/// An export of `left` chunks, produced as the client reads it, allocating nothing per chunk;
/// it fails instead of ending when `fails` is set.
struct Export {
    left: usize,
    fails: bool,
}

impl http_body::Body for Export {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(
                self.fails
                    .then(|| Err(std::io::Error::other("the export's source failed"))),
            );
        }
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&DATA)))))
    }
}

/// 100 MiB, or 4 MiB and then a failure for the `broken` query.
fn export_response(uri: &axum::http::Uri) -> Response {
    let broken = uri.query() == Some("broken");
    let left = if broken { 64 } else { CHUNKS };
    Response::new(Body::new(Export {
        left,
        fails: broken,
    }))
}

#[idempotent(scope = "global", name = "exports.create")]
async fn export(uri: axum::http::Uri) -> Response {
    export_response(&uri)
}

async fn plain_export(uri: axum::http::Uri) -> Response {
    export_response(&uri)
}

/// Sends a keyed POST and reads the body frame by frame, keeping only its length: the status,
/// the length, the last chunk, and whether the body ended in an error.
async fn send(router: &Router, path: &str) -> (StatusCode, usize, Bytes, bool) {
    let request = Request::post(path)
        .header("idempotency-key", path)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let mut body = response.into_body();
    let (mut len, mut last) = (0, Bytes::new());
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return (status, len, last, true);
        };
        if let Ok(data) = frame.into_data() {
            len += data.len();
            last = data;
        }
    }
    (status, len, last, false)
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_response_over_the_replay_limit_streams_with_bounded_memory_on_every_face() {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let router = Router::new()
        .route("/attribute", post(export))
        .with_state(idempotency.clone())
        .merge(
            Router::new()
                .route("/layer", post(plain_export))
                .layer(IdempotencyLayer::new(&idempotency).scope("global")),
        );
    // Warm up (lazy statics, the runtime's buffers) with a small request.
    let _ = router
        .clone()
        .oneshot(Request::post("/none").body(Body::empty()).unwrap())
        .await;

    for path in ["/attribute", "/layer"] {
        reset_peak();
        let (before, _) = memory();
        let (status, len, _, _) = send(&router, path).await;
        let peak = memory().1.saturating_sub(before);
        assert_eq!((status, len), (StatusCode::OK, CHUNK * CHUNKS), "{path}");
        // The default replay limit is 2 MiB: the store holds the marker, the capture at most
        // the limit and a chunk on the way (buffering it all would add 100 MiB).
        assert!(
            peak < 16 << 20,
            "{path}: {peak} bytes held at the peak while streaming {} bytes",
            CHUNK * CHUNKS
        );

        // The retry gets the documented answer; the export does not run again.
        let (status, _, last, _) = send(&router, path).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}");
        let problem: Value = serde_json::from_slice(&last).unwrap();
        assert_eq!(problem["code"], "idempotency_response_too_large");
        assert_eq!(problem["original_status"], 200);

        // A body that fails past the limit: the client gets what came, then the error; the
        // operation ran, so its retry gets the same answer, and it does not run again.
        let broken = format!("{path}?broken");
        let (status, len, _, failed) = send(&router, &broken).await;
        assert_eq!(
            (status, len, failed),
            (StatusCode::OK, 64 * CHUNK, true),
            "{broken}"
        );
        let (status, _, last, _) = send(&router, &broken).await;
        assert_eq!(status, StatusCode::CONFLICT, "{broken}");
        let problem: Value = serde_json::from_slice(&last).unwrap();
        assert_eq!(problem["code"], "idempotency_response_too_large");
    }
}
