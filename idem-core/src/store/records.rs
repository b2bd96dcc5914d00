//! What operators see of records and how they select them: the types of the stores' operator
//! methods ([`Admin::list_records`](super::Admin::list_records) and the rest), and the one
//! definition of which records a [`RecordFilter`] selects, which the stores that filter in
//! process share (the SQL stores say the same in SQL, and the conformance suite holds them to
//! it).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::clock::Timestamp;
use crate::key::RecordKey;

/// A record's state as of a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordState {
    /// Claimed and not completed: its owner is running (or its lease lapsed and a retry of the
    /// same request may take it over).
    InFlight,
    /// Holds a stored result that every retry replays.
    Completed,
    /// Past its expiry: invisible to requests (a new request with its key runs again), kept
    /// until the sweeper or the backend removes it.
    Expired,
}

impl RecordState {
    /// `in-flight`, `completed` or `expired`, as the `idem` command prints and parses them.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InFlight => "in-flight",
            Self::Completed => "completed",
            Self::Expired => "expired",
        }
    }
}

impl std::fmt::Display for RecordState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RecordState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "in-flight" => Ok(Self::InFlight),
            "completed" => Ok(Self::Completed),
            "expired" => Ok(Self::Expired),
            other => Err(format!(
                "unknown state `{other}`: expected in-flight, completed or expired"
            )),
        }
    }
}

/// What a store keeps about one record besides its payload: what an operator reads.
///
/// Records written before a store kept a field show it empty (an empty operation or scope, a
/// creation time of 0).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The record's key (a hash: the client's key is never stored).
    pub key: RecordKey,
    /// The operation (endpoint) it belongs to.
    pub operation: String,
    /// The scope its key was given in (`org`, `user`, `global`, ...).
    pub scope: String,
    /// The scope's value: the tenant (an organisation's id, a user's id), kept in clear.
    pub scope_value: String,
    /// Whether it completed. Combined with the times by [`state`](Self::state).
    pub completed: bool,
    /// The stored status code (HTTP faces), once completed.
    pub status: Option<u16>,
    /// When it was claimed.
    pub created_at: Timestamp,
    /// When it completed.
    pub completed_at: Option<Timestamp>,
    /// When its owner's lease lapses, while in flight.
    pub lease_until: Option<Timestamp>,
    /// When it stops existing for requests.
    pub expires_at: Timestamp,
    /// The stored payload, once completed (for an HTTP endpoint an encoded `StoredResponse`, for
    /// the programmatic API the serialised output). Only a read of one record
    /// ([`Admin::read_record`](super::Admin::read_record), `Records::show`) fills it in:
    /// listings leave it `None`.
    pub payload: Option<Bytes>,
}

impl Record {
    /// A record as a store read it: `lease_until` is kept only while it is in flight.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: RecordKey,
        operation: impl Into<String>,
        scope: impl Into<String>,
        scope_value: impl Into<String>,
        completed: bool,
        status: Option<u16>,
        times: RecordTimes,
    ) -> Self {
        Self {
            key,
            operation: operation.into(),
            scope: scope.into(),
            scope_value: scope_value.into(),
            completed,
            status: status.filter(|_| completed),
            created_at: times.created_at,
            completed_at: times.completed_at.filter(|_| completed),
            lease_until: (!completed).then_some(times.lease_until),
            expires_at: times.expires_at,
            payload: None,
        }
    }

    /// The record with `payload`, as [`Admin::read_record`](super::Admin::read_record) returns
    /// it: the stored payload once completed, `None` while in flight.
    pub fn with_payload(self, payload: Option<Bytes>) -> Self {
        Self { payload, ..self }
    }

    /// The record's state at `now`.
    pub fn state(&self, now: Timestamp) -> RecordState {
        if self.expires_at <= now {
            RecordState::Expired
        } else if self.completed {
            RecordState::Completed
        } else {
            RecordState::InFlight
        }
    }

    /// Whether an owner may still be running under a lease that has not lapsed at `now`: the
    /// record is in flight, not expired, and its lease ends after `now`.
    pub fn is_leased(&self, now: Timestamp) -> bool {
        self.state(now) == RecordState::InFlight && self.lease_until.is_some_and(|l| l > now)
    }
}

/// The times a store reads back for [`Record::new`].
#[derive(Debug, Clone, Copy)]
pub struct RecordTimes {
    /// When the record was claimed.
    pub created_at: Timestamp,
    /// When it completed (ignored unless completed).
    pub completed_at: Option<Timestamp>,
    /// The lease's end (ignored once completed).
    pub lease_until: Timestamp,
    /// When it expires.
    pub expires_at: Timestamp,
}

/// Which records an operator's listing, count or purge selects: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordFilter {
    /// Only this operation's records.
    pub operation: Option<String>,
    /// Only records in this state at the time of the call.
    pub state: Option<RecordState>,
    /// Only records of this scope (`scope`, and its value when given).
    pub scope: Option<String>,
    /// Only records of this scope value (with [`scope`](Self::scope)).
    pub scope_value: Option<String>,
    /// Only records created at or before this time (`--older-than`).
    pub created_before: Option<Timestamp>,
    /// Only records that completed in `[from, to)`.
    pub completed_between: Option<(Timestamp, Timestamp)>,
}

