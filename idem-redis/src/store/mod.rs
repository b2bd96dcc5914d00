//! A store in Redis: records next to the API, expired by Redis itself.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{RedisError, Script, Value};

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::{RecordKey, hex};
use idem_core::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

mod builder;
mod codec;
mod conn;
mod records;
mod scan;

pub use builder::RedisStoreBuilder;
use codec::decode_claim;
use conn::Conn;

static CLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("claim.lua")));
static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("complete.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));
static PURGE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("purge.lua")));

/// Records in Redis, one hash per record, expired by Redis itself: no sweeper is needed
/// (`Idempotency::spawn_sweeper` says so and ends).
///
/// Every operation is one Lua script run with `EVALSHA` (the script is loaded again whenever the
/// server has forgotten it), so it is atomic and one round trip: a claim takes a record that is
/// absent, expired, or in flight under a lapsed lease of the same request, and otherwise reports
/// it; completion, release and lease renewal write only while the caller's lease token is still
/// on the record, so an owner that was taken over cannot touch the new owner's record. Each
/// write that sets a record's expiry also sets the key's (`PEXPIRE`); renewing a lease writes
/// one field and keeps it. Expiry is decided by the engine's clock, passed to the scripts; the
/// key's time to live is computed from it (`expires_at - now`), so Redis drops a record once
/// the engine no longer sees it, whatever Redis's own clock says.
///
/// The connection is a [`ConnectionManager`](redis::aio::ConnectionManager): it reconnects by
/// itself after Redis restarts or the network drops. A command in flight when the connection
/// dies is not resent by the manager; the store runs a claim whose reply was lost once more, and
/// the claim recognises its own lease token, so the request still owns the record it claimed.
/// Every operation gives up after the connect timeout plus the response timeout (see
/// [`RedisStoreBuilder`]); the engine then answers 503 and does not run the handler.
///
/// Redis offers no transactions with an application's SQL database, so the store has no atomic
/// mode: an endpoint taking a `Tx` is refused by `Builder::build`.
///
/// # Keys, and what an operator reads
///
/// A record is the hash `<prefix>{<hex of the record key>}` (prefix `idem:` by default). The hex
/// is a hash tag, so on Redis Cluster every key of a record lives in one slot and the same
/// scripts run unchanged. Its fields: `state` (`in_flight` or `completed`), `fingerprint` (hex),
/// `token`, `owners` (more than 1: a lapsed lease was taken over), `lease_until`, `expires_at`,
/// `operation` (the endpoint), `scope` and `scope_value` (the scope the key was given in and its
/// value, the tenant; a takeover keeps them), `created_at`, and once completed `completed_at`,
/// `status` and `payload` (the stored response, binary). Times are milliseconds since the Unix
/// epoch. Records written before the store kept `scope` and `scope_value` read them empty.
///
/// ```sh
/// redis-cli --scan --pattern 'idem:{*'                # every record
/// redis-cli HGETALL 'idem:{3f1c...}'                  # one record
/// redis-cli HMGET 'idem:{3f1c...}' state operation scope scope_value status created_at
/// redis-cli PTTL 'idem:{3f1c...}'                     # milliseconds until Redis drops it
/// ```
///
/// The operators' methods ([`Admin::list_records`](idem_core::store::Admin::list_records) and the rest), which the `idem` command
/// (`idem --store redis://... ls|show|forget|purge|stats`) and
/// `Idempotency::records` call, read and change these hashes.
/// Listing, counting and purging walk every key of the database that matches
/// `<prefix>{*` with `SCAN` (on every primary of a cluster; the prefix's glob characters are
/// escaped), read each record's fields but not its payload, and select in process: their cost
/// grows with the number of keys in the database, not with the number selected, and they keep
/// each record key seen in memory, so that a key `SCAN` returns twice counts once. A record
/// is expired when the engine's `now` has passed its `expires_at`, whatever Redis's clock says;
/// one Redis already dropped is not listed. Forgetting is one script (a live lease refuses it
/// unless forced), and a purge deletes each record it chose with a script that checks the record
/// is still that completed, live record (same token and completion time), so a record claimed
/// afresh meanwhile is left alone. A key named like a record that is not a record's hash is
/// [`StoreError::Corrupt`] and left in place (a forced forget deletes a hash that is not a
/// record's, and says so).
///
/// # Guarantees, and what Redis does not promise
///
/// - Replication is asynchronous: a claim acknowledged by a primary that fails before a replica
///   received it is lost in the failover, and a retry on the promoted replica runs the operation
///   a second time. `WAIT` narrows that window but does not close it (Redis is not a consensus
///   store), and this store does not issue it.
/// - Without persistence a restart loses every record; with `appendonly yes`, `appendfsync
///   everysec` (the default) may lose the last second, `appendfsync always` none.
/// - A `maxmemory-policy` other than `noeviction` lets Redis evict records, live ones included:
///   [`RedisStoreBuilder::build`] reads the policy and logs a warning when it is not
///   `noeviction`. With `noeviction`, a full Redis refuses claims: requests get 503.
///
/// ```no_run
/// use idem_redis::RedisStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: Arc<str>,
    /// How long one operation may take in all: connect timeout plus response timeout.
    deadline: Duration,
    maxmemory_policy: Option<Arc<str>>,
    persists: Option<bool>,
}

