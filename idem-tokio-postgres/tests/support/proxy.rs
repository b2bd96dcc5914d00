//! A loopback proxy in front of PostgreSQL that frames the wire protocol, for two things:
//!
//! - **Round trips, counted on the wire.** A round trip is a wait of the client: it begins when
//!   the client sends after the server's last answer reached it (or first on a connection).
//!   Messages the client sends before an answer reaches it ride in the same round trip:
//!   pipelined. The server's answers are held for [`DELAY`] before they are passed on (a server
//!   a little way off), so messages a client sends together cannot be split by an answer, and a
//!   message that needed an answer always comes after it.
//! - **Cuts.** The connection can be cut when the client sends a chosen statement, as text
//!   (a simple-protocol `Query`) or as a prepared statement's `Bind` (the proxy remembers the
//!   text of each statement the connection's `Parse` named): before it reaches the server, or
//!   after, with its answer lost.
//!
//! Connect with `sslmode=disable`: the proxy frames no TLS.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// How long the server's answers are held before they are passed on.
pub const DELAY: Duration = Duration::from_millis(10);

/// Where a [`Cut`] falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// The statement never reaches the server; the connection is closed.
    Before,
    /// The statement reaches the server, which runs it; its answer never reaches the client,
    /// and the connection is closed.
    AnswerLost,
}

/// A cut of the next connection that sends a statement starting with `prefix`, as text or as
/// a prepared statement's `Bind`.
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    pub prefix: &'static str,
    pub when: When,
}

#[derive(Default)]
struct Shared {
    round_trips: AtomicU64,
    statements: AtomicU64,
    parses: AtomicU64,
    text_binds: AtomicU64,
    connections: AtomicU64,
    cut: Mutex<Option<Cut>>,
}

/// The proxy, serving until the test ends.
#[derive(Clone)]
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

/// Totals since the proxy started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub round_trips: u64,
    pub statements: u64,
    /// `Parse` messages: statements prepared.
    pub parses: u64,
    /// `Bind` messages with a parameter in text format.
    pub text_binds: u64,
    pub connections: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            round_trips: self.round_trips - earlier.round_trips,
            statements: self.statements - earlier.statements,
            parses: self.parses - earlier.parses,
            text_binds: self.text_binds - earlier.text_binds,
            connections: self.connections - earlier.connections,
        }
    }
}

impl Proxy {
    /// A proxy on a free loopback port in front of `server`.
    pub async fn start(server: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self {
            addr: listener.local_addr().unwrap(),
            shared: Arc::default(),
        };
        let shared = proxy.shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(server).await else {
                    continue;
                };
                shared.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(client, upstream, shared.clone()));
            }
        });
        proxy
    }

    /// The URL of `url`'s database through the proxy.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (user, rest) = rest.split_once('@').unwrap();
        let path = rest.find(['/', '?']).map_or("", |i| &rest[i..]);
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{scheme}://{user}@{}{path}{sep}sslmode=disable", self.addr)
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let s = &self.shared;
        Counts {
            round_trips: s.round_trips.load(Ordering::SeqCst),
            statements: s.statements.load(Ordering::SeqCst),
            parses: s.parses.load(Ordering::SeqCst),
            text_binds: s.text_binds.load(Ordering::SeqCst),
            connections: s.connections.load(Ordering::SeqCst),
        }
    }

    /// Cuts the next connection that sends `cut.prefix`.
    pub fn cut(&self, cut: Cut) {
        *self
            .shared
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cut);
    }
}

/// The server's address of a `postgres://user@host:port/db` URL.
pub async fn server_of(url: &str) -> SocketAddr {
    let rest = url.split_once("://").unwrap().1;
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split(['/', '?']).next().unwrap();
    tokio::net::lookup_host(host_port)
        .await
        .unwrap()
        .next()
        .unwrap()
}

/// One connection's state, shared by its two directions.
#[derive(Default)]
struct Exchange {
    /// The server's answers reached the client since it last sent.
    answered: bool,
    /// The server's answers are dropped from now on.
    muted: bool,
}

async fn serve(client: TcpStream, upstream: TcpStream, shared: Arc<Shared>) {
    let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    let exchange = Arc::new(Mutex::new(Exchange::default()));
    let up = tokio::spawn(upstream_side(
        client_read,
        server_write,
        exchange.clone(),
        shared,
    ));
    let _ = downstream_side(server_read, client_write, exchange).await;
    up.abort();
}

fn lock(exchange: &Mutex<Exchange>) -> std::sync::MutexGuard<'_, Exchange> {
    exchange.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Client to server: counts flights and statements, and makes the cuts.
