//! Scopes: whose keys a request's key belongs to. Two callers sending the same key in different
//! scope values never share a record.
//!
//! Every endpoint or method names a scope. [`GLOBAL_SCOPE`] needs nothing: one key space for
//! all callers. Any other scope needs a resolver, registered on the engine's builder, that finds
//! the scope's value (the tenant, the user) in what the caller sent, shown to it as a
//! [`Caller`]: its metadata (HTTP headers, gRPC metadata) and the extensions an authentication
//! layer put beside the request.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::{Extensions, HeaderMap};

/// The scope every endpoint may name without a resolver: one key space for all callers.
pub const GLOBAL_SCOPE: &str = "global";

/// What a scope resolver sees of a request: its metadata entries and its extensions, whatever
/// the transport (HTTP headers, gRPC metadata, a face's own values).
///
/// ```
/// use idem_core::settings::scope::Caller;
///
/// #[derive(Clone)]
/// struct UserId(String);
///
/// let mut headers = http::HeaderMap::new();
/// headers.insert("x-org", "acme".parse().unwrap());
/// let mut extensions = http::Extensions::new();
/// extensions.insert(UserId("ada".into()));
///
/// let caller = Caller::new(&headers, &extensions);
/// assert_eq!(caller.metadata("x-org"), Some("acme"));
/// assert_eq!(caller.extension::<UserId>().map(|u| u.0.as_str()), Some("ada"));
/// assert_eq!(Caller::empty().metadata("x-org"), None);
/// ```
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    headers: Option<&'a HeaderMap>,
    extensions: Option<&'a Extensions>,
}

impl<'a> Caller<'a> {
    /// A caller whose metadata entries are `headers` (an HTTP request's headers, a gRPC call's
    /// metadata as headers) and whose extensions are `extensions`. For faces.
    pub fn new(headers: &'a HeaderMap, extensions: &'a Extensions) -> Self {
        Self {
            headers: Some(headers),
            extensions: Some(extensions),
        }
    }

    /// A caller that sent nothing a resolver could read: every lookup finds nothing.
    pub fn empty() -> Self {
        Self {
            headers: None,
            extensions: None,
        }
    }

    /// The value of metadata entry `name` (an HTTP header, a gRPC metadata key; the name is
    /// case-insensitive), if it was sent once or more (the first), and is visible ASCII.
    pub fn metadata(&self, name: &str) -> Option<&'a str> {
        self.headers?.get(name)?.to_str().ok()
    }

    /// The extension of type `T` put beside the request (by an authentication layer, an
    /// extractor, an interceptor), if there is one.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&'a T> {
        self.extensions?.get::<T>()
    }
}

impl fmt::Debug for Caller<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values may be credentials: names only.
        let names: Vec<_> = self.headers.iter().flat_map(|h| h.keys()).collect();
        f.debug_struct("Caller")
            .field("metadata", &names)
            .finish_non_exhaustive()
    }
}

/// Whether every store can keep `value` as a scope value: text without a NUL byte (PostgreSQL's
/// `text` refuses NUL). The one rule of the resolvers' values and of the programmatic API's.
pub fn is_scope_value(value: &str) -> bool {
    !value.contains('\0')
}

/// How a scope's value is found in a request.
pub type Resolver = Arc<dyn Fn(&Caller<'_>) -> Option<String> + Send + Sync>;

/// The resolvers of an engine's scopes, by name.
#[derive(Clone, Default)]
pub struct Scopes {
    resolvers: HashMap<String, Resolver>,
}

/// A scope with no resolver on the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "scope \"{0}\" has no resolver: call `.scope(\"{0}\", |caller| ..)` on \
     `Idempotency::builder()`, or use \"global\""
)]
pub struct UnknownScope(pub &'static str);

/// Why a request's scope value could not be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeError {
    /// The scope has a resolver, which found no value in this request: the caller is not
    /// identified (HTTP 401, gRPC `UNAUTHENTICATED`).
    Unresolved,
    /// The scope has no resolver at all: the engine is misconfigured.
    Unknown,
}

/// `"global"` is built in and cannot be given a resolver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("scope \"global\" is built in and takes no resolver")]
pub struct ReservedScope;

