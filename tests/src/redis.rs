//! Redis for tests: a [`RedisStore`] under a key prefix of its own on the shared server at
//! [`redis_url`], and private servers ([`RedisServer`]) for what must not touch the shared one:
//! a one-node Redis Cluster, a server with another eviction policy.
//!
//! Prefixes are named like the PostgreSQL schemas ([`unique_name`]), so
//! tests running in parallel never see each other's records; [`discard`](TestStore::discard)
//! deletes a store's keys. What a failed or careless test left behind (the engine suite never
//! discards its stores) is deleted by the first [`redis_store`] of a later test process once it
//! is an hour old, and expires by itself within its TTL anyway.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, Record, RecordFilter, RecordStats};
use idem_runtime::store::{
    Admin, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, RedisStore,
    RedisStoreBuilder, Store,
};

use crate::db::{TestStore, is_stale, unique_name};
use crate::watched::{Watched, free_port, server_dir};

/// The Redis server tests use unless `REDIS_URL` names another.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The shared Redis server for tests: `REDIS_URL`, else [`DEFAULT_REDIS_URL`].
pub fn redis_url() -> String {
    std::env::var("REDIS_URL")
        .ok()
        .filter(|url| url.starts_with("redis://"))
        .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned())
}

/// The shared server's address, for a proxy in front of it.
///
/// # Panics
/// When [`redis_url`] has no numeric `host:port`.
pub fn redis_addr() -> SocketAddr {
    let url = redis_url();
    let rest = url.trim_start_matches("redis://");
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = host_port.split(['/', '?']).next().unwrap_or_default();
    host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .expect("this test needs REDIS_URL with a numeric host:port")
}

/// A fresh key prefix: `idem_test_<unix seconds>_<pid>_<sequence>_<random>:`.
pub fn unique_prefix() -> String {
    format!("{}:", unique_name())
}

/// A builder for a store on the shared server under a fresh prefix.
pub fn redis_store_builder() -> RedisStoreBuilder {
    RedisStore::builder(redis_url()).prefix(unique_prefix())
}

/// A [`RedisStore`] on the shared server under a fresh prefix. [`TestStore::discard`] deletes
/// its keys.
///
/// # Panics
/// When the server cannot be reached, with a hint on how to start it.
pub async fn redis_store() -> RedisStore {
    let url = redis_url();
    let store = redis_store_builder().build().await.unwrap_or_else(|e| {
        panic!(
            "Redis is not reachable at {url} ({e}); start it with \
             `redis-server --daemonize yes --bind 127.0.0.1 --save ''` or set REDIS_URL"
        )
    });
    sweep_redis(&url).await;
    store
}

/// A store whose server has gone: a fresh prefix on the shared server, reached through a
/// proxy that is cut before the store is returned. Keep the proxy for the test's length.
pub async fn unreachable_store() -> (RedisStore, crate::TcpProxy) {
    let proxy = crate::TcpProxy::start(redis_addr()).await;
    let store = RedisStore::builder(format!("redis://{}", proxy.addr()))
        .prefix(unique_prefix())
        .build()
        .await
        .expect("a Redis store behind the proxy");
    proxy.set_up(false);
    (store, proxy)
}

