//! The settings every face applies the same way, whatever carries the request: whose keys a
//! request's key belongs to ([`scope`]) and how large a request and its stored answer may be
//! ([`limits`]).
//!
//! A face (the HTTP adapters, the gRPC face, a consumer) holds these as the engine's handle
//! gives them, and asks them the same questions: "is this scope known", "whose is this
//! request", "is this answer small enough to keep". Nothing here names a transport's request
//! type: a face shows its request to a scope resolver as a [`Caller`](scope::Caller).

pub mod limits;
pub mod scope;
