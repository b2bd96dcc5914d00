//! The compile-time registry of `#[idempotent]` endpoints.

use std::time::Duration;

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

/// One `#[idempotent]` handler, as declared in its attribute. Created by the macro; listed by
/// [`Idempotency::endpoints`](crate::Idempotency::endpoints).
#[derive(Debug)]
pub struct Endpoint {
    name: &'static str,
    scope: &'static str,
    ttl: Duration,
    key: KeyMode,
    in_flight: InFlightMode,
    atomic: Option<&'static str>,
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
            atomic: None,
        }
    }

    #[doc(hidden)]
    pub const fn with_atomic(mut self, database: &'static str) -> Self {
        self.atomic = Some(database);
        self
    }

    /// The database of the handler's `Tx` parameter (`"sqlite"`, `"postgres"`) when
    /// it runs in atomic mode.
    pub const fn atomic(&self) -> Option<&'static str> {
        self.atomic
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
