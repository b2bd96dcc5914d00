//! [`Faulty`]: a store that hands every call to the store it wraps, except the calls a test told
//! it to fail, stall, slow down or panic.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::store::{Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

/// Which of a store's calls a fault hits: the five calls every store answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// [`Store::claim`].
    Claim,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`].
    Release,
    /// [`Store::renew`].
    Renew,
    /// [`Store::purge_expired`].
    Purge,
}

impl Call {
    /// Every call, in the order of the [`Store`] trait.
    pub const ALL: [Call; 5] = [
        Call::Claim,
        Call::Complete,
        Call::Release,
        Call::Renew,
        Call::Purge,
    ];

    /// The calls an attempt makes of the store: all but [`Call::Purge`], which only the sweeper
    /// makes.
    pub const ATTEMPT: [Call; 4] = [Call::Claim, Call::Complete, Call::Release, Call::Renew];

    const fn index(self) -> usize {
        self as usize
    }
}

/// What happens to a call a fault hits.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Fault {
    /// The call fails with [`StoreError::Unavailable`] without reaching the store: a blink (a
    /// refused connection, a failover, a dropped packet before the command went out).
    Blink,
    /// The call reaches the store, which carries it out, and then fails with
    /// [`StoreError::Unavailable`]: its reply was lost (a connection cut after the command went
    /// out). A claim so failed may hold its record; a completion so failed has stored it.
    LoseReply,
    /// The call waits, not reaching the store, until the fault is lifted
    /// ([`Faults::heal`], [`Faults::heal_all`]), and then reaches it: a lock, a stalled disk, a
    /// partition that heals. A stalled call whose caller stops waiting is dropped and never
    /// reaches the store.
    Stall,
    /// The call reaches the store at once, and its reply comes this much later: a slow network
    /// or an overloaded server.
    Delay(Duration),
    /// The call fails with the error this makes, without reaching the store
    /// (`|| StoreError::TooLarge { size: 1, limit: 0 }`, say).
    Fail(fn() -> StoreError),
    /// The call panics (a store with a bug): at once, in its first poll, or (`after_waiting`)
    /// once it has waited, from a later poll.
    Panic {
        /// Whether the call first yields to the runtime.
        after_waiting: bool,
    },
}

/// How long a fault lasts on a call.
#[derive(Debug, Clone, Copy)]
struct Rule {
    fault: Fault,
    /// How many more calls it hits; `None`: every call, until healed.
    times: Option<u32>,
}

/// The faults of a [`Faulty`] store and what they did: a handle shared by every clone of the
/// store (and of itself), so a test keeps it while the engine owns the store.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<State>);

#[derive(Debug, Default)]
struct State {
    rules: Mutex<[Option<Rule>; 5]>,
    /// Bumped by each heal of a call: what its stalled calls wait for.
    healed: [Heals; 5],
    calls: [AtomicU64; 5],
    faulted: [AtomicU64; 5],
    stalled: AtomicUsize,
}

#[derive(Debug)]
struct Heals(watch::Sender<u64>);

impl Default for Heals {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl Faults {
    /// Every `call` from now on meets `fault`, until [`heal`](Self::heal)ed.
    pub fn inject(&self, call: Call, fault: Fault) {
        self.set(call, Some(Rule { fault, times: None }));
    }

    /// The next `times` calls of `call` meet `fault`; the ones after reach the store. (A stall
    /// still lasts until healed.)
    pub fn inject_next(&self, call: Call, fault: Fault, times: u32) {
        let times = Some(times);
        self.set(call, Some(Rule { fault, times }));
    }

    /// Every call of `calls` meets `fault`, until healed.
    pub fn inject_all(&self, calls: &[Call], fault: Fault) {
        for &call in calls {
            self.inject(call, fault);
        }
    }

    /// Lifts the fault on `call`: the calls from now on reach the store, and the stalled ones go
    /// through.
    pub fn heal(&self, call: Call) {
        self.set(call, None);
        self.0.healed[call.index()]
            .0
            .send_modify(|heals| *heals += 1);
    }

    /// Lifts every fault.
    pub fn heal_all(&self) {
        for call in Call::ALL {
            self.heal(call);
        }
    }

    /// How many calls of `call` the store was made, faulted or not.
    pub fn calls(&self, call: Call) -> u64 {
        self.0.calls[call.index()].load(Ordering::SeqCst)
    }

    /// How many calls of every kind the store was made.
    pub fn all_calls(&self) -> u64 {
        Call::ALL.iter().map(|&call| self.calls(call)).sum()
    }

    /// How many calls of `call` a fault hit.
    pub fn faulted(&self, call: Call) -> u64 {
        self.0.faulted[call.index()].load(Ordering::SeqCst)
    }

    /// How many calls are stalled now.
    pub fn stalled(&self) -> usize {
        self.0.stalled.load(Ordering::SeqCst)
    }

    fn set(&self, call: Call, rule: Option<Rule>) {
        let mut rules = self.0.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules[call.index()] = rule;
    }

    /// Counts a call of `call`, and takes the fault it meets, if any.
    fn meet(&self, call: Call) -> Option<Fault> {
        self.0.calls[call.index()].fetch_add(1, Ordering::SeqCst);
        let mut rules = self.0.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let rule = rules[call.index()].as_mut()?;
        let fault = rule.fault;
        match &mut rule.times {
            Some(0) => return None,
            Some(times) => *times -= 1,
            None => {}
        }
        self.0.faulted[call.index()].fetch_add(1, Ordering::SeqCst);
        Some(fault)
    }

    /// Runs `call`'s store call `forward` as the fault it meets says.
    async fn run<T, F>(&self, call: Call, forward: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        // Subscribed before the fault is read, so a heal in between is not missed.
        let mut healed = self.0.healed[call.index()].0.subscribe();
        let Some(fault) = self.meet(call) else {
            return forward.await;
        };
        match fault {
            Fault::Blink => Err(blink(call, "the store blinked")),
            Fault::LoseReply => {
                let _landed = forward.await;
                Err(blink(call, "the store's reply was lost"))
            }
            Fault::Stall => {
                let _stalled = Stalled::count(&self.0.stalled);
                // A closed channel (the faults dropped) lets it through too.
                let _ = healed.changed().await;
                drop(_stalled);
                forward.await
            }
            Fault::Delay(delay) => {
                let answer = forward.await;
                tokio::time::sleep(delay).await;
                answer
            }
            Fault::Fail(error) => Err(error()),
            Fault::Panic { after_waiting } => {
                if after_waiting {
                    tokio::task::yield_now().await;
                }
                panic!("the store's {call:?} panicked (an injected fault)")
            }
        }
    }
}

fn blink(call: Call, what: &str) -> StoreError {
    StoreError::unavailable(std::io::Error::other(format!(
        "{what} ({call:?}, an injected fault)"
    )))
}

/// Counts a stalled call while it waits.
struct Stalled<'a>(&'a AtomicUsize);

impl<'a> Stalled<'a> {
    fn count(stalled: &'a AtomicUsize) -> Self {
        stalled.fetch_add(1, Ordering::SeqCst);
        Self(stalled)
    }
}

impl Drop for Stalled<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A store that hands each call to the store it wraps, except those its [`Faults`] hit: the
/// fault suite's way of making any store blink, lose replies, stall or panic, one kind of call
/// at a time, without a proxy in front of its server.
///
/// ```
/// use idem_core::store::MemoryStore;
/// use idem_core::testing::faults::{Call, Fault, Faulty};
///
/// let store = Faulty::new(MemoryStore::new());
/// let faults = store.faults().clone();
/// faults.inject_next(Call::Complete, Fault::Blink, 1); // the next completion fails
/// // ... build an engine on `store.clone()`, run, then:
/// faults.heal_all();
/// ```
///
/// Of the wrapped store's [capabilities](Store::offer_capabilities) it passes on what changes no
/// call's path: its payload limit and its expiry by itself. It offers no reads in process, no
/// transactions (atomic mode) and no claims inside them, which would reach the wrapped store
/// around the faults, and no operators' methods (nothing it is for reads records).
pub struct Faulty<S> {
    inner: Arc<S>,
    faults: Faults,
}

