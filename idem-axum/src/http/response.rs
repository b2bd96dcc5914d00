//! Capturing a handler's response and replaying it byte for byte.

use std::io::{Read, Write};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use idem_core::error::StoreError;

/// The header added to every replayed response.
pub const REPLAYED_HEADER: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Bodies at least this large are compressed by [`StoredResponse::encode`] (when it helps).
const COMPRESS_FROM: usize = 1024;

/// A completed response as kept by a store: status, end-to-end headers in order (repeated names
/// included), and the body bytes.
///
/// `Set-Cookie` and hop-by-hop headers are never kept: a replay must not hand one client's session
/// to another retry, and connection-level headers describe a connection that no longer exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

impl StoredResponse {
    /// A response to store. Headers that must not be replayed are dropped here.
    pub fn new(
        status: StatusCode,
        headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
        body: Bytes,
    ) -> Self {
        let mut kept: Vec<_> = headers.into_iter().collect();
        let connection_named = connection_tokens(&kept);
        kept.retain(|(name, _)| is_end_to_end(name) && !connection_named.contains(name));
        Self {
            status,
            headers: kept,
            body,
        }
    }

    /// Captures the parts and fully-buffered body of a handler's response.
    pub(crate) fn capture(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Self {
        // HeaderMap iterates a repeated name's values in insertion order, each yielding its name.
        Self::new(
            status,
            headers.iter().map(|(n, v)| (n.clone(), v.clone())),
            body,
        )
    }

    /// The stored status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stored headers, in order.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// The stored body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Rebuilds the response for a retry, adding `Idempotent-Replayed: true`.
    pub fn into_replay(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.reserve(self.headers.len() + 1);
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        response
    }

    /// Serialises for stores that keep bytes. Large bodies are deflate-compressed when that makes
    /// them smaller. The format is versioned and read back by [`StoredResponse::decode`].
    pub fn encode(&self) -> Vec<u8> {
        self.encode_after(&[])
    }

    /// `prefix`, then what [`StoredResponse::encode`] writes, in one allocation of exactly their
    /// size: nothing is copied or reallocated on the way to the store.
    pub(crate) fn encode_after(&self, prefix: &[u8]) -> Vec<u8> {
        let compressed = (self.body.len() >= COMPRESS_FROM)
            .then(|| deflate(&self.body))
            .filter(|c| c.len() < self.body.len());
        let body: &[u8] = compressed.as_deref().unwrap_or(&self.body);
        // Magic, version and flags; status; header count; each header's two lengths and bytes.
        let headers: usize = (self.headers.iter())
            .map(|(name, value)| 8 + name.as_str().len() + value.len())
            .sum();
        let mut out = Vec::with_capacity(prefix.len() + 3 + 2 + 4 + headers + body.len());
        out.extend_from_slice(prefix);
        out.extend_from_slice(&[MAGIC, VERSION, u8::from(compressed.is_some())]);
        out.extend_from_slice(&self.status.as_u16().to_be_bytes());
        out.extend_from_slice(&(self.headers.len() as u32).to_be_bytes());
        for (name, value) in &self.headers {
            put_bytes(&mut out, name.as_str().as_bytes());
            put_bytes(&mut out, value.as_bytes());
        }
        out.extend_from_slice(body);
        out
    }

    /// Reads back what [`StoredResponse::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = |what: &'static str| StoreError::Corrupt(what.into());
        let mut r = Reader(bytes);
        if r.take(2)? != [MAGIC, VERSION] {
            return Err(corrupt("unknown response encoding"));
        }
        let flags = r.take(1)?[0];
        let status = u16::from_be_bytes(r.array()?);
        let status = StatusCode::from_u16(status).map_err(|_| corrupt("invalid status"))?;
        let count = u32::from_be_bytes(r.array()?) as usize;
        let mut headers = Vec::with_capacity(count.min(256));
        for _ in 0..count {
            let name =
                HeaderName::from_bytes(r.bytes()?).map_err(|_| corrupt("invalid header name"))?;
            let value =
                HeaderValue::from_bytes(r.bytes()?).map_err(|_| corrupt("invalid header value"))?;
            headers.push((name, value));
        }
        let body = if flags & 1 == 1 {
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(r.0)
                .read_to_end(&mut out)
                .map_err(|_| corrupt("invalid compressed body"))?;
            Bytes::from(out)
        } else {
            Bytes::copy_from_slice(r.0)
        };
        Ok(Self {
            status,
            headers,
            body,
        })
    }
}

