//! The compile-time registry of `#[idempotent]` endpoints, and what an HTTP operation is.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::engine::OpName;
use crate::store::Capabilities;

/// What to do with a request that carries no idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyMode {
    /// Run the handler normally, without idempotency (`key = "optional"`, the default).
    Optional,
    /// Answer `400 idempotency_key_missing` (`key = "required"`).
    Required,
}

/// What to do with a duplicate that arrives while the first request is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlightMode {
    /// Answer `409 idempotency_key_in_progress` with `Retry-After` (`in_flight = "reject"`, the
    /// default).
    Reject,
    /// Wait, up to the engine's wait timeout, for the first request's response and replay it
    /// (`in_flight = "wait"`); answer 409 if it is still running then.
    Wait,
}

/// How a handler in atomic mode (one taking a `Tx` or `AnyTx`) commits on PostgreSQL. Other
/// stores and handlers without a transaction ignore it.
///
/// | | `commits = "one"` (default) | `commits = "two"` |
/// |---|---|---|
/// | commits per fresh request | 1 | 2 |
/// | round trips of idem's own | 2 (claim with `BEGIN`, completion with `COMMIT`) | 4 (claim, `BEGIN`, completion, `COMMIT`) |
/// | the transaction and its pooled connection are held | from the claim to the response: the handler's whole run | from the first `Tx::conn` to the response |
/// | a duplicate while the first runs | waits on the first's transaction: 409 after 50 ms (`in_flight = "reject"`), or the replay once it commits (`"wait"`, up to the wait timeout). Of its duplicates, one per process waits in the database, holding a pooled connection; the others wait in the process, holding none | sees the committed claim: 409, or polls for the replay |
/// | the process dies mid-handler | the transaction aborts with the connection: nothing is left, the retry runs at once | the claim stays until its lease lapses, then a retry takes it over |
/// | an operator's query for records in flight | shows none of this endpoint's (they are uncommitted) | shows them |
///
/// One commit saves two round trips and a commit per fresh request, so it answers sooner where
/// those cost more than CPU: a database across a network, or one whose commits wait for a disk.
/// Where the database shares the application's CPU on one machine and commits are cheap, it is
/// not faster in throughput (BENCHMARKS.md in the repository measures both, with the CPU each
/// costs). Choose two when the handler calls slow services before its first query (a payment
/// processor, say): with one commit a pooled connection and an open transaction are held for
/// that whole call, so a burst of slow requests with different keys can exhaust the pool
/// (duplicates of one key add at most one connection per process). Set PostgreSQL's `idle_in_transaction_session_timeout` above the slowest
/// handler: a one-commit claim whose client vanished without closing its connection (a network
/// partition, not a crash) holds the key until the server ends that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Commits {
    /// The claim is made inside the handler's transaction, which commits it completed, with the
    /// handler's writes (`commits = "one"`, the default).
    #[default]
    One,
    /// The claim commits on its own before the handler runs; the handler's transaction then
    /// commits its writes with the completion (`commits = "two"`).
    Two,
}

/// One `#[idempotent]` handler, as declared in its attribute. Created by the macro; listed by
/// [`Idempotency::endpoints`](crate::Idempotency::endpoints).
pub struct Endpoint {
    name: &'static str,
    scope: &'static str,
    ttl: Duration,
    key: KeyMode,
    in_flight: InFlightMode,
    commits: Commits,
    atomic: fn() -> Option<AtomicNeed>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("ttl", &self.ttl)
            .field("key", &self.key)
            .field("in_flight", &self.in_flight)
            .field("commits", &self.commits)
            .field("atomic", &self.atomic())
            .finish()
    }
}

/// What an endpoint in atomic mode needs from the store: transactions on its database.
#[derive(Clone, Copy)]
pub struct AtomicNeed {
    database: &'static str,
    is_met: fn(&Capabilities) -> bool,
}

impl AtomicNeed {
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) const fn new(database: &'static str, is_met: fn(&Capabilities) -> bool) -> Self {
        Self { database, is_met }
    }

    /// The database (`"SQLite"`, `"PostgreSQL"`, or `"any database"` for `AnyTx`).
    pub const fn database(&self) -> &'static str {
        self.database
    }

    /// Whether a store with `capabilities` can serve the endpoint.
    pub fn is_met(&self, capabilities: &Capabilities) -> bool {
        (self.is_met)(capabilities)
    }
}

impl fmt::Debug for AtomicNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicNeed")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

fn plain() -> Option<AtomicNeed> {
    None
}