/// Once per process: deletes the keys of test prefixes more than an hour old. Best effort.
async fn sweep_redis(url: &str) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::Relaxed) {
        return;
    }
    let Ok(client) = redis::Client::open(url) else {
        return;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return;
    };
    let mut cursor = 0u64;
    loop {
        let scanned: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("idem_test_*")
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await;
        let Ok((next, keys)) = scanned else { return };
        for key in keys {
            let prefix = key.split(':').next().unwrap_or_default();
            if is_stale(prefix) {
                let _: redis::RedisResult<()> =
                    redis::cmd("DEL").arg(&key).query_async(&mut conn).await;
            }
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Deletes every key under `prefix` on the server at `url` (one node). Keys are deleted one
/// by one, so this works on a cluster node too.
pub async fn delete_prefix(url: &str, prefix: &str) {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis to clean up");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan a test prefix");
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("DEL").arg(key).ignore();
            }
            let () = pipe.query_async(&mut conn).await.expect("delete test keys");
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

impl TestStore for RedisStore {
    async fn fresh() -> Self {
        redis_store().await
    }

    async fn discard(self) {
        delete_prefix(&redis_url(), self.prefix()).await;
    }
}

/// A `redis-server` of the test's own on a free loopback port, in a temporary directory; killed
/// (and the directory removed) on drop, and also when the test process dies, however it dies.
/// [`kill`](Self::kill) and [`restart`](Self::restart) crash it and start it again on what it
/// kept in that directory.
#[derive(Debug)]
pub struct RedisServer {
    url: String,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    /// The server running now. Dropped before `crashed`, whose watchdogs remove `dir`.
    server: Watched,
    /// The watchdogs of the servers [`restart`](Self::restart) replaced: kept until the end, as
    /// each removes `dir` once dropped.
    crashed: Vec<Watched>,
}

impl RedisServer {
    /// Starts a server with `args` added to its command line, and waits until it answers.
    ///
    /// # Panics
    /// When `redis-server` is not installed or does not start within 10 seconds.
    pub fn start(args: &[&str]) -> Self {
        let (port, dir) = (free_port(), server_dir("redis"));
        let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
        let server = Self {
            url: format!("redis://127.0.0.1:{port}"),
            server: spawn_redis(port, &dir, &args),
            port,
            dir,
            args,
            crashed: Vec::new(),
        };
        server.wait_until_up();
        server
    }

    /// Waits until the server answers `PING`.
    fn wait_until_up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.query::<String>(&redis::cmd("PING")).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start (is it installed?): {}",
                self.server.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL, as a crash would (nothing is flushed, saved or handed
    /// over), and waits until it no longer answers.
    ///
    /// # Panics
    /// When the server does not say its process id, or still answers after 10 seconds.
    pub fn kill(&self) {
        let info: String = self
            .query(redis::cmd("INFO").arg("server"))
            .expect("the server's INFO");
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .expect("the server's process id")
            .trim()
            .to_owned();
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        assert!(
            killed.is_ok_and(|status| status.success()),
            "kill -KILL {pid}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.query::<String>(&redis::cmd("PING")).is_ok() {
            assert!(Instant::now() < deadline, "redis-server survived SIGKILL");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Crashes the server ([`kill`](Self::kill)) and starts it again with the same arguments on
    /// the same port and directory: it has what it loads from there (its append-only file, its
    /// snapshot), and nothing else.
    pub fn restart(&mut self) {
        self.kill();
        let server = spawn_redis(self.port, &self.dir, &self.args);
        self.crashed
            .push(std::mem::replace(&mut self.server, server));
        self.wait_until_up();
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts a one-node Redis Cluster that owns every slot, and waits until it serves.
    pub fn start_cluster() -> Self {
        let server = Self::start(&["--cluster-enabled", "yes"]);
        let _: () = server
            .query(redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383))
            .expect("assign every slot to the node");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server
            .query::<String>(redis::cmd("CLUSTER").arg("INFO"))
            .is_ok_and(|info| info.contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs one command on a new connection (blocking).
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url.as_str())?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
        cmd.query(&mut conn)
    }
}

/// Runs `redis-server` on `port` in `dir`, without persistence unless `args` ask for it.
fn spawn_redis(port: u16, dir: &Path, args: &[String]) -> Watched {
    let port = port.to_string();
    let dir_arg = dir.to_str().expect("a UTF-8 temporary directory");
    let config = [
        "--port",
        &port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        dir_arg,
    ];
    let args = config.into_iter().chain(args.iter().map(String::as_str));
    Watched::spawn("redis-server", args, dir)
}

/// The one-node cluster of this test process, started on first use; it stops when the
/// process exits.
pub fn cluster_node() -> &'static RedisServer {
    static NODE: OnceLock<RedisServer> = OnceLock::new();
    NODE.get_or_init(RedisServer::start_cluster)
}

/// A [`RedisStore`] on a Redis Cluster (the process's [`cluster_node`]), as its own type so the
/// conformance suite runs once for it beside the single-server store.
#[derive(Debug, Clone)]
pub struct RedisClusterStore(pub RedisStore);

impl Store for RedisClusterStore {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, idem_runtime::StoreError> {
        self.0.claim(request).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, idem_runtime::StoreError> {
        self.0.complete(key, token, completion).await
    }

    async fn release(
        &self,
        key: &RecordKey,
        token: LeaseToken,
    ) -> Result<Fence, idem_runtime::StoreError> {
        self.0.release(key, token).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, idem_runtime::StoreError> {
        self.0.renew(key, token, lease_until).await
    }

    async fn purge_expired(
        &self,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, idem_runtime::StoreError> {
        self.0.purge_expired(now, limit).await
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        capabilities.expires_by_itself();
    }
}

impl Admin for RedisClusterStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, idem_runtime::StoreError> {
        self.0.list_records(filter, now, limit).await
    }

    async fn read_record(
        &self,
        key: &RecordKey,
    ) -> Result<Option<Record>, idem_runtime::StoreError> {
        self.0.read_record(key).await
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, idem_runtime::StoreError> {
        self.0.forget_record(key, now, force).await
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, idem_runtime::StoreError> {
        self.0.purge_records(filter, now, limit).await
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, idem_runtime::StoreError> {
        self.0.record_stats(filter, now).await
    }
}

impl TestStore for RedisClusterStore {
    async fn fresh() -> Self {
        let node = cluster_node();
        let store = RedisStore::cluster_builder([node.url()])
            .prefix(unique_prefix())
            .build()
            .await
            .expect("connect to the test cluster");
        Self(store)
    }

    async fn discard(self) {
        delete_prefix(cluster_node().url(), self.0.prefix()).await;
    }
}