impl Scopes {
    /// Registers the resolver of scope `name`, replacing any before it.
    pub fn insert(
        &mut self,
        name: impl Into<String>,
        resolve: Resolver,
    ) -> Result<(), ReservedScope> {
        let name = name.into();
        if name == GLOBAL_SCOPE {
            return Err(ReservedScope);
        }
        self.resolvers.insert(name, resolve);
        Ok(())
    }

    /// Whether requests can be scoped by `scope`: `"global"`, or a scope with a resolver. The
    /// one check every face makes of what it serves, before it serves it.
    pub fn check(&self, scope: &'static str) -> Result<(), UnknownScope> {
        if scope == GLOBAL_SCOPE || self.resolvers.contains_key(scope) {
            Ok(())
        } else {
            Err(UnknownScope(scope))
        }
    }

    /// The value of `scope` for `caller`: `""` for `"global"`. A value with a NUL byte, which
    /// not every store can keep, identifies no caller: [`ScopeError::Unresolved`].
    pub fn resolve(&self, scope: &str, caller: &Caller<'_>) -> Result<String, ScopeError> {
        if scope == GLOBAL_SCOPE {
            return Ok(String::new());
        }
        let resolve = self.resolvers.get(scope).ok_or(ScopeError::Unknown)?;
        let value = resolve(caller).ok_or(ScopeError::Unresolved)?;
        if !is_scope_value(&value) {
            // Not text every store keeps (PostgreSQL's `text` refuses it): were it claimed, the
            // request would fail as "store unavailable, retry", every time. No caller is
            // identified by it.
            tracing::warn!(
                scope,
                "a scope resolver returned a value with a NUL byte; the request is refused as \
                 not identified"
            );
            return Err(ScopeError::Unresolved);
        }
        Ok(value)
    }
}

impl fmt::Debug for Scopes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<_> = self.resolvers.keys().collect();
        names.sort();
        f.debug_set().entries(names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes() -> Scopes {
        let mut scopes = Scopes::default();
        let by_header: Resolver = Arc::new(|c: &Caller<'_>| c.metadata("x-org").map(str::to_owned));
        scopes.insert("org", by_header).unwrap();
        scopes
    }

    #[test]
    fn global_needs_no_resolver_and_takes_none() {
        let mut scopes = scopes();
        assert_eq!(scopes.check(GLOBAL_SCOPE), Ok(()));
        assert_eq!(
            scopes.resolve(GLOBAL_SCOPE, &Caller::empty()),
            Ok(String::new())
        );
        let resolver: Resolver = Arc::new(|_: &Caller<'_>| None);
        assert_eq!(scopes.insert(GLOBAL_SCOPE, resolver), Err(ReservedScope));
    }

    #[test]
    fn a_scope_resolves_from_what_the_caller_sent_or_says_why_not() {
        let scopes = scopes();
        let mut headers = HeaderMap::new();
        headers.insert("X-Org", "acme".parse().unwrap());
        let extensions = Extensions::new();
        let caller = Caller::new(&headers, &extensions);
        assert_eq!(scopes.resolve("org", &caller), Ok("acme".to_owned()));
        assert_eq!(
            scopes.resolve("org", &Caller::empty()),
            Err(ScopeError::Unresolved)
        );
        assert_eq!(scopes.resolve("user", &caller), Err(ScopeError::Unknown));
        assert_eq!(scopes.check("user"), Err(UnknownScope("user")));
    }

    #[test]
    fn a_value_with_a_nul_byte_identifies_no_caller() {
        let mut scopes = Scopes::default();
        let resolver: Resolver = Arc::new(|_: &Caller<'_>| Some("acme\0admin".to_owned()));
        scopes.insert("org", resolver).unwrap();
        assert_eq!(
            scopes.resolve("org", &Caller::empty()),
            Err(ScopeError::Unresolved)
        );
    }

    #[test]
    fn metadata_that_is_not_visible_ascii_is_not_read() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-org",
            http::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        let extensions = Extensions::new();
        assert_eq!(Caller::new(&headers, &extensions).metadata("x-org"), None);
    }

    #[test]
    fn debug_output_shows_names_not_values() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer secret".parse().unwrap());
        let extensions = Extensions::new();
        let shown = format!("{:?}", Caller::new(&headers, &extensions));
        assert!(
            shown.contains("authorization") && !shown.contains("secret"),
            "{shown}"
        );
    }
}
