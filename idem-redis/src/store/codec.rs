//! How values read back from Redis are decoded: the claim script's reply, fingerprints and
//! record keys stored as hex, and the numbers a record's hash holds as decimal text. Anything
//! that does not decode is [`StoreError::Corrupt`].

use bytes::Bytes;
use redis::Value;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::key::unhex;
use idem_core::store::Claim;

/// Reads the claim script's reply (see `claim.lua`).
pub(super) fn decode_claim(reply: Value) -> Result<Claim, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("claim reply: {what}").into());
    let Value::Array(items) = reply else {
        return Err(corrupt("not an array"));
    };
    let mut items = items.into_iter();
    let tag = match items.next() {
        Some(Value::BulkString(tag)) => tag,
        Some(Value::SimpleString(tag)) => tag.into_bytes(),
        _ => return Err(corrupt("no outcome")),
    };
    match tag.as_slice() {
        b"acquired" => match items.next() {
            Some(Value::Int(owners)) => Ok(Claim::Acquired {
                took_over: owners > 1,
            }),
            _ => Err(corrupt("acquired without an owner count")),
        },
        b"in_flight" => {
            let fingerprint = fingerprint(items.next())?;
            let lease_until = match items.next() {
                Some(Value::BulkString(ms)) => {
                    millis(&ms).ok_or_else(|| corrupt("lease_until is not a number"))?
                }
                _ => return Err(corrupt("in flight without lease_until")),
            };
            Ok(Claim::InFlight {
                fingerprint,
                lease_until,
            })
        }
        b"completed" => {
            let fingerprint = fingerprint(items.next())?;
            let payload = match items.next() {
                Some(Value::BulkString(payload)) => Bytes::from(payload),
                _ => return Err(corrupt("completed record without a payload")),
            };
            // Absent (nil, or left out) only for a record completed before the store kept it.
            let completed_at = match items.next() {
                None | Some(Value::Nil) => None,
                Some(Value::BulkString(ms)) => {
                    Some(millis(&ms).ok_or_else(|| corrupt("completed_at is not a number"))?)
                }
                Some(_) => return Err(corrupt("completed_at is not a number")),
            };
            Ok(Claim::Completed {
                fingerprint,
                payload,
                completed_at,
            })
        }
        other => Err(corrupt(&format!(
            "unknown outcome {:?}",
            String::from_utf8_lossy(other)
        ))),
    }
}

/// A time stored as decimal milliseconds since the Unix epoch.
pub(super) fn millis(digits: &[u8]) -> Option<Timestamp> {
    number(digits).map(Timestamp::from_millis)
}

/// A decimal integer stored as text.
pub(super) fn number(digits: &[u8]) -> Option<i64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A fingerprint stored as 64 hex digits.
pub(super) fn fingerprint(value: Option<Value>) -> Result<Fingerprint, StoreError> {
    let bad = || StoreError::Corrupt("fingerprint is not 64 hex digits".into());
    let Some(Value::BulkString(digits)) = value else {
        return Err(bad());
    };
    unhex(&digits).map(Fingerprint::from_bytes).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::key::hex;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    #[test]
    fn fingerprints_round_trip_through_hex() {
        let fp = Fingerprint::from_bytes(std::array::from_fn(|i| (i * 37) as u8));
        let stored = hex(fp.as_bytes());
        assert_eq!(stored.len(), 64);
        assert_eq!(fingerprint(Some(bulk(stored.as_bytes()))).unwrap(), fp);
        for bad in [&b"00"[..], &[b'g'; 64], &[b'0'; 65], &[b'+'; 64]] {
            assert!(matches!(
                fingerprint(Some(bulk(bad))),
                Err(StoreError::Corrupt(_))
            ));
        }
    }

    #[test]
    fn claim_replies_decode_and_malformed_ones_are_corrupt() {
        let fp = hex(&[7; 32]);
        let acquired = |owners| Value::Array(vec![bulk(b"acquired"), Value::Int(owners)]);
        assert_eq!(
            decode_claim(acquired(1)).unwrap(),
            Claim::Acquired { took_over: false }
        );
        assert_eq!(
            decode_claim(acquired(3)).unwrap(),
            Claim::Acquired { took_over: true }
        );
        // A server that answers the outcome as a status string (RESP3 servers may) reads the same.
        let status = Value::Array(vec![Value::SimpleString("acquired".into()), Value::Int(1)]);
        assert_eq!(
            decode_claim(status).unwrap(),
            Claim::Acquired { took_over: false }
        );
        let in_flight = Value::Array(vec![
            bulk(b"in_flight"),
            bulk(fp.as_bytes()),
            bulk(b"1750000030000"),
        ]);
        assert_eq!(
            decode_claim(in_flight).unwrap(),
            Claim::InFlight {
                fingerprint: Fingerprint::from_bytes([7; 32]),
                lease_until: Timestamp::from_millis(1_750_000_030_000),
            }
        );
        let completed = |completed_at: Value| {
            Value::Array(vec![
                bulk(b"completed"),
                bulk(fp.as_bytes()),
                bulk(b"\0\xff"),
                completed_at,
            ])
        };
        let replayed = |completed_at| Claim::Completed {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            payload: Bytes::from_static(b"\0\xff"),
            completed_at,
        };
        assert_eq!(
            decode_claim(completed(bulk(b"1750000001000"))).unwrap(),
            replayed(Some(Timestamp::from_millis(1_750_000_001_000)))
        );
        // A record completed before the store kept the time has none.
        assert_eq!(decode_claim(completed(Value::Nil)).unwrap(), replayed(None));
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![bulk(b"acquired")]),
            Value::Array(vec![bulk(b"stolen"), Value::Int(1)]),
            Value::Array(vec![bulk(b"completed"), bulk(fp.as_bytes())]),
            completed(bulk(b"yesterday")),
            completed(Value::Int(1)),
            Value::Array(vec![bulk(b"in_flight"), bulk(fp.as_bytes()), bulk(b"soon")]),
        ] {
            assert!(
                matches!(decode_claim(bad.clone()), Err(StoreError::Corrupt(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn numbers_are_decimal_text() {
        assert_eq!(number(b"-42"), Some(-42));
        assert_eq!(millis(b"1000"), Some(Timestamp::from_millis(1000)));
        for bad in [&b""[..], b"1e3", b" 1", b"\xff", b"99999999999999999999"] {
            assert_eq!(number(bad), None, "{bad:?}");
        }
    }
}
