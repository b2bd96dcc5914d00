//! The reference model: records in a `BTreeMap` and the rules of the [`Store`](crate::store::Store)
//! trait's documentation, nothing else.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::clock::Timestamp;
use crate::fingerprint::Fingerprint;
use crate::store::{Claim, Fence};

/// A record as the `Store` documentation defines it.
#[derive(Debug, Clone)]
pub(super) struct Modelled {
    fp: u8,
    token: i64,
    pub(super) expires_at: i64,
    /// `Some(lease_until)` in flight, `None` completed.
    pub(super) lease_until: Option<i64>,
    pub(super) payload: Vec<u8>,
    /// When it completed (meaningless in flight).
    pub(super) completed_at: i64,
}

/// What every store must answer.
#[derive(Debug, Default)]
pub(super) struct Model {
    pub(super) records: BTreeMap<u8, Modelled>,
}

impl Model {
    /// A claim of `key`: created when absent or expired, replayed when completed, reported while
    /// another owner's lease is live or the fingerprint differs, taken over otherwise.
    pub(super) fn claim(
        &mut self,
        key: u8,
        fp: u8,
        token: i64,
        now: i64,
        lease_until: i64,
        expires_at: i64,
    ) -> Claim {
        let fresh = Modelled {
            fp,
            token,
            expires_at,
            lease_until: Some(lease_until),
            payload: Vec::new(),
            completed_at: 0,
        };
        match self.records.get_mut(&key).filter(|r| r.expires_at > now) {
            None => {
                self.records.insert(key, fresh);
                Claim::Acquired { took_over: false }
            }
            Some(r) => match r.lease_until {
                None => Claim::Completed {
                    fingerprint: fingerprint(r.fp),
                    payload: Bytes::from(r.payload.clone()),
                    completed_at: Some(Timestamp::from_millis(r.completed_at)),
                },
                Some(lease) if lease > now || r.fp != fp => Claim::InFlight {
                    fingerprint: fingerprint(r.fp),
                    lease_until: Timestamp::from_millis(lease),
                },
                Some(_) => {
                    *r = fresh;
                    Claim::Acquired { took_over: true }
                }
            },
        }
    }

    /// Applies `f` to the record if `token` owns it in flight (expired or not: fencing is by
    /// token and state alone).
    pub(super) fn fenced(&mut self, key: u8, token: i64, f: impl FnOnce(&mut Modelled)) -> Fence {
        match self.records.get_mut(&key) {
            Some(r) if r.token == token && r.lease_until.is_some() => {
                f(r);
                Fence::Held
            }
            _ => Fence::Lost,
        }
    }

    /// Deletes the record if `token` owns it in flight.
    pub(super) fn release(&mut self, key: u8, token: i64) -> Fence {
        let fence = self.fenced(key, token, |_| {});
        if fence == Fence::Held {
            self.records.remove(&key);
        }
        fence
    }

    /// How many records have expired at `now`.
    pub(super) fn expired(&self, now: i64) -> usize {
        self.records
            .values()
            .filter(|r| r.expires_at <= now)
            .count()
    }
}

/// The fingerprint a step's `fp` stands for.
pub(super) fn fingerprint(n: u8) -> Fingerprint {
    let mut bytes = [n; 32];
    bytes[0] = 0xf0;
    Fingerprint::from_bytes(bytes)
}