const MAGIC: u8 = idem_core::format::HTTP_RESPONSE;
const VERSION: u8 = 1;

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(StoreError::Corrupt("truncated response".into()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let len = u32::from_be_bytes(self.array()?) as usize;
        self.take(len)
    }
}

fn deflate(body: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(body.len() / 2),
        flate2::Compression::fast(),
    );
    // Writing into a Vec cannot fail.
    let _ = encoder.write_all(body);
    encoder.finish().unwrap_or_default()
}

/// RFC 9110 section 7.6.1 hop-by-hop fields, plus `Set-Cookie`, which is end-to-end but belongs
/// to one client's session and must not be replayed to another.
fn is_end_to_end(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::CONNECTION
            | header::PROXY_AUTHENTICATE
            | header::PROXY_AUTHORIZATION
            | header::TE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::UPGRADE
            | header::SET_COOKIE
    ) && name.as_str() != "keep-alive"
        && name.as_str() != "proxy-connection"
        && *name != REPLAYED_HEADER
}

/// Fields named by `Connection` are hop-by-hop too.
fn connection_tokens(headers: &[(HeaderName, HeaderValue)]) -> Vec<HeaderName> {
    headers
        .iter()
        .filter(|(name, _)| *name == header::CONNECTION)
        .filter_map(|(_, value)| value.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn h(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
        (
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    }

    #[test]
    fn set_cookie_and_hop_by_hop_headers_are_not_stored() {
        let stored = StoredResponse::new(
            StatusCode::CREATED,
            [
                h("content-type", "application/json"),
                h("set-cookie", "session=abc"),
                h("connection", "keep-alive, x-hop"),
                h("keep-alive", "timeout=5"),
                h("transfer-encoding", "chunked"),
                h("x-hop", "1"),
                h("location", "/v1/charges/ch_1"),
            ],
            Bytes::new(),
        );
        let names: Vec<_> = stored.headers().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["content-type", "location"]);
    }

    #[test]
    fn encoding_round_trips_repeated_headers_in_order() {
        let stored = StoredResponse::new(
            StatusCode::ACCEPTED,
            [
                h("x-a", "1"),
                h("link", "<a>"),
                h("x-a", "2"),
                h("link", "<b>"),
            ],
            Bytes::from_static(b"\x00\x01binary\xff"),
        );
        let encoded = stored.encode();
        assert_eq!(encoded.len(), encoded.capacity(), "one exact allocation");
        let decoded = StoredResponse::decode(&encoded).unwrap();
        assert_eq!(decoded, stored);
        assert_eq!(decoded.status(), StatusCode::ACCEPTED);
    }

    #[test]
    fn large_bodies_are_compressed_and_restored_exactly() {
        let body: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let stored = StoredResponse::new(StatusCode::OK, [], Bytes::from(body));
        let encoded = stored.encode();
        assert_eq!(encoded.len(), encoded.capacity(), "one exact allocation");
        assert!(
            encoded.len() < stored.body().len() / 2,
            "{} bytes",
            encoded.len()
        );
        assert_eq!(StoredResponse::decode(&encoded).unwrap(), stored);
    }

    #[test]
    fn incompressible_bodies_are_stored_raw() {
        let mut rng = fastrand::Rng::with_seed(7);
        let body: Vec<u8> = (0..10_000).map(|_| rng.u8(..)).collect();
        let stored = StoredResponse::new(StatusCode::OK, [], Bytes::from(body));
        let encoded = stored.encode();
        assert!(encoded.len() <= stored.body().len() + 16);
        assert_eq!(StoredResponse::decode(&encoded).unwrap(), stored);
    }

    #[test]
    fn corrupt_encodings_are_errors_not_panics() {
        let encoded = StoredResponse::new(StatusCode::OK, [h("x-a", "1")], Bytes::new()).encode();
        for cut in 0..encoded.len() {
            assert!(
                StoredResponse::decode(&encoded[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        assert!(StoredResponse::decode(b"garbage").is_err());
    }

    #[tokio::test]
    async fn replay_adds_the_replayed_header() {
        let stored = StoredResponse::new(
            StatusCode::CREATED,
            [h("x-a", "1"), h("x-a", "2")],
            Bytes::from_static(b"hello"),
        );
        let response = stored.into_replay();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["idempotent-replayed"], "true");
        let values: Vec<_> = response.headers().get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
    }
}