impl Endpoint {
    #[doc(hidden)]
    pub const fn new(
        name: &'static str,
        scope: &'static str,
        ttl_secs: u64,
        key: KeyMode,
        in_flight: InFlightMode,
    ) -> Self {
        Self {
            name,
            scope,
            ttl: Duration::from_secs(ttl_secs),
            key,
            in_flight,
            commits: Commits::One,
            atomic: plain,
        }
    }

    /// Sets how atomic mode commits on PostgreSQL (`commits = "..."`).
    #[doc(hidden)]
    pub const fn with_commits(mut self, commits: Commits) -> Self {
        self.commits = commits;
        self
    }

    /// Sets how to find whether the handler takes a transaction (generated per parameter).
    #[doc(hidden)]
    pub const fn with_atomic(mut self, atomic: fn() -> Option<AtomicNeed>) -> Self {
        self.atomic = atomic;
        self
    }

    /// What the handler's `Tx` parameter needs from the store, when it runs in atomic mode.
    pub fn atomic(&self) -> Option<AtomicNeed> {
        (self.atomic)()
    }

    /// The operation as the HTTP flow runs it.
    pub(crate) fn spec(&self) -> Spec {
        let atomic = self.atomic().is_some();
        Spec {
            name: Cow::Borrowed(self.name),
            scope: self.scope,
            ttl: self.ttl,
            key: self.key,
            in_flight: self.in_flight,
            // Extractor rejections return before the claim: every response the flow sees is
            // the handler's own.
            released: ClientErrors::NONE,
            offers_tx: atomic,
            one_commit: atomic && self.commits == Commits::One,
        }
    }

    /// The endpoint's identity: module path and function name, e.g. `payments::create_charge`.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The scope whose value isolates records (`"global"`, `"org"`, ...).
    pub const fn scope(&self) -> &'static str {
        self.scope
    }

    /// How long a completed response is replayed.
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Behaviour when the key is missing.
    pub const fn key_mode(&self) -> KeyMode {
        self.key
    }

    /// Behaviour for in-flight duplicates.
    pub const fn in_flight(&self) -> InFlightMode {
        self.in_flight
    }

    /// How atomic mode commits on PostgreSQL.
    pub const fn commits(&self) -> Commits {
        self.commits
    }
}

/// An entry in the link-time registry, submitted by the macro.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static Endpoint);

inventory::collect!(Registration);

/// Every `#[idempotent]` endpoint linked into this binary.
pub(crate) fn registered() -> impl Iterator<Item = &'static Endpoint> {
    inventory::iter::<Registration>.into_iter().map(|r| r.0)
}

/// The scope every endpoint may name without a resolver: one key space for all callers.
pub const GLOBAL_SCOPE: &str = "global";

/// An idempotent HTTP operation as the flow runs it: an `#[idempotent]` endpoint, or a route
/// under the layer.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) name: OpName,
    pub(crate) scope: &'static str,
    pub(crate) ttl: Duration,
    pub(crate) key: KeyMode,
    pub(crate) in_flight: InFlightMode,
    /// Client-error statuses released like a 5xx instead of stored.
    pub(crate) released: ClientErrors,
    /// Whether the handler may take a `Tx`: the store's transactions are offered to it.
    pub(crate) offers_tx: bool,
    /// Whether the handler takes a `Tx` and its claim rides in that transaction when the store
    /// is PostgreSQL ([`Commits::One`]).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) one_commit: bool,
}

impl Spec {
    /// Whether a response with `status` releases the record (and rolls back a transaction)
    /// instead of being stored.
    pub(crate) fn releases(&self, status: StatusCode) -> bool {
        status.is_server_error() || self.released.contains(status)
    }
}

/// A set of 4xx statuses: one bit per status from 400 to 499.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientErrors(u128);

impl fmt::Debug for ClientErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(|s| s.as_u16()))
            .finish()
    }
}

impl ClientErrors {
    /// The empty set.
    pub(crate) const NONE: Self = Self(0);

    /// Adds `status`; `false` (and nothing added) when it is not a 4xx.
    pub(crate) fn insert(&mut self, status: StatusCode) -> bool {
        let Some(bit) = Self::bit(status) else {
            return false;
        };
        self.0 |= bit;
        true
    }

    pub(crate) fn contains(self, status: StatusCode) -> bool {
        Self::bit(status).is_some_and(|bit| self.0 & bit != 0)
    }

    /// The statuses in the set, in order.
    fn iter(self) -> impl Iterator<Item = StatusCode> {
        (400..500u16)
            .filter_map(|code| StatusCode::from_u16(code).ok())
            .filter(move |status| self.contains(*status))
    }

    fn bit(status: StatusCode) -> Option<u128> {
        status
            .is_client_error()
            .then(|| 1u128 << (status.as_u16() - 400))
    }
}
