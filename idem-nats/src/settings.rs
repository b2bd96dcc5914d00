//! What a consumer is set up with, shared by every delivery it processes.

use std::borrow::Cow;
use std::time::Duration;

use idem_core::idempotency::Idempotency;
use idem_core::operation::Operation;

use crate::key::KeyFrom;

/// What becomes of a message that has no key ([`KeyFrom::Publisher`] and neither header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Keyless {
    /// Terminated (`AckTerm`), logged at WARN and counted: the handler does not run. The
    /// default.
    #[default]
    Terminate,
    /// Processed without protection: the handler runs on every delivery (in atomic mode still
    /// in a transaction of its own), as it would without idem.
    Unprotected,
}

/// The settings of one consumer.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) idempotency: Idempotency,
    pub(crate) name: Cow<'static, str>,
    pub(crate) scope: String,
    pub(crate) ttl: Duration,
    pub(crate) concurrency: usize,
    pub(crate) handler_timeout: Duration,
    pub(crate) retry_delay: Duration,
    pub(crate) key_from: KeyFrom,
    pub(crate) keyless: Keyless,
}

/// How long an unprotected run's throw-away record lives: the shortest TTL there is.
const UNPROTECTED_TTL: Duration = Duration::from_secs(1);

impl Settings {
    /// The operation for one delivery: protected under its key, or (`protected == false`)
    /// under a throw-away key of its own that lapses at once.
    pub(crate) fn operation(&self, protected: bool) -> Operation<'_> {
        let ttl = if protected { self.ttl } else { UNPROTECTED_TTL };
        self.idempotency
            .operation(self.name.clone())
            .scope(self.scope.clone())
            .ttl(ttl)
    }
}