impl RedisStore {
    /// The key prefix used unless [`RedisStoreBuilder::prefix`] says otherwise.
    pub const DEFAULT_PREFIX: &'static str = "idem:";
    /// The connect timeout used unless [`RedisStoreBuilder::connect_timeout`] says otherwise.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The response timeout used unless [`RedisStoreBuilder::response_timeout`] says otherwise.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

    /// Connects to the server at `url` (`redis://[user:password@]host:port[/db]`, or
    /// `rediss://` with a TLS feature of the `redis` crate) with the default prefix and timeouts.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).build().await
    }

    /// Configures a store on the server at `url`.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), idem_core::error::StoreError> {
    /// use std::time::Duration;
    /// use idem_redis::RedisStore;
    ///
    /// let store = RedisStore::builder("redis://cache.internal:6379")
    ///     .prefix("payments:idem:")
    ///     .connect_timeout(Duration::from_millis(500))
    ///     .response_timeout(Duration::from_millis(250))
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::single(url.into())
    }

    /// Configures a store on a Redis Cluster, found through any of `nodes` (URLs of some of its
    /// nodes). The cluster connection follows slot moves and reconnects by itself.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), idem_core::error::StoreError> {
    /// use idem_redis::RedisStore;
    ///
    /// let store = RedisStore::cluster_builder(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<I, S>(nodes: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::cluster(nodes.into_iter().map(Into::into).collect())
    }

    /// What every record's key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The `maxmemory-policy` the server reported when the store connected (on a cluster: the
    /// first node's that is not `noeviction`, if any), or `None` if it could not be read.
    pub fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// Whether the server persists its data (`appendonly yes`, or a `save` schedule) as read when
    /// the store connected (on a cluster: every node), or `None` if it could not be read. A
    /// server that persists nothing forgets every record when it restarts, and the store warns
    /// about it at connect.
    pub fn persists(&self) -> Option<bool> {
        self.persists
    }

    /// The Redis key of `key`'s record: `<prefix>{<hex>}`.
    pub fn record_key(&self, key: &RecordKey) -> String {
        format!("{}{{{}}}", self.prefix, key.to_hex())
    }

    /// Runs `operation` within the store's deadline; past it the operation fails.
    async fn within<T>(
        &self,
        operation: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.deadline, operation).await {
            Ok(result) => result.map_err(StoreError::unavailable),
            Err(_) => Err(StoreError::unavailable(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("Redis did not answer within {:?}", self.deadline),
            ))),
        }
    }

    async fn fenced(&self, script: redis::ScriptInvocation<'_>) -> Result<Fence, StoreError> {
        let held: i64 = self.within(self.conn.invoke(&script)).await?;
        Ok(if held == 1 { Fence::Held } else { Fence::Lost })
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("deadline", &self.deadline)
            .field("maxmemory_policy", &self.maxmemory_policy)
            .field("persists", &self.persists)
            .finish_non_exhaustive()
    }
}

