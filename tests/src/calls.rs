//! A counter of how many times a test's handlers or methods ran, shared with their clones.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many times the handlers ran.
#[derive(Clone, Default, Debug)]
pub struct Calls(Arc<AtomicUsize>);

impl Calls {
    /// The runs so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Counts a run; returns its number, from 1.
    pub fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}
