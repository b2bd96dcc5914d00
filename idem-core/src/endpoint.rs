//! The compile-time registry of `#[idempotent]` endpoints, and an HTTP operation's identity.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::Method;

use crate::engine::{AtomicCommits, InFlightMode, OpName};
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

/// One `#[idempotent]` handler, as declared in its attribute. Created by the macro; listed by
/// [`Idempotency::endpoints`](crate::idempotency::Idempotency::endpoints).
pub struct Endpoint {
    handler: &'static str,
    name: Option<&'static str>,
    scope: &'static str,
    ttl: Duration,
    key: KeyMode,
    in_flight: InFlightMode,
    commits: AtomicCommits,
    atomic: fn() -> Option<AtomicNeed>,
    /// Whether the missing-route warning was logged (see [`Endpoint::identity`]).
    warned: AtomicBool,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("handler", &self.handler)
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
    /// The need for transactions on `database`, met by the stores whose capabilities pass
    /// `is_met` (a face's `Tx` says which).
    pub const fn new(database: &'static str, is_met: fn(&Capabilities) -> bool) -> Self {
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
        handler: &'static str,
        scope: &'static str,
        ttl_secs: u64,
        key: KeyMode,
        in_flight: InFlightMode,
    ) -> Self {
        Self {
            handler,
            name: None,
            scope,
            ttl: Duration::from_secs(ttl_secs),
            key,
            in_flight,
            commits: AtomicCommits::One,
            atomic: plain,
            warned: AtomicBool::new(false),
        }
    }

    /// Sets the operation's stable name (`name = "..."`).
    #[doc(hidden)]
    pub const fn with_name(mut self, name: &'static str) -> Self {
        self.name = Some(name);
        self
    }

    /// Sets how atomic mode commits on PostgreSQL (`commits = "..."`).
    #[doc(hidden)]
    pub const fn with_commits(mut self, commits: AtomicCommits) -> Self {
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

    /// Where the handler is written: module path and function name, e.g.
    /// `payments::routes::create_charge`. Not its identity (see [`Endpoint::name`]).
    pub const fn handler(&self) -> &'static str {
        self.handler
    }

    /// The stable name given with `name = "..."`, if any: the operation's identity in its
    /// records' keys, its metrics and traces. Without one, the identity is the method and the
    /// route as routed (`POST /v1/charges`).
    pub const fn name(&self) -> Option<&'static str> {
        self.name
    }

    /// The identity of a request to this endpoint: its `name`, or else the method and the
    /// route's pattern as routed (`POST /v1/charges`, with the prefixes of `nest`), so renaming
    /// or moving the function changes nothing. A request no route matched (the handler called
    /// as a service of its own) falls back to the handler's Rust path, with a warning logged
    /// once: that identity changes when the function is renamed or moved.
    pub fn identity(&self, method: &Method, route: Option<&str>) -> OpName {
        if let Some(name) = self.name {
            return Cow::Borrowed(name);
        }
        if let Some(route) = route {
            return route_identity(method, route);
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                handler = self.handler,
                "an `#[idempotent]` handler ran outside a router's route and has no `name`: its \
                 records are keyed by its Rust path, which changes when the function is renamed \
                 or moved; give it `name = \"...\"`"
            );
        }
        Cow::Borrowed(self.handler)
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
    pub const fn commits(&self) -> AtomicCommits {
        self.commits
    }
}

/// The identity of requests of `method` on the route whose pattern is `route`, unless a name
/// says otherwise: `POST /v1/charges`. The same for the attribute and the layer, so a route
/// moved from one to the other keeps its records.
pub fn route_identity(method: &Method, route: &str) -> OpName {
    Cow::Owned(format!("{method} {route}"))
}

/// An entry in the link-time registry, submitted by the macro.
#[doc(hidden)]
#[derive(Debug)]
pub struct Registration(pub &'static Endpoint);

inventory::collect!(Registration);

/// Every `#[idempotent]` endpoint linked into this binary.
pub fn registered() -> impl Iterator<Item = &'static Endpoint> {
    inventory::iter::<Registration>.into_iter().map(|r| r.0)
}
