//! The gRPC face of [idem]: `#[idempotent]` on the methods of a tonic service, on the engine of
//! `idem-core`. A retried call runs its method once; every retry gets the first reply, message
//! or status, with `idempotent-replayed: true` in its metadata.
//!
//! Applications use it through `idem-runtime` (feature `tonic`), whose `grpc` module documents
//! it: `#[idem_runtime::grpc::service]` on the service's `impl`, `#[idempotent(..)]` on each
//! method, and the descriptors of its messages given to the engine's builder
//! (`Builder::protobuf_descriptors`).
//!
//! What this crate adds to the engine's handle is its own: the decoded descriptors, made and
//! checked when the engine is built (its `FaceSetup`), and the registry of the methods
//! `#[idempotent]` marks.
//!
//! [idem]: https://docs.rs/idem-runtime
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up: `rpc` (what a method declares and the registry of them, the engine's
// answers as statuses, stored replies, the deterministic encoding of request messages, and
// this face's part of the handle), then `face` (one call through the engine). Beside them,
// `codec`: the protobuf codec that answers an undecodable request `INVALID_ARGUMENT`.
mod rpc;

mod face;

mod codec;

pub use codec::{ProstCodec, ProstDecoder};
pub use face::{IdempotentService, KeyField, RequestMessage, STORED_CODES};
pub use rpc::status::{ERROR_DOMAIN, status};
pub use rpc::stored::{REPLAYED_METADATA, ReplyFormatError};

/// What `#[idem_runtime::grpc::service]` expands to, and the benches' way in. Not public API:
/// anything here may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::face::{fingerprint_of_message, full_name, key_field, run};
    pub use crate::rpc::method::{GrpcMethod, GrpcRegistration};
}
