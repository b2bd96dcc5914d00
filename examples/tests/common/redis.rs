//! Redis for end-to-end tests: a key prefix of the test's own on the shared server, its keys
//! deleted afterwards, and servers started on it.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::ServerBuilder;

/// Whether this test binary runs every server on Redis (see the `common` module docs).
pub(super) fn redis_by_default() -> bool {
    env!("CARGO_CRATE_NAME").ends_with("_redis")
}

impl ServerBuilder {
    /// Keeps the idempotency records in Redis under `prefix` (`IDEM_STORE=redis`); the app data
    /// stays in `DATABASE_URL`.
    pub(crate) fn redis(self, prefix: &RedisPrefix) -> Self {
        self.env("IDEM_STORE", "redis")
            .env("REDIS_URL", prefix.url.as_str())
            .env("REDIS_PREFIX", prefix.prefix.as_str())
    }
}

/// The Redis server the tests use: `REDIS_URL` when it names one, else the local server.
pub(crate) fn redis_url() -> String {
    std::env::var("REDIS_URL")
        .ok()
        .filter(|url| url.starts_with("redis://"))
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// A fresh `REDIS_PREFIX` for servers of one test (shared by the instances, and the restarts,
/// that must see the same records). Its keys are deleted on drop.
#[derive(Debug)]
pub(crate) struct RedisPrefix {
    pub(crate) url: String,
    pub(crate) prefix: String,
}

impl RedisPrefix {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let prefix = format!(
            "payments_e2e_{}_{}_{}:",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::iter::repeat_with(fastrand::lowercase)
                .take(8)
                .collect::<String>()
        );
        Self {
            url: redis_url(),
            prefix,
        }
    }

    /// The keys under the prefix now.
    pub(crate) fn keys(&self) -> Vec<String> {
        let mut conn = self.connect();
        let keys: redis::Iter<'_, String> = redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg(format!("{}*", self.prefix))
            .clone()
            .iter(&mut conn)
            .expect("scan the test's Redis keys");
        keys.map(|key| key.expect("a key")).collect()
    }

    fn connect(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|e| panic!("Redis at {} is needed (set REDIS_URL): {e}", self.url))
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        let keys = self.keys();
        let mut conn = self.connect();
        for key in keys {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&key).query(&mut conn);
        }
    }
}
