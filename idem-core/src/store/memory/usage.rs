//! What the memory store's records hold, in all and per tenant, for its bounds.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::Entry;
use super::shard::Spread;
use crate::clock::Timestamp;

/// What the records hold, in all and per tenant, and when the room they hold frees up.
#[derive(Debug)]
pub(super) struct Usage {
    pub(super) all: Room,
    pub(super) tenants: HashMap<u64, Room, Spread>,
}

impl Default for Usage {
    fn default() -> Self {
        Self {
            all: Room::default(),
            tenants: HashMap::with_hasher(Spread::new()),
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Room {
    pub(super) records: usize,
    pub(super) bytes: usize,
    /// Whole second by which records expire (their expiry rounded up) -> how many: the
    /// earliest tells when room frees. Whole seconds keep the map at most a TTL's worth of seconds long (86 400 for a
    /// day) however many records there are, and most updates touch its last entry.
    expiries: BTreeMap<i64, u32>,
}

/// The first whole second at or after `t`: a record expiring at `t` has expired by then.
fn second_of(t: Timestamp) -> i64 {
    let millis = t.as_millis();
    millis.div_euclid(1000) + i64::from(millis.rem_euclid(1000) != 0)
}

impl Room {
    fn add(&mut self, cost: usize, expires_at: Timestamp) {
        self.records += 1;
        self.bytes += cost;
        *self.expiries.entry(second_of(expires_at)).or_default() += 1;
    }

    fn remove(&mut self, cost: usize, expires_at: Timestamp) {
        self.records -= 1;
        self.bytes -= cost;
        let second = second_of(expires_at);
        if let Some(n) = self.expiries.get_mut(&second) {
            *n -= 1;
            if *n == 0 {
                self.expiries.remove(&second);
            }
        }
    }

    /// Whether a record may have expired by `now` (none has when this is `false`).
    pub(super) fn any_expired(&self, now: Timestamp) -> bool {
        self.expiries
            .keys()
            .next()
            .is_some_and(|first| (first - 1) * 1000 <= now.as_millis())
    }

    /// How long until the earliest record's expiry, rounded up to a whole second: never before
    /// it expires, exact when it expires on a second.
    pub(super) fn frees_in(&self, now: Timestamp) -> Option<Duration> {
        let first = self.expiries.keys().next()?;
        Some(
            now.until(Timestamp::from_millis(first * 1000))
                .max(Duration::from_secs(1)),
        )
    }
}

impl Usage {
    pub(super) fn add(&mut self, record: &Entry) {
        let cost = record.cost();
        self.all.add(cost, record.expires_at);
        self.tenants
            .entry(record.tenant)
            .or_default()
            .add(cost, record.expires_at);
    }

    pub(super) fn remove(&mut self, record: &Entry) {
        let cost = record.cost();
        self.all.remove(cost, record.expires_at);
        if let Some(room) = self.tenants.get_mut(&record.tenant) {
            room.remove(cost, record.expires_at);
            if room.records == 0 {
                self.tenants.remove(&record.tenant);
            }
        }
    }
}
