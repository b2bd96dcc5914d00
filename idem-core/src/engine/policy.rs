//! The rules every adapter follows: how long a lease lasts, how long a duplicate waits, what a
//! refused caller is told, how long a store may take, and how atomic mode commits.

use std::time::Duration;

/// Timing rules shared by every adapter, set on the engine's builder.
#[derive(Debug, Clone)]
pub struct Policy {
    /// How long a claim lasts without renewal.
    pub lease: Duration,
    /// How long a waiting duplicate waits for the first request.
    pub wait_timeout: Duration,
    /// What callers are told to wait before retrying after a 409 or a store failure.
    pub retry_after: Duration,
    /// How long a caller waits for the store before it is refused (fail closed), and how long
    /// any store call but a claim may take.
    pub store_timeout: Duration,
    /// How long a transaction lent to an operation may stay open, from its first use (or from
    /// the claim, when the claim rides in it): past it the operation is stopped and rolled back.
    pub transaction_timeout: Duration,
    /// Whether work for a request may go on after its answer (`Builder::background_work`):
    /// when not, failed writes are retried inline, for at most `store_timeout`, and the answer
    /// waits for the attempt's task to end.
    pub background_work: bool,
}

impl Policy {
    /// The defaults of the engine's builder.
    pub const DEFAULT: Self = Self {
        lease: Duration::from_secs(30),
        wait_timeout: Duration::from_secs(10),
        retry_after: Duration::from_secs(1),
        store_timeout: Duration::from_secs(5),
        transaction_timeout: Duration::from_secs(10),
        background_work: true,
    };

    /// How long each statement in a lent transaction may run or wait for a lock on the server
    /// (PostgreSQL's `statement_timeout` and `lock_timeout`): a little past the transaction's own
    /// deadline, so the engine's answer comes first, and a statement the engine stopped waiting
    /// for still frees its connection.
    pub fn statement_timeout(&self) -> Duration {
        self.transaction_timeout + Duration::from_secs(1)
    }

    /// How long a write the store failed is retried before the request is answered: `None`
    /// when it is retried in the background instead.
    pub fn inline_retries(&self) -> Option<Duration> {
        (!self.background_work).then_some(self.store_timeout)
    }
}

/// What to do with a duplicate that arrives while the first request is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlightMode {
    /// Answer `409 idempotency_key_in_progress` with `Retry-After` (`in_flight = "reject"`, the
    /// default).
    Reject,
    /// Wait, up to the engine's wait timeout, for the first request's response and replay it
    /// (`in_flight = "wait"`); answer 409 if it is still running then.
    Wait,
}

/// How an operation in atomic mode (a handler taking a `Tx` or `AnyTx`) commits on a store that
/// can claim inside a transaction (PostgreSQL). Other stores and operations without a
/// transaction ignore it.
///
/// | | `commits = "one"` (default) | `commits = "two"` |
/// |---|---|---|
/// | commits per fresh request | 1 | 2 |
/// | round trips of idem's own | 2 (claim with `BEGIN`, completion with `COMMIT`) | 4 (claim, `BEGIN`, completion, `COMMIT`) |
/// | the transaction and its pooled connection are held | from the claim to the response: the handler's whole run | from the first `Tx::conn` to the response |
/// | rows written per fresh request | 1: the completed record, with the `COMMIT` | 2: the claim, then the completion |
/// | a duplicate while the first runs | waits on the first's transaction: 409 after 50 ms (`in_flight = "reject"`), or the replay once it commits (`"wait"`, up to the wait timeout). Of its duplicates, one per process waits in the database, holding a pooled connection; the others wait in the process, holding none | sees the committed claim: 409, or polls for the replay |
/// | the process dies mid-handler | the transaction aborts with the connection: nothing is left, the retry runs at once | the claim stays until its lease lapses, then a retry takes it over |
/// | an operator's query for records in flight | shows none of this endpoint's (the record is written when it completes) | shows them |
///
/// One commit saves two round trips and a commit per fresh request, so it answers sooner where
/// those cost more than CPU: a database across a network, or one whose commits wait for a disk.
/// It also writes each record once, so where the database shares the application's CPU on one
/// machine it serves about a third more requests a second (BENCHMARKS.md in the repository
/// measures both, with the CPU each costs). Choose two when the handler calls slow services before its first query (a payment
/// processor, say): with one commit a pooled connection and an open transaction are held for
/// that whole call, so a burst of slow requests with different keys can exhaust the pool
/// (duplicates of one key add at most one connection per process). Set PostgreSQL's
/// `idle_in_transaction_session_timeout` above the slowest handler: a one-commit claim whose
/// client vanished without closing its connection (a network partition, not a crash) holds the
/// key until the server ends that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AtomicCommits {
    /// The claim is made inside the handler's transaction, which commits it completed, with the
    /// handler's writes (`commits = "one"`, the default).
    #[default]
    One,
    /// The claim commits on its own before the handler runs; the handler's transaction then
    /// commits its writes with the completion (`commits = "two"`).
    Two,
}
