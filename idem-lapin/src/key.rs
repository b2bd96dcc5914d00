//! Where an AMQP message's idempotency key comes from: the publisher's header, else the
//! `message_id` property.

use lapin::BasicProperties;
use lapin::types::AMQPValue;

/// Which part of the message the key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RabbitKeySource {
    /// The key header (`Idempotency-Key`, or the engine's header name), a string.
    Header,
    /// The `message_id` property.
    MessageId,
    /// None: the message is processed unprotected.
    None,
}

/// The text of a header value that can be a key: an AMQP string.
fn text(value: &AMQPValue) -> Option<&str> {
    match value {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// The key of a message with `properties`, and where it came from: the header named
/// `key_header` (compared without regard to ASCII case), else `message_id`; `None` when
/// neither is there or both are empty. Not validated here: the engine's rules refuse a bad one.
pub(crate) fn derive(
    properties: &BasicProperties,
    key_header: &str,
) -> Option<(String, RabbitKeySource)> {
    let from_header = properties.headers().as_ref().and_then(|headers| {
        headers
            .inner()
            .iter()
            .filter(|(name, _)| name.as_str().eq_ignore_ascii_case(key_header))
            .find_map(|(_, value)| text(value).filter(|key| !key.is_empty()))
    });
    if let Some(key) = from_header {
        return Some((key.to_owned(), RabbitKeySource::Header));
    }
    let id = properties.message_id().as_ref().map(|id| id.as_str());
    id.filter(|id| !id.is_empty())
        .map(|id| (id.to_owned(), RabbitKeySource::MessageId))
}

#[cfg(test)]
mod tests {
    use lapin::types::{FieldTable, LongString, ShortString};

    use super::*;

    #[test]
    fn the_header_comes_first_then_the_message_id() {
        let mut headers = FieldTable::default();
        headers.insert(
            ShortString::from("Idempotency-Key"),
            AMQPValue::LongString(LongString::from("k-1")),
        );
        let both = BasicProperties::default()
            .with_headers(headers)
            .with_message_id("m-1".into());
        let id = BasicProperties::default().with_message_id("m-1".into());
        let empty = BasicProperties::default().with_message_id("".into());
        assert_eq!(
            derive(&both, "idempotency-key"),
            Some(("k-1".into(), RabbitKeySource::Header))
        );
        assert_eq!(
            derive(&id, "idempotency-key"),
            Some(("m-1".into(), RabbitKeySource::MessageId))
        );
        assert_eq!(derive(&empty, "idempotency-key"), None);
        assert_eq!(derive(&BasicProperties::default(), "idempotency-key"), None);
    }
}
