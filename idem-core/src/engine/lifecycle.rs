//! One attempt, from its claim to its stored result, on a task of its own.
//!
//! The caller of [`Engine::run`] may go away at any moment: a client hangs up, a timeout layer
//! fires, a `select!` drops the future. Nothing it drops can leave an operation half done,
//! because the claim and the work run as a task of their own that the caller only waits for.
//! The attempt is polled first where its caller is and handed to the runtime the moment it
//! would wait, so whenever the caller could be dropped, the attempt has ended or is spawned:
//!
//! - once the attempt owns the record, its work runs to its end and its result is stored (or
//!   its release made) whatever the caller does; the next retry replays it or waits for it;
//! - a claim whose caller stopped waiting (gone, or past the store deadline) is not abandoned
//!   in flight: when it settles, the engine releases the record at once by its own token, so
//!   the key is free again as soon as the store answers, not when the lease lapses.
//!
//! Every request is counted once: by the caller when it received the claim's answer, by the
//! task when the caller was gone (`cancelled`) or once the work ran.
//!
//! A task's future is as large as the largest state of any path it may take, and is copied
//! whole into the task. The work is boxed where it enters, and the paths plain mode's stored
//! result does not take (releases, a caller that left, inline retries) are boxed where they are
//! awaited (atomic mode's commit comes boxed from its store): the common path's task is that
//! much smaller to copy and allocate (`bench/HISTORY.md` in the repository measures it).

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::attempt::{Answer, Attempt, Kept, RolledBack, Verdict};
use super::claim::{Claimed, Unowned};
use super::deadline::LeaseTerms;
use super::outcome::{OpName, OutcomeLabel, count, result_lost, span};
use super::owner::{CatchUnwind, Owner, Written};
use super::policy::{AtomicCommits, InFlightMode};
use super::{Engine, Lending};
use crate::error::StoreError;
use crate::store::{Completion, Fence};

/// The work, boxed once where it enters the engine: every level below moves a pointer, not the
/// work's whole state (a task's future holds each level's arguments, so an unboxed work would be
/// copied, at its full size, once per level and again into the task).
type Work<R> = Pin<Box<dyn Future<Output = Verdict<R>> + Send>>;

/// Polls `attempt` once where its caller is, and hands it to a task of its own the moment it
/// would wait: the task, or `None` when the attempt ended in that poll.
///
/// The caller can only go away between two of its polls, and by then the attempt has ended or
/// belongs to the runtime, so ownership is the same as spawning it at once; an attempt that
/// does not wait (an in-process store, a handler that does no I/O) costs no task, no wake-up
/// and no timer (`bench/HISTORY.md`, "The attempt polled where its caller is"). A panic in that
/// poll (a store's, say: the work's own are caught) drops the attempt, which its caller then
/// answers as a task that ended without an answer.
fn start<F>(attempt: Pin<Box<F>>) -> impl Future<Output = Option<JoinHandle<()>>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut attempt = Some(attempt);
    std::future::poll_fn(move |cx| {
        let Some(mut running) = attempt.take() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut CatchUnwind(running.as_mut())).poll(cx);
        Poll::Ready(match polled {
            Poll::Pending => Some(tokio::spawn(running)),
            Poll::Ready(_ended_or_panicked) => None,
        })
    })
}

/// How the work ended, sent from the task.
enum Finished<R> {
    Ran(R, Kept),
    RolledBack(RolledBack),
    Panicked(Box<dyn Any + Send>),
}

/// The claim's answer, sent from the task.
enum Decision {
    Owner,
    Settled(Unowned),
}

/// The task's way back to its caller.
struct Reply<R> {
    decided: oneshot::Sender<Decision>,
    done: oneshot::Sender<Finished<R>>,
    /// Set by a caller that stopped waiting for the claim past its deadline (and counted it).
    gave_up: Arc<AtomicBool>,
}

impl Engine {
    /// Runs `work` once for `attempt`'s record, or answers for the run that did: claims the
    /// record, runs the work on a task of its own under a renewed lease, and stores its result
    /// or releases the record. `decode` turns a stored payload into what a replay returns.
    ///
    /// The caller waits for the claim at most the store's deadline (plus the wait in wait mode,
    /// or on another attempt's open transaction), and for the work as long as it takes.
    pub fn run<R, P, E>(
        self: &Arc<Self>,
        attempt: Attempt,
        work: impl Future<Output = Verdict<R>> + Send + 'static,
        decode: impl FnOnce(&[u8]) -> Result<P, E>,
    ) -> impl Future<Output = Answer<R, P, E>>
    where
        R: Send + 'static,
        E: std::error::Error + 'static,
    {
        // Boxed before the future that waits for it is made, which then holds a pointer.
        self.run_boxed(attempt, Box::pin(work), decode)
    }

