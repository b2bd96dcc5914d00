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
//!
//! With a [`Trace`], each chunk read is also written down as a line: when it was read (µs since
//! the trace began), its direction (`up` to the database, `down` from it), its connection, its
//! size and the types of the protocol messages that start in it (`QBES`: a `Query`, then a
//! `Bind`, `Execute` and `Sync`). `bench/pg_segments.py` reads such files and says where a
//! request's time went: the proxy's hold, the database or the application.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::pgcount::Framer;

/// How long before a chunk is due its writer stops sleeping and spins: more than the kernel's
/// timer slack and a wake-up's latency, which a sleep may add.
const SPIN: Duration = Duration::from_micros(150);

/// Where the chunks a proxy reads are written down, one line each (see the module).
pub struct Trace {
    file: Mutex<File>,
    began: Instant,
    connections: AtomicU64,
}

impl Trace {
    /// A trace written to `path`, created or emptied.
    pub fn create(path: &Path) -> io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            file: Mutex::new(File::create(path)?),
            began: Instant::now(),
            connections: AtomicU64::new(0),
        }))
    }

    fn line(&self, read_at: Instant, direction: &str, connection: u64, size: usize, types: &str) {
        let at = read_at.duration_since(self.began).as_micros();
        let line = format!("{at} {direction} {connection} {size} {types}\n");
        if let Ok(mut file) = self.file.lock() {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Starts a proxy on an ephemeral loopback port forwarding to `upstream`, holding data for
/// `one_way` in each direction, every chunk written down in `trace` if given; returns its
/// address. Its threads live as long as the process.
pub fn start(
    upstream: SocketAddr,
    one_way: Duration,
    trace: Option<Arc<Trace>>,
) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let addr = listener.local_addr()?;
    thread::Builder::new()
        .name("delay-accept".into())
        .spawn(move || {
            for client in listener.incoming().flatten() {
                if let Ok(server) = TcpStream::connect(upstream) {
                    let _ = relay(client, server, one_way, trace.clone());
                }
            }
        })?;
    Ok(addr)
}

fn relay(
    client: TcpStream,
    server: TcpStream,
    one_way: Duration,
    trace: Option<Arc<Trace>>,
) -> io::Result<()> {
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let traced = trace.map(|trace| (trace.connections.fetch_add(1, Ordering::Relaxed), trace));
    let side = |direction, untyped_first| {
        traced.as_ref().map(|(connection, trace)| Traced {
            trace: trace.clone(),
            direction,
            connection: *connection,
            framer: Framer::new(untyped_first),
        })
    };
    // The client opens with the untyped start-up message; the server's messages are typed.
    let (up, down) = (side("up", true), side("down", false));
    pipe(client.try_clone()?, server.try_clone()?, one_way, up)?;
    pipe(server, client, one_way, down)
}

/// One direction of one connection, as the trace sees it.
struct Traced {
    trace: Arc<Trace>,
    direction: &'static str,
    connection: u64,
    framer: Framer,
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    delay: Duration,
    mut traced: Option<Traced>,
) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::Builder::new()
        .name("delay-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut types = String::new();
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let read_at = Instant::now();
                if tx.send((read_at + delay, buf[..n].to_vec())).is_err() {
                    break;
                }
                // Written down once the chunk is on its way, so the trace never holds a chunk
                // back; it costs the reader one write to the file before its next read.
                if let Some(t) = &mut traced {
                    types.clear();
                    t.framer
                        .feed(&buf[..n], &mut |ty| types.push(char::from(ty)));
                    t.trace.line(read_at, t.direction, t.connection, n, &types);
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
        let proxy = start(upstream_addr, Duration::from_micros(200), None).unwrap();
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

    #[test]
    fn a_trace_writes_down_each_chunk_with_its_messages() {
        let upstream = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let upstream_addr = upstream.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut conn, _) = upstream.accept().unwrap();
            let mut got = [0u8; 8 + 6 + 5];
            conn.read_exact(&mut got).unwrap();
            // `ReadyForQuery`: a type, a length counting itself, the status.
            conn.write_all(&[b'Z', 0, 0, 0, 5, b'I']).unwrap();
        });
        let path = std::env::temp_dir().join(format!("idem-delay-trace-{}", std::process::id()));
        let trace = Trace::create(&path).unwrap();
        let proxy = start(upstream_addr, Duration::from_micros(100), Some(trace)).unwrap();
        let mut conn = TcpStream::connect(proxy).unwrap();
        // An untyped start-up message (a length, then a body), a `Query` and a `Sync` sent in
        // one write.
        let mut sent = vec![0, 0, 0, 8, 0, 3, 0, 0];
        sent.extend_from_slice(&[b'Q', 0, 0, 0, 5, 0]);
        sent.extend_from_slice(&[b'S', 0, 0, 0, 4]);
        conn.write_all(&sent).unwrap();
        let mut answer = [0u8; 6];
        conn.read_exact(&mut answer).unwrap();
        server.join().unwrap();
        // Each reader writes its line after passing its chunk on, so a reader the machine
        // paused may write it after the answer arrived, and after the other reader's line.
        let mut text = String::new();
        for _ in 0..500 {
            text = std::fs::read_to_string(&path).unwrap();
            if text.lines().count() >= 2 {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&path);
        let mut lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
        lines.sort_by_key(|line| line[0].parse::<u64>().unwrap());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0][1..], ["up", "0", "19", "QS"]);
        assert_eq!(lines[1][1..], ["down", "0", "6", "Z"]);
    }
}
