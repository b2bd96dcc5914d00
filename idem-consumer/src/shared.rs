//! [`Core`]: what every face's consumer holds, its options and its counters.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::counts::{Counters, Counts};
use crate::options::Options;

/// How often [`Core::stop_when`] looks at the counts.
const WATCH: Duration = Duration::from_millis(50);

/// What a face's consumer holds: its [`Options`] and the [`Counters`] its deliveries end in.
/// Cheap to clone; clones share the counters.
#[derive(Debug, Clone)]
pub struct Core {
    options: Options,
    counters: Arc<Counters>,
}

impl Core {
    /// A consumer's core with `options`, nothing counted yet.
    pub fn new(options: Options) -> Self {
        Self {
            options,
            counters: Arc::default(),
        }
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The live counters, for the deliveries to count themselves in.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// How many deliveries ended each way so far.
    pub fn counts(&self) -> Counts {
        self.counters.snapshot()
    }

    /// A stop that completes once the counts satisfy `done`: for a consumer that drains a
    /// known number of messages (a batch job, a test), handed to its `run`.
    pub fn stop_when<F>(&self, done: F) -> impl Future<Output = ()> + Send + 'static + use<F>
    where
        F: Fn(&Counts) -> bool + Send + 'static,
    {
        let counters = Arc::clone(&self.counters);
        async move {
            while !done(&counters.snapshot()) {
                tokio::time::sleep(WATCH).await;
            }
        }
    }
}
