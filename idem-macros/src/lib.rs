//! The `#[idempotent]` attribute. Use it through `idem_runtime::idempotent`, where it is
//! documented; this crate is an implementation detail of `idem-runtime`.

use proc_macro::TokenStream;

mod ast;
mod attr;
mod expand;
mod grpc;
mod ttl;
mod validate;

/// Makes an axum handler idempotent. See `idem_runtime::idempotent` for the documentation.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}

/// Makes the `#[idempotent]` methods of a tonic service's `impl` idempotent. See
/// `idem_runtime::grpc` for the documentation.
#[proc_macro_attribute]
pub fn grpc_service(args: TokenStream, item: TokenStream) -> TokenStream {
    grpc::service(args.into(), item.into()).into()
}

/// Emits the item, then the items given as arguments: `#[idempotent]` hangs the code it
/// generates on the struct this way, so that it exists only where the struct can be declared.
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __idempotent_items(items: TokenStream, item: TokenStream) -> TokenStream {
    let mut tokens = item;
    tokens.extend(items);
    tokens
}
