//! What operators read of the memory store's records, and the operators' methods: listing,
//! reading, forgetting and purging records under the shards' locks.

use super::{Entry, MemoryStore, SHARDS, State};
use crate::clock::Timestamp;
use crate::key::RecordKey;
use crate::store::records::{
    Forgotten, Record, RecordFilter, RecordState, RecordStats, RecordTimes,
};
use crate::store::{ClaimRequest, Completion};

/// A record's operator fields: its names in one allocation, its times and status.
#[derive(Debug)]
pub(super) struct About {
    /// `operation`, `scope` and `scope_value` one after the other.
    names: Box<str>,
    /// Where `scope` and `scope_value` start in `names`.
    splits: [usize; 2],
    created_at: Timestamp,
    completed_at: Option<Timestamp>,
    status: Option<u16>,
}

impl About {
    pub(super) fn of(req: &ClaimRequest<'_>) -> Self {
        let parts = [req.operation, req.scope, req.scope_value];
        let splits = [parts[0].len(), parts[0].len() + parts[1].len()];
        Self {
            names: parts.concat().into_boxed_str(),
            splits,
            created_at: req.now,
            completed_at: None,
            status: None,
        }
    }

    pub(super) fn completed(&mut self, completion: &Completion<'_>) {
        self.completed_at = Some(completion.completed_at);
        self.status = completion.status;
    }

    pub(super) fn completed_at(&self) -> Option<Timestamp> {
        self.completed_at
    }

    fn names(&self) -> [&str; 3] {
        let [a, b] = self.splits;
        [&self.names[..a], &self.names[a..b], &self.names[b..]]
    }
}

fn info(key: &RecordKey, record: &Entry) -> Record {
    let about = &record.about;
    let [operation, scope, scope_value] = about.names();
    let (completed, lease_until) = match record.state {
        State::InFlight { lease_until } => (false, lease_until),
        State::Completed(_) => (true, record.expires_at),
    };
    Record::new(
        *key,
        operation,
        scope,
        scope_value,
        completed,
        about.status,
        RecordTimes {
            created_at: about.created_at,
            completed_at: about.completed_at,
            lease_until,
            expires_at: record.expires_at,
        },
    )
}

impl MemoryStore {
    /// Calls `f` on every record's operator view, one shard locked at a time.
    fn each(&self, mut f: impl FnMut(Record)) {
        for i in 0..SHARDS {
            for (key, record) in self.lock(i).iter() {
                f(info(key, record));
            }
        }
    }

    pub(super) fn list(&self, filter: &RecordFilter, now: Timestamp, limit: u32) -> Vec<Record> {
        let mut found = Vec::new();
        self.each(|record| {
            if filter.matches(&record, now) {
                found.push(record);
            }
        });
        found.sort_by_key(|r| (r.created_at, r.key));
        found.truncate(limit as usize);
        found
    }

    pub(super) fn read(&self, key: &RecordKey) -> Option<Record> {
        let shard = self.lock(Self::shard_of(key));
        let record = shard.get(key)?;
        let payload = match &record.state {
            State::Completed(payload) => Some(payload.clone()),
            State::InFlight { .. } => None,
        };
        Some(info(key, record).with_payload(payload))
    }

    pub(super) fn forget(&self, key: &RecordKey, now: Timestamp, force: bool) -> Forgotten {
        let mut shard = self.lock(Self::shard_of(key));
        let Some(record) = shard.get(key) else {
            return Forgotten::Absent;
        };
        let seen = info(key, record);
        if !force && seen.is_leased(now) {
            return Forgotten::Leased(seen);
        }
        if let Some(gone) = shard.remove(key) {
            self.usage().remove(&gone);
        }
        Forgotten::Deleted(seen)
    }

    pub(super) fn purge(&self, filter: &RecordFilter, now: Timestamp, limit: u32) -> u64 {
        let mut left = limit as usize;
        for i in 0..SHARDS {
            if left == 0 {
                break;
            }
            let mut shard = self.lock(i);
            let doomed: Vec<RecordKey> = shard
                .iter()
                .map(|(key, record)| info(key, record))
                .filter(|r| r.state(now) == RecordState::Completed && filter.matches(r, now))
                .map(|r| r.key)
                .take(left)
                .collect();
            let mut usage = self.usage();
            for key in &doomed {
                if let Some(gone) = shard.remove(key) {
                    usage.remove(&gone);
                }
            }
            left -= doomed.len();
        }
        (limit as usize - left) as u64
    }

    pub(super) fn stats(&self, filter: &RecordFilter, now: Timestamp) -> RecordStats {
        let mut stats = RecordStats::new();
        self.each(|record| {
            if filter.matches(&record, now) {
                stats.add(&record, now);
            }
        });
        stats
    }
}
