//! Atomic mode for tonic methods: the transaction the engine lends an `#[idempotent]` method,
//! taken from its request. The facade's: it joins the gRPC face (`idem-tonic`) to the
//! transaction handles of the HTTP faces, which neither crate of the two depends on the other
//! for.

use tonic::{Request, Status};

#[cfg(all(feature = "sqlite", feature = "postgres"))]
use crate::tx::AnyTx;
use idem_core::operation::Lent;
use idem_tonic::status;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
use {crate::store::atomic::AtomicDatabase, crate::tx::Tx};

/// The transaction lent to this call of an `#[idempotent]` method, as the handle `T` of the
/// store's database library: writes made through it commit together with the stored reply, as
/// they do when an HTTP handler takes `T` as a parameter.
///
/// `T` is any handle that implements [`Lent`]: [`Tx`](crate::Tx) on the sqlx stores ([`tx`] is
/// this for it), `TokioPostgresTx` and `DieselTx` on `TokioPostgresStore` (feature
/// `tokio-postgres`), or a handle of your own crate's.
///
/// A reply that is stored (a message, or a status whose code is in
/// [`STORED_CODES`](idem_tonic::STORED_CODES)) commits the transaction with it; any other status,
/// an error or a panic rolls it back and releases the key. Anywhere else, or on a store that
/// lends no transactions of `T`'s kind, it is `INTERNAL` with reason
/// `IDEMPOTENCY_MISCONFIGURED`.
pub fn lent<T: Lent, M>(request: &Request<M>) -> Result<T, Status> {
    idem_axum::atomic::lent(request.extensions()).map_err(|rejection| status(&rejection))
}

/// [`lent`] for the sqlx stores' [`Tx`]: the transaction lent to this call, on `DB`.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub fn tx<DB: AtomicDatabase, M>(request: &Request<M>) -> Result<Tx<DB>, Status> {
    lent(request)
}

/// [`tx`] on whichever database the engine's store lends ([`AnyTx`]); [`AnyTx::None`] on a
/// store without transactions.
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub fn any_tx<M>(request: &Request<M>) -> Result<AnyTx, Status> {
    AnyTx::from_extensions(request.extensions()).map_err(|rejection| status(&rejection))
}
