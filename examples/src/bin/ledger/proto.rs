//! The code `build.rs` generates from `examples/proto/ledger/v1/ledger.proto`: the messages, the
//! `Ledger` server, and the encoded descriptor set.
#![allow(unreachable_pub, missing_docs, clippy::all)]

tonic::include_proto!("ledger.v1");

/// The encoded `FileDescriptorSet` of `ledger.proto`: what server reflection answers with, and
/// what the idempotency engine reads the request messages' fields from.
pub(crate) const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("ledger_descriptor");
