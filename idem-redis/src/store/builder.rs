//! Configuring and connecting a [`RedisStore`]: the key prefix, the timeouts, and the start-up
//! check of the eviction policy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::RedisStore;
use super::conn::Conn;
use idem_core::error::StoreError;

/// Configures a [`RedisStore`]; made by [`RedisStore::builder`] (or
/// `RedisStore::cluster_builder` with the `cluster` feature).
#[derive(Debug, Clone)]
#[must_use = "call `.build().await` to connect the store"]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: String,
    connect_timeout: Duration,
    response_timeout: Duration,
}

#[derive(Clone)]
enum Target {
    Single(String),
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
}

impl std::fmt::Debug for Target {
    // URLs may carry a password: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Single(_) => f.write_str("Single"),
            #[cfg(feature = "cluster")]
            Self::Cluster(nodes) => write!(f, "Cluster({} nodes)", nodes.len()),
        }
    }
}

/// The longest key prefix the builder accepts.
pub(super) const MAX_PREFIX: usize = 128;

/// Characters a prefix may not hold: braces would move the hash tag. (`SCAN MATCH` wildcards are
/// allowed: the walks over the records escape them.)
const FORBIDDEN_IN_PREFIX: &[char] = &['{', '}'];

impl RedisStoreBuilder {
    pub(super) fn single(url: String) -> Self {
        Self::new(Target::Single(url))
    }

    #[cfg(feature = "cluster")]
    pub(super) fn cluster(nodes: Vec<String>) -> Self {
        Self::new(Target::Cluster(nodes))
    }

    fn new(target: Target) -> Self {
        Self {
            target,
            prefix: RedisStore::DEFAULT_PREFIX.to_owned(),
            connect_timeout: RedisStore::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: RedisStore::DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// What every record's key starts with (default `idem:`): a record is the hash
    /// `<prefix>{<64 hex digits>}`. Several applications (or stores) can share one Redis with
    /// different prefixes. 1 to 128 visible ASCII characters, without `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one attempt to (re)connect may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a command may wait for its reply (default 1 s). A claim past it fails, and the
    /// engine answers 503 without running the handler.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Validates the settings, connects, and checks the server's eviction policy and persistence:
    /// a policy other than `noeviction`, and a server that persists nothing, are logged as
    /// warnings (see [`RedisStore`]).
    ///
    /// # Errors
    /// [`StoreError::Config`] for a bad prefix, a zero timeout or a URL that does not parse
    /// (checked before connecting), [`StoreError::Unavailable`] when Redis cannot be reached.
    pub async fn build(self) -> Result<RedisStore, StoreError> {
        validate_prefix(&self.prefix)?;
        for (what, timeout) in [
            ("connect", self.connect_timeout),
            ("response", self.response_timeout),
        ] {
            if timeout.is_zero() {
                return Err(StoreError::Config(
                    format!("the Redis {what} timeout must be longer than zero").into(),
                ));
            }
        }
        let conn = match &self.target {
            Target::Single(url) => Conn::Single(self.connect_single(url).await?),
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => self.connect_cluster(nodes).await?,
        };
        let maxmemory_policy = check_eviction_policy(&conn).await;
        let persists = check_persistence(&conn).await;
        Ok(RedisStore {
            conn,
            prefix: Arc::from(self.prefix),
            deadline: self.connect_timeout + self.response_timeout,
            maxmemory_policy: maxmemory_policy.map(Arc::from),
            persists,
        })
    }

    async fn connect_single(&self, url: &str) -> Result<ConnectionManager, StoreError> {
        let client = redis::Client::open(url).map_err(invalid_url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            // Reconnect attempts after a drop: a few, quickly, then the next command starts
            // over. Commands wait for them, bounded by the store's deadline.
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
            .set_number_of_retries(3);
        ConnectionManager::new_with_config(client, config)
            .await
            .map_err(StoreError::unavailable)
    }

    #[cfg(feature = "cluster")]
    async fn connect_cluster(&self, nodes: &[String]) -> Result<Conn, StoreError> {
        use redis::{ConnectionAddr, IntoConnectionInfo};
        if nodes.is_empty() {
            return Err(StoreError::Config(
                "a Redis Cluster store needs at least one node URL".into(),
            ));
        }
        let mut seeds = Vec::new();
        for node in nodes {
            let info = node.as_str().into_connection_info().map_err(invalid_url)?;
            match info.addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    seeds.push((host.clone(), *port));
                }
                _ => {}
            }
        }
        let client = redis::cluster::ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.response_timeout)
            .overall_response_timeout(Some(self.connect_timeout + self.response_timeout))
            .build()
            .map_err(invalid_url)?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(StoreError::unavailable)?;
        Ok(Conn::Cluster {
            conn,
            seeds: seeds.into(),
        })
    }
}