impl<S> Clone for Faulty<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            faults: self.faults.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Faulty<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty")
            .field("inner", &self.inner)
            .field("faults", &self.faults)
            .finish()
    }
}

impl<S: Store> Faulty<S> {
    /// `inner`, with no faults yet.
    pub fn new(inner: S) -> Self {
        Self {
            inner: Arc::new(inner),
            faults: Faults::default(),
        }
    }

    /// The faults, to inject, heal and count.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The wrapped store, reached around the faults.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Store> Store for Faulty<S> {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let forward = self.inner.claim(request);
        self.faults.run(Call::Claim, forward).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        let forward = self.inner.complete(key, token, completion);
        self.faults.run(Call::Complete, forward).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let forward = self.inner.release(key, token);
        self.faults.run(Call::Release, forward).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let forward = self.inner.renew(key, token, lease_until);
        self.faults.run(Call::Renew, forward).await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let forward = self.inner.purge_expired(now, limit);
        self.faults.run(Call::Purge, forward).await
    }

    fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
        let mut inner = Capabilities::default();
        self.inner.offer_capabilities(&mut inner);
        if let Some(limit) = inner.payload_limit() {
            capabilities.limit_payload(limit);
        }
        if !inner.needs_sweeping() {
            capabilities.expires_by_itself();
        }
    }
}
