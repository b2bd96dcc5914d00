//! The first byte of every stored payload: whose encoding follows. One table, so no two
//! encodings share a tag and a payload is never read as another's.

/// An HTTP response (`StoredResponse`), written by both HTTP adapters.
pub const HTTP_RESPONSE: u8 = 0x1d;
/// A programmatic operation's output, as JSON.
pub const OPERATION_OUTPUT: u8 = 0x1e;
/// An HTTP response wrapped with the digest of the raw request that produced it, for early
/// replay on stores that read in process. Never written to a store that outlives the process.
pub const RAW_REQUEST_ENVELOPE: u8 = 0x1f;
/// A gRPC method's reply (its message or its final status, with metadata), written by the gRPC
/// face. Listed without the feature too, so no other encoding takes its tag.
pub const GRPC_REPLY: u8 = 0x20;
