//! What operators read and change of the object store's records: every object under the prefix
//! listed and read a few at once, and forgets and purges that replace a record by a tombstone
//! with a compare-and-swap on the version they read.

use std::future::ready;
use std::pin::pin;

use futures_util::{Stream, TryStreamExt};
use object_store::UpdateVersion;
use object_store::path::Path;

use super::format::{LiveRecord, Stored};
use super::{ATTEMPTS, BucketStore, contended};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{
    Forgotten, Oldest, Record, RecordFilter, RecordState, RecordStats, RecordTimes,
};

/// How many objects a listing reads at once.
const READS_AT_ONCE: usize = 16;

/// One record object as a listing read it.
pub(super) struct Scanned {
    pub(super) key: RecordKey,
    pub(super) path: Path,
    pub(super) stored: Stored,
    /// The version read: a change decided from `stored` is a compare-and-swap on it.
    pub(super) version: UpdateVersion,
}

/// What an operator sees of a live record.
fn info(key: &RecordKey, record: &LiveRecord) -> Record {
    let completed = record.completed.as_ref();
    Record::new(
        *key,
        record.operation.as_str(),
        record.scope.as_str(),
        record.scope_value.as_str(),
        completed.is_some(),
        completed.and_then(|c| c.status),
        RecordTimes {
            created_at: record.created_at,
            completed_at: completed.map(|c| c.at),
            lease_until: record.lease_until,
            expires_at: record.expires_at,
        },
    )
}

/// The key a record object's name spells: 64 lower-case hex digits, as
/// [`RecordKey::to_hex`] writes them.
fn parse_key(name: &str) -> Option<RecordKey> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let name = name.as_bytes();
    if name.len() != 64 {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(name.chunks_exact(2)) {
        *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(RecordKey::from_bytes(bytes))
}

impl BucketStore {
    /// The record an object holds, when its path is one [`path`](Self::path) gives a key:
    /// anything else under the prefix (a start-up probe, a store under a longer prefix, a file
    /// of someone else's) is not a record.
    fn key_of(&self, path: &Path) -> Option<RecordKey> {
        let key = parse_key(path.filename()?)?;
        (self.path(&key) == *path).then_some(key)
    }

    /// Every record object under the prefix (tombstones and retiring marks too), in no order,
    /// read [`READS_AT_ONCE`] at a time; an object deleted between the listing and its read is
    /// left out. `object_store` pages the listing itself.
    pub(super) fn scan(&self) -> impl Stream<Item = Result<Scanned, StoreError>> + Send + '_ {
        self.store
            .list(Some(&self.prefix))
            .map_err(StoreError::unavailable)
            .try_filter_map(move |meta| {
                let found = self.key_of(&meta.location).map(|key| (key, meta.location));
                ready(Ok(found))
            })
            .map_ok(move |(key, path)| async move {
                let read = match self.read(&path).await {
                    Err(StoreError::Corrupt(why)) => {
                        return Err(StoreError::Corrupt(format!("object {path}: {why}").into()));
                    }
                    read => read?,
                };
                Ok(read.map(|(stored, version)| Scanned {
                    key,
                    path,
                    stored,
                    version,
                }))
            })
            .try_buffer_unordered(READS_AT_ONCE)
            .try_filter_map(|found| ready(Ok(found)))
    }

    /// The live records `filter` selects at `now`, with what was read of each (tombstones and
    /// retiring marks are released, forgotten or being deleted: not records).
    fn selected<'a>(
        &'a self,
        filter: &'a RecordFilter,
        now: Timestamp,
    ) -> impl Stream<Item = Result<(Record, Scanned), StoreError>> + Send + 'a {
        self.scan().try_filter_map(move |scanned| {
            let selected = match &scanned.stored {
                Stored::Live(record) => Some(info(&scanned.key, record))
                    .filter(|info| filter.matches(info, now))
                    .map(|info| (info, scanned)),
                Stored::Tombstone | Stored::Retiring { .. } => None,
            };
            ready(Ok(selected))
        })
    }
}

impl Admin for BucketStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let mut oldest = Oldest::new(limit);
        let mut records = pin!(self.selected(filter, now));
        while let Some((info, _)) = records.try_next().await? {
            oldest.offer(info);
        }
        Ok(oldest.into_vec())
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        Ok(match self.read(&self.path(key)).await? {
            Some((Stored::Live(record), _)) => {
                let payload = record.completed.as_ref().map(|c| c.payload.clone());
                Some(info(key, &record).with_payload(payload))
            }
            _ => None,
        })
    }

    /// Replaces the record by a tombstone (compare-and-swap on the version read, re-read when
    /// another writer got there first): `object_store` has no conditional delete, and a
    /// tombstone is nobody's record, so its owner's fenced writes find theirs gone.
    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let path = self.path(key);
        for _ in 0..ATTEMPTS {
            let Some((Stored::Live(record), version)) = self.read(&path).await? else {
                return Ok(Forgotten::Absent);
            };
            let seen = info(key, &record);
            if !force && seen.is_leased(now) {
                return Ok(Forgotten::Leased(seen));
            }
            if self.swap(&path, &Stored::Tombstone, version).await? {
                return Ok(Forgotten::Deleted(seen));
            }
        }
        Err(contended())
    }

    /// Tombstones up to `limit` completed, live records `filter` selects, each by
    /// compare-and-swap on the version read: one that changed since is left alone, uncounted.
    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        if limit == 0 {
            return Ok(purged);
        }
        let mut records = pin!(self.selected(filter, now));
        while let Some((info, scanned)) = records.try_next().await? {
            if info.state(now) != RecordState::Completed {
                continue;
            }
            let Scanned { path, version, .. } = scanned;
            if self.swap(&path, &Stored::Tombstone, version).await? {
                purged += 1;
                if purged >= u64::from(limit) {
                    break;
                }
            }
        }
        Ok(purged)
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let mut stats = RecordStats::new();
        let mut records = pin!(self.selected(filter, now));
        while let Some((info, _)) = records.try_next().await? {
            stats.add(&info, now);
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_the_store_writes_are_keys() {
        let key = RecordKey::from_bytes(std::array::from_fn(|i| (i * 9) as u8));
        assert_eq!(parse_key(&key.to_hex()), Some(key));
        let upper = key.to_hex().to_uppercase();
        for name in [".probe-0000000000000001", "", &upper, &key.to_hex()[1..]] {
            assert_eq!(parse_key(name), None, "{name:?}");
        }
    }
}
