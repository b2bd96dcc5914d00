//! [`TcpProxy`]: a loopback TCP proxy in front of a store's server, cut and restored at will, so
//! a test gets a real outage: live connections dropped, new ones refused; or a lost or late
//! reply: a command that reached the server and ran, whose answer never came back or came after
//! the client stopped waiting.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards connections from [`addr`](TcpProxy::addr) to a target while up. Cutting it drops
/// every live connection (both ends) and closes each new one at once, as an unreachable server
/// would look to a client; restoring it forwards again. Stops when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    next_reply: Arc<Mutex<Option<ReplyFault>>>,
    task: JoinHandle<()>,
}

/// What happens to the next reply a server sends.
#[derive(Debug, Clone, Copy)]
enum ReplyFault {
    /// Thrown away, and the connection closed.
    Lose,
    /// Held back this long, then forwarded (the replies after it wait behind it, as on TCP).
    Delay(Duration),
}

impl TcpProxy {
    /// A proxy on `127.0.0.1:<free port>` to `target`, up.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.clone();
        let next_reply = Arc::new(Mutex::new(None));
        let fault = Arc::clone(&next_reply);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut down = state.subscribe();
                if !*down.borrow_and_update() {
                    drop(client); // refused: the server is "unreachable"
                    continue;
                }
                let fault = Arc::clone(&fault);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut client_read, mut client_write) = client.split();
                    let (mut server_read, mut server_write) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
                        _ = replies(&mut server_read, &mut client_write, &fault) => {}
                        _ = down.wait_for(|up| !*up) => {} // cut: both ends are dropped
                    }
                });
            }
        });
        Self {
            addr,
            up,
            next_reply,
            task,
        }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts (`false`) or restores (`true`) the proxy.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }

    /// Loses the next reply: the next bytes a server sends on any connection are thrown away
    /// and that connection is closed at both ends, as when a network drops after a command was
    /// delivered. The command itself reached the server and ran. Later replies pass again.
    pub fn lose_next_reply(&self) {
        *self.next_reply.lock().unwrap() = Some(ReplyFault::Lose);
    }

    /// Holds the next reply a server sends on any connection back for `delay`, then forwards
    /// it: a reply that comes after the client's response timeout. Later replies pass again.
    pub fn delay_next_reply(&self, delay: Duration) {
        *self.next_reply.lock().unwrap() = Some(ReplyFault::Delay(delay));
    }
}

/// Forwards the server's replies to the client until either end closes, or until a reply is to
/// be lost: then returns without forwarding it, which closes the connection. A reply to be
/// delayed is forwarded late.
async fn replies(
    server: &mut (impl AsyncReadExt + Unpin),
    client: &mut (impl AsyncWriteExt + Unpin),
    fault: &Mutex<Option<ReplyFault>>,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match server.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let taken = fault.lock().unwrap().take();
        match taken {
            Some(ReplyFault::Lose) => return,
            Some(ReplyFault::Delay(delay)) => tokio::time::sleep(delay).await,
            None => {}
        }
        if client.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        // Live connections end with the channel: every `wait_for` sees it closed.
        self.set_up(false);
        self.task.abort();
    }
}

/// The PostgreSQL server of [`postgres_url`](crate::postgres_url), and that URL with its
/// `host:port` replaced by `{proxy}`.
pub fn postgres_target() -> (SocketAddr, String) {
    target_of(crate::postgres_url())
}

/// The same for the MySQL server the tests use ([`crate::mysql::mysql_url`]).
pub fn mysql_target() -> (SocketAddr, String) {
    target_of(crate::mysql::mysql_url())
}

/// `url`'s server address, and `url` with `{proxy}` in its place.
fn target_of(url: String) -> (SocketAddr, String) {
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let host_port = rest.split_once('@').map_or(rest, |(_, r)| r);
    let host_port = host_port.split(['/', '?']).next().unwrap();
    let addr: SocketAddr = host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("this test needs a database URL with a numeric host:port");
    (addr, url.replacen(host_port, "{proxy}", 1))
}
