//! Code generation: the handler becomes a unit struct implementing axum's `Handler`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn};

use crate::{attr::Args, validate};

/// Parses, validates and expands. On error, the user's function is emitted unchanged beside the
/// error, so one mistake in the attribute does not cascade into errors at every route using it.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    match try_expand(args, item.clone()) {
        Ok(tokens) => tokens,
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item #error)
        }
    }
}

fn try_expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let item: ItemFn = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "`#[idempotent]` goes on an `async fn` axum handler",
        )
    })?;
    let args: Args = syn::parse2(args)?;
    let config = validate::config(args)?;
    validate::function(&item)?;
    Ok(expand(&item, &config))
}

fn expand(item: &ItemFn, config: &validate::Config) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let vis = &item.vis;
    let name = &item.sig.ident;
    let name_str = name.to_string();
    let scope = &config.scope;
    let ttl = config.ttl_secs;
    let key_mode = if config.key_required {
        quote!(Required)
    } else {
        quote!(Optional)
    };
    let in_flight = if config.wait {
        quote!(Wait)
    } else {
        quote!(Reject)
    };

    // Docs describe the endpoint (the struct); `cfg`s apply to everything; any other attribute
    // (`#[tracing::instrument]`, `#[allow]`, ...) stays on the function that holds the body.
    let is = |a: &syn::Attribute, n: &str| a.path().is_ident(n);
    let docs = item.attrs.iter().filter(|a| is(a, "doc"));
    let cfgs: Vec<_> = item
        .attrs
        .iter()
        .filter(|a| is(a, "cfg") || is(a, "cfg_attr"))
        .collect();
    let mut inner = item.clone();
    inner.vis = syn::Visibility::Inherited;
    inner
        .attrs
        .retain(|a| !is(a, "doc") && !is(a, "cfg") && !is(a, "cfg_attr"));

    let types: Vec<&syn::Type> = item
        .sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(pat) => Some(&*pat.ty),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let args: Vec<_> = (0..types.len())
        .map(|i| format_ident!("__idem_arg{}", i))
        .collect();
    let state = quote!(__IdemS);

    let (parts_types, last) = match types.split_last() {
        Some((last, parts)) => (parts, Some(*last)),
        None => (&[][..], None),
    };
    let mut bounds = Vec::new();
    let mut extract_parts = Vec::new();
    for (ty, arg) in parts_types.iter().zip(&args) {
        bounds.push(quote_spanned!(ty.span()=> #ty: #p::FromRequestParts<#state>,));
        extract_parts.push(quote_spanned! {ty.span()=>
            let #arg = match <#ty as #p::FromRequestParts<#state>>::from_request_parts(
                &mut __idem_parts, &__idem_state,
            ).await {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(rejection) => {
                    return #p::IntoResponse::into_response(rejection);
                }
            };
        });
    }
    let (marker, extract_last) = match last {
        Some(ty) => {
            let arg = &args[types.len() - 1];
            bounds.push(quote_spanned!(ty.span()=> #ty: #p::FromRequest<#state, __IdemM>,));
            let extract = quote_spanned! {ty.span()=>
                let #arg = match <#ty as #p::FromRequest<#state, __IdemM>>::from_request(
                    __idem_request, &__idem_state,
                ).await {
                    ::core::result::Result::Ok(value) => value,
                    ::core::result::Result::Err(rejection) => {
                        return #p::IntoResponse::into_response(rejection);
                    }
                };
            };
            (quote!(__IdemM,), extract)
        }
        None => (quote!(), quote!(let _ = __idem_request;)),
    };
    let handler_t = if last.is_some() {
        quote!((__IdemM,))
    } else {
        quote!(((),))
    };
    let call = quote_spanned! {name.span()=>
        async move { #p::IntoResponse::into_response(#name(#(#args),*).await) }
    };

    quote! {
        #(#cfgs)*
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;

        #(#cfgs)*
        const _: () = {
            static __IDEM_ENDPOINT: #p::Endpoint = #p::Endpoint::new(
                ::core::concat!(::core::module_path!(), "::", #name_str),
                #scope,
                #ttl,
                #p::KeyMode::#key_mode,
                #p::InFlightMode::#in_flight,
            );
            #p::inventory::submit! { #p::Registration(&__IDEM_ENDPOINT) }

            #inner

            #[automatically_derived]
            impl<#state, #marker> #p::Handler<#handler_t, #state> for #name
            where
                #state: ::core::marker::Send + ::core::marker::Sync + 'static,
                ::idem_runtime::Idempotency: #p::FromRef<#state>,
                #(#bounds)*
            {
                type Future = #p::HandlerFuture;

                fn call(self, __idem_request: #p::Request, __idem_state: #state) -> Self::Future {
                    ::std::boxed::Box::pin(async move {
                        let __idem_engine =
                            <::idem_runtime::Idempotency as #p::FromRef<#state>>::from_ref(&__idem_state);
                        let (mut __idem_parts, __idem_body) = __idem_request.into_parts();
                        let __idem_pending =
                            match #p::begin(&__idem_engine, &__IDEM_ENDPOINT, &__idem_parts) {
                                ::core::result::Result::Ok(pending) => pending,
                                ::core::result::Result::Err(response) => return response,
                            };
                        #(#extract_parts)*
                        let (__idem_ready, __idem_request) = match __idem_pending
                            .body(&__idem_engine, &__IDEM_ENDPOINT, __idem_parts, __idem_body)
                            .await
                        {
                            ::core::result::Result::Ok(ready) => ready,
                            ::core::result::Result::Err(response) => return response,
                        };
                        #extract_last
                        __idem_ready.run(&__idem_engine, &__IDEM_ENDPOINT, #call).await
                    })
                }
            }
        };
    }
}