impl RecordFilter {
    /// Every record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only `operation`'s records.
    #[must_use]
    pub fn operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Only records in `state`.
    #[must_use]
    pub fn state(mut self, state: RecordState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only records of `scope`.
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Only records of this scope value.
    #[must_use]
    pub fn scope_value(mut self, value: impl Into<String>) -> Self {
        self.scope_value = Some(value.into());
        self
    }

    /// Only records created at or before `at`.
    #[must_use]
    pub fn created_before(mut self, at: Timestamp) -> Self {
        self.created_before = Some(at);
        self
    }

    /// Only records completed in `[from, to)`.
    #[must_use]
    pub fn completed_between(mut self, from: Timestamp, to: Timestamp) -> Self {
        self.completed_between = Some((from, to));
        self
    }

    /// Whether `record` is selected at `now`: the rule every store follows.
    pub fn matches(&self, record: &Record, now: Timestamp) -> bool {
        let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        is(&self.operation, &record.operation)
            && is(&self.scope, &record.scope)
            && is(&self.scope_value, &record.scope_value)
            && self.state.is_none_or(|s| s == record.state(now))
            && self.created_before.is_none_or(|at| record.created_at <= at)
            && self.completed_between.is_none_or(|(from, to)| {
                record
                    .completed_at
                    .is_some_and(|at| record.completed && from <= at && at < to)
            })
    }
}

/// What [`Admin::forget_record`](super::Admin::forget_record) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Forgotten {
    /// The record was deleted: the next request with its key runs again. Its owner, if one was
    /// still running, is fenced out: its completion finds no record of its own and stores
    /// nothing.
    Deleted(Record),
    /// An owner still holds a live lease; nothing was deleted (only without `force`).
    Leased(Record),
    /// No record under that key.
    Absent,
}

/// Counts of records by operation and state, as [`Admin::record_stats`](super::Admin::record_stats)
/// reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordStats {
    /// How many records each operation has in each state.
    pub counts: BTreeMap<(String, RecordState), u64>,
    /// When the oldest record still in flight was created.
    pub oldest_in_flight: Option<Timestamp>,
}

impl RecordStats {
    /// No records.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `record` as of `now`.
    pub fn add(&mut self, record: &Record, now: Timestamp) {
        let state = record.state(now);
        self.add_count(&record.operation, state, 1);
        if state == RecordState::InFlight {
            self.saw_in_flight(record.created_at);
        }
    }

    /// Adds `n` records of `operation` in `state` (a store that counts in its backend).
    pub fn add_count(&mut self, operation: &str, state: RecordState, n: u64) {
        if n > 0 {
            *self
                .counts
                .entry((operation.to_owned(), state))
                .or_default() += n;
        }
    }

    /// Notes an in-flight record created at `created_at`.
    pub fn saw_in_flight(&mut self, created_at: Timestamp) {
        self.oldest_in_flight = Some(
            self.oldest_in_flight
                .map_or(created_at, |oldest| oldest.min(created_at)),
        );
    }

    /// How many records are counted in `state`, over every operation.
    pub fn total(&self, state: RecordState) -> u64 {
        self.counts
            .iter()
            .filter(|((_, s), _)| *s == state)
            .map(|(_, n)| n)
            .sum()
    }
}

/// The oldest `limit` records, by creation then key, among those a listing offers: what a store
/// that selects records in process answers [`Admin::list_records`](super::Admin::list_records)
/// with. It holds at most twice the limit (at least 256) at a time, however many are offered.
#[derive(Debug)]
pub struct Oldest {
    limit: usize,
    found: Vec<Record>,
}

impl Oldest {
    /// Keeps the oldest `limit` of what it is offered.
    pub fn new(limit: u32) -> Self {
        Self {
            limit: limit as usize,
            found: Vec::new(),
        }
    }

    /// Takes `record` into account.
    pub fn offer(&mut self, record: Record) {
        self.found.push(record);
        if self.found.len() >= self.limit.saturating_mul(2).max(256) {
            self.keep_oldest();
        }
    }

    /// The oldest `limit` records offered, oldest first.
    pub fn into_vec(mut self) -> Vec<Record> {
        self.keep_oldest();
        self.found
    }

    fn keep_oldest(&mut self) {
        self.found.sort_unstable_by_key(|r| (r.created_at, r.key));
        self.found.truncate(self.limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_are_kept_by_creation_then_key() {
        let record = |n: u8, created: i64| {
            let times = RecordTimes {
                created_at: Timestamp::from_millis(created),
                completed_at: None,
                lease_until: Timestamp::from_millis(0),
                expires_at: Timestamp::from_millis(1),
            };
            Record::new(
                RecordKey::from_bytes([n; 32]),
                "",
                "",
                "",
                false,
                None,
                times,
            )
        };
        let mut oldest = Oldest::new(3);
        for record in [record(3, 5), record(2, 9), record(1, 5), record(4, 1)] {
            oldest.offer(record);
        }
        let keys: Vec<u8> = oldest
            .into_vec()
            .iter()
            .map(|r| r.key.as_bytes()[0])
            .collect();
        assert_eq!(keys, [4, 1, 3]);
    }

    #[test]
    fn memory_stays_bounded_however_many_are_offered() {
        let mut oldest = Oldest::new(2);
        for n in (0..10_000i64).rev() {
            let times = RecordTimes {
                created_at: Timestamp::from_millis(n),
                completed_at: None,
                lease_until: Timestamp::from_millis(0),
                expires_at: Timestamp::from_millis(1),
            };
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&n.to_be_bytes());
            let info = Record::new(RecordKey::from_bytes(key), "", "", "", false, None, times);
            oldest.offer(info);
            assert!(oldest.found.len() < 256, "{}", oldest.found.len());
        }
        let created: Vec<i64> = oldest
            .into_vec()
            .iter()
            .map(|r| r.created_at.as_millis())
            .collect();
        assert_eq!(created, [0, 1]);
    }
}