async fn upstream_side(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    exchange: Arc<Mutex<Exchange>>,
    shared: Arc<Shared>,
) -> std::io::Result<()> {
    // The start-up message has no type byte.
    let mut len = [0; 4];
    from.read_exact(&mut len).await?;
    let mut body = vec![0; u32::from_be_bytes(len) as usize - 4];
    from.read_exact(&mut body).await?;
    to.write_all(&len).await?;
    to.write_all(&body).await?;
    // The text of each statement the connection prepared, by name.
    let mut prepared: HashMap<Vec<u8>, String> = HashMap::new();
    // A prepared statement's cut whose answer is lost: it falls after the next `Sync`.
    let mut cut_at_sync = false;
    loop {
        let mut head = [0; 5];
        from.read_exact(&mut head).await?;
        let len = u32::from_be_bytes(head[1..].try_into().unwrap()) as usize;
        let mut body = vec![0; len - 4];
        from.read_exact(&mut body).await?;
        let kind = head[0];
        {
            let mut exchange = lock(&exchange);
            if kind != b'X' && exchange.answered {
                shared.round_trips.fetch_add(1, Ordering::SeqCst);
            }
            exchange.answered = false;
            if matches!(kind, b'Q' | b'E') {
                shared.statements.fetch_add(1, Ordering::SeqCst);
            }
            if kind == b'P' {
                shared.parses.fetch_add(1, Ordering::SeqCst);
            }
            if kind == b'B' && binds_text(&body) {
                shared.text_binds.fetch_add(1, Ordering::SeqCst);
            }
        }
        let mut names = body.split(|b| *b == 0);
        let text = match kind {
            b'Q' => Some(String::from_utf8_lossy(&body).into_owned()),
            b'P' => {
                let (name, text) = (names.next().unwrap_or_default(), names.next());
                let text = String::from_utf8_lossy(text.unwrap_or_default()).into_owned();
                prepared.insert(name.to_vec(), text);
                None
            }
            b'B' => {
                let statement = names.nth(1).unwrap_or_default();
                prepared.get(statement).cloned()
            }
            _ => None,
        };
        if let Some(cut) = text.and_then(|text| take_cut(&shared, &text)) {
            lock(&exchange).muted = true;
            if cut.when == When::Before {
                return Err(std::io::ErrorKind::ConnectionReset.into());
            }
            // A `Query` runs as it arrives; a `Bind`'s statement once its `Sync` does.
            cut_at_sync = true;
            if kind == b'B' {
                to.write_all(&head).await?;
                to.write_all(&body).await?;
                continue;
            }
        }
        to.write_all(&head).await?;
        to.write_all(&body).await?;
        if cut_at_sync && matches!(kind, b'Q' | b'S') {
            // Returning closes the server's side for writing: the server reads, runs and
            // answers everything sent before it sees the end, and the client's side closes
            // only once the server has closed its own (`downstream_side`), so no cancel the
            // client sends on seeing the cut can reach a statement still running.
            return Err(std::io::ErrorKind::ConnectionReset.into());
        }
    }
}

/// The cut set for a statement starting as `text` does, taken: it falls once.
fn take_cut(shared: &Shared, text: &str) -> Option<Cut> {
    let mut cut = shared.cut.lock().unwrap_or_else(PoisonError::into_inner);
    match *cut {
        Some(c) if text.trim_start().starts_with(c.prefix) => cut.take(),
        _ => None,
    }
}

/// Whether a `Bind` message's body sends a parameter in text format: after the portal's and the
/// statement's names, the format codes (none: all text; one: for all; else one per parameter),
/// then the number of parameters.
fn binds_text(body: &[u8]) -> bool {
    let after_names = body
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == 0)
        .nth(1)
        .map(|(i, _)| i + 1);
    let Some(at) = after_names else { return true };
    let int16 = |at: usize| i16::from_be_bytes([body[at], body[at + 1]]);
    let codes = int16(at) as usize;
    let params = int16(at + 2 + 2 * codes);
    let text = (0..codes).any(|i| int16(at + 2 + 2 * i) == 0);
    params > 0 && (codes == 0 || text)
}

/// Server to client: holds each answer for [`DELAY`], marks it received, then passes it on
/// (unless muted by a cut: then drops it, until the server closes the connection).
async fn downstream_side(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    exchange: Arc<Mutex<Exchange>>,
) -> std::io::Result<()> {
    let mut pending = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        tokio::time::sleep(DELAY).await;
        pending.extend_from_slice(&buf[..n]);
        let muted = {
            let mut exchange = lock(&exchange);
            exchange.answered = true;
            exchange.muted
        };
        if muted {
            // Cut: the server's answers are read and dropped until it closes the connection.
            pending.clear();
            continue;
        }
        to.write_all(&pending).await?;
        pending.clear();
    }
}
