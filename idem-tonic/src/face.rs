//! The gRPC face: one call of an `#[idempotent]` tonic method through the engine.
//!
//! The generated method calls [`run`] with the request and the method's body as a closure. The
//! key comes from the request's key field or its key metadata entry; the scope from the
//! engine's resolvers, which see the metadata as headers; the fingerprint from the request
//! message's deterministic encoding. The engine then runs the body once, on a task of its own,
//! and its reply is stored when it is a message or a final status, and replayed to every retry.

use std::any::TypeId;
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use prost::{Message, Name};
use tonic::metadata::MetadataMap;
use tonic::{Code, Extensions, Request, Response, Status};

use crate::rpc::status::{status, status_saying, too_large};
use crate::rpc::stored::{ReplyFormatError, StoredReply, replayed};
use idem_core::endpoint::KeyMode;
use idem_core::engine::{Answer, Attempt, InvocationDeadline, Lending, Verdict};
use idem_core::error::KeyError;
use idem_core::fingerprint::buffers::{recycle, with_thread};
use idem_core::fingerprint::{Fingerprint, Hasher, Previous, Version};
use idem_core::idempotency::Idempotency;
use idem_core::key::{IdempotencyKey, RecordKey, tenant_of};
use idem_core::rejection::Rejection;
use idem_core::rejection::{Settled, settle};
use idem_core::settings::scope::Caller;

use crate::rpc::canonical::CanonicalError;
use crate::rpc::method::GrpcMethod;
use crate::rpc::method::{self, KeyPlace};
use crate::rpc::settings::GrpcSettings;

/// What a method returns.
type Reply<R> = Result<Response<R>, Status>;

/// The status codes a method returns that are final for its request, stored and replayed like
/// its messages (as the HTTP face stores a 4xx): a retry of the same request would get them
/// again. Every other code (`UNAVAILABLE`, `INTERNAL`, `UNKNOWN`, `DEADLINE_EXCEEDED`,
/// `RESOURCE_EXHAUSTED`, `ABORTED`, `CANCELLED`, ...) releases the key, so a retry runs again.
pub const STORED_CODES: [Code; 6] = [
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::OutOfRange,
];

/// A request message whose deterministic encoding idem can take: a prost message that knows its
/// protobuf name.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a request message `#[idempotent]` can fingerprint",
    note = "the request of an idempotent tonic method must be a prost message implementing \
            `prost::Name`: prost-build generates it when the build script calls \
            `.enable_type_names()` on its `prost_build::Config`"
)]
pub trait RequestMessage: Message + Name + Send + 'static {}
impl<M: Message + Name + Send + 'static> RequestMessage for M {}

/// A request field that can carry the idempotency key: a `string` field.
#[diagnostic::on_unimplemented(
    message = "the key field of an idempotent tonic method must be a `string` field, not `{Self}`",
    label = "not a `string` field",
    note = "AIP-155 names it `string request_id`; or leave `key_field` out and take the key from \
            the metadata with `key_metadata = \"idempotency-key\"`"
)]
pub trait KeyField {
    #[doc(hidden)]
    fn as_key_field(&mut self) -> &mut String;
}

impl KeyField for String {
    fn as_key_field(&mut self) -> &mut String {
        self
    }
}

/// The full protobuf name of `M`, for the generated registration.
#[doc(hidden)]
pub fn full_name<M: RequestMessage>() -> String {
    M::full_name()
}

/// The key field, for the generated accessor.
#[doc(hidden)]
pub fn key_field<F: KeyField + ?Sized>(field: &mut F) -> &mut String {
    field.as_key_field()
}

/// The engine of the service the method belongs to.
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not give `#[idempotent]` methods their engine",
    note = "implement `AsRef<idem_runtime::Idempotency>` for the service, returning the engine it \
            holds; the service must also be `Clone` (the engine runs each call on a task of its \
            own, with a clone of the service)"
)]
pub trait IdempotentService: AsRef<Idempotency> + Clone + Send + Sync + 'static {}
impl<S: AsRef<Idempotency> + Clone + Send + Sync + 'static> IdempotentService for S {}

