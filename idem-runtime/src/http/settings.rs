//! What the HTTP adapters add to the engine: the key header, body limits, how a request's scope
//! is found, and how the engine's own answers are rendered.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use http::HeaderName;
use http::request::Parts;

use super::rejection::Rejection;

/// The scope every endpoint may name without a resolver: one key space for all callers.
pub const GLOBAL_SCOPE: &str = "global";

/// How a scope's principal is found in a request.
pub(crate) type Resolver = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
/// How the engine's answers are rendered in the application's format.
pub(crate) type Renderer = Arc<dyn Fn(&Rejection) -> Response + Send + Sync>;

/// The HTTP settings of an engine, set on its [`Builder`](crate::Builder).
#[derive(Clone)]
pub(crate) struct HttpSettings {
    /// The request header carrying the key.
    pub(crate) header: HeaderName,
    /// The largest response kept for replay.
    pub(crate) max_response_bytes: usize,
    /// The largest request body an idempotent request may have.
    pub(crate) max_request_bytes: usize,
    /// The resolver of each scope but `"global"`.
    pub(crate) scopes: HashMap<String, Resolver>,
    /// The application's format for the engine's answers, if it has one.
    pub(crate) render: Option<Renderer>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            header: HeaderName::from_static("idempotency-key"),
            max_response_bytes: 2 * 1024 * 1024,
            max_request_bytes: 2 * 1024 * 1024,
            scopes: HashMap::new(),
            render: None,
        }
    }
}

/// A scope with no resolver on the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "scope \"{0}\" has no resolver: call `.scope(\"{0}\", |parts| ..)` on \
     `Idempotency::builder()`, or use \"global\""
)]
pub(crate) struct UnknownScope(pub(crate) &'static str);

/// Why a scope's principal could not be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScopeError {
    /// The scope has a resolver, which found no principal in this request.
    Unresolved,
    /// The scope has no resolver at all.
    Unknown,
}

impl HttpSettings {
    /// The engine's own answer: problem+json, or the application's format
    /// ([`Builder::render_rejections`](crate::Builder::render_rejections)) with the
    /// rejection's status and `Retry-After` kept.
    pub(crate) fn reject(&self, rejection: Rejection) -> Response {
        let Some(render) = &self.render else {
            return rejection.into_response();
        };
        let mut response = render(&rejection);
        *response.status_mut() = rejection.status();
        if let Some(value) = rejection.retry_after_header() {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, value);
        }
        response
    }

    /// Whether requests can be scoped by `scope`: `"global"`, or a scope with a resolver. The
    /// one check of both the attribute's endpoints (at build) and the layer's scopes.
    pub(crate) fn check_scope(&self, scope: &'static str) -> Result<(), UnknownScope> {
        if scope == GLOBAL_SCOPE || self.scopes.contains_key(scope) {
            Ok(())
        } else {
            Err(UnknownScope(scope))
        }
    }

    /// The principal for `scope` in a request: `""` for `"global"`.
    pub(crate) fn resolve_scope(&self, scope: &str, parts: &Parts) -> Result<String, ScopeError> {
        if scope == GLOBAL_SCOPE {
            return Ok(String::new());
        }
        let resolve = self.scopes.get(scope).ok_or(ScopeError::Unknown)?;
        resolve(parts).ok_or(ScopeError::Unresolved)
    }

    /// The rejection for a scope that could not be resolved.
    pub(crate) fn scope_rejection(scope: &'static str, error: ScopeError) -> Rejection {
        match error {
            ScopeError::Unresolved => Rejection::ScopeUnresolved { scope },
            ScopeError::Unknown => Rejection::ScopeUnknown { scope },
        }
    }
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut scopes: Vec<_> = self.scopes.keys().collect();
        scopes.sort();
        f.debug_struct("HttpSettings")
            .field("header", &self.header)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("scopes", &scopes)
            .field("render", &self.render.is_some())
            .finish()
    }
}
