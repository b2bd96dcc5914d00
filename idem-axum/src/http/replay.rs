//! Replaying a retry before any other work, on stores that read in process.
//!
//! A retry usually sends the very bytes of the first request. On a store that
//! [reads in process](idem_core::store::ReadInProcess), the HTTP faces look the record up
//! as soon as the body is read and, when the stored payload says it answered the same bytes,
//! replay it at once: no canonical JSON, no body extractor, no claim. The check is a digest of
//! the raw request (method, path and query, `Content-Type`, body), kept in a small envelope
//! around the stored response. The raw request determines the fingerprint, so an equal raw
//! digest means an equal fingerprint: the early replay answers exactly what the claim would.
//! Anything else (another serialisation of the same JSON, a payload without the envelope, a
//! record in flight) takes the usual path.
//!
//! The raw digest is the fingerprint's own hash of the body as written
//! ([`Hasher::finish_as_is`](idem_core::fingerprint::Hasher::finish_as_is): the fingerprint's
//! domain and version, method, path and query, the body's encoding and its bytes). Those are
//! everything the fingerprint reads, so an equal raw digest means an equal fingerprint; the
//! `Content-Type` counts as far as the fingerprint reads it, as its encoding (JSON, form or
//! other). A body that is canonical as written (JSON already compact and in key order, or a body
//! hashed raw) has that hash for its fingerprint, so a fresh request hashes it once for both
//! digests, and a retry hashes its body once. An envelope written by an earlier release (whose
//! digest was built otherwise, and which only this process could have written) never matches:
//! its retry takes the usual path.

//! The envelope is written only on such stores, whose records never outlive the process: the
//! payloads of shared stores stay as every release reads them.

use idem_core::fingerprint::Fingerprint;

/// Opens an envelope: a tag of its own, so it is mistaken for no stored encoding.
const ENVELOPE: u8 = idem_core::format::RAW_REQUEST_ENVELOPE;

/// The digest of a request's raw method, path and query, body and its encoding (see the
/// module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawDigest([u8; 32]);

impl RawDigest {
    /// The digest of a raw request from `as_is`, the fingerprint's hash of it with its body as
    /// written (`request::raw_digest_of_request` computes it from the request).
    pub(crate) fn of(as_is: &Fingerprint) -> Self {
        Self(*as_is.as_bytes())
    }

    /// The 32 bytes.
    pub(crate) const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The envelope carrying the digest of the request that produced a payload: what the sealed
/// payload starts with, the payload following it.
pub(crate) fn envelope(raw: &RawDigest) -> [u8; 33] {
    let mut out = [ENVELOPE; 33];
    out[1..].copy_from_slice(&raw.0);
    out
}

/// The digest in `stored`'s envelope, if it has one, and the payload inside.
pub(crate) fn open(stored: &[u8]) -> (Option<RawDigest>, &[u8]) {
    match stored.split_first() {
        Some((&ENVELOPE, rest)) if rest.len() >= 32 => {
            let (digest, payload) = rest.split_at(32);
            let mut bytes = [0; 32];
            bytes.copy_from_slice(digest);
            (Some(RawDigest(bytes)), payload)
        }
        _ => (None, stored),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::response::StoredResponse;

    #[test]
    fn envelopes_open_to_what_was_sealed_and_bare_payloads_pass_through() {
        let raw = RawDigest([7; 32]);
        let response = StoredResponse::new(http::StatusCode::CREATED, [], b"{}"[..].into());
        let payload = response.encode();
        let sealed = response.encode_after(&envelope(&raw));
        assert_eq!(sealed.len(), sealed.capacity(), "one exact allocation");
        assert_eq!(sealed.len(), payload.len() + 33);
        assert_eq!(open(&sealed), (Some(raw), &payload[..]));
        // A payload stored without an envelope (by an earlier release, or on a shared store)
        // reads as it is.
        assert_eq!(open(&payload), (None, &payload[..]));
        assert_eq!(StoredResponse::decode(open(&sealed).1).ok(), Some(response));
        assert_eq!(open(&[]), (None, &[][..]));
        assert_eq!(open(&[ENVELOPE; 20]), (None, &[ENVELOPE; 20][..]));
    }
}