/// Runs `body` once for the request's key, or answers for the run that did.
#[doc(hidden)]
pub async fn run<S, M, R, F, Fut>(
    method: &'static GrpcMethod,
    service: &S,
    request: Request<M>,
    field: Option<fn(&mut M) -> &mut String>,
    body: F,
) -> Reply<R>
where
    S: IdempotentService,
    M: RequestMessage,
    R: Message + Default + Send + 'static,
    F: FnOnce(S, Request<M>) -> Fut + Send + 'static,
    Fut: Future<Output = Reply<R>> + Send + 'static,
{
    let idempotency = service.as_ref();
    let engine = idempotency.engine();
    let name = method.identity(M::PACKAGE);
    let (metadata, mut extensions, mut message) = request.into_parts();
    let lending = engine.lending();
    if let Some(lending) = &lending {
        extensions.insert(lending.clone());
    }
    let entry = method.metadata_name(idempotency.header_name());
    let key = match key_of(method, field, &mut message, &metadata, entry) {
        Ok(Some(key)) => key,
        Ok(None) if method.key_mode() == KeyMode::Optional => {
            let request = Request::from_parts(metadata, extensions, message);
            return run_without_key(idempotency, body(service.clone(), request), lending).await;
        }
        Ok(None) => {
            engine.count_invalid(name);
            let header = idempotency.header_name().clone();
            let places = method.key_places(None, entry);
            let message = format!("this method requires an idempotency key in {places}");
            return Err(status_saying(&Rejection::KeyMissing { header }, message));
        }
        Err((place, reason)) => {
            engine.count_invalid(name);
            tracing::debug!(method = &**name, %reason, "invalid idempotency key");
            let header = idempotency.header_name().clone();
            let place = method.key_places(Some(place), entry);
            let message = format!("the idempotency key in {place} is invalid: {reason}");
            return Err(status_saying(
                &Rejection::KeyInvalid { header, reason },
                message,
            ));
        }
    };
    let caller = Caller::new(metadata.as_ref(), &extensions);
    let scope_value = match idempotency.scopes().resolve(method.scope(), &caller) {
        Ok(value) => value,
        Err(error) => {
            engine.count_invalid(name);
            return Err(status(&Rejection::of_scope(method.scope(), error)));
        }
    };
    let fingerprint = match fingerprint(idempotency, field, &mut message) {
        Ok(fingerprint) => fingerprint,
        Err(reason) => {
            tracing::error!(method = &**name, %reason, "the request could not be fingerprinted");
            return Err(status(&Rejection::Misconfigured {
                reason: "the request message is not in the engine's protobuf descriptors: \
                         register them with `Builder::protobuf_descriptors`",
            }));
        }
    };
    let scope = method.scope();
    let attempt = Attempt {
        key: RecordKey::derive(scope, &scope_value, name, &key),
        fingerprint,
        previous: Previous::new(move || fingerprint),
        operation: name.clone(),
        tenant: tenant_of(scope, &scope_value),
        scope,
        scope_value,
        ttl: method.ttl(),
        in_flight: method.in_flight(),
        lending,
        commits: method.commits(),
        deadline: extensions.get::<InvocationDeadline>().copied(),
    };
    let request = Request::from_parts(metadata, extensions, message);
    let limit = idempotency.limits().max_response_bytes;
    let work = keep(body(service.clone(), request), limit);
    let answer = engine.run(attempt, work, decode::<R>).await;
    respond(idempotency, answer)
}

/// The request's key, from its key field (read through `field`) and its metadata entry.
fn key_of<M>(
    method: &GrpcMethod,
    field: Option<fn(&mut M) -> &mut String>,
    message: &mut M,
    metadata: &MetadataMap,
    entry: &str,
) -> Result<Option<IdempotencyKey>, (KeyPlace, KeyError)> {
    debug_assert_eq!(field.is_some(), method.key_field().is_some());
    let field = field.map(|field| field(message).as_str());
    method::key_of(field, metadata, entry)
}

/// The fingerprint of the request message: its deterministic encoding without the key field
/// (so a key sent in the field or in the metadata is one request), under its protobuf name.
fn fingerprint<M: RequestMessage>(
    idempotency: &Idempotency,
    field: Option<fn(&mut M) -> &mut String>,
    message: &mut M,
) -> Result<Fingerprint, CanonicalError> {
    let full_name = full_name_of::<M>();
    let Some(settings) = idempotency.face::<GrpcSettings>() else {
        return Err(CanonicalError::UnknownMessage(full_name.to_string()));
    };
    with_thread(&ENCODED, |encoded| {
        let key = field.map(|field| std::mem::take(field(message)));
        // As `encode_to_vec` does: room for the whole encoding first, so a message larger
        // than the buffer the thread kept costs one allocation, not one per doubling.
        encoded.reserve(message.encoded_len());
        message.encode_raw(encoded);
        if let (Some(field), Some(key)) = (field, key) {
            *field(message) = key;
        }
        let fingerprint = settings.with_canonical(&full_name, encoded, |canonical| {
            let mut hasher = Hasher::new(b"idem.grpc", Version::CURRENT);
            hasher.update(&(full_name.len() as u64).to_be_bytes());
            hasher.update(full_name.as_bytes());
            hasher.update(canonical);
            hasher.finish()
        });
        recycle(encoded);
        fingerprint
    })
}

