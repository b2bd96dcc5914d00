//! Why an engine could not be built.

use crate::settings::scope::UnknownScope;

/// A misconfigured [`Idempotency`](super::Idempotency) engine, reported by
/// [`Builder::build`](super::Builder::build) at start-up rather
/// than by the first request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given to the builder.
    #[error("no idempotency store configured: call `.store(..)` on the builder")]
    MissingStore,
    /// An annotated endpoint names a scope that has no resolver.
    #[error("endpoint `{endpoint}`: {}", UnknownScope(.scope))]
    UnresolvedScope {
        /// The endpoint's handler (module path and function name).
        endpoint: &'static str,
        /// The scope it names.
        scope: &'static str,
    },
    /// An endpoint runs in atomic mode, but the store lends no transactions on its database.
    #[error(
        "endpoint `{endpoint}` runs in atomic mode on {database}, but the idempotency store \
         `{store}` offers no {database} transactions, so the handler's writes could not commit \
         with its stored response: build the engine with a store that does (`SqliteStore` for \
         SQLite, `PostgresStore` for PostgreSQL), on the database holding the endpoint's tables, \
         or take no `Tx` in the handler"
    )]
    AtomicUnsupported {
        /// The endpoint's handler (module path and function name).
        endpoint: &'static str,
        /// The database of its transaction (`"SQLite"`, `"PostgreSQL"`).
        database: &'static str,
        /// The store's type.
        store: &'static str,
    },
    /// A set given to `Builder::protobuf_descriptors` is not an encoded `FileDescriptorSet`.
    #[error("the protobuf descriptors given to the builder do not decode: {0}")]
    ProtobufDescriptors(String),
    /// An `#[idempotent]` tonic method's request message is not in the descriptors given to
    /// `Builder::protobuf_descriptors`, so its requests could not be fingerprinted.
    #[error(
        "method `{method}`: its request message `{message}` is not in the engine's protobuf \
         descriptors: pass the `FileDescriptorSet` the build script writes to \
         `Builder::protobuf_descriptors`"
    )]
    MissingDescriptors {
        /// The method (module path and name).
        method: &'static str,
        /// The request message's full protobuf name.
        message: String,
    },
    /// The renderer given to `Builder::render_rejections` returns a type the HTTP faces cannot
    /// send: they take one that returns `axum::response::Response`.
    #[error(
        "the renderer given to `render_rejections` returns `{found}`; the HTTP faces send \
         `axum::response::Response`: end it with `.into_response()`"
    )]
    RendererOutput {
        /// The type the renderer returns.
        found: &'static str,
    },
    /// `"global"` is built in and cannot be given a resolver.
    #[error("scope \"global\" is built in and takes no resolver")]
    ReservedScope,
}
