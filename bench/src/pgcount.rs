//! Counting PostgreSQL round trips for real: a loopback TCP proxy that frames the wire protocol.
//!
//! Two counts of exchanges, because a client may send several before it waits:
//!
//! - **Round trips** are the client's waits: each time the client sends after the server has
//!   spoken (or first on a connection), it starts a flight the server must answer before the
//!   client goes on. Messages the client queues and sends together (sqlx sends a queued
//!   `ROLLBACK` with the `Sync` it tests a returned connection with) are one flight, one wait
//!   of a network's round-trip time. This is what latency pays.
//! - **Sync points** are `ReadyForQuery` (`Z`) messages from the server: every exchange ends with
//!   exactly one, whether it was a simple `Query`, an extended-protocol `Parse/Bind/Execute/Sync`
//!   pipeline, or a bare `Sync`. Pipelined exchanges each have one.
//!
//! The number of `Execute` (`E`) plus `Query` (`Q`) messages the client sends is the number of
//! statements run (a `Query` may hold several). Connections opened are counted too (each costs
//! one flight and one `Z` at start-up, after the authentication exchange).
//!
//! Connect through the proxy with `sslmode=disable`: an SSL negotiation is not framed.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Totals since the proxy started.
#[derive(Debug, Default)]
pub struct Counters {
    flights: AtomicU64,
    round_trips: AtomicU64,
    statements: AtomicU64,
    connections: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Counts {
    /// Flights from the client, each sent after the server had spoken: the waits a network's
    /// latency multiplies.
    #[serde(default)]
    pub flights: u64,
    /// `ReadyForQuery` messages from the server: sync points, one per exchange even when
    /// several were pipelined in one flight.
    pub round_trips: u64,
    /// `Execute` and `Query` messages from the client: statements run.
    pub statements: u64,
    /// Connections opened through the proxy.
    pub connections: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            flights: self.flights.saturating_sub(earlier.flights),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            statements: self.statements.saturating_sub(earlier.statements),
            connections: self.connections.saturating_sub(earlier.connections),
        }
    }
}

impl Counters {
    /// The current totals.
    pub fn snapshot(&self) -> Counts {
        Counts {
            flights: self.flights.load(Ordering::Relaxed),
            round_trips: self.round_trips.load(Ordering::Relaxed),
            statements: self.statements.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
        }
    }
}

/// Starts a proxy on an ephemeral loopback port forwarding to `upstream`; returns its address
/// and its counters. It runs until the runtime stops.
pub async fn start(upstream: SocketAddr) -> io::Result<(SocketAddr, Arc<Counters>)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let shared = counters.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let counters = shared.clone();
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream).await {
                    counters.connections.fetch_add(1, Ordering::Relaxed);
                    let _ = relay(client, server, counters).await;
                }
            });
        }
    });
    Ok((addr, counters))
}

async fn relay(client: TcpStream, server: TcpStream, counters: Arc<Counters>) -> io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    // Whether the server has sent anything since the client's last bytes: the client's next
    // bytes then start a new flight.
    let server_spoke = Arc::new(AtomicBool::new(true));
    let (up_counters, up_spoke) = (counters.clone(), server_spoke.clone());
    let up = async move {
        // The client opens with an untyped start-up message.
        let mut framer = Framer::new(true);
        let on_bytes = || {
            if up_spoke.swap(false, Ordering::AcqRel) {
                up_counters.flights.fetch_add(1, Ordering::Relaxed);
            }
        };
        pump(
            &mut client_rx,
            &mut server_tx,
            &mut framer,
            on_bytes,
            |ty| {
                if ty == b'E' || ty == b'Q' {
                    up_counters.statements.fetch_add(1, Ordering::Relaxed);
                }
            },
        )
        .await
    };
    let down = async move {
        let mut framer = Framer::new(false);
        let on_bytes = || server_spoke.store(true, Ordering::Release);
        pump(
            &mut server_rx,
            &mut client_tx,
            &mut framer,
            on_bytes,
            |ty| {
                if ty == b'Z' {
                    counters.round_trips.fetch_add(1, Ordering::Relaxed);
                }
            },
        )
        .await
    };
    tokio::select! {
        r = up => r,
        r = down => r,
    }
}

async fn pump(
    from: &mut (impl AsyncReadExt + Unpin),
    to: &mut (impl AsyncWriteExt + Unpin),
    framer: &mut Framer,
    on_bytes: impl Fn(),
    mut on_message: impl FnMut(u8),
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        on_bytes();
        framer.feed(&buf[..n], &mut on_message);
        to.write_all(&buf[..n]).await?;
    }
}

/// Splits a byte stream into protocol messages: a type byte (absent for the start-up message)
/// and a big-endian length that counts itself but not the type byte.
#[derive(Debug)]
pub(crate) struct Framer {
    untyped_next: bool,
    header: Vec<u8>,
    body_left: usize,
}

impl Framer {
    pub(crate) fn new(untyped_first: bool) -> Self {
        Self {
            untyped_next: untyped_first,
            header: Vec::with_capacity(5),
            body_left: 0,
        }
    }

    pub(crate) fn feed(&mut self, mut data: &[u8], on_message: &mut impl FnMut(u8)) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let need = if self.untyped_next { 4 } else { 5 };
            let n = (need - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.header.len() == need {
                let len = u32::from_be_bytes(self.header[need - 4..].try_into().unwrap_or([0; 4]));
                if !self.untyped_next {
                    on_message(self.header[0]);
                }
                self.body_left = (len as usize).saturating_sub(4);
                self.untyped_next = false;
                self.header.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![ty];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn frames_messages_split_anywhere() {
        let mut stream = 12u32.to_be_bytes().to_vec();
        stream.extend_from_slice(&[0, 3, 0, 0, 1, 2, 3, 4]);
        for m in [
            msg(b'P', b"select 1\0\0\0"),
            msg(b'E', b"\0\0\0\0\0"),
            msg(b'S', b""),
        ] {
            stream.extend(m);
        }
        for chunk in 1..stream.len() {
            let mut framer = Framer::new(true);
            let mut seen = Vec::new();
            for part in stream.chunks(chunk) {
                framer.feed(part, &mut |ty| seen.push(ty));
            }
            assert_eq!(seen, b"PES", "chunks of {chunk}");
        }
    }
}
