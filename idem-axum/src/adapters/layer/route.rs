//! What the layer runs each request as: its settings, per route, and the operation they make.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use axum::extract::{MatchedPath, Request};
use http::{Method, StatusCode};

use crate::adapters::flow::{Covered, HttpOperation};
use crate::http::release::ClientErrors;
use idem_core::endpoint::{KeyMode, route_identity};
use idem_core::engine::{AtomicCommits, InFlightMode};
use idem_core::rules::{checked_name, checked_ttl};

/// Everything a layer was configured with.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub(super) defaults: Settings,
    pub(super) methods: Vec<Method>,
    pub(super) routes: HashMap<String, RouteSettings>,
    pub(super) skipped: HashSet<String>,
    /// The layer's body limit; the engine's when `None`.
    pub(super) max_request_bytes: Option<usize>,
}

/// What the flow needs for one route, resolved.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    pub(super) name: Option<&'static str>,
    pub(super) scope: &'static str,
    pub(super) ttl: Duration,
    pub(super) key: KeyMode,
    pub(super) in_flight: InFlightMode,
    pub(super) rejections: ClientErrors,
}

/// Overrides for one route under an [`IdempotencyLayer`](crate::IdempotencyLayer), built in the closure given to
/// [`IdempotencyLayer::route`](crate::IdempotencyLayer::route). Each setting left alone follows the layer's.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RouteSettings {
    pub(super) scope: Option<&'static str>,
    pub(super) ttl: Option<Duration>,
    pub(super) key: Option<KeyMode>,
    pub(super) in_flight: Option<InFlightMode>,
    pub(super) rejections: Option<ClientErrors>,
    pub(super) name: Option<&'static str>,
}

impl RouteSettings {
    /// The route's scope, as [`IdempotencyLayer::scope`](crate::IdempotencyLayer::scope); checked when the closure returns.
    pub fn scope(mut self, scope: &'static str) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The route's stable name: the identity of its records, metrics and traces, instead of
    /// `"{METHOD} {pattern}"`. Keep it when the route's path changes and its records should
    /// still replay, or give the same name as an `#[idempotent(name = ..)]` handler the route
    /// replaces.
    ///
    /// # Panics
    /// When `name` is not an operation name: 1..=128 bytes, no control characters, no
    /// whitespace at either end (the rule of the attribute's `name`).
    #[track_caller]
    pub fn name(mut self, name: &'static str) -> Self {
        checked_name("RouteSettings::name", name);
        self.name = Some(name);
        self
    }

    /// The route's TTL, as [`IdempotencyLayer::ttl`](crate::IdempotencyLayer::ttl).
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(checked_ttl("RouteSettings::ttl", ttl));
        self
    }

    /// The route's key mode, as [`IdempotencyLayer::key`](crate::IdempotencyLayer::key).
    pub fn key(mut self, key: KeyMode) -> Self {
        self.key = Some(key);
        self
    }

    /// The route's in-flight mode, as [`IdempotencyLayer::in_flight`](crate::IdempotencyLayer::in_flight).
    pub fn in_flight(mut self, in_flight: InFlightMode) -> Self {
        self.in_flight = Some(in_flight);
        self
    }

    /// The route's rejection statuses, as [`IdempotencyLayer::rejections`](crate::IdempotencyLayer::rejections).
    ///
    /// # Panics
    /// When a status is not a 4xx.
    #[track_caller]
    pub fn rejections(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.rejections = Some(client_errors(statuses));
        self
    }

    fn over(&self, defaults: Settings) -> Settings {
        Settings {
            name: self.name.or(defaults.name),
            scope: self.scope.unwrap_or(defaults.scope),
            ttl: self.ttl.unwrap_or(defaults.ttl),
            key: self.key.unwrap_or(defaults.key),
            in_flight: self.in_flight.unwrap_or(defaults.in_flight),
            rejections: self.rejections.unwrap_or(defaults.rejections),
        }
    }
}

#[track_caller]
pub(super) fn client_errors(statuses: impl IntoIterator<Item = StatusCode>) -> ClientErrors {
    let mut set = ClientErrors::NONE;
    for status in statuses {
        assert!(
            set.insert(status),
            "IdempotencyLayer: rejection status {status} is not a client error (4xx): 2xx and \
             3xx are always stored, 5xx always released"
        );
    }
    set
}

#[track_caller]
pub(super) fn check_path(method: &str, path: &str) {
    assert!(
        path.starts_with('/'),
        "IdempotencyLayer::{method}: the path `{path}` must be a route pattern starting with `/`, \
         such as \"/api/stories\""
    );
}

impl Config {
    /// The settings of requests of `method` on the route whose pattern is `path`, or `None`
    /// when the layer leaves them alone.
    pub(super) fn settings(&self, method: &Method, path: &str) -> Option<Settings> {
        if !self.methods.contains(method) || self.skipped.contains(path) {
            return None;
        }
        let route = self.routes.get(path);
        Some(route.map_or(self.defaults, |route| route.over(self.defaults)))
    }

    /// The operation a request runs as, or `None` when the layer leaves it alone.
    pub(super) fn operation(
        &self,
        request: &Request,
        engine_limit: usize,
    ) -> Option<HttpOperation> {
        let method = request.method();
        if !self.methods.contains(method) || request.extensions().get::<Covered>().is_some() {
            return None;
        }
        let Some(path) = request.extensions().get::<MatchedPath>() else {
            tracing::debug!(
                %method,
                path = request.uri().path(),
                "no route matched: the idempotency layer leaves the request alone"
            );
            return None;
        };
        let path = path.as_str();
        let settings = self.settings(method, path)?;
        Some(HttpOperation {
            name: match settings.name {
                Some(name) => Cow::Borrowed(name),
                None => route_identity(method, path),
            },
            scope: settings.scope,
            ttl: settings.ttl,
            key: settings.key,
            in_flight: settings.in_flight,
            released: settings.rejections,
            // Whether the handler takes a `Tx` is unknown until it runs: always lend one, and
            // claim before it (two commits).
            lends: true,
            commits: AtomicCommits::Two,
            max_request_bytes: self.max_request_bytes.unwrap_or(engine_limit),
        })
    }
}
