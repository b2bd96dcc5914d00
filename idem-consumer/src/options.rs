//! [`Options`]: what every consumer face is set up with, whatever its broker.

use std::borrow::Cow;
use std::time::Duration;

use idem_core::idempotency::Idempotency;
use idem_core::operation::{Lent, Operation, OperationError};

use crate::error::ConsumeError;

/// What becomes of a message that has no key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Keyless {
    /// Terminated (the broker is told never to deliver it again), logged at WARN and counted:
    /// the handler does not run. The default.
    #[default]
    Terminate,
    /// Processed without protection: the handler runs on every delivery (in atomic mode still
    /// in a transaction of its own), as it would without idem.
    Unprotected,
}

/// The settings every consumer takes: the engine, the operation its records are kept under,
/// and how messages are handled. Handed to a face's consumer (`idem_nats::NatsConsumer::new`).
#[derive(Debug, Clone)]
pub struct Options {
    idempotency: Idempotency,
    name: Cow<'static, str>,
    scope: String,
    ttl: Duration,
    concurrency: usize,
    handler_timeout: Duration,
    retry_delay: Duration,
    keyless: Keyless,
}

/// How long an unprotected run's throw-away record lives: the shortest TTL there is.
const UNPROTECTED_TTL: Duration = Duration::from_secs(1);

impl Options {
    /// Messages handled by the engine `idempotency` as the idempotent operation `operation`
    /// (the records' name, such as `"orders.create"`: keep it stable across deployments).
    ///
    /// # Panics
    /// When `operation` is not an operation name (1..=128 bytes, no control characters, no
    /// whitespace at either end).
    #[track_caller]
    pub fn new(idempotency: Idempotency, operation: impl Into<Cow<'static, str>>) -> Self {
        let name = operation.into();
        let _ = idempotency.operation(name.clone()); // checks the name now, not per message
        Self {
            idempotency,
            name,
            scope: String::new(),
            ttl: Operation::DEFAULT_TTL,
            concurrency: 8,
            handler_timeout: Duration::from_secs(30),
            retry_delay: Duration::from_secs(1),
            keyless: Keyless::default(),
        }
    }

    /// Whose keys these are: consumers with different scopes never share a record (default:
    /// one global scope).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// How long a processed key is remembered and its redeliveries skipped (default 24 h).
    /// Keep it above the longest a message can come back: the broker's retention, or how long
    /// publishers retry.
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        let _ = self.idempotency.operation("ttl").ttl(ttl); // checks the bounds
        self.ttl = ttl;
        self
    }

    /// How many messages are handled at once (default 8); a consumer takes no more from its
    /// broker than it has room for.
    ///
    /// # Panics
    /// When `concurrency` is 0.
    #[track_caller]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        assert!(concurrency > 0, "Options::concurrency must be at least 1");
        self.concurrency = concurrency;
        self
    }

    /// The handler's deadline (default 30 s): a handler that outlives it is stopped and treated
    /// as failed (in atomic mode its transaction rolls back), and the message handed back.
    /// Keep the engine's `transaction_timeout` (atomic mode) and `lease` at or above it.
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.handler_timeout = limit;
        self
    }

    /// How long a message whose run failed waits before it is delivered again (default 1 s).
    /// A key in flight elsewhere waits the engine's `retry_after` instead.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// What becomes of a message without a key (default [`Keyless::Terminate`]).
    pub fn keyless(mut self, keyless: Keyless) -> Self {
        self.keyless = keyless;
        self
    }

    /// The engine.
    pub fn idempotency(&self) -> &Idempotency {
        &self.idempotency
    }

    /// How many messages are handled at once.
    pub fn concurrency_limit(&self) -> usize {
        self.concurrency
    }

    /// The handler's deadline.
    pub fn handler_limit(&self) -> Duration {
        self.handler_timeout
    }

    /// How long a failed message waits before its next delivery.
    pub fn retry_wait(&self) -> Duration {
        self.retry_delay
    }

    /// What becomes of a message without a key.
    pub fn keyless_policy(&self) -> Keyless {
        self.keyless
    }

    /// The operation for one delivery: protected under its key, or (`protected == false`)
    /// under a throw-away key of its own that lapses at once.
    pub fn operation(&self, protected: bool) -> Operation<'_> {
        let ttl = if protected { self.ttl } else { UNPROTECTED_TTL };
        self.idempotency
            .operation(self.name.clone())
            .scope(self.scope.clone())
            .ttl(ttl)
    }

    /// Whether these options can run: the scope holds no NUL byte.
    pub fn check(&self) -> Result<(), ConsumeError> {
        match self.scope.contains('\0') {
            true => Err(ConsumeError::InvalidScope),
            false => Ok(()),
        }
    }

    /// Whether these options can run in atomic mode on `L`: [`check`](Self::check), and the
    /// engine's store lends transactions of that kind.
    pub fn check_atomic<L: Lent>(&self) -> Result<(), ConsumeError> {
        self.check()?;
        let engine = self.idempotency.engine();
        let lends = engine
            .lending()
            .is_some_and(|lending| L::lent(&lending).is_ok());
        match lends {
            true => Ok(()),
            false => Err(ConsumeError::Atomic(OperationError::AtomicUnsupported {
                store: engine.store_name(),
                database: L::DATABASE,
            })),
        }
    }
}
