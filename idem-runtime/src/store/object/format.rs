//! How a record is written as an object: a magic, a version, a state, then the state's fields.

use bytes::Bytes;

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::fingerprint::Fingerprint;
use crate::store::LeaseToken;

const MAGIC: &[u8; 8] = b"idem.rec";
const VERSION: u8 = 1;
const IN_FLIGHT: u8 = 0;
const COMPLETED: u8 = 1;
const TOMBSTONE: u8 = 2;
const RETIRING: u8 = 3;

/// A record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stored {
    Live(Record),
    /// Released: the key is free.
    Tombstone,
    /// About to be deleted by a purge, which marked it at `since`: see `BucketStore`'s
    /// documentation for why a claim leaves it alone for a while.
    Retiring {
        since: Timestamp,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) fingerprint: Fingerprint,
    pub(super) token: LeaseToken,
    pub(super) lease_until: Timestamp,
    pub(super) expires_at: Timestamp,
    pub(super) created_at: Timestamp,
    /// `Some` once completed.
    pub(super) completed: Option<Completed>,
    pub(super) operation: String,
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
    out.push(VERSION);
    let r = match stored {
        Stored::Live(r) => r,
        Stored::Tombstone => {
            out.push(TOMBSTONE);
            return out.into();
        }
        Stored::Retiring { since } => {
            out.push(RETIRING);
            out.extend_from_slice(&since.as_millis().to_be_bytes());
            return out.into();
        }
    };
    out.push(if r.completed.is_some() {
        COMPLETED
    } else {
        IN_FLIGHT
    });
    out.extend_from_slice(r.fingerprint.as_bytes());
    for n in [
        r.token.as_i64(),
        r.lease_until.as_millis(),
        r.expires_at.as_millis(),
    ] {
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&r.created_at.as_millis().to_be_bytes());
    let (at, status, payload) = match &r.completed {
        Some(c) => (c.at.as_millis(), c.status.unwrap_or(0), &c.payload[..]),
        None => (0, 0, &[][..]),
    };
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(&status.to_be_bytes());
    let operation = &r.operation.as_bytes()[..r.operation.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(operation.len() as u16).to_be_bytes());
    out.extend_from_slice(operation);
    out.extend_from_slice(payload);
    out.into()
}

pub(super) fn decode(bytes: &[u8]) -> Result<Stored, StoreError> {
    let corrupt = |why: &'static str| StoreError::Corrupt(why.into());
    let rest = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or(corrupt("not an idem record"))?;
    let (&[version, state], rest) = rest.split_first_chunk().ok_or(corrupt("truncated"))?;
    if version != VERSION {
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
    let len = usize::from(u16::from_be_bytes(reader.take()?));
    let operation = reader.bytes(len)?;
    let operation =
        String::from_utf8(operation.to_vec()).map_err(|_| corrupt("operation is not UTF-8"))?;
    let completed = match state {
        IN_FLIGHT => None,
        COMPLETED => Some(Completed {
            at: completed_at,
            status: (status != 0).then_some(status),
            payload: Bytes::copy_from_slice(reader.0),
        }),
        _ => return Err(corrupt("unknown record state")),
    };
    Ok(Stored::Live(Record {
        fingerprint,
        token,
        lease_until,
        expires_at,
        created_at,
        completed,
        operation,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(completed: Option<Completed>) -> Stored {
        Stored::Live(Record {
            fingerprint: Fingerprint::from_bytes([7; 32]),
            token: LeaseToken::from_i64(-42),
            lease_until: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(2_000),
            created_at: Timestamp::from_millis(500),
            completed,
            operation: "jobs::submit".into(),
        })
    }

    #[test]
    fn records_round_trip() {
        for stored in [
            record(None),
            record(Some(Completed {
                at: Timestamp::from_millis(900),
                status: Some(201),
                payload: Bytes::from_static(b"\x00\xffbody"),
            })),
            record(Some(Completed {
                at: Timestamp::from_millis(900),
                status: None,
                payload: Bytes::new(),
            })),
            Stored::Tombstone,
            Stored::Retiring {
                since: Timestamp::from_millis(-7),
            },
        ] {
            assert_eq!(decode(&encode(&stored)).unwrap(), stored);
        }
        // A tombstone written by the first release: ten bytes.
        assert_eq!(decode(b"idem.rec\x01\x02").unwrap(), Stored::Tombstone);
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let good = encode(&record(None));
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated to {len}");
        }
        let mut other = good.to_vec();
        other[8] = 9;
        assert!(decode(&other).is_err(), "unknown version");
    }
}
