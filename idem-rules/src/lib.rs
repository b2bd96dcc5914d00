//! The rules every idem crate shares, defined once: the syntax of an idempotency key
//! ([`key`]), what an operation may be named ([`name`]) and the bounds of a TTL ([`ttl`]).
//!
//! The server (`idem-runtime`), its attribute (`idem-macros`) and the client (`idem-client`)
//! all check against these, so a key one accepts the others accept, and a TTL or a name the
//! attribute refuses at compile time the layer and the programmatic API refuse too, with the
//! same message. Use them through those crates.

pub mod key;
pub mod name;
pub mod ttl;
