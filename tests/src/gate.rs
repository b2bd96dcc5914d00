//! [`Gate`]: holds a handler at a point of its body until the test lets it go.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

/// Holds handlers at [`Gate::pass`] until the test calls [`Gate::open`], and tells the test when
/// one arrived ([`Gate::entered`]): in-flight states without sleeping on a guess.
#[derive(Debug, Clone)]
pub struct Gate {
    entered: Arc<Semaphore>,
    release: Arc<Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            entered: Arc::new(Semaphore::new(0)),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Gate {
    /// Waits until a handler reached [`Gate::pass`] (bounded, so a bug fails instead of hanging).
    pub async fn entered(&self) {
        tokio::time::timeout(Duration::from_secs(10), self.entered.acquire())
            .await
            .expect("a gated handler should have started")
            .expect("the gate is never closed")
            .forget();
    }

    /// Lets one handler through.
    pub fn open(&self) {
        self.release.add_permits(1);
    }

    /// Called by a handler: announces itself, then waits to be let through.
    pub async fn pass(&self) {
        self.entered.add_permits(1);
        self.release
            .acquire()
            .await
            .expect("the gate is never closed")
            .forget();
    }
}
