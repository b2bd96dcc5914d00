//! How an operation's output is stored: its format tag, a version byte, then JSON.

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::PayloadError;
use crate::format::OPERATION_OUTPUT as FORMAT_TAG;

/// Second byte: the version of the encoding after the tag.
const FORMAT_VERSION: u8 = 1;

pub(super) fn encode<T: Serialize>(output: &T) -> Result<Bytes, serde_json::Error> {
    let mut payload = vec![FORMAT_TAG, FORMAT_VERSION];
    serde_json::to_writer(&mut payload, output)?;
    Ok(Bytes::from(payload))
}

pub(super) fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, PayloadError> {
    match payload {
        [FORMAT_TAG, FORMAT_VERSION, json @ ..] => {
            serde_json::from_slice(json).map_err(PayloadError::Json)
        }
        [FORMAT_TAG, version, ..] => Err(PayloadError::Version(*version)),
        _ => Err(PayloadError::Format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_round_trip_under_their_own_tag_and_version() {
        let payload = encode(&vec!["job", "7"]).unwrap();
        assert_eq!(&payload[..2], &[FORMAT_TAG, FORMAT_VERSION]);
        assert_ne!(FORMAT_TAG, crate::format::HTTP_RESPONSE, "not the HTTP tag");
        assert_eq!(decode::<Vec<String>>(&payload).unwrap(), ["job", "7"]);
    }

    #[test]
    fn foreign_or_future_payloads_are_errors_not_panics() {
        assert!(matches!(
            decode::<u64>(b"\x1d\x01{}"),
            Err(PayloadError::Format)
        ));
        assert!(matches!(decode::<u64>(b""), Err(PayloadError::Format)));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG]),
            Err(PayloadError::Format)
        ));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG, 2, b'1']),
            Err(PayloadError::Version(2))
        ));
        assert!(matches!(
            decode::<u64>(&[FORMAT_TAG, 1, b'x']),
            Err(PayloadError::Json(_))
        ));
    }
}
