//! What a client may hold, against the real binary on loopback: a connection that does not send
//! its request head in time is closed (`HEADER_TIMEOUT_MS`), a body that does not arrive in time
//! is answered 408 (`BODY_TIMEOUT_MS`), and connections over `MAX_CONNECTIONS` are answered 503
//! at once instead of being left waiting, until the held ones go away.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a bounded wait in these tests may take: far more than any timeout they set.
const BOUND: Duration = Duration::from_secs(15);

/// Opens a connection and sends `bytes` on it (maybe nothing, maybe half a request).
async fn hold(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(bytes).await.expect("write");
    stream
}

/// Reads until the server closes `stream`; what it sent. Fails past [`BOUND`]: the server
/// kept the connection open.
async fn until_closed(mut stream: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, read)
        .await
        .expect("the server kept the connection open");
    got
}

/// `GET /healthz` until it is 200; fails past [`BOUND`].
async fn healthy_again(server: &Server) {
    let deadline = Instant::now() + BOUND;
    loop {
        let response = server.get("/healthz").send().await;
        if response.status == 200 {
            return;
        }
        response.assert_problem(503, "server_busy");
        assert!(Instant::now() < deadline, "still shedding after {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_slow_request_head_is_cut_off() {
    let server = Server::builder().env("HEADER_TIMEOUT_MS", "300").start();
    // Half a head, never finished; and a connection that sends nothing at all.
    let slow = hold(server.addr(), b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    let silent = hold(server.addr(), b"").await;
    until_closed(slow).await;
    until_closed(silent).await;
    // A request that is not slow is served as usual.
    assert_eq!(server.get("/healthz").send().await.status, 200);
}

#[tokio::test]
async fn a_slow_body_is_408_and_its_connection_closed() {
    let server = Server::builder().env("BODY_TIMEOUT_MS", "300").start();
    for key in ["", "Idempotency-Key: slow-body-1\r\n"] {
        let head = format!(
            "POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_acme\r\n\
             Content-Type: application/json\r\n{key}Content-Length: 100\r\n\r\n{{\"amount\":"
        );
        let answer = until_closed(hold(server.addr(), head.as_bytes()).await).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(
            answer.contains(r#""code":"request_body_timeout""#),
            "{answer}"
        );
    }
    // Nothing was stored under the key: the whole request now runs.
    let charge = server
        .post("/v1/charges")
        .org("acme")
        .key("slow-body-1")
        .json(&common::charge(100, "tok_visa"))
        .send()
        .await;
    assert_eq!(charge.status, 201, "{}", charge.text());
    assert!(!charge.is_replay());
}

#[tokio::test]
async fn connections_over_the_cap_are_shed_with_503_until_the_held_ones_go() {
    let server = Server::builder()
        .env("MAX_CONNECTIONS", "4")
        .env("HEADER_TIMEOUT_MS", "1500")
        .start();

    // Four idle connections take every slot; the next is answered 503 at once, not left waiting
    // for one to free.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(hold(server.addr(), b"").await);
    }
    let shed = server.get("/healthz").send().await;
    let doc = shed.assert_problem(503, "server_busy");
    assert_eq!(shed.header("retry-after"), Some("1"), "{doc}");

    // The server closes the idle connections after HEADER_TIMEOUT_MS; then requests are served.
    for stream in held.drain(..) {
        until_closed(stream).await;
    }
    healthy_again(&server).await;

    // The same when the clients close them. The last request of `healthy_again` may still hold
    // its slot for a moment after its answer (the slot frees when the server has closed that
    // connection): one of these is then shed instead, and if the slot frees before the GET, the
    // GET takes it. So hold the cap's worth, and one more each time the GET got through, until
    // it is shed (bounded: a server that never sheds fails).
    for _ in 0..4 {
        held.push(hold(server.addr(), b"").await);
    }
    let deadline = Instant::now() + BOUND;
    loop {
        let response = server.get("/healthz").send().await;
        if response.status != 200 {
            response.assert_problem(503, "server_busy");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never shed with {} connections held",
            held.len()
        );
        held.push(hold(server.addr(), b"").await);
    }
    drop(held);
    healthy_again(&server).await;
}
