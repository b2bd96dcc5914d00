//! How a gRPC reply is stored: the method's response message (encoded as its method encoded
//! it) or its final status, each with the metadata the method set. Replays rebuild it, adding
//! `idempotent-replayed: true`.
//!
//! Layout, after the format tag and a version byte: the kind (0 message, 1 status), the status
//! code, the status message, the body (the encoded message, or the status details), then the
//! metadata entries as name and value. Lengths are big-endian `u32`s; every read is bounded.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tonic::Code;
use tonic::metadata::MetadataMap;

use idem_core::format::GRPC_REPLY as FORMAT_TAG;

/// Second byte: the version of the layout after the tag.
const FORMAT_VERSION: u8 = 1;
const KIND_MESSAGE: u8 = 0;
const KIND_STATUS: u8 = 1;

/// The metadata entry a replay carries, as the HTTP face's `Idempotent-Replayed` header.
pub const REPLAYED_METADATA: &str = "idempotent-replayed";

/// A stored reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StoredReply {
    /// The method answered with a message.
    Message {
        /// The response metadata the method set.
        metadata: HeaderMap,
        /// The encoded response message.
        body: Bytes,
    },
    /// The method answered with a status whose code is final for this request.
    Status {
        /// The code.
        code: Code,
        /// The status message.
        message: String,
        /// The encoded `google.rpc.Status` details the method attached.
        details: Bytes,
        /// The status metadata the method set.
        metadata: HeaderMap,
    },
}