/// Refuses a prefix that would break the hash tag, or is not plain visible ASCII.
pub(super) fn validate_prefix(prefix: &str) -> Result<(), StoreError> {
    let valid = (1..=MAX_PREFIX).contains(&prefix.len())
        && prefix.chars().all(|c| c.is_ascii_graphic())
        && !prefix.contains(FORBIDDEN_IN_PREFIX);
    if valid {
        Ok(())
    } else {
        Err(StoreError::Config(
            format!(
                "invalid Redis key prefix {prefix:?}: use 1 to {MAX_PREFIX} visible ASCII \
                 characters without `{{` or `}}`"
            )
            .into(),
        ))
    }
}

fn invalid_url(error: redis::RedisError) -> StoreError {
    // The error names what is wrong; the URL (which may hold a password) is not repeated.
    StoreError::Config(format!("invalid Redis URL: {error}").into())
}

/// Reads `maxmemory-policy` on every node and warns about each that may evict records. Returns
/// the policy found (the first that is not `noeviction`, if any), or `None` when it cannot be
/// read (managed services often rename or forbid `CONFIG`).
async fn check_eviction_policy(conn: &Conn) -> Option<String> {
    let nodes = match conn.nodes().await {
        Ok(nodes) => nodes,
        Err(error) => {
            tracing::debug!(%error, "could not list the Redis nodes to check maxmemory-policy");
            return None;
        }
    };
    let mut seen = None;
    for node in nodes {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg("maxmemory-policy");
        let policy = match conn.on::<HashMap<String, String>>(&node, cmd).await {
            Ok(mut reply) => reply.remove("maxmemory-policy"),
            Err(error) => {
                tracing::debug!(%error, %node, "could not read the Redis maxmemory-policy");
                None
            }
        };
        let Some(policy) = policy else { continue };
        if let Some(warning) = eviction_warning(&policy) {
            tracing::warn!(policy, %node, "{warning}");
            seen = Some(policy);
        } else if seen.is_none() {
            seen = Some(policy);
        }
    }
    seen
}

/// Reads `appendonly` and `save` on every node and warns about each that persists nothing.
/// Returns whether every node read persists something, or `None` when none could be read.
async fn check_persistence(conn: &Conn) -> Option<bool> {
    let nodes = conn.nodes().await.ok()?;
    let mut persists = None;
    for node in nodes {
        let setting = async |name: &str| {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(name);
            match conn.on::<HashMap<String, String>>(&node, cmd).await {
                Ok(mut reply) => reply.remove(name),
                Err(error) => {
                    tracing::debug!(%error, %node, name, "could not read a Redis setting");
                    None
                }
            }
        };
        let (Some(appendonly), Some(save)) = (setting("appendonly").await, setting("save").await)
        else {
            continue;
        };
        let node_persists = appendonly.eq_ignore_ascii_case("yes") || !save.trim().is_empty();
        if !node_persists {
            tracing::warn!(%node, "{}", PERSISTENCE_WARNING);
        }
        persists = Some(persists.unwrap_or(true) && node_persists);
    }
    persists
}

/// What to tell the operator about a Redis that persists nothing.
pub(super) const PERSISTENCE_WARNING: &str = "Redis persists nothing (`appendonly no`, `save \"\"`): \
     a restart or a crash of Redis forgets every idempotency record, in flight and completed, \
     and the retries of those requests run the operation again. Turn on `appendonly yes` \
     (`appendfsync always` loses no claim, `everysec` up to a second of them), or accept that \
     a Redis restart repeats recent operations";

/// What to tell the operator about `maxmemory-policy` = `policy`, if it can drop records.
pub(super) fn eviction_warning(policy: &str) -> Option<String> {
    (!policy.eq_ignore_ascii_case("noeviction")).then(|| {
        format!(
            "Redis maxmemory-policy is `{policy}`: once Redis reaches maxmemory it may evict \
             idempotency records, live ones included, and a retry of an evicted request runs \
             the operation again. Set `maxmemory-policy noeviction`: a full Redis then refuses \
             new claims, and requests get 503 instead of running twice"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_that_would_break_the_hash_tag_are_refused() {
        for good in [
            "idem:",
            "app/payments:idem:",
            "x",
            &"p".repeat(MAX_PREFIX),
            // Glob characters are escaped where the store scans.
            "idem*",
            "idem?",
            "[idem]",
            "back\\slash",
        ] {
            assert!(validate_prefix(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "a{b",
            "a}b",
            "with space",
            "caf\u{e9}",
            "new\nline",
            &"p".repeat(MAX_PREFIX + 1),
        ] {
            match validate_prefix(bad) {
                Err(StoreError::Config(message)) => {
                    assert!(message.contains("invalid Redis key prefix"), "{message}")
                }
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
    }

    #[test]
    fn only_noeviction_is_quiet() {
        assert_eq!(eviction_warning("noeviction"), None);
        assert_eq!(eviction_warning("NOEVICTION"), None);
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let warning = eviction_warning(policy).expect(policy);
            assert!(warning.contains(policy), "{warning}");
            assert!(warning.contains("noeviction"), "{warning}");
            assert!(warning.contains("runs the operation again"), "{warning}");
        }
    }
}
