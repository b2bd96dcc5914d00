//! What became of the deliveries a consumer took: counters while it runs, a [`Counts`] snapshot
//! for the application and its tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many deliveries ended each way, since the consumer was made: a snapshot of its
/// [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// The handler ran, its output was stored, the message acked.
    pub processed: u64,
    /// The key's record was complete: the handler did not run, the message was acked.
    pub replayed: u64,
    /// The key was in flight in another delivery: handed back (`nak` with a delay), not run.
    pub handed_back: u64,
    /// The handler failed, outlived its deadline or panicked, or the store failed: the key was
    /// released (or never claimed) and the message handed back.
    pub failed: u64,
    /// The key was used before with another payload: terminated (`AckTerm`), not run.
    pub key_reused: u64,
    /// The handler said no delivery can succeed: terminated.
    pub poison: u64,
    /// No key and [`Keyless::Terminate`](crate::Keyless::Terminate), or a key the engine's rules
    /// refuse: terminated, not run.
    pub keyless: u64,
    /// No key and [`Keyless::Unprotected`](crate::Keyless::Unprotected): run without protection
    /// (counted in [`processed`](Self::processed) too when it succeeded).
    pub unprotected: u64,
    /// Acks, naks or terminations the client failed to send (the broker redelivers those).
    pub ack_errors: u64,
}

/// Where a delivery ended, one counter each (the fields of [`Counts`] of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// Run, output stored.
    Processed,
    /// Complete before: not run.
    Replayed,
    /// In flight elsewhere: handed back.
    HandedBack,
    /// The run failed or the store did: handed back.
    Failed,
    /// The key was used with another payload: terminated.
    KeyReused,
    /// Poison: terminated.
    Poison,
    /// No key, or one the rules refuse: terminated.
    Keyless,
}

/// The live counters behind [`Counts`].
#[derive(Debug, Default)]
pub struct Counters {
    processed: AtomicU64,
    replayed: AtomicU64,
    handed_back: AtomicU64,
    failed: AtomicU64,
    key_reused: AtomicU64,
    poison: AtomicU64,
    keyless: AtomicU64,
    unprotected: AtomicU64,
    ack_errors: AtomicU64,
}

impl Counters {
    /// Counts a delivery that ended as `ended`.
    pub fn ended(&self, ended: Ended) {
        let counter = match ended {
            Ended::Processed => &self.processed,
            Ended::Replayed => &self.replayed,
            Ended::HandedBack => &self.handed_back,
            Ended::Failed => &self.failed,
            Ended::KeyReused => &self.key_reused,
            Ended::Poison => &self.poison,
            Ended::Keyless => &self.keyless,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a delivery run unprotected.
    pub fn unprotected(&self) {
        self.unprotected.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer the client failed to send.
    pub fn ack_error(&self) {
        self.ack_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Counts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Counts {
            processed: read(&self.processed),
            replayed: read(&self.replayed),
            handed_back: read(&self.handed_back),
            failed: read(&self.failed),
            key_reused: read(&self.key_reused),
            poison: read(&self.poison),
            keyless: read(&self.keyless),
            unprotected: read(&self.unprotected),
            ack_errors: read(&self.ack_errors),
        }
    }
}