    async fn run_boxed<R, P, E>(
        self: &Arc<Self>,
        attempt: Attempt,
        work: Work<R>,
        decode: impl FnOnce(&[u8]) -> Result<P, E>,
    ) -> Answer<R, P, E>
    where
        R: Send + 'static,
        E: std::error::Error + 'static,
    {
        let span = span(&attempt.operation, &attempt.key);
        let operation = attempt.operation.clone();
        let deadline = self.claim_deadline(&attempt);
        // Without background work, how long the answer waits for what the task still does after
        // it (a release): a write and its inline retries, and never past the invocation's end.
        let drain = self.policy.inline_retries().map(|limit| {
            LeaseTerms::quiet(self.policy.lease, self.now(), attempt.deadline)
                .within(self.now(), limit * 2)
        });
        let (decided, mut decision) = oneshot::channel();
        let (done, finished) = oneshot::channel();
        let gave_up = Arc::new(AtomicBool::new(false));
        let reply = Reply {
            decided,
            done,
            gave_up: gave_up.clone(),
        };
        // Boxed before it is spawned: the attempt's future is about 4 KB, which tokio would copy
        // into its task by value, and each copy costs more than the allocation (bench/HISTORY.md,
        // "The attempt's future boxed").
        let task = start(Box::pin(
            self.clone()
                .attempt(attempt, work, reply)
                .instrument(span.clone()),
        ))
        .await;
        let answer = async move {
            let decision = match tokio::time::timeout(deadline, &mut decision).await {
                Ok(Ok(decision)) => decision,
                Ok(Err(_)) => return self.task_lost(&operation),
                Err(_) => {
                    // Stop waiting, unless the answer is already there: the task releases a
                    // claim that settles from now on.
                    gave_up.store(true, Ordering::SeqCst);
                    decision.close();
                    match decision.try_recv() {
                        Ok(decision) => decision,
                        Err(_) => return self.timed_out(&operation, deadline),
                    }
                }
            };
            match decision {
                Decision::Settled(settled) => self.settled(&operation, settled, decode),
                Decision::Owner => match finished.await {
                    Ok(Finished::Ran(reply, kept)) => Answer::Ran(reply, kept),
                    Ok(Finished::RolledBack(why)) => Answer::RolledBack(why),
                    Ok(Finished::Panicked(panic)) => Answer::Panicked(panic),
                    // The task was dropped (the runtime is shutting down): the owner's drop
                    // counted and settled it.
                    Err(_) => Answer::Unavailable {
                        error: StoreError::unavailable(std::io::Error::other(
                            "the operation's task ended without an answer",
                        )),
                        retry_after: self.policy.retry_after,
                    },
                },
            }
        }
        .instrument(span.clone())
        .await;
        if let Some(within) = drain
            && let Some(task) = task
            && tokio::time::timeout(within, task).await.is_err()
        {
            let _entered = span.enter();
            tracing::warn!(
                ?within,
                "answering while the attempt's task still settles its record"
            );
        }
        answer
    }

    /// How long a caller waits for the claim's answer.
    fn claim_deadline(&self, attempt: &Attempt) -> Duration {
        let waits_for_others = match (attempt.in_flight, attempt.commits, &attempt.lending) {
            (InFlightMode::Wait, ..) => self.policy.wait_timeout,
            (InFlightMode::Reject, AtomicCommits::One, Some(_)) => self.lock_wait(attempt),
            (InFlightMode::Reject, ..) => Duration::ZERO,
        };
        self.policy.store_timeout + waits_for_others
    }

