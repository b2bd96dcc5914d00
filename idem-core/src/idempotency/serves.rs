//! What an engine is told it serves ([`Builder::serves`](super::Builder::serves)), and the
//! start-up checks of [`Builder::build`](super::Builder::build) over it: every endpoint told
//! names a scope with a resolver and, in atomic mode, gets transactions from the store. Faces
//! check what else they serve in their [`FaceSetup`](super::FaceSetup), asking
//! [`Setup::serves`](super::Setup::serves) which of their handlers the engine was told of.
//!
//! Why the engine is told rather than finding out: axum cannot list a router's handlers, and
//! the router meets its state (where handlers find the engine) without calling anything of
//! idem's, so no check can run where a route is attached. Checking every `#[idempotent]`
//! linked into the binary instead fails binaries that link handlers they do not route with
//! this engine (tests, examples, benches, a second engine's handlers). An endpoint the engine
//! was not told of is checked at its first request, and a misconfigured one is answered
//! `500` without running (fail closed), with an error logged that names the fix.

use super::error::BuildError;
use crate::endpoint::Endpoint;
use crate::settings::scope::Scopes;
use crate::store::Capabilities;

/// Something an engine serves: an `#[idempotent]` handler (the attribute implements this for
/// the handler it expands), a tonic service with `#[idempotent]` methods (through the
/// `IDEMPOTENT_METHODS` constant `#[idem_runtime::grpc::service]` adds to it), or a tuple,
/// array or reference of these.
///
/// ```
/// # use idem_core::idempotency::{Served, Serves};
/// # struct Charge; struct Refund;
/// # impl Serves for Charge { fn add_to(&self, _: &mut Served) {} }
/// # impl Serves for Refund { fn add_to(&self, _: &mut Served) {} }
/// # let builder = idem_core::idempotency::Idempotency::builder();
/// // With `#[idempotent]` handlers `Charge` and `Refund`:
/// builder.serves((Charge, Refund));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not something an engine serves",
    label = "not an `#[idempotent]` handler",
    note = "`Builder::serves` takes `#[idempotent]` handlers (the handler's name), a tonic \
            service's `IDEMPOTENT_<TRAIT>` constant, or a tuple, array or reference of these"
)]
pub trait Serves {
    /// Adds the endpoints and handlers `self` stands for to `served`.
    fn add_to(&self, served: &mut Served);
}

/// The endpoints and handlers an engine was told it serves, which
/// [`Builder::build`](super::Builder::build) checks.
#[derive(Debug, Default)]
pub struct Served {
    endpoints: Vec<&'static Endpoint>,
    handlers: Vec<&'static str>,
}

impl Served {
    /// An `#[idempotent]` axum handler's endpoint: the core checks its scope and atomic mode.
    pub fn endpoint(&mut self, endpoint: &'static Endpoint) {
        if !self.contains(endpoint.handler()) {
            self.handlers.push(endpoint.handler());
            self.endpoints.push(endpoint);
        }
    }

    /// The Rust path (`my_app::Ledger::create_transfer`) of a handler a face keeps in a
    /// registry of its own, such as a tonic method, for that face's
    /// [`FaceSetup`](super::FaceSetup) to check.
    pub fn handler(&mut self, handler: &'static str) {
        if !self.handlers.contains(&handler) {
            self.handlers.push(handler);
        }
    }

    /// Whether the handler at Rust path `handler` is served.
    pub(super) fn contains(&self, handler: &str) -> bool {
        self.handlers.contains(&handler)
    }

    /// The first endpoint served that the engine could not serve.
    pub(super) fn check(
        &self,
        scopes: &Scopes,
        capabilities: &Capabilities,
        store: &'static str,
    ) -> Result<(), BuildError> {
        for ep in &self.endpoints {
            if scopes.check(ep.scope()).is_err() {
                return Err(BuildError::UnresolvedScope {
                    endpoint: ep.handler(),
                    scope: ep.scope(),
                });
            }
            if let Some(need) = ep.atomic().filter(|need| !need.is_met(capabilities)) {
                return Err(BuildError::AtomicUnsupported {
                    endpoint: ep.handler(),
                    database: need.database(),
                    store,
                });
            }
        }
        Ok(())
    }
}

/// The Rust paths of handlers a face keeps in a registry of its own (a tonic service's
/// `#[idempotent]` methods), as generated code lists them for [`Builder::serves`](super::Builder::serves).
#[derive(Debug, Clone, Copy)]
pub struct Handlers(pub &'static [&'static str]);

impl Serves for Handlers {
    fn add_to(&self, served: &mut Served) {
        for handler in self.0 {
            served.handler(handler);
        }
    }
}

impl<T: Serves + ?Sized> Serves for &T {
    fn add_to(&self, served: &mut Served) {
        (**self).add_to(served);
    }
}

impl<T: Serves, const N: usize> Serves for [T; N] {
    fn add_to(&self, served: &mut Served) {
        for each in self {
            each.add_to(served);
        }
    }
}

impl<T: Serves> Serves for [T] {
    fn add_to(&self, served: &mut Served) {
        for each in self {
            each.add_to(served);
        }
    }
}

macro_rules! tuples {
    ($($name:ident)+) => {
        impl<$($name: Serves),+> Serves for ($($name,)+) {
            fn add_to(&self, served: &mut Served) {
                #[allow(non_snake_case)]
                let ($($name,)+) = self;
                $($name.add_to(served);)+
            }
        }
    };
}

tuples!(A);
tuples!(A B);
tuples!(A B C);
tuples!(A B C D);
tuples!(A B C D E);
tuples!(A B C D E F);
tuples!(A B C D E F G);
tuples!(A B C D E F G H);
tuples!(A B C D E F G H I);
tuples!(A B C D E F G H I J);
tuples!(A B C D E F G H I J K);
tuples!(A B C D E F G H I J K L);
tuples!(A B C D E F G H I J K L M);
tuples!(A B C D E F G H I J K L M N);
tuples!(A B C D E F G H I J K L M N O);
tuples!(A B C D E F G H I J K L M N O P);

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str);

    impl Serves for Named {
        fn add_to(&self, served: &mut Served) {
            served.handler(self.0);
        }
    }

    #[test]
    fn tuples_arrays_and_references_add_each_member_once() {
        let mut served = Served::default();
        let service = Handlers(&["a::v", "a::x"]);
        (
            Named("a::x"),
            [Named("a::y"), Named("a::x")],
            &Named("a::z"),
            service,
        )
            .add_to(&mut served);
        assert_eq!(served.handlers, ["a::x", "a::y", "a::z", "a::v"]);
        assert!(served.contains("a::y"));
        assert!(!served.contains("a::w"));
    }
}
