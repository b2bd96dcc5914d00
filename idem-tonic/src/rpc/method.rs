//! What `#[idempotent]` declares about a tonic method, and where its key comes from.

use std::sync::OnceLock;
use std::time::Duration;

use http::HeaderName;
use tonic::metadata::MetadataMap;

use idem_core::endpoint::KeyMode;
use idem_core::engine::{AtomicCommits, InFlightMode, OpName};
use idem_core::error::KeyError;
use idem_core::key::IdempotencyKey;

/// One idempotent tonic method, as `#[idempotent]` declares it (a `static` per method).
#[doc(hidden)]
#[derive(Debug)]
pub struct GrpcMethod {
    /// The Rust method's path (`ledger::service::create_transfer`), for start-up checks.
    handler: &'static str,
    /// The full protobuf name of its request message.
    message: fn() -> String,
    /// The gRPC method's name (`CreateTransfer`), from the Rust method's.
    method: &'static str,
    /// `name = "..."`.
    name: Option<&'static str>,
    scope: &'static str,
    ttl: Duration,
    key: KeyMode,
    /// `key_field = "request_id"`: the request field holding the key (AIP-155).
    key_field: Option<&'static str>,
    /// `key_metadata = "..."`: the metadata entry holding the key, when not the engine's header.
    key_metadata: Option<&'static str>,
    in_flight: InFlightMode,
    commits: AtomicCommits,
    /// The operation's name, once known (it may need the request message's package).
    identity: OnceLock<OpName>,
}

impl GrpcMethod {
    /// A method named `method` (in the gRPC spelling) with its scope, TTL and key mode.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        handler: &'static str,
        message: fn() -> String,
        method: &'static str,
        name: Option<&'static str>,
        scope: &'static str,
        ttl_secs: u64,
        key: KeyMode,
        key_field: Option<&'static str>,
        key_metadata: Option<&'static str>,
        in_flight: InFlightMode,
        commits: AtomicCommits,
    ) -> Self {
        Self {
            handler,
            message,
            method,
            name,
            scope,
            ttl: Duration::from_secs(ttl_secs),
            key,
            key_field,
            key_metadata,
            in_flight,
            commits,
            identity: OnceLock::new(),
        }
    }

    /// The operation's name: `name = "..."`, or the request message's package and the gRPC
    /// method (`ledger.v1.CreateTransfer`).
    pub(crate) fn identity(&self, package: &str) -> &OpName {
        self.identity.get_or_init(|| match self.name {
            Some(name) => OpName::Borrowed(name),
            None if package.is_empty() => OpName::Borrowed(self.method),
            None => OpName::Owned(format!("{package}.{}", self.method)),
        })
    }

    /// The Rust method's path.
    pub(crate) fn handler(&self) -> &'static str {
        self.handler
    }

    /// The full protobuf name of the request message.
    pub(crate) fn message(&self) -> String {
        (self.message)()
    }

    pub(crate) fn scope(&self) -> &'static str {
        self.scope
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn key_mode(&self) -> KeyMode {
        self.key
    }

    pub(crate) fn in_flight(&self) -> InFlightMode {
        self.in_flight
    }

    pub(crate) fn commits(&self) -> AtomicCommits {
        self.commits
    }

    pub(crate) fn key_field(&self) -> Option<&'static str> {
        self.key_field
    }

    /// The metadata entry the key may come in: `key_metadata`, else the engine's header name
    /// (`idempotency-key`), which gRPC metadata spells the same way.
    pub(crate) fn metadata_name<'a>(&self, header: &'a HeaderName) -> &'a str {
        self.key_metadata.unwrap_or(header.as_str())
    }

    /// Where a call's key was read, as its error messages name it: "the `request_id` field",
    /// "the `idempotency-key` metadata entry", both; `None` (no key found) names every place
    /// the method reads a key from.
    pub(crate) fn key_places(&self, place: Option<KeyPlace>, entry: &str) -> String {
        let metadata = format!("the `{entry}` metadata entry");
        let field = |field: &str| format!("the `{field}` field");
        match (place, self.key_field) {
            (Some(KeyPlace::Metadata), _) | (_, None) => metadata,
            (Some(KeyPlace::Field), Some(name)) => field(name),
            (Some(KeyPlace::Both), Some(name)) => format!("{} and {metadata}", field(name)),
            (None, Some(name)) => format!("{} or {metadata}", field(name)),
        }
    }
}