    /// A claim that settled without ownership: counted, and decoded when it is a replay (whose
    /// age is observed).
    fn settled<R, P, E: std::error::Error + 'static>(
        &self,
        operation: &OpName,
        settled: Unowned,
        decode: impl FnOnce(&[u8]) -> Result<P, E>,
    ) -> Answer<R, P, E> {
        let (outcome, answer) = match settled {
            Unowned::Replay {
                payload,
                completed_at,
            } => match decode(&payload) {
                Ok(replay) => {
                    self.count_replayed(operation, completed_at);
                    return Answer::Replay(replay);
                }
                Err(error) => {
                    tracing::error!(
                        error = &error as &dyn std::error::Error,
                        "stored result could not be decoded; refusing the request"
                    );
                    (OutcomeLabel::StoreError, Answer::Corrupt(error))
                }
            },
            Unowned::Reused => (OutcomeLabel::Reused, Answer::Reused),
            Unowned::InFlight => (
                OutcomeLabel::InProgress,
                Answer::InFlight {
                    retry_after: self.policy.retry_after,
                },
            ),
            Unowned::Unavailable { error, retry_after } => (
                match error {
                    StoreError::Full { .. } => OutcomeLabel::StoreFull,
                    _ => OutcomeLabel::StoreError,
                },
                Answer::Unavailable { error, retry_after },
            ),
        };
        count(operation, outcome);
        answer
    }

    fn timed_out<R, P, E>(&self, operation: &OpName, deadline: Duration) -> Answer<R, P, E> {
        tracing::error!(
            ?deadline,
            "idempotency store did not answer the claim in time; refusing the request"
        );
        count(operation, OutcomeLabel::StoreError);
        Answer::Unavailable {
            error: StoreError::Timeout(deadline),
            retry_after: self.policy.retry_after,
        }
    }

    fn task_lost<R, P, E>(&self, operation: &OpName) -> Answer<R, P, E> {
        count(operation, OutcomeLabel::StoreError);
        Answer::Unavailable {
            error: StoreError::unavailable(std::io::Error::other(
                "the attempt's task ended before its claim settled",
            )),
            retry_after: self.policy.retry_after,
        }
    }

    /// The task: claim, tell the caller, run the work if the caller still waits for it.
    async fn attempt<R: Send + 'static>(
        self: Arc<Self>,
        attempt: Attempt,
        work: Work<R>,
        reply: Reply<R>,
    ) {
        let claimed = self.claim(&attempt, || reply.decided.is_closed()).await;
        let counted_by_caller = || reply.gave_up.load(Ordering::SeqCst);
        let owner = match claimed {
            Claimed::Owner(owner) => owner,
            Claimed::Settled(settled) => {
                if reply.decided.send(Decision::Settled(settled)).is_err() && !counted_by_caller() {
                    count(&attempt.operation, OutcomeLabel::Cancelled);
                }
                return;
            }
        };
        if reply.decided.send(Decision::Owner).is_err() {
            // Nobody will learn of this claim: free the key now, by the claim's own token,
            // rather than when its lease lapses.
            if !counted_by_caller() {
                count(&attempt.operation, OutcomeLabel::Cancelled);
            }
            tracing::info!("the caller left before its claim settled; releasing the record");
            match Box::pin(owner.release()).await {
                Written::Done(_) => {}
                Written::Deferred(error) => tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not release the record yet: retrying in the background"
                ),
                Written::Unsettled(error) => tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not release the record; it frees when its lease ends"
                ),
            }
            return;
        }
        let operation = attempt.operation.clone();
        let (finished, release) = self.finish(owner, attempt, work).await;
        // The caller may be gone: the result is stored, and the next retry replays it.
        let _ = reply.done.send(finished);
        if let Some(owner) = release {
            Box::pin(self.release(owner, &operation)).await;
        }
    }

    /// Runs the owned work to its end and stores its result, commits it with the work's
    /// transaction, or releases the record; or, when the work's transaction outlived its
    /// deadline, stops it and hands back the record to release once the caller has its answer
    /// (the store may be what holds the transaction up).
    async fn finish<R>(
        &self,
        owner: Owner,
        attempt: Attempt,
        work: Work<R>,
    ) -> (Finished<R>, Option<Owner>) {
        let Attempt {
            operation,
            lending,
            ttl,
            ..
        } = attempt;
        if let Some(lending) = &lending {
            lending.bind(owner.key());
        }
        // Work in a lent transaction is bounded by the transaction's deadline. Stopping it there
        // is safe, unlike stopping plain work: its writes are all in the transaction, which
        // rolls back.
        let limit = self.policy.transaction_timeout;
        let verdict = match &lending {
            None => Some(owner.run(work).await),
            Some(lending) => tokio::select! {
                biased;
                verdict = owner.run(work) => Some(verdict),
                () = lending.expired(limit) => None,
            },
        };
        let Some(verdict) = verdict else {
            // The work is dropped: its transaction came back, and rolls back here.
            tracing::error!(
                ?limit,
                "the operation's transaction outlived its deadline: stopped and rolled back"
            );
            drop(lending.as_ref().and_then(Lending::returned));
            return (
                Finished::RolledBack(RolledBack::Deadline(limit)),
                Some(owner),
            );
        };
        (
            self.settle(owner, lending, operation, ttl, verdict).await,
            None,
        )
    }

    /// Stores the work's result (in its transaction, if it handed one back) or releases the
    /// record, as the work's verdict says.
    async fn settle<R>(
        &self,
        owner: Owner,
        lending: Option<Lending>,
        operation: OpName,
        ttl: Duration,
        verdict: Result<Verdict<R>, Box<dyn Any + Send>>,
    ) -> Finished<R> {
        // The work's transaction is handed back once the work dropped it; dropping it here
        // rolls it back.
        let returned = lending.as_ref().and_then(Lending::returned);
        let (payload, status, reply) = match verdict {
            Err(panic) => {
                drop(returned);
                Box::pin(self.release(owner, &operation)).await;
                return Finished::Panicked(panic);
            }
            Ok(Verdict::Release(reply)) => {
                drop(returned);
                Box::pin(self.release(owner, &operation)).await;
                return Finished::Ran(reply, Kept::Released);
            }
            Ok(Verdict::Keep {
                payload,
                status,
                reply,
            }) => (payload, status, reply),
        };
        if let Some(returned) = returned {
            let (completed_at, expires_at) = owner.completion_times(ttl);
            let completion = Completion {
                payload: &payload,
                status,
                completed_at,
                expires_at,
            };
            let (key, token) = (*owner.key(), owner.token());
            return match returned.complete_and_commit(&key, token, completion).await {
                Ok(Fence::Held) => {
                    owner.disarm();
                    count(&operation, OutcomeLabel::Executed);
                    Finished::Ran(reply, Kept::Stored)
                }
                Ok(Fence::Lost) => {
                    owner.disarm();
                    count(&operation, OutcomeLabel::InProgress);
                    tracing::warn!(
                        "lease lost while the operation ran; its transaction rolled back"
                    );
                    Finished::RolledBack(RolledBack::LeaseLost)
                }
                Err(StoreError::Aborted(error)) => {
                    // The work's own statement failed and aborted its transaction: nothing of it
                    // committed, and its answer (a bad value's, typically) is the caller's to
                    // have. Free the key: a retry runs the work again.
                    tracing::warn!(
                        error = &*error as &dyn std::error::Error,
                        "a statement of the operation failed and aborted its transaction: its \
                         answer is sent as it is, and nothing of it is stored"
                    );
                    Box::pin(self.release(owner, &operation)).await;
                    Finished::Ran(reply, Kept::Released)
                }
                Err(error) => {
                    // Nothing of the attempt committed: free the key so a retry runs it.
                    tracing::error!(
                        error = &error as &dyn std::error::Error,
                        "could not commit the operation's writes with its result; rolled back"
                    );
                    Box::pin(self.release(owner, &operation)).await;
                    Finished::RolledBack(RolledBack::Failed(error))
                }
            };
        }
        if !owner.leased() {
            // The claim's transaction went with a `Tx` that outlived its operation: it can no
            // longer commit with the result.
            tracing::error!("the operation's `Tx` outlived it; its writes and the claim roll back");
            Box::pin(self.release(owner, &operation)).await;
            return Finished::RolledBack(RolledBack::Failed(StoreError::unavailable(
                std::io::Error::other("the operation's transaction outlived it"),
            )));
        }
        count(&operation, OutcomeLabel::Executed);
        let key = *owner.key();
        let kept = match owner.complete(payload, status, ttl).await {
            Written::Done(Fence::Held) => Kept::Stored,
            Written::Done(Fence::Lost) => {
                result_lost(&operation, &key);
                Kept::LeaseLost
            }
            Written::Deferred(error) => {
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not store the result yet: retrying in the background while holding the lease; duplicates get 409 until it lands"
                );
                Kept::Retrying
            }
            Written::Unsettled(error @ StoreError::TooLarge { .. }) => {
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "the store refused the result; its key answers in flight until it expires"
                );
                Kept::Unstored
            }
            Written::Unsettled(error) => {
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "could not store the result before answering: duplicates get 409 until the lease ends, then a retry runs the operation again"
                );
                Kept::Unstored
            }
        };
        Finished::Ran(reply, kept)
    }

    /// Releases the record so a retry runs again, counting how that went.
    async fn release(&self, owner: Owner, operation: &OpName) {
        match owner.release().await {
            Written::Done(_) => count(operation, OutcomeLabel::Released),
            Written::Deferred(error) => {
                count(operation, OutcomeLabel::ReleaseFailed);
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not release the record yet: retrying in the background"
                );
            }
            Written::Unsettled(error) => {
                count(operation, OutcomeLabel::ReleaseFailed);
                tracing::warn!(
                    error = &error as &dyn std::error::Error,
                    "could not release the record; it frees when its lease ends"
                );
            }
        }
    }
}
