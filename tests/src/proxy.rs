//! A loopback TCP proxy between an app and its database that a test cuts and restores: store
//! outages and blips through a real network seam.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback TCP proxy to PostgreSQL that can be cut and restored.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    up: watch::Sender<bool>,
}

impl Proxy {
    /// Starts forwarding to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, _) = watch::channel(true);
        let state = up.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let mut down = state.subscribe();
                if !*down.borrow_and_update() {
                    drop(client); // refused: the server is "unreachable"
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = down.wait_for(|up| !*up) => {} // cut: both ends are dropped
                    }
                });
            }
        });
        Self { addr, up }
    }

    /// Cuts (`false`: live connections dropped, new ones refused) or restores the link.
    pub fn set_up(&self, up: bool) {
        self.up.send_replace(up);
    }
}

/// The PostgreSQL server of [`postgres_url`](crate::postgres_url), and that URL with its
/// `host:port` replaced by `{proxy}`.
pub fn postgres_target() -> (SocketAddr, String) {
    let url = crate::postgres_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let host_port = rest.split_once('@').map_or(rest, |(_, r)| r);
    let host_port = host_port.split(['/', '?']).next().unwrap();
    let addr: SocketAddr = host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("this test needs DATABASE_URL with a numeric host:port");
    (addr, url.replacen(host_port, "{proxy}", 1))
}
