//! Where a message's idempotency key comes from: the publisher's header, JetStream's
//! `Nats-Msg-Id`, or the message's place in its stream.

use async_nats::HeaderMap;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::MAX_KEY_LEN;

/// JetStream's de-duplication header, which publishers set with `PublishMessage::message_id`.
pub const NATS_MSG_ID: &str = "Nats-Msg-Id";

/// Which parts of a message may give its key, tried in this order: the key header
/// (`Idempotency-Key`, or the engine's [`header_name`](idem_core::idempotency::Builder::header_name)),
/// then `Nats-Msg-Id`, then the stream and sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyFrom {
    /// The header, else `Nats-Msg-Id`, else `<stream>:<sequence>`, which every redelivery of
    /// one stored message keeps (but a publisher's retried send, stored twice, does not). Every
    /// JetStream message has a key. The default.
    #[default]
    Any,
    /// The publisher's key only: the header, else `Nats-Msg-Id`. A message with neither is
    /// keyless ([`Keyless`](crate::Keyless) says what becomes of it).
    Publisher,
}

/// Which part of the message the key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NatsKeySource {
    /// The key header (`Idempotency-Key`).
    Header,
    /// JetStream's `Nats-Msg-Id`.
    MessageId,
    /// The stream's name and the message's sequence in it.
    Sequence,
    /// None: the message is processed unprotected ([`Keyless::Unprotected`](crate::Keyless)).
    None,
}

impl NatsKeySource {
    /// A name for logs: `header`, `nats-msg-id`, `sequence`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::MessageId => "nats-msg-id",
            Self::Sequence => "sequence",
            Self::None => "none",
        }
    }
}

/// The first non-empty value of header `name` (compared without regard to ASCII case).
fn header<'h>(headers: Option<&'h HeaderMap>, name: &str) -> Option<&'h str> {
    headers?
        .iter()
        .filter(|(header, _)| AsRef::<str>::as_ref(*header).eq_ignore_ascii_case(name))
        .flat_map(|(_, values)| values.iter())
        .map(|value| value.as_str())
        .find(|value| !value.is_empty())
}

/// The key for a message with `headers`, at `sequence` of `stream`, and where it came from;
/// `None` when `from` allows no part the message has. The key is not validated here: a bad
/// one is refused by the engine's rules.
pub(crate) fn derive(
    from: KeyFrom,
    key_header: &str,
    headers: Option<&HeaderMap>,
    stream: &str,
    sequence: u64,
) -> Option<(String, NatsKeySource)> {
    if let Some(key) = header(headers, key_header) {
        return Some((key.to_owned(), NatsKeySource::Header));
    }
    if let Some(key) = header(headers, NATS_MSG_ID) {
        return Some((key.to_owned(), NatsKeySource::MessageId));
    }
    match from {
        KeyFrom::Any => Some((sequence_key(stream, sequence), NatsKeySource::Sequence)),
        KeyFrom::Publisher => None,
    }
}

/// `<stream>:<sequence>`; a stream name that is not visible ASCII, or too long for a key, is
/// replaced by the hex of the first 16 bytes of its fingerprint.
fn sequence_key(stream: &str, sequence: u64) -> String {
    let plain = stream.len() + 21 <= MAX_KEY_LEN && stream.bytes().all(|b| b.is_ascii_graphic());
    if plain {
        return format!("{stream}:{sequence}");
    }
    let digest = Fingerprint::of_bytes(stream.as_bytes());
    let hex: String = digest.as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{hex}:{sequence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, *value);
        }
        map
    }

    #[test]
    fn the_header_comes_first_then_the_message_id_then_the_sequence() {
        let both = headers(&[("Idempotency-Key", "k-1"), (NATS_MSG_ID, "m-1")]);
        let id = headers(&[(NATS_MSG_ID, "m-1")]);
        let key = |h: Option<&HeaderMap>, from| derive(from, "idempotency-key", h, "ORDERS", 7);
        assert_eq!(
            key(Some(&both), KeyFrom::Any),
            Some(("k-1".into(), NatsKeySource::Header))
        );
        assert_eq!(
            key(Some(&id), KeyFrom::Any),
            Some(("m-1".into(), NatsKeySource::MessageId))
        );
        assert_eq!(
            key(None, KeyFrom::Any),
            Some(("ORDERS:7".into(), NatsKeySource::Sequence))
        );
        assert_eq!(key(None, KeyFrom::Publisher), None);
        assert_eq!(
            key(
                Some(&headers(&[("Idempotency-Key", "")])),
                KeyFrom::Publisher
            ),
            None,
            "an empty header is no key"
        );
    }

    #[test]
    fn a_stream_name_that_cannot_be_in_a_key_is_hashed() {
        let key = sequence_key("commandes-été", 3);
        assert_eq!(key.len(), 32 + 2);
        assert!(key.ends_with(":3"));
        assert_eq!(key, sequence_key("commandes-été", 3));
    }
}
