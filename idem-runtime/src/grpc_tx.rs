//! Atomic mode for tonic methods: the transaction the engine lends an `#[idempotent]` method,
//! taken from its request. The facade's: it joins the gRPC face (`idem-tonic`) to the `Tx` of
//! the HTTP faces, which neither crate of the two depends on the other for.

use tonic::{Request, Status};

use crate::store::atomic::AtomicDatabase;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
use crate::tx::AnyTx;
use crate::tx::Tx;
use idem_tonic::status;

/// The transaction lent to this call of an `#[idempotent]` method: writes made through it
/// commit together with the stored reply, as a [`Tx`] handler parameter's do over HTTP.
///
/// A reply that is stored (a message, or a status whose code is in
/// [`STORED_CODES`](idem_tonic::STORED_CODES)) commits the transaction with it; any other status,
/// an error or a panic rolls it back and releases the key. Anywhere else, or on a store that
/// lends no transactions on `DB`, it is `INTERNAL` with reason `IDEMPOTENCY_MISCONFIGURED`.
pub fn tx<DB: AtomicDatabase, M>(request: &Request<M>) -> Result<Tx<DB>, Status> {
    Tx::from_extensions(request.extensions()).map_err(|rejection| status(&rejection))
}

/// [`tx`] on whichever database the engine's store lends ([`AnyTx`]); [`AnyTx::None`] on a
/// store without transactions.
#[cfg(all(feature = "sqlite", feature = "postgres"))]
pub fn any_tx<M>(request: &Request<M>) -> Result<AnyTx, Status> {
    AnyTx::from_extensions(request.extensions()).map_err(|rejection| status(&rejection))
}
