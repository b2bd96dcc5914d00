//! Which idempotency key a record is processed under: [`KeyFrom`].

use std::fmt;
use std::str::FromStr;

use idem_runtime::IdempotencyKey;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Where a record's idempotency key comes from.
///
/// SQS delivers a message at least once: a redelivery (the visibility timeout lapsed, or the
/// batch was reported failed) keeps the message's id, so [`MessageId`](KeyFrom::MessageId)
/// catches it. A producer that retries its `SendMessage` (its reply was lost) makes a *new*
/// message with a new id: only the body tells the two apart, with
/// [`BodyFingerprint`](KeyFrom::BodyFingerprint) when the retry sends the same bytes, or with
/// [`Field`](KeyFrom::Field) when the body carries a business id (`order_id`) and may differ
/// elsewhere (a timestamp, a trace id).
///
/// Parsed from `message-id`, `body` or `field:<name>` (the `IDEM_KEY_FROM` setting of
/// `sqs-orders`):
///
/// ```
/// use idem_examples::sqs::KeyFrom;
///
/// assert_eq!("message-id".parse::<KeyFrom>(), Ok(KeyFrom::MessageId));
/// assert_eq!("body".parse::<KeyFrom>(), Ok(KeyFrom::BodyFingerprint));
/// assert_eq!("field:order_id".parse::<KeyFrom>(), Ok(KeyFrom::Field("order_id".into())));
/// assert!("field:".parse::<KeyFrom>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyFrom {
    /// The SQS message id (the default): catches redeliveries of one message.
    #[default]
    MessageId,
    /// SHA-256 of the body's bytes: also catches a producer's retried send of the same body.
    BodyFingerprint,
    /// A top-level field of the JSON body (a string or a number), such as `order_id`: one
    /// record per value, whatever else the bodies carry. A record whose body is not a JSON
    /// object with that field cannot be keyed: it is rejected (reported done, and logged).
    Field(String),
}

/// A record's key and what a duplicate must match to count as the same record.
#[derive(Debug, Clone)]
pub(crate) struct Derived {
    /// The idempotency key.
    pub(crate) key: IdempotencyKey,
    /// What the record is fingerprinted on: the body for message ids and body fingerprints,
    /// only the field's value for fields (two bodies with one `order_id` are one order).
    pub(crate) input: String,
}

impl KeyFrom {
    /// The key of a record with `message_id` and `body`, and what its duplicates must match.
    pub(crate) fn derive(&self, message_id: Option<&str>, body: &str) -> Result<Derived, NoKey> {
        let (key, input) = match self {
            Self::MessageId => {
                // An empty id is no id: every such message would share the key `message:`.
                let id = message_id
                    .filter(|id| !id.is_empty())
                    .ok_or(NoKey::NoMessageId)?;
                (format!("message:{id}"), body.to_owned())
            }
            Self::BodyFingerprint => {
                let digest = Sha256::digest(body.as_bytes());
                (format!("sha256:{digest:x}"), body.to_owned())
            }
            Self::Field(name) => {
                let value = field(body, name)?;
                (format!("{name}:{value}"), value)
            }
        };
        let key = IdempotencyKey::new(&key).map_err(|error| NoKey::Invalid(error.to_string()))?;
        Ok(Derived { key, input })
    }
}

/// The value of the top-level field `name` of the JSON object `body`, as text.
fn field(body: &str, name: &str) -> Result<String, NoKey> {
    let missing = || NoKey::MissingField(name.to_owned());
    let json: Value = serde_json::from_str(body).map_err(|_| NoKey::NotJson)?;
    match json.as_object().ok_or(NoKey::NotJson)?.get(name) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(Value::Number(number)) => Ok(number.to_string()),
        Some(Value::Null | Value::String(_)) | None => Err(missing()),
        Some(_) => Err(NoKey::NotScalar(name.to_owned())),
    }
}

impl FromStr for KeyFrom {
    type Err = ParseKeyFromError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "message-id" => Ok(Self::MessageId),
            "body" => Ok(Self::BodyFingerprint),
            _ => match text.strip_prefix("field:") {
                Some(name) if !name.is_empty() && !name.contains(char::is_whitespace) => {
                    Ok(Self::Field(name.to_owned()))
                }
                _ => Err(ParseKeyFromError(text.to_owned())),
            },
        }
    }
}

