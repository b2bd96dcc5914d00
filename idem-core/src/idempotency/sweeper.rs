//! The background task that purges expired records in bounded batches.

use std::time::Duration;

use super::Idempotency;

impl Idempotency {
    /// Spawns a task on the current Tokio runtime that purges expired records every `period`,
    /// in batches of at most `batch` records so no purge holds a store lock for long. Abort the
    /// returned handle to stop it.
    ///
    /// Stores whose backend expires records itself (Redis) need no sweeping: the task then
    /// logs that once and ends.
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn spawn_sweeper(&self, period: Duration, batch: u32) -> tokio::task::JoinHandle<()> {
        let idempotency = self.clone();
        tokio::spawn(async move {
            let engine = idempotency.engine();
            if !engine.needs_sweeping() {
                tracing::info!(
                    store = engine.store_name(),
                    "the idempotency store expires records itself; no sweeper needed"
                );
                return;
            }
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                loop {
                    match engine.purge_expired(batch).await {
                        Ok(n) if n >= u64::from(batch) => tokio::task::yield_now().await,
                        Ok(n) => {
                            tracing::debug!(purged = n, "idempotency sweep");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(
                                error = &error as &dyn std::error::Error,
                                "idempotency sweep failed"
                            );
                            break;
                        }
                    }
                }
            }
        })
    }
}
