//! At most one one-commit claim per record key waits on the database at a time, per store.
//!
//! A duplicate of a one-commit request waits on the first's claim (its lock) inside PostgreSQL,
//! and a waiting claim holds a pooled connection. Without a bound, a flood of duplicates of one
//! slow request would take every connection in the pool and starve requests for other keys.
//! Behind the gate the others wait in the process, holding no connection, within the same
//! deadline; when the one ahead of them settles (usually because the first committed), the next
//! goes to the database and settles at once. So duplicates hold at most one connection per key
//! and process beside the first request's own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use idem_core::key::RecordKey;

/// The keys whose claims are on their way to the database, each with a gate of one permit.
#[derive(Debug, Default)]
pub(super) struct KeyGates {
    gates: Mutex<HashMap<RecordKey, Arc<Semaphore>>>,
}

/// Passage through one key's gate; dropping it lets the next claim of that key through.
#[derive(Debug)]
pub(super) struct Passage<'a> {
    gates: &'a KeyGates,
    key: RecordKey,
    /// `None` only inside `drop`.
    gate: Option<Arc<Semaphore>>,
    held: bool,
}

impl KeyGates {
    /// Waits up to `within` for `key`'s gate. `None` when the claims ahead took longer.
    pub(super) async fn pass(&self, key: &RecordKey, within: Duration) -> Option<Passage<'_>> {
        let gate = self
            .lock()
            .entry(*key)
            .or_insert_with(|| Arc::new(Semaphore::new(1)))
            .clone();
        let mut passage = Passage {
            gates: self,
            key: *key,
            gate: Some(gate),
            held: false,
        };
        let gate = passage.gate.as_deref()?;
        let permit = tokio::time::timeout(within, gate.acquire()).await.ok()?;
        // The gate is never closed; its permit goes back when the passage drops.
        permit.ok()?.forget();
        passage.held = true;
        Some(passage)
    }

    /// How many keys have a gate: claims on their way, or waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RecordKey, Arc<Semaphore>>> {
        // The map stays consistent whatever panicked while it was held: every change is one call.
        self.gates.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Passage<'_> {
    fn drop(&mut self) {
        let mut gates = self.gates.lock();
        let Some(gate) = self.gate.take() else { return };
        if self.held {
            gate.add_permits(1);
        }
        // Every clone of a gate is made and dropped under the lock, so a count of one is the
        // map's own: nobody else is passing or waiting, and the key's entry goes.
        drop(gate);
        if gates
            .get(&self.key)
            .is_some_and(|g| Arc::strong_count(g) == 1)
        {
            gates.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: RecordKey = RecordKey::from_bytes([7; 32]);
    const OTHER: RecordKey = RecordKey::from_bytes([8; 32]);
    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn one_claim_per_key_passes_and_the_next_follows_when_it_is_done() {
        let gates = KeyGates::default();
        let first = gates.pass(&KEY, LONG).await.expect("an open gate");
        // Another key is not held up.
        let other = gates.pass(&OTHER, LONG).await.expect("its own gate");
        drop(other);
        // The same key waits while the first is through, and gives up at its deadline.
        assert!(gates.pass(&KEY, Duration::from_millis(20)).await.is_none());
        let done = async {
            tokio::task::yield_now().await;
            drop(first);
        };
        let (next, ()) = tokio::join!(gates.pass(&KEY, LONG), done);
        assert!(
            next.is_some(),
            "the next claim passed once the first was done"
        );
        drop(next);
        assert_eq!(gates.len(), 0, "no key is kept once its claims are done");
    }

    #[tokio::test]
    async fn a_key_is_forgotten_once_nobody_passes_or_waits() {
        let gates = KeyGates::default();
        for i in 0..100u8 {
            let key = RecordKey::from_bytes([i; 32]);
            let through = gates.pass(&key, LONG).await.unwrap();
            assert!(gates.pass(&key, Duration::ZERO).await.is_none(), "held");
            drop(through);
        }
        assert_eq!(
            gates.len(),
            0,
            "a hostile stream of keys leaves nothing behind"
        );
    }
}
