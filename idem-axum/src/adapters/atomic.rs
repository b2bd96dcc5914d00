//! Atomic mode, as the HTTP faces offer it: the handler's database writes and its stored
//! response commit together.
//!
//! The HTTP flow puts the engine's [`Lending`] in the request's extensions when the store lends
//! transactions; a transaction extractor takes its transaction from there with [`lent`]. The
//! extractors themselves belong to the crate of their database library (`idem_runtime::Tx` on
//! sqlx), which implements [`AtomicParam`] for them so that `#[idempotent]` recognises them.

use http::Extensions;

use idem_core::endpoint::AtomicNeed;
use idem_core::engine::Lending;
use idem_core::operation::Lent;
use idem_core::rejection::Rejection;

/// A handler argument that puts an `#[idempotent]` handler in atomic mode: what it needs from
/// the store, which building the engine checks against the store's capabilities.
///
/// Implemented by `idem_runtime::Tx` and `idem_runtime::AnyTx`; a crate lending the
/// transactions of another database library implements it for its own extractor.
pub trait AtomicParam {
    /// The transactions the argument needs.
    fn need() -> AtomicNeed;
}

/// The transaction lent to the request whose extensions these are, as `T`.
///
/// # Errors
///
/// [`Rejection::Misconfigured`] (`500 idempotency_misconfigured`) outside an `#[idempotent]`
/// handler or `IdempotencyLayer`, or when the store lends no transactions of `T`'s database.
pub fn lent<T: Lent>(extensions: &Extensions) -> Result<T, Rejection> {
    let lending = extensions
        .get::<Lending>()
        .ok_or(Rejection::Misconfigured {
            reason: "a `Tx` works only in an `#[idempotent]` handler or method, or under \
                     `IdempotencyLayer`, with a store that lends transactions",
        })?;
    T::lent(lending).map_err(|error| {
        tracing::error!(
            reason = error.reason(),
            "a handler takes a `Tx` its engine's store cannot lend: answered 500 without running \
             it; pass the handler to `Builder::serves` to have this refuse the build instead"
        );
        Rejection::Misconfigured {
            reason: error.reason(),
        }
    })
}
