//! Configuring an [`Idempotency`]: the store, the policy, the settings every face applies, what
//! the faces add, and what the engine serves, which the start-up checks cover.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;

use super::error::BuildError;
use super::faces::{FaceSetup, Faces, ProtobufDescriptors, RenderedAs, Renderer, Setup};
use super::serves::{Served, Serves};
use super::{Idempotency, Inner};
use crate::clock::{Clock, SystemClock};
use crate::engine::{Engine, Policy};
use crate::rejection::Rejection;
use crate::settings::limits::Limits;
use crate::settings::scope::{Caller, Scopes};
use crate::store::{Capabilities, DynStore, Store};

/// Configures an [`Idempotency`] engine. Every setting but the store has a production default.
#[must_use]
pub struct Builder {
    store: Option<(Arc<dyn DynStore>, &'static str, Capabilities)>,
    reserved_scope: bool,
    served: Served,
    policy: Policy,
    scopes: Scopes,
    limits: Limits,
    header: HeaderName,
    faces: Faces,
    clock: Arc<dyn Clock>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            store: None,
            reserved_scope: false,
            served: Served::default(),
            policy: Policy::DEFAULT,
            scopes: Scopes::default(),
            limits: Limits::DEFAULT,
            header: HeaderName::from_static("idempotency-key"),
            faces: Faces::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl Builder {
    /// Where records live. Required.
    pub fn store<S: Store>(mut self, store: S) -> Self {
        let store = Arc::new(store);
        let mut capabilities = Capabilities::default();
        store.offer_capabilities(&mut capabilities);
        self.store = Some((store, std::any::type_name::<S>(), capabilities));
        self
    }

    /// Registers how to find the value of scope `name` (the tenant or user whose keys these
    /// are) in a request, typically from an extension your auth layer or extractor inserted, or
    /// from a header (gRPC: a metadata entry). A request for which `resolve` returns `None` is
    /// answered `401 idempotency_scope_unresolved` (gRPC: `UNAUTHENTICATED`), and so is one for
    /// which it returns a value with a NUL byte, which not every store can keep (PostgreSQL's
    /// `text` refuses it).
    ///
    /// The resolver sees the request as a [`Caller`]: the same closure serves HTTP handlers, the
    /// layer and tonic methods. Resolvers run after the handler's `FromRequestParts` extractors,
    /// so an extractor that authenticates the request may insert the extension the resolver
    /// reads.
    ///
    /// ```
    /// use idem_core::idempotency::Idempotency;
    /// use idem_core::store::MemoryStore;
    ///
    /// #[derive(Clone)]
    /// struct OrgId(String);
    ///
    /// let idempotency = Idempotency::builder()
    ///     .store(MemoryStore::new())
    ///     // Put there by the application's authentication middleware.
    ///     .scope("org", |caller| caller.extension::<OrgId>().map(|org| org.0.clone()))
    ///     // Or read from what the client sent.
    ///     .scope("tenant", |caller| caller.metadata("x-tenant").map(str::to_owned))
    ///     .build()
    ///     .unwrap();
    /// # let _ = idempotency;
    /// ```
    pub fn scope<F>(mut self, name: impl Into<String>, resolve: F) -> Self
    where
        F: Fn(&Caller<'_>) -> Option<String> + Send + Sync + 'static,
    {
        if self.scopes.insert(name, Arc::new(resolve)).is_err() {
            self.reserved_scope = true;
        }
        self
    }

    /// The request header carrying the key. Default `Idempotency-Key`; some clients send
    /// `X-Idempotency-Key`.
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.header = name;
        self
    }

    /// How long an owner's claim lasts without renewal (default 30 s). A running handler renews
    /// its lease every third of this; a crashed one's record can be taken over once it lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.policy.lease = lease.max(Duration::from_millis(100));
        self
    }

    /// How long an `in_flight = "wait"` duplicate waits for the first request before answering
    /// 409 (default 10 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.policy.wait_timeout = timeout;
        self
    }