/// Where a call's key was read from, for the errors that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyPlace {
    /// The request message's key field.
    Field,
    /// The key metadata entry.
    Metadata,
    /// Both, which named different keys.
    Both,
}

/// Registers an `#[idempotent]` tonic method with the builder's start-up checks.
#[doc(hidden)]
pub struct GrpcRegistration(pub &'static GrpcMethod);

inventory::collect!(GrpcRegistration);

/// Every `#[idempotent]` tonic method linked into this binary.
pub(crate) fn registered() -> impl Iterator<Item = &'static GrpcMethod> {
    inventory::iter::<GrpcRegistration>.into_iter().map(|r| r.0)
}

/// The request's key, from the key field (empty: absent) and the metadata entry; when both are
/// present they must name the same key.
pub(crate) fn key_of(
    field: Option<&str>,
    metadata: &MetadataMap,
    entry: &str,
) -> Result<Option<IdempotencyKey>, (KeyPlace, KeyError)> {
    let in_metadata = |error| (KeyPlace::Metadata, error);
    let mut values = metadata.get_all(entry).iter();
    let from_metadata = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => return Err(in_metadata(KeyError::Duplicate)),
        (Some(value), None) => Some(IdempotencyKey::parse(value.as_bytes()).map_err(in_metadata)?),
    };
    let from_field = match field {
        None | Some("") => None,
        Some(field) => Some(IdempotencyKey::new(field).map_err(|error| (KeyPlace::Field, error))?),
    };
    match (from_field, from_metadata) {
        (Some(a), Some(b)) if a != b => Err((KeyPlace::Both, KeyError::Disagree)),
        (Some(key), _) | (None, Some(key)) => Ok(Some(key)),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(values: &[&str]) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        for value in values {
            metadata.append("idempotency-key", value.parse().unwrap());
        }
        metadata
    }

    #[test]
    fn the_key_comes_from_the_field_or_the_metadata_and_both_must_agree() {
        let key = |k: &str| Ok(Some(IdempotencyKey::new(k).unwrap()));
        let entry = "idempotency-key";
        assert_eq!(key_of(Some("k1"), &metadata(&[]), entry), key("k1"));
        assert_eq!(key_of(Some(""), &metadata(&["k2"]), entry), key("k2"));
        assert_eq!(key_of(None, &metadata(&["k2"]), entry), key("k2"));
        assert_eq!(key_of(Some("k3"), &metadata(&["k3"]), entry), key("k3"));
        assert_eq!(key_of(Some(""), &metadata(&[]), entry), Ok(None));
        assert_eq!(
            key_of(Some("k1"), &metadata(&["k2"]), entry),
            Err((KeyPlace::Both, KeyError::Disagree))
        );
        assert_eq!(
            key_of(None, &metadata(&["k1", "k1"]), entry),
            Err((KeyPlace::Metadata, KeyError::Duplicate))
        );
        assert!(matches!(
            key_of(Some("has space"), &metadata(&[]), entry),
            Err((KeyPlace::Field, _))
        ));
        assert!(matches!(
            key_of(None, &metadata(&["has space"]), entry),
            Err((KeyPlace::Metadata, _))
        ));
        assert!(key_of(Some(&"x".repeat(256)), &metadata(&[]), entry).is_err());
    }

    #[test]
    fn the_operation_is_named_by_its_package_and_method_unless_named() {
        let method = |name| {
            GrpcMethod::new(
                "tests::create_transfer",
                String::new,
                "CreateTransfer",
                name,
                "global",
                60,
                KeyMode::Optional,
                Some("request_id"),
                None,
                InFlightMode::Reject,
                AtomicCommits::Two,
            )
        };
        assert_eq!(
            method(None).identity("ledger.v1"),
            "ledger.v1.CreateTransfer"
        );
        assert_eq!(method(None).identity(""), "CreateTransfer");
        assert_eq!(
            method(Some("transfers.create")).identity("x"),
            "transfers.create"
        );
    }
}
