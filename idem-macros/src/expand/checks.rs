//! Checks made where the handler is written, one per argument and spanned at its type, so the
//! error lands on `Json<String>` in the user's signature. They need no router state: a body
//! extractor before the last argument, and a second transaction. Everything that depends on the
//! router state is checked where the handler is routed (see `handler.rs`).

use proc_macro2::{Ident, TokenStream};
use quote::{quote, quote_spanned};

use crate::ast::{Handler, Param, Role};

/// `fn __idem_arguments()`: the checks, and what the handler needs from the store (atomic mode
/// is chosen by a parameter's type, a `Tx` under any name or alias, never by how it is spelled).
pub(super) fn arguments_fn(handler: &Handler) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let params = &handler.params;
    // `Json<T>` before the last argument: it would consume the body the others never see.
    let body_checks = params
        .iter()
        .filter(|param| param.role == Role::Head)
        .map(|param| {
            let ty = &param.ty;
            probe(param, quote!(#p::Probe::<#ty>), "before_last")
        });
    // A second `Tx`/`AnyTx`: every pair, reported at the later argument.
    let p = &p;
    let transaction_checks = params.iter().enumerate().flat_map(|(j, second)| {
        params[..j].iter().map(move |first| {
            let (a, b) = (&first.ty, &second.ty);
            probe(
                second,
                quote!(#p::Pair::<#a, #b>),
                "at_most_one_transaction",
            )
        })
    });
    let needs = params.iter().map(|param| {
        let ty = &param.ty;
        quote_spanned!(param.span()=> .or((&&#p::Probe::<#ty>::NEW).atomic_need()))
    });
    quote! {
        fn __idem_arguments() -> ::core::option::Option<#p::AtomicNeed> {
            #[allow(unused_imports)]
            use #p::{
                ProbeAtomic as _, ProbeBody as _, ProbeHead as _, ProbeOneTransaction as _,
                ProbePlain as _, ProbeTwoTransactions as _,
            };
            #(#body_checks)*
            #(#transaction_checks)*
            ::core::option::Option::None #(#needs)*
        }
    }
}

/// `(&&probe::NEW).method();`, spanned at `at`'s type. rustc reports a method's unmet bound at
/// the method's name, which therefore carries the type's (first token's) span.
fn probe(at: &Param, probe: TokenStream, method: &str) -> TokenStream {
    let span = at.span();
    let method = Ident::new(method, span);
    quote_spanned!(span=> (&&#probe::NEW).#method();)
}
