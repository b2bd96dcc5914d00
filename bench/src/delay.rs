//! A database that is far away, on loopback: a TCP proxy that holds every chunk of bytes for a
//! fixed time in each direction before passing it on, so each round trip a client waits for
//! costs at least twice that delay.
//!
//! Tokio's timers tick in milliseconds, too coarse for a delay of half of one, so each direction
//! of each connection has a reader and a writer thread: the reader stamps each chunk with its
//! arrival, the writer sleeps until the stamp plus the delay and writes it. Chunks keep their
//! order and a slow chunk never holds back the reading of the next (the delay is a pipe's
//! latency, not a limit on its throughput). `std::thread::sleep` oversleeps by the kernel's
//! timer slack (about 50 µs a sleep here, 10 % of the delay a chunk, and so 10 % more on every
//! round trip measured), so the writer sleeps until 150 µs before the chunk is due and spins
//! the rest, yielding the core between looks at the clock.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long before a chunk is due its writer stops sleeping and spins: more than the kernel's
/// timer slack and a wake-up's latency, which a sleep may add.
const SPIN: Duration = Duration::from_micros(150);

/// Starts a proxy on an ephemeral loopback port forwarding to `upstream`, holding data for
/// `one_way` in each direction; returns its address. Its threads live as long as the process.
pub fn start(upstream: SocketAddr, one_way: Duration) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    thread::Builder::new()
        .name("delay-accept".into())
        .spawn(move || {
            for client in listener.incoming().flatten() {
                if let Ok(server) = TcpStream::connect(upstream) {
                    let _ = relay(client, server, one_way);
                }
            }
        })?;
    Ok(addr)
}

fn relay(client: TcpStream, server: TcpStream, one_way: Duration) -> io::Result<()> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    pipe(client.try_clone()?, server.try_clone()?, one_way)?;
    pipe(server, client, one_way)
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::Builder::new()
        .name("delay-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                if tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
            // Dropping `tx` ends the writer once it has written what was read.
        })?;
    thread::Builder::new()
        .name("delay-write".into())
        .spawn(move || {
            while let Ok((due, chunk)) = rx.recv() {
                wait_until(due);
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// Returns at `due`, not a timer slack later: sleeps until [`SPIN`] before it, then spins.
fn wait_until(due: Instant) {
    let now = Instant::now();
    if let Some(long) = due
        .checked_sub(SPIN)
        .and_then(|t| t.checked_duration_since(now))
    {
        thread::sleep(long);
    }
    while Instant::now() < due {
        thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pass_in_order_and_the_connection_closes_through_the_proxy() {
        let upstream = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        let echo = thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            let mut got = Vec::new();
            conn.read_to_end(&mut got).unwrap();
            conn.write_all(&got).unwrap();
        });
        let proxy = start(upstream_addr, Duration::from_micros(200)).unwrap();
        let mut conn = TcpStream::connect(proxy).unwrap();
        let sent: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for part in sent.chunks(7_000) {
            conn.write_all(part).unwrap();
        }
        conn.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        conn.read_to_end(&mut back).unwrap();
        echo.join().unwrap();
        assert_eq!(back, sent);
    }
}
