//! Checks made where the handler is written, one per argument and spanned at its type, so the
//! error lands on `Json<String>` in the user's signature. Without the router state: a body
//! extractor before the last argument, and a second transaction. With it, when it is known
//! there ([`KnownState`]): the engine, and each argument's extractor. Otherwise what depends on
//! the router state is checked where the handler is routed (see `handler.rs`).

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::ast::{Handler, KnownState, Param, Role};

/// `fn __idem_arguments()`: the checks, and what the handler needs from the store (atomic mode
/// is chosen by a parameter's type, a `Tx` under any name or alias, never by how it is spelled).
pub(super) fn arguments_fn(handler: &Handler, state: KnownState<'_>) -> TokenStream {
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
    let state_checks = state_checks(handler, state);
    let needs = params.iter().map(|param| {
        let ty = &param.ty;
        quote_spanned!(param.span()=> .or((&&#p::Probe::<#ty>::NEW).atomic_need()))
    });
    quote! {
        fn __idem_arguments() -> ::core::option::Option<#p::AtomicNeed> {
            #[allow(unused_imports)]
            use #p::{
                ProbeAtomic as _, ProbeBody as _, ProbeHead as _, ProbeOneTransaction as _,
                ProbePlain as _, ProbeTwoTransactions as _, InferredChecks as _, InferredSkip as _,
            };
            #(#body_checks)*
            #(#transaction_checks)*
            #state_checks
            ::core::option::Option::None #(#needs)*
        }
    }
}

/// With a known router state `S`, each argument's extractor for `S`: the same bounds as where
/// the handler is routed (`__private::ExtractParts`, `ExtractLast`), worded for the argument. A
/// declared state is also checked for the engine. Every token of a check carries the span of
/// what it checks (the state through a local alias): rustc reports these calls, whose marker it
/// infers, at the whole call, which then covers that argument's type and nothing else.
fn state_checks(handler: &Handler, state: KnownState<'_>) -> TokenStream {
    let alias = Ident::new("__IdemState", Span::call_site());
    let (s, inferred) = match state {
        KnownState::Unknown => return TokenStream::new(),
        KnownState::Declared(s) => (s, false),
        KnownState::Inferred(s) => (s, true),
    };
    let idempotency = if inferred {
        TokenStream::new()
    } else {
        let span = s.span();
        let (p, alias) = (private(span), Ident::new("__IdemState", span));
        quote_spanned!(span=> #p::Declared::<#alias, (), ()>::NEW.idempotency();)
    };
    let arguments = handler.params.iter().map(|param| {
        let (ty, span) = (&param.ty, param.span());
        let (p, alias) = (private(span), Ident::new("__IdemState", span));
        let method = match param.role {
            Role::Head => "head",
            Role::Last => "last",
        };
        match (&param.state, inferred) {
            // Through `&&`: the checks apply only if `S` provides the engine (`InferredChecks`).
            // `State<S>` itself needs none: the inferred `S` provides itself.
            (_, true) => {
                let method = Ident::new(method, span);
                quote_spanned!(span=> (&&#p::Inferred::<#alias, #ty>::NEW).#method();)
            }
            // `State<X>`: worded as the state not providing `X`.
            (Some(x), false) => {
                let method = Ident::new(&format!("{method}_state"), span);
                quote_spanned!(span=> #p::Declared::<#alias, #ty, #x>::NEW.#method();)
            }
            (None, false) => {
                let method = Ident::new(method, span);
                quote_spanned!(span=> #p::Declared::<#alias, #ty, ()>::NEW.#method();)
            }
        }
    });
    quote! {
        #[allow(non_camel_case_types)]
        type #alias = #s;
        #idempotency
        #(#arguments)*
    }
}

/// `::idem_runtime::__private`, every token at `span`.
fn private(span: Span) -> TokenStream {
    quote_spanned!(span=> ::idem_runtime::__private)
}

/// `(&&probe::NEW).method();`, spanned at `at`'s type. rustc reports a method's unmet bound at
/// the method's name, which therefore carries the type's (first token's) span.
fn probe(at: &Param, probe: TokenStream, method: &str) -> TokenStream {
    let span = at.span();
    let method = Ident::new(method, span);
    quote_spanned!(span=> (&&#probe::NEW).#method();)
}