/// Whether the command may have run although its reply never came: the connection failed or
/// the reply did not come within the response timeout. redis reports both as I/O errors (a
/// dropped connection always is one); the timeout is named too in case a timeout ever comes as
/// another kind.
fn reply_lost(error: &RedisError) -> bool {
    error.is_io_error() || error.is_timeout()
}

/// Milliseconds from `from` to `to`, at least 1: a key's time to live.
fn px(from: Timestamp, to: Timestamp) -> i64 {
    to.as_millis().saturating_sub(from.as_millis()).max(1)
}

impl Store for RedisStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let mut script = CLAIM.prepare_invoke();
        script
            .key(self.record_key(req.key))
            .arg(hex(req.fingerprint.as_bytes()))
            .arg(req.token.as_i64())
            .arg(req.now.as_millis())
            .arg(req.lease_until.as_millis())
            .arg(req.expires_at.as_millis())
            .arg(px(req.now, req.expires_at))
            .arg(req.operation)
            .arg(req.scope)
            .arg(req.scope_value);
        let reply: Value = self
            .within(async {
                match self.conn.invoke(&script).await {
                    // The manager does not resend a command in flight when the connection dies.
                    // Run the claim again (the manager reconnects meanwhile): if the first one
                    // took the record, this one finds its own token and reports it acquired.
                    Err(error) if reply_lost(&error) => {
                        tracing::debug!(%error, "claim reply lost; claiming again");
                        self.conn.invoke(&script).await
                    }
                    done => done,
                }
            })
            .await?;
        decode_claim(reply)
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let mut script = COMPLETE.prepare_invoke();
        script
            .key(self.record_key(key))
            .arg(token.as_i64())
            .arg(completion.payload)
            .arg(
                completion
                    .status
                    .map_or_else(String::new, |s| s.to_string()),
            )
            .arg(completion.completed_at.as_millis())
            .arg(completion.expires_at.as_millis())
            // Not clamped: a completion that expires at once deletes the key.
            .arg(
                completion
                    .expires_at
                    .as_millis()
                    .saturating_sub(completion.completed_at.as_millis()),
            );
        self.fenced(script).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let mut script = RELEASE.prepare_invoke();
        script.key(self.record_key(key)).arg(token.as_i64());
        self.fenced(script).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let mut script = RENEW.prepare_invoke();
        script
            .key(self.record_key(key))
            .arg(token.as_i64())
            .arg(lease_until.as_millis());
        self.fenced(script).await
    }

    /// Redis drops expired records by itself; this deletes, now, up to `limit` records that
    /// expired by the engine's clock (earlier than Redis's expiry when the engine's clock runs
    /// ahead, as a `ManualClock` does in tests). It walks the prefix's keys with `SCAN` on every
    /// node, so it costs a pass over the keyspace: the sweeper never calls it on this store.
    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        if limit == 0 {
            return Ok(0);
        }
        let mut keys = scan::Keys::new(self).await?;
        while let Some(batch) = keys.next().await? {
            for key in batch {
                let mut script = PURGE.prepare_invoke();
                script.key(self.record_key(&key)).arg(now.as_millis());
                let deleted: i64 = self.within(self.conn.invoke(&script)).await?;
                purged += u64::from(deleted == 1);
                if purged >= u64::from(limit) {
                    return Ok(purged);
                }
            }
        }
        Ok(purged)
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        capabilities.expires_by_itself();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_live_from_now_until_expiry_and_at_least_a_millisecond() {
        let t = Timestamp::from_millis;
        assert_eq!(px(t(1_000), t(61_000)), 60_000);
        assert_eq!(px(t(1_000), t(1_000)), 1);
        assert_eq!(px(t(5_000), t(1_000)), 1);
    }
}
