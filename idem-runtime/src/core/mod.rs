//! The transport-neutral core: keys, fingerprints, time and the errors of stores.
//!
//! Nothing here names HTTP, axum or a response type. A record's payload is opaque bytes that an
//! adapter encodes and decodes; the first two bytes are its format tag ([`format`]) and version
//! (the HTTP response encoding starts `0x1d 0x01`), so a payload written by an older release is
//! recognised, not misread.

pub mod clock;
pub(crate) mod error;
pub(crate) mod fingerprint;
pub(crate) mod format;
pub(crate) mod key;
pub(crate) mod rules;
