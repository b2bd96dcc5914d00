//! The deadline a Lambda invocation gives its requests, read from `lambda_http`'s context, and
//! what the engine makes of it through the HTTP face: the engine's test clock stands for the
//! wall clock.
#![cfg(feature = "lambda")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::post;
use http::StatusCode;
use lambda_http::RequestExt;
use tower::ServiceExt;

use idem_runtime::IdempotencyLayer;
use idem_runtime::clock::{Clock, ManualClock};
use idem_runtime::lambda::{DeadlineLayer, deadline_of, invocation_deadline};
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, InvocationDeadline};

const LEASE: Duration = Duration::from_secs(30);

fn context(deadline_ms: u64) -> lambda_http::Context {
    let mut context = lambda_http::Context::default();
    context.deadline = deadline_ms;
    context
}

#[test]
fn the_deadline_is_the_contexts_in_epoch_millis() {
    let mut extensions = http::Extensions::new();
    assert_eq!(deadline_of(&extensions), None, "no Lambda context");
    extensions = extensions.with_lambda_context(context(1_700_000_000_123));
    assert_eq!(
        deadline_of(&extensions),
        Some(InvocationDeadline::from_epoch_millis(1_700_000_000_123))
    );
    // The emulator's: passed on as it is; the engine does not believe it (see below).
    let emulator = http::Extensions::new().with_lambda_context(context(600_000));
    assert_eq!(
        deadline_of(&emulator),
        Some(InvocationDeadline::from_epoch_millis(600_000))
    );
    // Beyond what a timestamp holds: no deadline, so the configured lease.
    let unreadable = http::Extensions::new().with_lambda_context(context(u64::MAX));
    assert_eq!(deadline_of(&unreadable), None);
    // A context alone, as a function that is not an HTTP one holds it.
    assert_eq!(
        invocation_deadline(&context(1_700_000_000_123)),
        Some(InvocationDeadline::from_epoch_millis(1_700_000_000_123))
    );
    assert_eq!(invocation_deadline(&context(u64::MAX)), None);
}

/// A service whose readiness is what it is told.
struct Readiness(Poll<Result<(), &'static str>>);

impl tower::Service<http::Request<()>> for Readiness {
    type Response = ();
    type Error = &'static str;
    type Future = std::future::Ready<Result<(), &'static str>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

/// The layer is transparent to back-pressure: a concurrency limit or a load shedder under it
/// still tells `lambda_http` to wait, or fails, as it would without the layer.
#[test]
fn readiness_is_the_inner_services() {
    use tower::{Layer, Service};

    let mut cx = Context::from_waker(std::task::Waker::noop());
    for readiness in [Poll::Pending, Poll::Ready(Ok(())), Poll::Ready(Err("shed"))] {
        let mut service = DeadlineLayer::new().layer(Readiness(readiness));
        assert_eq!(service.poll_ready(&mut cx), readiness);
    }
}

#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

/// Hangs when asked to (an invocation that times out); answers 201 otherwise.
async fn charge(State(calls): State<Calls>, body: String) -> StatusCode {
    calls.0.fetch_add(1, Ordering::SeqCst);
    if body == "hang" {
        std::future::pending::<()>().await;
    }
    StatusCode::CREATED
}

struct Function {
    router: Router,
    clock: ManualClock,
}

/// A function's router as `payments-lambda` builds it: the idempotency layer on its routes,
/// the deadline layer outside.
fn function() -> Function {
    let clock = ManualClock::new();
    let idempotency = Idempotency::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .lease(LEASE)
        .background_work(false)
        .build()
        .unwrap();
    let router = Router::new()
        .route("/v1/charges", post(charge))
        .layer(IdempotencyLayer::new(&idempotency))
        .layer(DeadlineLayer::new())
        .with_state(Calls::default());
    Function { router, clock }
}

impl Function {
    /// An invocation's request, with its context when `deadline_ms` is given.
    fn request(&self, deadline_ms: Option<u64>, body: &'static str) -> http::Request<Body> {
        let request = http::Request::post("/v1/charges")
            .header("idempotency-key", "k1")
            .body(Body::from(body))
            .unwrap();
        match deadline_ms {
            Some(ms) => request.with_lambda_context(context(ms)),
            None => request,
        }
    }

    /// Starts an invocation that hangs; returns once its claim landed.
    async fn hang(&self, deadline_ms: Option<u64>) {
        let request = self.request(deadline_ms, "hang");
        tokio::spawn(self.router.clone().oneshot(request));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// A retry of the hanging request's key, in an invocation without a context.
    async fn retry(&self) -> StatusCode {
        let request = self.request(None, "hang");
        let retry = self.router.clone().oneshot(request);
        // A retry that runs hangs too: it ran if it did not answer at once.
        match tokio::time::timeout(Duration::from_secs(1), retry).await {
            Ok(response) => response.unwrap().status(),
            Err(_) => StatusCode::CREATED,
        }
    }

    fn ms_from_now(&self, ahead: Duration) -> u64 {
        self.clock.now().after(ahead).as_millis() as u64
    }
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_invocations_key_frees_a_second_after_its_deadline() {
    let function = function();
    function
        .hang(Some(function.ms_from_now(Duration::from_secs(3))))
        .await;
    assert_eq!(function.retry().await, StatusCode::CONFLICT);
    function.clock.advance(Duration::from_millis(3_900));
    assert_eq!(function.retry().await, StatusCode::CONFLICT);
    function.clock.advance(Duration::from_millis(200));
    assert_eq!(function.retry().await, StatusCode::CREATED, "taken over");
}

/// No context, the emulator's deadline in 1970, and one past Lambda's longest invocation: the
/// claim holds for the configured lease, neither expiring at once nor beyond it.
#[tokio::test(start_paused = true)]
async fn without_a_believable_deadline_the_configured_lease_holds() {
    for case in 0..3 {
        let function = function();
        let too_far = function.ms_from_now(Duration::from_secs(20 * 60));
        let deadline = [None, Some(600_000), Some(too_far)][case];
        function.hang(deadline).await;
        assert_eq!(function.retry().await, StatusCode::CONFLICT, "case {case}");
        function.clock.advance(LEASE - Duration::from_secs(1));
        assert_eq!(function.retry().await, StatusCode::CONFLICT, "case {case}");
        function.clock.advance(Duration::from_secs(2));
        assert_eq!(function.retry().await, StatusCode::CREATED, "case {case}");
    }
}
