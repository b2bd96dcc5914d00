//! The faults around `orders-consumer`: its broker restarted mid-stream, its database cut off,
//! its database stalled on a lock past the handler's deadline. Each ends with every order
//! recorded once and every message answered.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_tests::TcpProxy;

use super::harness::{STEP, Topic, lock_orders, order, unique, unlock};
use super::postgres::PgDatabase;
use super::{SqliteFile, assert_once, orders, start};

/// A NATS server of the test's own, with JetStream on a directory of its own, so it can be
/// restarted without disturbing anyone else's. Killed, and its directory removed, on drop.
struct PrivateNats {
    addr: SocketAddr,
    dir: PathBuf,
    child: Option<Child>,
}

impl PrivateNats {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("nats-"));
        let mut nats = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
            child: None,
        };
        nats.up();
        nats
    }

    /// Starts the server and waits until it accepts connections.
    fn up(&mut self) {
        let child = Command::new("nats-server")
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.addr.port().to_string(),
                "-js",
                "-sd",
            ])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server is needed on PATH");
        self.child = Some(child);
        let deadline = Instant::now() + STEP;
        while TcpStream::connect(self.addr).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the server at once (what it stored is on disk), as a crashed broker.
    fn down(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broker_restart_mid_stream_loses_nothing_and_repeats_nothing() {
    let mut nats = PrivateNats::start();
    let db = SqliteFile::new();
    let url = nats.addr.to_string();
    let topic = Topic::new(&url).await;
    let consumer = start(&topic, &db.url(), &[("SLOW_MS", "200")]).await;
    topic.publish_orders("r", 0..20).await;
    // Down while messages are being handled and acked, up again on the same storage.
    nats.down();
    tokio::time::sleep(Duration::from_millis(500)).await;
    nats.up();
    // The publisher retries until acknowledged (some of those retries may be stored twice).
    topic.publish_orders("r", 20..40).await;
    topic.wait_drained(STEP).await;
    assert_once(&orders(&db.url()).await, (0..40).map(|n| format!("o-{n}")));
    drop(consumer);
}

/// `url` with its PostgreSQL server's address replaced by `proxy`'s.
fn through(url: &str, proxy: &TcpProxy) -> String {
    let proxied = url.replacen("127.0.0.1:5432", &proxy.addr().to_string(), 1);
    assert_ne!(
        proxied, url,
        "this test needs the local PostgreSQL at 127.0.0.1:5432"
    );
    proxied
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_cut_off_hands_messages_back_and_runs_none_twice() {
    let (topic, db) = (
        Topic::new("127.0.0.1:4222").await,
        PgDatabase::create().await,
    );
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let consumer = start(&topic, &through(&db.url, &proxy), &[]).await;
    topic.publish(Some("before"), &order("o-before", 1)).await;
    topic.wait_drained(STEP).await;

    proxy.set_up(false);
    topic.publish_orders("cut", 0..10).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (pending, waiting, _) = topic.backlog().await.expect("the consumer");
    assert!(
        pending + waiting as u64 > 0,
        "messages were answered while the database was cut off"
    );
    assert_eq!(
        orders(&db.url).await.len(),
        1,
        "an order was recorded while cut off"
    );

    proxy.set_up(true);
    topic.wait_drained(STEP).await;
    let ids = std::iter::once("o-before".to_owned()).chain((0..10).map(|n| format!("o-{n}")));
    assert_once(&orders(&db.url).await, ids);
    consumer.assert_said("message handed back");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_stalled_past_the_handler_deadline_rolls_back_and_runs_none_twice() {
    let (topic, db) = (
        Topic::new("127.0.0.1:4222").await,
        PgDatabase::create().await,
    );
    let consumer = start(&topic, &db.url, &[("HANDLER_TIMEOUT_MS", "1500")]).await;
    topic.publish(Some("before"), &order("o-before", 1)).await;
    topic.wait_drained(STEP).await;

    // A session of the test's own holds the `orders` table: every insert waits behind it.
    let lock = lock_orders(&db.url).await;
    topic.publish_orders("stall", 0..5).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (pending, waiting, _) = topic.backlog().await.expect("the consumer");
    assert!(
        pending + waiting as u64 > 0,
        "messages were acked while the table was locked"
    );
    unlock(lock).await;

    topic.wait_drained(STEP).await;
    let ids = std::iter::once("o-before".to_owned()).chain((0..5).map(|n| format!("o-{n}")));
    assert_once(&orders(&db.url).await, ids);
    consumer.assert_said("the handler ran longer than");
}
