//! What key a delivery runs under: its own, a throw-away one (unprotected), or none at all
//! (terminated), as the consumer's [`Keyless`] policy says.

use crate::counts::{Counters, Ended};
use crate::options::{Keyless, Options};

/// How a delivery is keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keying {
    /// Under the message's own key.
    Key(String),
    /// Unprotected, under a throw-away key of its own that lapses at once.
    Unprotected(String),
    /// Terminated: no key, and [`Keyless::Terminate`]. Already logged and counted.
    Terminate,
}

impl Keying {
    /// How a delivery whose key is `key` (`None`: it has none) is keyed under `options`;
    /// counts and logs the keyless ones (in the caller's span, which should name the message).
    pub fn of(options: &Options, counters: &Counters, key: Option<String>) -> Self {
        match (key, options.keyless_policy()) {
            (Some(key), _) => Self::Key(key),
            (None, Keyless::Unprotected) => {
                counters.unprotected();
                Self::Unprotected(format!("unprotected:{}", uuid::Uuid::new_v4()))
            }
            (None, Keyless::Terminate) => {
                tracing::warn!("message terminated: it has no idempotency key");
                counters.ended(Ended::Keyless);
                Self::Terminate
            }
        }
    }
}
