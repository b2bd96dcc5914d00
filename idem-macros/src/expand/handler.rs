//! `impl Handler<M, S> for name`: the extractors run around the HTTP flow's steps.
//!
//! For any router state `S`, the where-clause bounds only `S` (see `__private`), one bound per
//! argument, spanned at the argument's type: when one fails where the handler is routed, rustc's
//! "unsatisfied trait bound introduced here" note points at that argument. With a declared
//! state (`state = S`), the impl is for `S` alone (`__private::DeclaredState`) and has no bound
//! on the arguments: the checks where the handler is written (`checks.rs`) report every
//! mistake, once.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Type;

use crate::ast::{Handler, Param, Role};

pub(super) fn handler_impl(handler: &Handler, declared: Option<&Type>) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let name = &handler.name;
    let state = quote!(__IdemS);
    let markers: Vec<_> = handler
        .params
        .iter()
        .map(|param| format_ident!("__IdemM{}", param.index))
        .collect();

    let mut bounds = vec![quote_spanned!(Span::call_site()=> #state: #p::IdempotencyState,)];
    let mut extract_head = Vec::new();
    let mut extract_last = quote!(let _ = __idem_request;);
    for (param, marker) in handler.params.iter().zip(&markers) {
        let (bound, call) = match declared {
            None => extractor(param, marker),
            Some(s) => (TokenStream::new(), known_extractor(param, s)),
        };
        bounds.push(bound);
        let local = param.local();
        let extract = quote! {
            let #local = match #call.await {
                ::core::result::Result::Ok(__idem_value) => __idem_value,
                ::core::result::Result::Err(__idem_response) => return __idem_response,
            };
        };
        match param.role {
            Role::Head => extract_head.push(extract),
            Role::Last => extract_last = extract,
        }
    }
    // axum's own marker for a handler without arguments.
    let handler_t = if markers.is_empty() {
        quote!(((),))
    } else {
        quote!((#(#markers,)*))
    };
    let locals = handler.params.iter().map(Param::local);

    // Spanned at the name: a non-`Send` future or an output that is not a response is
    // reported there ("future returned by `name` is not `Send`").
    let call = quote_spanned! {name.span()=>
        #p::handler_future(#name(#(#locals),*))
    };
    let run = quote!(__idem_prepared.run(&__idem_idempotency, #call).await);

    let (header, state, idempotency) = match declared {
        None => (
            quote! {
                impl<#state, #(#markers),*> #p::Handler<#handler_t, #state> for #name
                where
                    #state: ::core::marker::Send + ::core::marker::Sync + 'static,
                    #(#bounds)*
            },
            state,
            quote!(#p::IdempotencyState::idempotency(&__idem_state)),
        ),
        // Any router state, which must be the declared one: then the error where it is routed
        // with another names both, rather than a mismatch between two `MethodRouter`s.
        Some(s) => (
            quote! {
                impl<#state> #p::Handler<#p::Declared<#s, (), ()>, #state> for #name
                where
                    #state: #p::DeclaredState<#s> + ::core::marker::Send + ::core::marker::Sync + 'static,
            },
            state,
            quote! {
                match (&&#p::Known::<::idem_runtime::Idempotency, #s>::NEW).idempotency(&__idem_state) {
                    ::core::result::Result::Ok(__idem_idempotency) => __idem_idempotency,
                    ::core::result::Result::Err(__idem_response) => return *__idem_response,
                }
            },
        ),
    };

    let declared = declared
        .map(|s| quote!(let __idem_state: #s = #p::DeclaredState::<#s>::declared(__idem_state);));

    quote! {
        #[automatically_derived]
        #header
        {
            type Future = #p::HandlerFuture;

            fn call(self, __idem_request: #p::Request, __idem_state: #state) -> Self::Future {
                #[allow(unused_imports)]
                use #p::{
                    KnownIdempotency as _, KnownFallback as _, KnownHead as _, KnownLastParts as _,
                    KnownLastRequest as _,
                };
                #declared
                ::std::boxed::Box::pin(async move {
                    let __idem_idempotency = #idempotency;
                    let (mut __idem_parts, __idem_body) = __idem_request.into_parts();
                    let __idem_started =
                        match #p::begin(&__idem_idempotency, &__IDEM_ENDPOINT, &mut __idem_parts) {
                            ::core::result::Result::Ok(__idem_started) => __idem_started,
                            ::core::result::Result::Err(__idem_response) => return __idem_response,
                        };
                    #(#extract_head)*
                    let (__idem_prepared, __idem_request) = match __idem_started
                        .body(&__idem_idempotency, __idem_parts, __idem_body)
                        .await
                    {
                        ::core::result::Result::Ok(__idem_prepared) => __idem_prepared,
                        ::core::result::Result::Err(__idem_response) => return __idem_response,
                    };
                    #extract_last
                    #run
                })
            }
        }
    }
}

/// The call that extracts one argument with the declared state `s`: by autoref, the impl whose
/// bounds hold (`__private::Known`). The checks where the handler is written guarantee one does.
fn known_extractor(param: &Param, s: &Type) -> TokenStream {
    let ty = &param.ty;
    let p = quote!(::idem_runtime::__private);
    match param.role {
        Role::Head => quote! {
            (&&#p::Known::<#ty, #s>::NEW).extract_head(&mut __idem_parts, &__idem_state)
        },
        Role::Last => quote! {
            (&&&#p::Known::<#ty, #s>::NEW).extract_last(__idem_request, &__idem_state)
        },
    }
}

/// The bound on the router state for one argument, and the call that extracts it.
///
/// The whole bound is spanned at the user's type (a `#p` prefix would carry the call site), so
/// rustc's "unsatisfied trait bound introduced here" points at the argument.
fn extractor(param: &Param, marker: &proc_macro2::Ident) -> (TokenStream, TokenStream) {
    let ty = &param.ty;
    let span = param.span();
    let p = quote_spanned!(span=> ::idem_runtime::__private);
    // `State<X>` only changes the error's wording: `StateParts` and `StateLast` have
    // `ExtractParts` and `ExtractLast` as supertraits and hold exactly when they do.
    let bound = match (param.role, &param.state) {
        (Role::Head, None) => quote_spanned!(span=> #p::ExtractParts<#ty, #marker>),
        (Role::Head, Some(x)) => quote_spanned!(span=> #p::StateParts<#ty, #x, #marker>),
        (Role::Last, None) => quote_spanned!(span=> #p::ExtractLast<#ty, #marker>),
        (Role::Last, Some(x)) => quote_spanned!(span=> #p::StateLast<#ty, #x, #marker>),
    };
    let call = match param.role {
        Role::Head => quote_spanned!(span=>
            <__IdemS as #p::ExtractParts<#ty, #marker>>::extract_parts(
                &mut __idem_parts, &__idem_state,
            )
        ),
        Role::Last => quote_spanned!(span=>
            <__IdemS as #p::ExtractLast<#ty, #marker>>::extract_last(
                __idem_request, &__idem_state,
            )
        ),
    };
    (quote_spanned!(span=> __IdemS: #bound,), call)
}

/// `name::call(..)`: the function the attribute wraps, callable with its extractors' values, as
/// a unit test calls a plain axum handler. It runs the body alone: no key, no store.
pub(super) fn call_fn(handler: &Handler) -> TokenStream {
    let Handler { vis, name, .. } = handler;
    let sig = &handler.item.sig;
    let output = &sig.output;
    let args = handler.params.iter().map(|param| {
        let (local, ty) = (param.local(), &param.ty);
        quote!(#local: #ty)
    });
    let locals = handler.params.iter().map(Param::local);
    let doc = format!(
        " Calls the function `#[idempotent]` wraps, with its extractors' values: \
         `{name}::call(..).await` in a unit test, as with a plain axum handler. Only the body \
         runs: no idempotency key, no store."
    );
    quote! {
        #[automatically_derived]
        impl #name {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis async fn call(#(#args),*) #output {
                #name(#(#locals),*).await
            }
        }
    }
}
