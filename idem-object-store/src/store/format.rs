//! How a record is written as an object: a magic, a version, a state, then the state's fields.
//!
//! Version 2 (this release) writes a live record's operation, scope and scope value, each
//! length-prefixed (4 bytes). Version 1 (the releases before) wrote the operation alone (2-byte
//! length) and no scope: its records still decode, with an empty scope and scope value.
//! Tombstones and retiring marks are the same in both versions and are still written as
//! version 1, so a process of the previous release reads them during a rolling upgrade (it
//! cannot read a version 2 record: it answers that the record is corrupt).

use bytes::Bytes;

use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::fingerprint::Fingerprint;
use idem_core::store::LeaseToken;

const MAGIC: &[u8; 8] = b"idem.rec";
/// Operation only, 2-byte length; and every tombstone and retiring mark.
const V1: u8 = 1;
/// Operation, scope and scope value, 4-byte lengths.
const V2: u8 = 2;
const IN_FLIGHT: u8 = 0;
const COMPLETED: u8 = 1;
const TOMBSTONE: u8 = 2;
const RETIRING: u8 = 3;

/// A record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stored {
    Live(LiveRecord),
    /// Released or forgotten: the key is free.
    Tombstone,
    /// About to be deleted by a purge, which marked it at `since`: see `BucketStore`'s
    /// documentation for why a claim leaves it alone for a while.
    Retiring {
        since: Timestamp,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LiveRecord {
    pub(super) fingerprint: Fingerprint,
    pub(super) token: LeaseToken,
    pub(super) lease_until: Timestamp,
    pub(super) expires_at: Timestamp,
    pub(super) created_at: Timestamp,
    /// `Some` once completed.
    pub(super) completed: Option<Completed>,
    pub(super) operation: String,
    /// Empty for a record written by version 1.
    pub(super) scope: String,
    /// Empty for a record written by version 1.
    pub(super) scope_value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Completed {
    pub(super) at: Timestamp,
    pub(super) status: Option<u16>,
    pub(super) payload: Bytes,
}

pub(super) fn encode(stored: &Stored) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    let r = match stored {
        Stored::Live(r) => r,
        Stored::Tombstone => {
            out.extend_from_slice(&[V1, TOMBSTONE]);
            return out.into();
        }
        Stored::Retiring { since } => {
            out.extend_from_slice(&[V1, RETIRING]);
            out.extend_from_slice(&since.as_millis().to_be_bytes());
            return out.into();
        }
    };
    out.push(V2);
    out.push(if r.completed.is_some() {
        COMPLETED
    } else {
        IN_FLIGHT
    });
    out.extend_from_slice(r.fingerprint.as_bytes());
    let (at, status, payload) = match &r.completed {
        Some(c) => (c.at.as_millis(), c.status.unwrap_or(0), &c.payload[..]),
        None => (0, 0, &[][..]),
    };
    for n in [
        r.token.as_i64(),
        r.lease_until.as_millis(),
        r.expires_at.as_millis(),
        r.created_at.as_millis(),
        at,
    ] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&status.to_be_bytes());
    for text in [&r.operation, &r.scope, &r.scope_value] {
        let text = clip(text, u32::MAX as usize);
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(payload);
    out.into()
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary (a
/// cut inside a character would make the record undecodable).
fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

pub(super) fn decode(bytes: &[u8]) -> Result<Stored, StoreError> {
    let corrupt = |why: &'static str| StoreError::Corrupt(why.into());
    let rest = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or(corrupt("not an idem record"))?;
    let (&[version, state], rest) = rest.split_first_chunk().ok_or(corrupt("truncated"))?;
    if version != V1 && version != V2 {
        return Err(corrupt("unknown record version"));
    }
    let mut reader = Reader(rest);
    match state {
        TOMBSTONE => return Ok(Stored::Tombstone),
        RETIRING => {
            let since = Timestamp::from_millis(reader.i64()?);
            return Ok(Stored::Retiring { since });
        }
        _ => {}
    }
    let fingerprint = Fingerprint::from_bytes(reader.take::<32>()?);
    let token = LeaseToken::from_i64(reader.i64()?);
    let lease_until = Timestamp::from_millis(reader.i64()?);
    let expires_at = Timestamp::from_millis(reader.i64()?);
    let created_at = Timestamp::from_millis(reader.i64()?);
    let completed_at = Timestamp::from_millis(reader.i64()?);
    let status = u16::from_be_bytes(reader.take()?);
    let (operation, scope, scope_value) = if version == V1 {
        let len = usize::from(u16::from_be_bytes(reader.take()?));
        (reader.text(len)?, String::new(), String::new())
    } else {
        let mut text = || {
            let len = u32::from_be_bytes(reader.take()?);
            let len = usize::try_from(len).map_err(|_| corrupt("text too long"))?;
            reader.text(len)
        };
        (text()?, text()?, text()?)
    };
    let completed = match state {
        IN_FLIGHT => None,
        COMPLETED => Some(Completed {
            at: completed_at,
            status: (status != 0).then_some(status),
            payload: Bytes::copy_from_slice(reader.0),
        }),
        _ => return Err(corrupt("unknown record state")),
    };
    Ok(Stored::Live(LiveRecord {
        fingerprint,
        token,
        lease_until,
        expires_at,
        created_at,
        completed,
        operation,
        scope,
        scope_value,
    }))
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(StoreError::Corrupt("truncated record".into()))?;
        self.0 = rest;
        Ok(*head)
    }

    fn i64(&mut self) -> Result<i64, StoreError> {
        self.take().map(i64::from_be_bytes)
    }

    fn bytes(&mut self, len: usize) -> Result<&[u8], StoreError> {
        if self.0.len() < len {
            return Err(StoreError::Corrupt("truncated record".into()));
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }

    fn text(&mut self, len: usize) -> Result<String, StoreError> {
        let bytes = self.bytes(len)?.to_vec();
        String::from_utf8(bytes).map_err(|_| StoreError::Corrupt("text is not UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(completed: Option<Completed>) -> Stored {
        Stored::Live(live(completed))
    }

    fn live(completed: Option<Completed>) -> LiveRecord {
        LiveRecord {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            token: LeaseToken::from_i64(-42),
            lease_until: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(2_000),
            created_at: Timestamp::from_millis(500),
            completed,
            operation: "jobs::submit".into(),
            scope: "org".into(),
            scope_value: "acmé".into(),
        }
    }

    fn done(payload: &'static [u8]) -> Option<Completed> {
        Some(Completed {
            at: Timestamp::from_millis(900),
            status: Some(201),
            payload: Bytes::from_static(payload),
        })
    }

    fn is_corrupt(decoded: Result<Stored, StoreError>) -> bool {
        matches!(decoded, Err(StoreError::Corrupt(_)))
    }

    #[test]
    fn records_round_trip() {
        for stored in [
            record(None),
            record(done(b"\x00\xffbody")),
            record(Some(Completed {
                at: Timestamp::from_millis(900),
                status: None,
                payload: Bytes::new(),
            })),
            without_scope(live(None)),
            Stored::Tombstone,
            Stored::Retiring {
                since: Timestamp::from_millis(-7),
            },
        ] {
            assert_eq!(decode(&encode(&stored)).unwrap(), stored);
        }
    }

    #[test]
    fn tombstones_and_marks_are_still_written_as_the_previous_release_wrote_them() {
        // A tombstone written by the first release: ten bytes, version 1.
        assert_eq!(&encode(&Stored::Tombstone)[..], b"idem.rec\x01\x02");
        assert_eq!(decode(b"idem.rec\x01\x02").unwrap(), Stored::Tombstone);
        let mark = encode(&Stored::Retiring {
            since: Timestamp::from_millis(258),
        });
        assert_eq!(&mark[..], b"idem.rec\x01\x03\0\0\0\0\0\0\x01\x02");
        // A live record is written in version 2.
        assert_eq!(encode(&record(None))[8], V2);
    }

    /// A record as the previous release (version 1) wrote it, byte by byte.
    fn version_1(state: u8, operation: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut bytes = b"idem.rec\x01".to_vec();
        bytes.push(state);
        bytes.extend_from_slice(&[7; 32]); // fingerprint
        bytes.extend_from_slice(&(-42i64).to_be_bytes()); // token
        bytes.extend_from_slice(&1_000i64.to_be_bytes()); // lease_until
        bytes.extend_from_slice(&2_000i64.to_be_bytes()); // expires_at
        bytes.extend_from_slice(&500i64.to_be_bytes()); // created_at
        let (at, status) = if state == COMPLETED {
            (900i64, 201u16)
        } else {
            (0, 0)
        };
        bytes.extend_from_slice(&at.to_be_bytes()); // completed_at
        bytes.extend_from_slice(&status.to_be_bytes());
        bytes.extend_from_slice(&(operation.len() as u16).to_be_bytes());
        bytes.extend_from_slice(operation);
        bytes.extend_from_slice(tail); // the payload
        bytes
    }

    fn without_scope(record: LiveRecord) -> Stored {
        Stored::Live(LiveRecord {
            scope: String::new(),
            scope_value: String::new(),
            ..record
        })
    }

    #[test]
    fn records_of_the_previous_version_decode_with_an_empty_scope() {
        let in_flight = version_1(IN_FLIGHT, b"jobs::submit", b"");
        assert_eq!(decode(&in_flight).unwrap(), without_scope(live(None)));
        let completed = version_1(COMPLETED, b"jobs::submit", b"\x00\xffbody");
        assert_eq!(
            decode(&completed).unwrap(),
            without_scope(live(done(b"\x00\xffbody")))
        );
        // Truncated anywhere before the payload: corrupt, not a panic.
        let fields = version_1(IN_FLIGHT, b"jobs::submit", b"").len();
        for len in 0..fields {
            assert!(is_corrupt(decode(&completed[..len])), "truncated to {len}");
        }
        let mut bad = version_1(IN_FLIGHT, b"jobs\xff", b"");
        assert!(is_corrupt(decode(&bad)), "operation not UTF-8");
        bad[9] = 7;
        assert!(is_corrupt(decode(&bad)), "unknown state");
    }

    #[test]
    fn damaged_records_are_corrupt_not_panics() {
        let good = encode(&record(None));
        for len in 0..good.len() {
            assert!(is_corrupt(decode(&good[..len])), "truncated to {len}");
        }
        let mut other = good.to_vec();
        other[8] = 9;
        assert!(is_corrupt(decode(&other)), "unknown version");
        // A length beyond the object.
        let lengths = good.len() - "jobs::submit".len() - "org".len() - "acmé".len() - 12;
        let mut long = good.to_vec();
        long[lengths..lengths + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(is_corrupt(decode(&long)), "length past the end");
        // A scope value that is not UTF-8.
        let mut bad = good.to_vec();
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert!(is_corrupt(decode(&bad)), "scope value not UTF-8");
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary() {
        assert_eq!(clip("aé", 2), "a");
        assert_eq!(clip("aé", 3), "aé");
        assert_eq!(clip("abc", 10), "abc");
    }
}