/// A stored payload that is not a gRPC reply this release can read.
#[derive(Debug, thiserror::Error)]
pub enum ReplyFormatError {
    /// Not written by the gRPC face.
    #[error("the stored result is not a gRPC reply")]
    Format,
    /// Written by a newer release.
    #[error("the stored gRPC reply has layout version {0}, which this release cannot read")]
    Version(u8),
    /// Cut short or inconsistent.
    #[error("the stored gRPC reply is malformed: {0}")]
    Malformed(&'static str),
    /// The stored message does not decode as the method's response type.
    #[error("the stored response message does not decode: {0}")]
    Message(#[from] prost::DecodeError),
}

impl StoredReply {
    /// The reply's bytes, under the gRPC format tag.
    pub(crate) fn encode(&self) -> Bytes {
        let (kind, code, message, body, metadata) = match self {
            Self::Message { metadata, body } => (KIND_MESSAGE, Code::Ok, "", body, metadata),
            Self::Status {
                code,
                message,
                details,
                metadata,
            } => (KIND_STATUS, *code, message.as_str(), details, metadata),
        };
        let mut out = Vec::with_capacity(16 + message.len() + body.len() + 64 * metadata.len());
        // Codes are 0..=16, so one byte each.
        out.extend_from_slice(&[FORMAT_TAG, FORMAT_VERSION, kind, code as i32 as u8]);
        put(&mut out, message.as_bytes());
        put(&mut out, body);
        put_len(&mut out, metadata.len());
        for (name, value) in metadata {
            put(&mut out, name.as_str().as_bytes());
            put(&mut out, value.as_bytes());
        }
        Bytes::from(out)
    }

    /// Reads a stored reply back.
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, ReplyFormatError> {
        let rest = match payload {
            [FORMAT_TAG, FORMAT_VERSION, rest @ ..] => rest,
            [FORMAT_TAG, version, ..] => return Err(ReplyFormatError::Version(*version)),
            _ => return Err(ReplyFormatError::Format),
        };
        let mut reader = Reader(rest);
        let [kind, code] = reader.array()?;
        let message = String::from_utf8(reader.chunk()?.to_vec())
            .map_err(|_| ReplyFormatError::Malformed("status message is not UTF-8"))?;
        let body = Bytes::copy_from_slice(reader.chunk()?);
        let entries = reader.len()?;
        let mut metadata = HeaderMap::with_capacity(entries.min(64));
        for _ in 0..entries {
            let name = HeaderName::from_bytes(reader.chunk()?)
                .map_err(|_| ReplyFormatError::Malformed("metadata name"))?;
            let value = HeaderValue::from_bytes(reader.chunk()?)
                .map_err(|_| ReplyFormatError::Malformed("metadata value"))?;
            metadata.append(name, value);
        }
        if !reader.0.is_empty() {
            return Err(ReplyFormatError::Malformed("trailing bytes"));
        }
        match kind {
            KIND_MESSAGE => Ok(Self::Message { metadata, body }),
            KIND_STATUS => Ok(Self::Status {
                code: Code::from_i32(i32::from(code)),
                message,
                details: body,
                metadata,
            }),
            _ => Err(ReplyFormatError::Malformed("unknown kind")),
        }
    }
}

/// The metadata a replay carries: what was stored, plus `idempotent-replayed: true`.
pub(crate) fn replayed(mut metadata: HeaderMap) -> MetadataMap {
    metadata.insert(
        HeaderName::from_static(REPLAYED_METADATA),
        HeaderValue::from_static("true"),
    );
    MetadataMap::from_headers(metadata)
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // Stored replies are bounded far below 4 GiB by the store's limits.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// A bounded reader over the layout.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ReplyFormatError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(ReplyFormatError::Malformed("truncated"))?;
        self.0 = rest;
        Ok(*head)
    }

    fn len(&mut self) -> Result<usize, ReplyFormatError> {
        let len = u32::from_be_bytes(self.array()?) as usize;
        if len > self.0.len() {
            // Every entry or byte counted takes at least one byte.
            return Err(ReplyFormatError::Malformed("length past the end"));
        }
        Ok(len)
    }

    fn chunk(&mut self) -> Result<&'a [u8], ReplyFormatError> {
        let len = self.len()?;
        let (chunk, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> HeaderMap {
        let mut metadata = HeaderMap::new();
        metadata.insert("x-ledger-version", HeaderValue::from_static("7"));
        metadata.append("x-trace-bin", HeaderValue::from_static("AAEC"));
        metadata.append("x-trace-bin", HeaderValue::from_static("AwQF"));
        metadata
    }

    #[test]
    fn messages_and_statuses_round_trip_with_their_metadata() {
        let replies = [
            StoredReply::Message {
                metadata: metadata(),
                body: Bytes::from_static(b"\x0a\x03tr_"),
            },
            StoredReply::Status {
                code: Code::FailedPrecondition,
                message: "insufficient funds: ünïcode".into(),
                details: Bytes::from_static(b"\x08\x09"),
                metadata: metadata(),
            },
            StoredReply::Message {
                metadata: HeaderMap::new(),
                body: Bytes::new(),
            },
        ];
        for reply in replies {
            let payload = reply.encode();
            assert_eq!(payload[0], FORMAT_TAG);
            assert_eq!(StoredReply::decode(&payload).unwrap(), reply);
        }
    }

    #[test]
    fn foreign_truncated_or_future_payloads_are_errors_not_panics() {
        let payload = StoredReply::Status {
            code: Code::NotFound,
            message: "no such transfer".into(),
            details: Bytes::new(),
            metadata: metadata(),
        }
        .encode();
        for cut in 0..payload.len() {
            assert!(
                StoredReply::decode(&payload[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut future = payload.to_vec();
        future[1] = 9;
        assert!(matches!(
            StoredReply::decode(&future),
            Err(ReplyFormatError::Version(9))
        ));
        assert!(matches!(
            StoredReply::decode(b"\x1d\x01"),
            Err(ReplyFormatError::Format)
        ));
        let mut longer = payload.to_vec();
        longer.push(0);
        assert!(StoredReply::decode(&longer).is_err());
    }

    #[test]
    fn replays_say_so_in_their_metadata() {
        let replay = replayed(metadata());
        assert_eq!(replay.get(REPLAYED_METADATA).unwrap(), "true");
        assert_eq!(replay.get("x-ledger-version").unwrap(), "7");
    }
}