impl fmt::Display for KeyFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MessageId => f.write_str("message-id"),
            Self::BodyFingerprint => f.write_str("body"),
            Self::Field(name) => write!(f, "field:{name}"),
        }
    }
}

/// A [`KeyFrom`] setting that is not `message-id`, `body` or `field:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a key source: use `message-id`, `body` or `field:<name>`")]
pub struct ParseKeyFromError(String);

/// Why a record has no idempotency key. No delivery of it can have one, so it is
/// [rejected](super::RecordOutcome::Rejected): reported done with a log line saying why,
/// nothing claimed or stored, and the others go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoKey {
    /// The record carries no `messageId`, or an empty one (SQS always sends one).
    #[error("the record has no messageId")]
    NoMessageId,
    /// The body is not a JSON object, so it has no field to key on.
    #[error("the body is not a JSON object")]
    NotJson,
    /// The body has no such field, or it is `null` or an empty string.
    #[error("the body has no `{0}` field")]
    MissingField(String),
    /// The field is an object, an array or a boolean, not an id.
    #[error("the body's `{0}` field is not a string or a number")]
    NotScalar(String),
    /// The key is not 1..=255 visible ASCII characters (a field value too long, or not ASCII).
    #[error("the key is not a valid idempotency key: {0}")]
    Invalid(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_keys_what_it_says() {
        let body = r#"{"order_id": "o-1", "quantity": 2}"#;
        let id = KeyFrom::MessageId.derive(Some("m-1"), body).unwrap();
        assert_eq!((id.key.as_str(), id.input.as_str()), ("message:m-1", body));
        let digest = KeyFrom::BodyFingerprint.derive(Some("m-1"), body).unwrap();
        assert_eq!(digest.key.as_str().len(), "sha256:".len() + 64);
        let field = KeyFrom::Field("order_id".into())
            .derive(None, body)
            .unwrap();
        assert_eq!(
            (field.key.as_str(), field.input.as_str()),
            ("order_id:o-1", "o-1")
        );
        let number = KeyFrom::Field("quantity".into())
            .derive(None, body)
            .unwrap();
        assert_eq!(number.key.as_str(), "quantity:2");
    }

    #[test]
    fn a_record_without_its_key_says_why() {
        // An empty messageId would key every such record `message:`, one record for all.
        for id in [None, Some("")] {
            assert_eq!(
                KeyFrom::MessageId.derive(id, "{}").unwrap_err(),
                NoKey::NoMessageId,
                "{id:?}"
            );
        }
        let field = KeyFrom::Field("order_id".into());
        assert_eq!(
            field.derive(None, "plain text").unwrap_err(),
            NoKey::NotJson
        );
        assert_eq!(field.derive(None, "[1]").unwrap_err(), NoKey::NotJson);
        for body in [
            r#"{"id": 1}"#,
            r#"{"order_id": null}"#,
            r#"{"order_id": ""}"#,
        ] {
            let error = field.derive(None, body).unwrap_err();
            assert_eq!(error, NoKey::MissingField("order_id".into()), "{body}");
        }
        let nested = field.derive(None, r#"{"order_id": {"n": 1}}"#).unwrap_err();
        assert_eq!(nested, NoKey::NotScalar("order_id".into()));
        let accented = field
            .derive(None, r#"{"order_id": "commande-é"}"#)
            .unwrap_err();
        assert!(matches!(accented, NoKey::Invalid(_)), "{accented:?}");
        let none = KeyFrom::MessageId.derive(None, "{}").unwrap_err();
        assert_eq!(none, NoKey::NoMessageId);
    }

    #[test]
    fn settings_read_back_as_written() {
        for text in ["message-id", "body", "field:order_id"] {
            assert_eq!(text.parse::<KeyFrom>().unwrap().to_string(), text);
        }
        for bad in ["", "id", "field:", "field:a b", "Body"] {
            assert!(bad.parse::<KeyFrom>().is_err(), "{bad}");
        }
    }
}