/// How many message types' names a thread keeps: more than a service has request messages.
const NAMES_KEPT: usize = 64;

thread_local! {
    /// Each thread's buffer for a request message's encoding ([`with_thread`]).
    static ENCODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The full names of the message types a thread has fingerprinted, which prost's
    /// `Name::full_name` builds anew on each call.
    static NAMES: RefCell<Vec<(TypeId, Rc<str>)>> = const { RefCell::new(Vec::new()) };
}

/// `M`'s full protobuf name (`M::full_name()`), without allocating once the thread has seen `M`.
fn full_name_of<M: RequestMessage>() -> Rc<str> {
    let id = TypeId::of::<M>();
    NAMES.with_borrow_mut(|names| {
        if let Some((_, name)) = names.iter().find(|(of, _)| *of == id) {
            return name.clone();
        }
        let name: Rc<str> = M::full_name().into();
        if names.len() < NAMES_KEPT {
            names.push((id, name.clone()));
        }
        name
    })
}

/// The fingerprint (`fingerprint`, above) of a request message whose key is in the metadata
/// (no key field), for the bench that weighs it against hashing its encoding; `None` when the
/// engine has no descriptors for it.
pub fn fingerprint_of_message<M: RequestMessage>(
    idempotency: &Idempotency,
    message: &mut M,
) -> Option<Fingerprint> {
    fingerprint::<M>(idempotency, None, message).ok()
}

/// The method's reply as the engine's verdict: a message or a final status is kept (or, over
/// `limit` bytes, the answer its retries get instead), any other status releases the key.
async fn keep<R: Message>(
    reply: impl Future<Output = Reply<R>>,
    limit: usize,
) -> Verdict<Reply<R>> {
    let reply = reply.await;
    let stored = match &reply {
        Ok(response) => StoredReply::Message {
            metadata: response.metadata().clone().into_headers(),
            body: response.get_ref().encode_to_vec().into(),
        },
        Err(status) if STORED_CODES.contains(&status.code()) => stored_status(status),
        Err(_) => return Verdict::Release(reply),
    };
    let mut payload = stored.encode();
    if payload.len() > limit {
        tracing::warn!(
            size = payload.len(),
            limit,
            "reply over the replay limit: retries get FAILED_PRECONDITION \
             IDEMPOTENCY_RESPONSE_TOO_LARGE"
        );
        let code = reply.as_ref().map_or_else(Status::code, |_| Code::Ok);
        payload = stored_status(&too_large(code)).encode();
    }
    Verdict::Keep {
        payload,
        status: None,
        reply,
    }
}

/// A status as it is stored.
fn stored_status(status: &Status) -> StoredReply {
    StoredReply::Status {
        code: status.code(),
        message: status.message().to_owned(),
        details: status.details().to_vec().into(),
        metadata: status.metadata().clone().into_headers(),
    }
}

/// A stored reply, as a replay returns it.
fn decode<R: Message + Default>(payload: &[u8]) -> Result<Reply<R>, ReplyFormatError> {
    Ok(match StoredReply::decode(payload)? {
        StoredReply::Message { metadata, body } => {
            let message = R::decode(body)?;
            Ok(Response::from_parts(
                replayed(metadata),
                message,
                Extensions::new(),
            ))
        }
        StoredReply::Status {
            code,
            message,
            details,
            metadata,
        } => Err(Status::with_details_and_metadata(
            code,
            message,
            details,
            replayed(metadata),
        )),
    })
}

/// The engine's answer as the method's reply.
fn respond<R, E>(idempotency: &Idempotency, answer: Answer<Reply<R>, Reply<R>, E>) -> Reply<R> {
    let retry_after = idempotency.engine().policy().retry_after;
    match settle(answer, retry_after) {
        Settled::Ran(reply) | Settled::Replay(reply) => reply,
        Settled::Refused(rejection) => Err(status(&rejection)),
    }
}

/// No key: the method runs as it would without idem. A transaction it began commits unless its
/// status releases (as a 5xx does over HTTP).
async fn run_without_key<R>(
    idempotency: &Idempotency,
    reply: impl Future<Output = Reply<R>>,
    lending: Option<Lending>,
) -> Reply<R> {
    let reply = reply.await;
    if let Some(returned) = lending.as_ref().and_then(Lending::returned) {
        if matches!(&reply, Err(status) if !STORED_CODES.contains(&status.code())) {
            return reply; // `returned` rolls back when dropped
        }
        if let Err(error) = returned.commit().await {
            tracing::error!(error = &error as &dyn std::error::Error, "commit failed");
            let retry_after = idempotency.engine().policy().retry_after;
            return Err(status(&Rejection::StoreUnavailable { retry_after }));
        }
    }
    reply
}

#[cfg(test)]
mod tests;
