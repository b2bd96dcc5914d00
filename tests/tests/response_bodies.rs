//! Response bodies reach the client whole, over a real HTTP/1 connection, on both HTTP faces: a
//! body the handler streams in several chunks is stored whole and replayed byte for byte, and a
//! body over the replay limit streams on to its last byte after the part read to check its size,
//! keeping the length it is known to have.
//!
//! ```text
//! cargo test -p idem-tests --test response_bodies
//! ```

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use idem_runtime::IdempotencyLayer;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, idempotent};
use serde_json::Value;

/// The replay limit of these tests: 16 chunks.
const LIMIT: usize = 16 * CHUNK;
const CHUNK: usize = 1024;

/// A body of `total` chunks of `CHUNK` bytes, one frame each, each chunk's bytes its index (so a
/// missing or repeated chunk shows).
struct Chunks {
    next: usize,
    total: usize,
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.next == self.total {
            return Poll::Ready(None);
        }
        let chunk = vec![self.next as u8; CHUNK];
        self.next += 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(chunk)))))
    }
}

/// `?chunks=N` streams N chunks; `?sized=N` answers N chunks' bytes in one buffer, whose length
/// is known before it is sent.
fn report_response(uri: &axum::http::Uri) -> Response {
    let query = uri.query().unwrap_or_default();
    let number = |prefix: &str| query.strip_prefix(prefix).and_then(|n| n.parse().ok());
    match (number("chunks="), number("sized=")) {
        (Some(total), _) => Response::new(Body::new(Chunks { next: 0, total })),
        (_, Some(chunks)) => Response::new(Body::from(expected(chunks))),
        _ => panic!("no size in {query:?}"),
    }
}

#[idempotent(scope = "global", name = "reports.create")]
async fn report(uri: axum::http::Uri) -> Response {
    report_response(&uri)
}

async fn plain_report(uri: axum::http::Uri) -> Response {
    report_response(&uri)
}

/// Serves both faces on a loopback port; returns its address.
async fn serve() -> std::net::SocketAddr {
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .max_response_bytes(LIMIT)
        .build()
        .unwrap();
    let router = Router::new()
        .route("/attribute", post(report))
        .with_state(idempotency.clone())
        .merge(
            Router::new()
                .route("/layer", post(plain_report))
                .layer(IdempotencyLayer::new(&idempotency).scope("global")),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

/// A keyed POST over a new connection: the status, whether it was replayed, the whole body.
async fn send(address: std::net::SocketAddr, path: &str, key: &str) -> (StatusCode, bool, Bytes) {
    let (status, headers, body) = exchange(address, path, key).await;
    (status, headers.contains_key("idempotent-replayed"), body)
}

/// A keyed POST over a new connection: the status, the headers, the whole body.
async fn exchange(
    address: std::net::SocketAddr,
    path: &str,
    key: &str,
) -> (StatusCode, HeaderMap, Bytes) {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let request = Request::post(path)
        .header("host", "localhost")
        .header("idempotency-key", key)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

fn expected(chunks: usize) -> Vec<u8> {
    (0..chunks).flat_map(|i| vec![i as u8; CHUNK]).collect()
}

#[tokio::test]
async fn a_body_streamed_in_chunks_is_sent_stored_and_replayed_whole() {
    let address = serve().await;
    for face in ["/attribute", "/layer"] {
        let path = format!("{face}?chunks=5");
        let (status, replayed, first) = send(address, &path, face).await;
        assert_eq!((status, replayed), (StatusCode::OK, false), "{face}");
        assert_eq!(first, expected(5), "{face}: the client gets every chunk");

        let (status, replayed, again) = send(address, &path, face).await;
        assert_eq!((status, replayed), (StatusCode::OK, true), "{face}");
        assert_eq!(again, first, "{face}: the replay is the whole body");
    }
}

#[tokio::test]
async fn a_body_over_the_replay_limit_streams_to_its_last_byte() {
    let address = serve().await;
    for face in ["/attribute", "/layer"] {
        let path = format!("{face}?chunks=40");
        let (status, replayed, body) = send(address, &path, face).await;
        assert_eq!((status, replayed), (StatusCode::OK, false), "{face}");
        assert_eq!(body.len(), 40 * CHUNK, "{face}");
        assert_eq!(
            body,
            expected(40),
            "{face}: the chunks read to check the size, then the rest"
        );

        let (status, _, problem) = send(address, &path, face).await;
        assert_eq!(status, StatusCode::CONFLICT, "{face}");
        let problem: Value = serde_json::from_slice(&problem).unwrap();
        assert_eq!(problem["code"], "idempotency_response_too_large", "{face}");
    }
}

#[tokio::test]
async fn a_body_over_the_replay_limit_keeps_its_known_length() {
    let address = serve().await;
    for face in ["/attribute", "/layer"] {
        let path = format!("{face}?sized=40");
        let (status, headers, body) = exchange(address, &path, face).await;
        assert_eq!(status, StatusCode::OK, "{face}");
        assert_eq!(body, expected(40), "{face}");
        // Sent with its length, as without idem, not chunked: clients can show progress.
        assert_eq!(
            headers
                .get(header::CONTENT_LENGTH)
                .map(|v| v.to_str().unwrap()),
            Some("40960"),
            "{face}"
        );
        assert!(!headers.contains_key(header::TRANSFER_ENCODING), "{face}");
    }
}
