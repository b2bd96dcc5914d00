//! One of the memory store's shards: its records, and an index of them by expiry so purges take
//! the expired ones without scanning the rest.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, Hasher};

use super::Entry;
use crate::clock::Timestamp;
use crate::key::RecordKey;

/// A shard's records, and the index the purges read.
///
/// Every record has one entry in `expiries`, at `Entry::indexed`, never later than the record
/// expires: an entry may be early (a completion moved the expiry later without touching the
/// index, which saves the hot path a B-tree update), and a purge that meets an early entry moves
/// it to the record's real expiry.
pub(super) struct Shard {
    records: HashMap<RecordKey, Entry, Spread>,
    expiries: BTreeSet<(i64, RecordKey)>,
}

impl Shard {
    pub(super) fn new() -> Self {
        Self {
            records: HashMap::with_hasher(Spread::new()),
            expiries: BTreeSet::new(),
        }
    }

    pub(super) fn get(&self, key: &RecordKey) -> Option<&Entry> {
        self.records.get(key)
    }

    /// Every record, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RecordKey, &Entry)> {
        self.records.iter()
    }

    /// The record, to change anything but its expiry (see [`Shard::set_expiry`]).
    pub(super) fn get_mut(&mut self, key: &RecordKey) -> Option<&mut Entry> {
        self.records.get_mut(key)
    }

    /// Adds `record` under `key`, which must be absent.
    pub(super) fn insert(&mut self, key: RecordKey, mut record: Entry) {
        record.indexed = record.expires_at.as_millis();
        self.expiries.insert((record.indexed, key));
        self.records.insert(key, record);
    }

    pub(super) fn remove(&mut self, key: &RecordKey) -> Option<Entry> {
        let record = self.records.remove(key)?;
        self.expiries.remove(&(record.indexed, *key));
        Some(record)
    }

    /// Moves the record's expiry to `at`; the index changes only when `at` is earlier than its
    /// entry.
    pub(super) fn set_expiry(&mut self, key: &RecordKey, at: Timestamp) {
        let Some(record) = self.records.get_mut(key) else {
            return;
        };
        record.expires_at = at;
        if at.as_millis() < record.indexed {
            self.expiries.remove(&(record.indexed, *key));
            record.indexed = at.as_millis();
            self.expiries.insert((record.indexed, *key));
        }
    }

    /// Removes up to `limit` records expired at `now`, earliest first, handing each to `gone`.
    pub(super) fn drain_expired(
        &mut self,
        now: Timestamp,
        limit: usize,
        mut gone: impl FnMut(Entry),
    ) -> usize {
        let mut removed = 0;
        while removed < limit {
            let Some(&(at, key)) = self.expiries.first() else {
                break;
            };
            if at > now.as_millis() {
                break;
            }
            self.expiries.pop_first();
            let Some(record) = self.records.get_mut(&key) else {
                continue;
            };
            if record.expires_at > now {
                // An early entry: the record lives on; index it where it expires.
                record.indexed = record.expires_at.as_millis();
                self.expiries.insert((record.indexed, key));
                continue;
            }
            if let Some(record) = self.records.remove(&key) {
                gone(record);
                removed += 1;
            }
        }
        removed
    }
}

/// Hashes the maps' keys (record keys, tenants) with one multiply: both are already uniformly
/// distributed hash outputs (SHA-256, a keyed SipHash), so SipHash over them again buys nothing.
/// A random seed per store keeps bucket positions unpredictable from outside.
#[derive(Clone, Copy)]
pub(super) struct Spread(u64);

impl Spread {
    pub(super) fn new() -> Self {
        Self(fastrand::u64(..) | 1)
    }
}

impl BuildHasher for Spread {
    type Hasher = SpreadHasher;
    fn build_hasher(&self) -> SpreadHasher {
        SpreadHasher(self.0)
    }
}

/// The [`Spread`] hasher: folds the written words into its state, then mixes it once.
pub(super) struct SpreadHasher(u64);

impl Hasher for SpreadHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Entry keys hash as their 32 bytes (plus a length prefix); 8 bytes per word.
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut le = [0; 8];
            le.copy_from_slice(word);
            self.write_u64(u64::from_le_bytes(le));
        }
        for byte in words.remainder() {
            self.write_u64(u64::from(*byte));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 31)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Entry keys are SHA-256 outputs: random bytes stand in for them.
    fn keys(n: usize) -> Vec<RecordKey> {
        let mut rng = fastrand::Rng::with_seed(7);
        (0..n)
            .map(|_| RecordKey::from_bytes(std::array::from_fn(|_| rng.u8(..))))
            .collect()
    }

    /// The maps stay maps, not lists: distinct keys hash apart in the bits a `HashMap` reads
    /// (the low ones pick the bucket, the top seven tag it), and another store's seed moves
    /// every key, so nobody outside can aim keys at one bucket.
    #[test]
    fn record_keys_spread_over_the_hash_and_each_store_places_them_its_own_way() {
        let keys = keys(10_000);
        let (one, other) = (Spread::new(), Spread::new());
        let hashes: Vec<u64> = keys.iter().map(|k| one.hash_one(k)).collect();
        let distinct = |bits: fn(u64) -> u64| {
            hashes
                .iter()
                .map(|&h| bits(h))
                .collect::<HashSet<_>>()
                .len()
        };
        assert_eq!(distinct(|h| h), keys.len(), "no two keys share a hash");
        // 10 000 keys into 65 536 buckets: about 9 300 distinct if uniform.
        assert!(
            distinct(|h| h & 0xffff) > 9_000,
            "low bits: {}",
            distinct(|h| h & 0xffff)
        );
        assert_eq!(
            distinct(|h| h >> 57),
            128,
            "every top-seven-bit tag is used"
        );
        let moved = keys
            .iter()
            .filter(|k| one.hash_one(k) != other.hash_one(k))
            .count();
        assert_eq!(moved, keys.len(), "another seed, other places");
    }
}
