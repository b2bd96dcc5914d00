//! At most one one-commit claim per record key waits on the database at a time, per store.
//!
//! A duplicate of a one-commit request waits on the first's claim (its advisory lock) inside
//! PostgreSQL, holding a pooled connection. Without a bound, a flood of duplicates of one slow
//! request would take every connection in the pool. Behind the gate the others wait in the
//! process, holding none, within the same deadline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use idem_core::key::RecordKey;

/// The keys whose claims are on their way to the database, each with a gate of one permit.
#[derive(Debug, Default)]
pub(crate) struct KeyGates {
    gates: Mutex<HashMap<RecordKey, Arc<Semaphore>>>,
}

/// Passage through one key's gate; dropping it lets the next claim of that key through.
#[derive(Debug)]
pub(crate) struct Passage<'a> {
    gates: &'a KeyGates,
    key: RecordKey,
    permit: Option<OwnedSemaphorePermit>,
}

impl KeyGates {
    /// Waits up to `within` for `key`'s gate. `None` when the claims ahead took longer.
    pub(crate) async fn pass(&self, key: &RecordKey, within: Duration) -> Option<Passage<'_>> {
        let gate = self
            .lock()
            .entry(*key)
            .or_insert_with(|| Arc::new(Semaphore::new(1)))
            .clone();
        let mut passage = Passage {
            gates: self,
            key: *key,
            permit: None,
        };
        // On a timeout the passage drops without a permit and forgets the key if nobody else
        // holds its gate.
        let permit = tokio::time::timeout(within, gate.acquire_owned()).await;
        passage.permit = Some(permit.ok()?.ok()?);
        Some(passage)
    }

    /// How many keys have a gate: claims on their way, or waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RecordKey, Arc<Semaphore>>> {
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Passage<'_> {
    fn drop(&mut self) {
        let mut gates = self.gates.lock();
        drop(self.permit.take());
        // Every clone of a gate is made under the lock and held by a waiter or a permit: a
        // count of one is the map's own, so nobody passes or waits, and the key goes.
        if gates
            .get(&self.key)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            gates.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: RecordKey = RecordKey::from_bytes([7; 32]);
    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn one_claim_per_key_passes_and_keys_are_forgotten_after() {
        let gates = KeyGates::default();
        let first = gates.pass(&KEY, LONG).await.expect("an open gate");
        let other = RecordKey::from_bytes([8; 32]);
        drop(gates.pass(&other, LONG).await.expect("its own gate"));
        assert!(gates.pass(&KEY, Duration::ZERO).await.is_none(), "held");
        drop(first);
        let next = gates.pass(&KEY, LONG).await;
        assert!(next.is_some(), "the next passes once the first is done");
        drop(next);
        assert_eq!(gates.len(), 0, "no key is kept once its claims are done");
    }
}
