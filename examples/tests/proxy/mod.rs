//! Loopback proxies that lose things on purpose, for the client's end-to-end tests.
//!
//! - [`LossyProxy`]: HTTP/1.1 in front of the payments server. It forwards each request and
//!   reads the server's whole answer, so the server did the work, then for the first requests
//!   loses that answer: it closes the client's connection, or answers 502 in its place.
//! - [`TcpProxy`]: plain TCP in front of PostgreSQL, cut (live connections dropped, new ones
//!   refused) and restored at will: a store outage.
//!
//! Both bind `127.0.0.1:0`, bound every read by [`STEP_TIMEOUT`], and stop with the test.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::common::STEP_TIMEOUT;

/// How a request's answer is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The client's connection is closed without a byte of the answer.
    Close,
    /// The client gets `502 Bad Gateway` instead of the answer.
    BadGateway,
}

/// One request through a [`LossyProxy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Its `Idempotency-Key`, if any.
    pub(crate) key: Option<String>,
    /// The status the server answered, which the client may not have seen.
    pub(crate) status: u16,
    /// Whether the server's answer was a replay.
    pub(crate) replayed: bool,
    /// What happened to the answer: `None` when the client got it.
    pub(crate) lost: Option<Loss>,
}

/// An HTTP/1.1 proxy that loses the answers of its first requests (see the module docs). One
/// request per connection: each is forwarded with `Connection: close`.
pub(crate) struct LossyProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl LossyProxy {
    /// Proxies to `upstream`; the answer to the `i`-th request (from 0) is lost as `losses[i]`
    /// says, and every answer after those is delivered.
    pub(crate) async fn start(upstream: SocketAddr, losses: Vec<Loss>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::<Seen>::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let (log, losses) = (log.clone(), losses.clone());
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(STEP_TIMEOUT, relay(client, upstream, &log, &losses))
                            .await;
                });
            }
        });
        Self { addr, seen, task }
    }

    /// The base URL clients use.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in the order they were answered by the server.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards one request from `client` and delivers, or loses, the answer.
async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    log: &Mutex<Vec<Seen>>,
    losses: &[Loss],
) -> Option<()> {
    let (head, body) = read_request(&mut client).await?;
    let key = header(&head, "idempotency-key");
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(&close_after(&head)).await.ok()?;
    server.write_all(&body).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    let answer_head = String::from_utf8_lossy(&answer[..answer.len().min(4096)]).into_owned();
    let status = answer_head.split(' ').nth(1)?.parse().ok()?;
    let replayed = header(&answer_head, "idempotent-replayed").as_deref() == Some("true");
    let lost = {
        let mut log = log.lock().unwrap();
        let lost = losses.get(log.len()).copied();
        log.push(Seen {
            key,
            status,
            replayed,
            lost,
        });
        lost
    };
    match lost {
        None => client.write_all(&answer).await.ok()?,
        Some(Loss::Close) => drop(client),
        Some(Loss::BadGateway) => {
            let bad_gateway =
                "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            client.write_all(bad_gateway.as_bytes()).await.ok()?;
        }
    }
    Some(())
}

/// Reads one request: its head (through the blank line) and its `Content-Length` body.
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(raw[..head_end].to_vec()).ok()?;
    let length: usize = header(&head, "content-length").map_or(Some(0), |v| v.parse().ok())?;
    while raw.len() < head_end + length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    Some((head, raw[head_end..head_end + length].to_vec()))
}

/// The first value of header `name` in a request or response head.
fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// `head` with its `Connection` header replaced by `Connection: close`, so the server's answer
/// ends with its connection.
fn close_after(head: &str) -> Vec<u8> {
    let mut lines: Vec<&str> = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    lines.push("Connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n")).into_bytes()
}

/// A TCP proxy that can be cut and restored (see the module docs).
pub(crate) struct TcpProxy {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl TcpProxy {
    pub(crate) async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut down = state.subscribe();
                if !*down.borrow_and_update() {
                    drop(client); // unreachable: refused at once
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {} // cut: both ends dropped
                    }
                });
            }
        });
        Self { addr, up, task }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts (`false`) or restores (`true`) the link.
    pub(crate) fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// A handle that restores the link, for a callback that outlives a borrow.
    pub(crate) fn switch(&self) -> watch::Sender<bool> {
        self.up.clone()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `url`, a `postgres://` URL, pointing at `proxy` instead of its own `host:port`.
pub(crate) fn via_proxy(url: &str, proxy: SocketAddr) -> String {
    let host_port = postgres_host_port(url);
    url.replacen(&host_port, &proxy.to_string(), 1)
}

/// The `host:port` a `postgres://` URL names, as a socket address.
pub(crate) fn postgres_addr(url: &str) -> SocketAddr {
    postgres_host_port(url)
        .replace("localhost", "127.0.0.1")
        .parse()
        .unwrap_or_else(|_| panic!("a numeric host:port in the database URL: {url}"))
}

fn postgres_host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host_port = rest.split_once('@').map_or(rest, |(_, rest)| rest);
    host_port.split(['/', '?']).next().unwrap().to_owned()
}

#[test]
fn a_forwarded_head_asks_to_close() {
    let head = "POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n\r\n";
    assert_eq!(
        String::from_utf8(close_after(head)).unwrap(),
        "POST /v1/charges HTTP/1.1\r\nhost: x\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(header(head, "Host").as_deref(), Some("x"));
    let url = "postgres://postgres@127.0.0.1:5432/db?x=1";
    let proxy: SocketAddr = "127.0.0.1:9".parse().unwrap();
    assert_eq!(
        via_proxy(url, proxy),
        "postgres://postgres@127.0.0.1:9/db?x=1"
    );
    assert_eq!(postgres_addr(url), "127.0.0.1:5432".parse().unwrap());
}