    /// The largest response body kept for replay (default 2 MiB). A larger response is still sent
    /// to the first client in full, streamed as the handler produces it: at most the limit (and
    /// one chunk) of it is held in memory, however large it is. Its retries get `409
    /// idempotency_response_too_large` naming the original status, and the operation is never
    /// run again for that key, even if the body fails after the limit (the client then gets a
    /// truncated response; a body that fails within the limit releases the key). A gRPC reply
    /// is measured as stored (its encoded message or status, and its metadata); the retries of
    /// one over the limit get `FAILED_PRECONDITION` with reason `IDEMPOTENCY_RESPONSE_TOO_LARGE`.
    /// A store that keeps smaller payloads (`DynamoDbStore`: 392 KiB) lowers the limit to fit,
    /// less 16 KiB for the status and headers.
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.limits.max_response_bytes = limit;
        self
    }

    /// The largest request body an idempotent request may have (default 2 MiB, as axum's
    /// `DefaultBodyLimit`; both limits apply). A request whose `Content-Length` says more is
    /// answered `413 payload_too_large` before any of its body is read.
    pub fn max_request_bytes(mut self, limit: usize) -> Self {
        self.limits.max_request_bytes = limit;
        self
    }

    /// How long a request waits for its claim, and any other call to the store may take
    /// (default 5 s). Past it the request fails closed: `503 idempotency_store_unavailable`
    /// with `Retry-After`, the handler not run. The claim itself runs on (up to its lease) and,
    /// if it lands, is released at once, so the key does not stay held. A completion or release
    /// that times out is retried in the background.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.policy.store_timeout = timeout.max(Duration::from_millis(10));
        self
    }

    /// Renders the engine's own answers (400 invalid key, 409 in flight, 422 reused, 503
    /// unavailable, ...) in the application's error format instead of problem+json. The engine
    /// keeps each answer's status and `Retry-After`, whatever `render` sets; match on the
    /// [`Rejection`] (its [`code`](Rejection::code) is stable) to choose the body.
    ///
    /// Each face takes the renderer whose output is its own response type: the HTTP faces one
    /// that returns `axum::response::Response` (`Json(..).into_response()`; idem-runtime's
    /// `Problem` shows one), and [`build`](Builder::build) refuses one that returns anything
    /// else with [`BuildError::RendererOutput`]. The gRPC face answers with statuses and takes
    /// none.
    ///
    /// ```
    /// use idem_core::idempotency::Idempotency;
    /// use idem_core::rejection::Rejection;
    /// use idem_core::store::MemoryStore;
    ///
    /// let idempotency = Idempotency::builder()
    ///     .store(MemoryStore::new())
    ///     .render_rejections(|rejection: &Rejection| format!("{}: {rejection}", rejection.code()))
    ///     .build()
    ///     .unwrap();
    /// # let _ = idempotency;
    /// ```
    pub fn render_rejections<F, R>(mut self, render: F) -> Self
    where
        F: Fn(&Rejection) -> R + Send + Sync + 'static,
        R: Any,
    {
        self.faces.insert(Renderer::new(render));
        self.faces.insert(RenderedAs {
            type_id: TypeId::of::<R>(),
            type_name: std::any::type_name::<R>(),
        });
        self
    }

    /// How long a transaction the engine lends to an operation in atomic mode (a handler's `Tx`)
    /// may stay open, counted from its first use, or from the claim when the claim rides in it
    /// (default 10 s). Past it the operation is stopped, its writes roll back, its record is
    /// released and the request is answered `503 idempotency_store_unavailable` with
    /// `Retry-After`, so a lock that never goes cannot take the pool's connections for good. On
    /// PostgreSQL each statement in the transaction also carries `statement_timeout` and
    /// `lock_timeout` of this plus one second, so a statement the engine stopped waiting for
    /// frees its connection too. Operations without a transaction are never stopped.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.policy.transaction_timeout = timeout.max(Duration::from_millis(100));
        self
    }

    /// Whether the engine may leave work for a request running after the request is answered
    /// (default `true`). Set `false` where the process is frozen between requests, so that
    /// nothing the engine still had to do could be lost: AWS Lambda (see `idem_runtime::lambda`,
    /// feature `lambda`), or any platform that throttles the CPU once a response is sent.
    ///
    /// With `false`:
    /// - a completion or release the store fails is retried before the answer returns, for at
    ///   most [`store_timeout`](Self::store_timeout), and never past the request's
    ///   [`InvocationDeadline`](crate::engine::InvocationDeadline), instead of in the background until
    ///   it lands;
    /// - if the result still is not stored, the caller gets the operation's own answer all the
    ///   same (it ran; for HTTP its response, for [`Operation::run`](crate::operation::Operation::run) its
    ///   output) and the record stays in flight, held by the lease it has: duplicates get 409
    ///   until the lease ends (never past the invocation's deadline plus its margin), then a
    ///   retry runs the operation again, as after a crash. A release that still fails leaves
    ///   the record in flight the same way, until its lease ends;
    /// - a claim the store failed (it may have landed) is released before the refusal (503) is
    ///   answered, tried for at most the store timeout, or it lapses with its lease;
    /// - the answer waits for the attempt's task to finish what it does after the result (the
    ///   release of a claim whose caller stopped waiting, or of a transaction stopped at its
    ///   deadline), for at most twice the store timeout.
    ///
    /// The sweeper ([`Idempotency::spawn_sweeper`]) is a
    /// background task of the application's choosing: where processes freeze, purge expired
    /// records from a scheduled job (or the `idem purge` command) instead, or use a store that
    /// expires them itself.
    pub fn background_work(mut self, allowed: bool) -> Self {
        self.policy.background_work = allowed;
        self
    }

    /// `Retry-After` sent with 409 and 503 answers (default 1 s).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.policy.retry_after = after;
        self
    }

    /// The clock used for leases and expiry. Tests use [`ManualClock`](crate::clock::ManualClock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Tells the engine what it serves: `#[idempotent]` handlers (the attribute's expansion is a
    /// value of the handler's name), tonic services (`MyService::IDEMPOTENT_METHODS`, which
    /// `#[idem_runtime::grpc::service]` adds), or a tuple or array of these; call it again to
    /// add more. [`Builder::build`] then checks each: its scope has a resolver, a handler that
    /// takes a `Tx` gets transactions from the store, a tonic method's request message is in the
    /// [protobuf descriptors](Builder::protobuf_descriptors).
    ///
    /// ```
    /// # use idem_core::idempotency::{Served, Serves};
    /// # #[allow(non_camel_case_types)] struct create_charge;
    /// # impl Serves for create_charge { fn add_to(&self, _: &mut Served) {} }
    /// # #[allow(non_camel_case_types)] struct refund_charge;
    /// # impl Serves for refund_charge { fn add_to(&self, _: &mut Served) {} }
    /// # fn main() -> Result<(), idem_core::idempotency::BuildError> {
    /// let idempotency = idem_core::idempotency::Idempotency::builder()
    ///     .store(idem_core::store::MemoryStore::new())
    ///     .serves((create_charge, refund_charge)) // two `#[idempotent]` handlers
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    ///
    /// An endpoint the engine was not told of is checked at its first request instead: a
    /// misconfigured one is answered `500` (`idempotency_scope_unknown` or
    /// `idempotency_misconfigured`; gRPC `INTERNAL`) without running, and an error is logged.
    /// The engine is told rather than finding out because nothing of idem's runs where axum
    /// attaches a route to its state, and every `#[idempotent]` linked into a binary is not
    /// what one engine serves: tests, examples and binaries with several engines link
    /// handlers that engine never sees.
    pub fn serves(mut self, endpoints: impl Serves) -> Self {
        endpoints.add_to(&mut self.served);
        self
    }

    /// The protobuf descriptors of the request messages of `#[idempotent]` tonic methods: an
    /// encoded `google.protobuf.FileDescriptorSet`, as the build script writes it with
    /// `file_descriptor_set_path` (the bytes tonic's reflection service takes too). Call it once
    /// per set.
    ///
    /// A request's fingerprint is taken over its message encoded deterministically: prost
    /// encodes fields in one order and drops unknown fields, but writes a map's entries in the
    /// order of its `HashMap`, which differs between two decodings of one request. The
    /// descriptors say which fields are maps, so their entries are sorted first.
    /// [`build`](Builder::build) fails when a set does not decode, or when an `#[idempotent]`
    /// method the engine [serves](Builder::serves) has a request message the descriptors do not
    /// hold (a method the engine was not told of answers `INTERNAL`, reason
    /// `IDEMPOTENCY_MISCONFIGURED`, at its first request instead).
    pub fn protobuf_descriptors(mut self, encoded: &[u8]) -> Self {
        self.faces
            .get_or_default::<ProtobufDescriptors>()
            .push(encoded);
        self
    }

    /// Builds the engine, checking that every `#[idempotent]` endpoint it
    /// [serves](Builder::serves) names a scope that has a resolver, and that every one in atomic
    /// mode can get a transaction from the store; then each face linked in runs its
    /// [`FaceSetup`]: the gRPC face checks that every `#[idempotent]` tonic method served names
    /// a scope that has a resolver and has its request message in the [protobuf
    /// descriptors](Builder::protobuf_descriptors), the HTTP faces that a
    /// [renderer](Builder::render_rejections) returns their response type.
    pub fn build(self) -> Result<Idempotency, BuildError> {
        if self.reserved_scope {
            return Err(BuildError::ReservedScope);
        }
        let (store, store_name, capabilities) = self.store.ok_or(BuildError::MissingStore)?;
        let mut limits = self.limits;
        if let Some(limit) = capabilities.payload_limit() {
            limits = limits.fitted_to(limit);
        }
        self.served.check(&self.scopes, &capabilities, store_name)?;
        let mut faces = self.faces;
        let mut setup = Setup {
            scopes: &self.scopes,
            capabilities: &capabilities,
            store: store_name,
            served: &self.served,
            faces: &mut faces,
        };
        for face in inventory::iter::<FaceSetup> {
            (face.0)(&mut setup)?;
        }
        let engine = Engine::new(store, store_name, capabilities, self.clock, self.policy);
        Ok(Idempotency {
            inner: Arc::new(Inner {
                engine,
                scopes: self.scopes,
                limits,
                header: self.header,
                faces,
            }),
        })
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("policy", &self.policy)
            .field("scopes", &self.scopes)
            .field("limits", &self.limits)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}
