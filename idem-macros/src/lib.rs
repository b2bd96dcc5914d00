//! The `#[idempotent]` attribute. Use it through `idem_runtime::idempotent`, where it is
//! documented; this crate is an implementation detail of `idem-runtime`.

use proc_macro::TokenStream;

mod attr;
mod expand;
mod validate;

/// Makes an axum handler idempotent. See `idem_runtime::idempotent` for the documentation.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::idempotent(args.into(), item.into()).into()
}
