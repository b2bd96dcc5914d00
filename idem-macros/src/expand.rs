//! Code generation: the handler becomes a unit struct implementing axum's `Handler`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, FnArg, Ident, ItemFn, Type};

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

/// Reports the attribute's and the function's mistakes together, so fixing one does not reveal
/// the next.
fn try_expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let item = validate::item(item)?;
    let config = syn::parse2::<Args>(args).and_then(validate::config);
    let function = validate::function(&item);
    match (config, function) {
        (Ok(config), Ok(())) => Ok(expand(&item, &config)),
        (Err(mut error), Err(other)) => {
            error.combine(other);
            Err(error)
        }
        (Err(error), Ok(())) | (Ok(_), Err(error)) => Err(error),
    }
}

fn expand(item: &ItemFn, config: &validate::Config) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let vis = &item.vis;
    let name = &item.sig.ident;
    let name_str = name.unraw().to_string();
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
    let is = |a: &Attribute, n: &str| a.path().is_ident(n);
    let is_cfg = |a: &Attribute| is(a, "cfg") || is(a, "cfg_attr");
    let docs = item.attrs.iter().filter(|a| is(a, "doc"));
    let cfgs: Vec<_> = item.attrs.iter().filter(|a| is_cfg(a)).collect();
    let mut inner = item.clone();
    inner.vis = syn::Visibility::Inherited;
    inner.attrs.retain(|a| !is(a, "doc") && !is_cfg(a));

    let handler_impl = handler_impl(item);
    // Atomic mode is chosen by a parameter's type (a `Tx` extractor, under any name or alias):
    // one probe per parameter tells the builder what the handler needs from the store.
    let probes = params(item)
        .into_iter()
        .map(|(ty, _)| quote_spanned!(ty.span()=> (&&#p::Probe::<#ty>::NEW).atomic_need()));

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
            )
            .with_atomic(__idem_atomic);
            fn __idem_atomic() -> ::core::option::Option<#p::AtomicNeed> {
                #[allow(unused_imports)]
                use #p::{ProbeAtomic as _, ProbePlain as _};
                ::core::option::Option::None #(.or(#probes))*
            }
            #p::inventory::submit! { #p::Registration(&__IDEM_ENDPOINT) }

            #inner

            #handler_impl
        };
    }
}

/// Every parameter's type, with the local that holds its value in the generated code.
fn params(item: &ItemFn) -> Vec<(&Type, Ident)> {
    item.sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(pat) => Some(&*pat.ty),
            FnArg::Receiver(_) => None,
        })
        .enumerate()
        .map(|(i, ty)| (ty, format_ident!("__idem_arg{}", i)))
        .collect()
}

/// `impl Handler<(M,), S> for name`, running the extractors around the engine's steps.
///
/// The where-clause bounds only the router state `S` (see `__private::EngineState`): each
/// bound is spanned at the user's own tokens, so when one fails, rustc's "required by this
/// bound" note points at the extractor type, or at the attribute for the engine.
fn handler_impl(item: &ItemFn) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let name = &item.sig.ident;
    let params: Vec<(&Type, Ident)> = params(item);
    let extractors: Vec<&(&Type, Ident)> = params.iter().collect();
    let args = params.iter().map(|(_, arg)| arg);
    let state = quote!(__IdemS);
    let marker = quote!(__IdemM);

    let mut bounds = vec![quote_spanned!(Span::call_site()=> #state: #p::EngineState,)];
    let mut extract_parts = Vec::new();
    let mut extract_last = quote!(let _ = __idem_request;);
    for (i, (ty, arg)) in extractors.iter().copied().enumerate() {
        let span = ty.span();
        let last = i + 1 == extractors.len();
        // The whole bound is spanned at the user's type (`#p` would carry the call site), so
        // rustc's "unsatisfied trait bound introduced here" points at the argument.
        let (bound, call) = if !last {
            (
                quote_spanned!(span=> ::idem_runtime::__private::ExtractParts<#ty>),
                quote_spanned!(span=> <#state as #p::ExtractParts<#ty>>::extract_parts(
                    &mut __idem_parts, &__idem_state,
                )),
            )
        } else {
            (
                quote_spanned!(span=> ::idem_runtime::__private::ExtractLast<#ty, __IdemM>),
                quote_spanned!(span=> <#state as #p::ExtractLast<#ty, #marker>>::extract_last(
                    __idem_request, &__idem_state,
                )),
            )
        };
        bounds.push(quote_spanned!(span=> __IdemS: #bound,));
        let extract = quote! {
            let #arg = match #call.await {
                ::core::result::Result::Ok(__idem_value) => __idem_value,
                ::core::result::Result::Err(__idem_response) => return __idem_response,
            };
        };
        if !last {
            extract_parts.push(extract);
        } else {
            extract_last = extract;
        }
    }
    let (generics, handler_t) = if extractors.is_empty() {
        (quote!(#state), quote!(((),)))
    } else {
        (quote!(#state, #marker), quote!((#marker,)))
    };

    // Spanned at the name: a non-`Send` future or an output that is not a response is
    // reported there ("future returned by `name` is not `Send`").
    let call = quote_spanned! {name.span()=>
        #p::handler_future(#name(#(#args),*))
    };
    let run = quote!(__idem_ready.run(&__idem_engine, &__IDEM_ENDPOINT, #call).await);

    quote! {
        #[automatically_derived]
        impl<#generics> #p::Handler<#handler_t, #state> for #name
        where
            #state: ::core::marker::Send + ::core::marker::Sync + 'static,
            #(#bounds)*
        {
            type Future = #p::HandlerFuture;

            fn call(self, __idem_request: #p::Request, __idem_state: #state) -> Self::Future {
                ::std::boxed::Box::pin(async move {
                    let __idem_engine = #p::EngineState::engine(&__idem_state);
                    let (mut __idem_parts, __idem_body) = __idem_request.into_parts();
                    let __idem_pending =
                        match #p::begin(&__idem_engine, &__IDEM_ENDPOINT, &mut __idem_parts) {
                            ::core::result::Result::Ok(__idem_pending) => __idem_pending,
                            ::core::result::Result::Err(__idem_response) => return __idem_response,
                        };
                    #(#extract_parts)*
                    let (__idem_ready, __idem_request) = match __idem_pending
                        .body(&__idem_engine, &__IDEM_ENDPOINT, __idem_parts, __idem_body)
                        .await
                    {
                        ::core::result::Result::Ok(__idem_ready) => __idem_ready,
                        ::core::result::Result::Err(__idem_response) => return __idem_response,
                    };
                    #extract_last
                    #run
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::TokenTree;
    use quote::ToTokens;

    fn expand_str(args: &str, item: &str) -> String {
        idempotent(args.parse().unwrap(), item.parse().unwrap()).to_string()
    }

    fn idents(tokens: TokenStream, out: &mut Vec<String>) {
        for tree in tokens {
            match tree {
                TokenTree::Ident(ident) => out.push(ident.to_string()),
                TokenTree::Group(group) => idents(group.stream(), out),
                _ => {}
            }
        }
    }

    #[test]
    fn expands_into_a_struct_and_a_handler_impl() {
        let out = expand_str(
            r#"scope = "org", ttl = "15m", key = "required""#,
            "/// Docs.\n#[cfg(all())]\n#[tracing::instrument]\npub async fn create(\
             State(s): State<App>, Json(b): Json<B>) -> String { b }",
        );
        let file: syn::File = syn::parse_str(&out).unwrap();
        let [syn::Item::Struct(endpoint), syn::Item::Const(block)] = &file.items[..] else {
            panic!("{out}");
        };
        let endpoint = endpoint.to_token_stream().to_string();
        assert!(endpoint.contains("doc = \" Docs.\""), "{endpoint}");
        assert!(endpoint.contains("cfg (all ())"), "{endpoint}");
        assert!(endpoint.contains("pub struct create ;"), "{endpoint}");
        let block = block.to_token_stream().to_string();
        assert!(block.starts_with("# [cfg (all ())] const _"), "{block}");
        assert!(block.contains("900u64"), "{block}");
        assert!(block.contains("KeyMode :: Required"), "{block}");
        assert!(block.contains("InFlightMode :: Reject"), "{block}");
        assert!(
            block.contains("# [tracing :: instrument] async fn create"),
            "{block}"
        );
        assert!(block.contains("__IdemS : :: idem_runtime :: __private :: EngineState"));
        assert!(block.contains("__private :: ExtractParts < State < App > >"));
        assert!(block.contains("__private :: ExtractLast < Json < B > , __IdemM >"));
        assert!(block.contains("Handler < (__IdemM ,) , __IdemS > for create"));
    }

    #[test]
    fn a_handler_without_extractors_takes_the_unit_marker() {
        let out = expand_str(r#"scope = "global""#, "async fn ping() {}");
        assert!(
            out.contains("Handler < (() ,) , __IdemS > for ping"),
            "{out}"
        );
        assert!(out.contains("let _ = __idem_request ;"), "{out}");
        assert!(!out.contains("Extract"), "{out}");
    }

    #[test]
    fn a_transaction_is_an_extractor_and_probed_by_type() {
        let out = expand_str(
            r#"scope = "global""#,
            "async fn create(s: State<A>, mut tx: Db, b: Json<B>) {}",
        );
        assert!(out.contains(". with_atomic (__idem_atomic)"), "{out}");
        assert!(
            out.contains("Probe :: < Db > :: NEW) . atomic_need ()"),
            "{out}"
        );
        assert!(out.contains("ExtractParts < Db >"), "{out}");
        assert!(
            out.contains("create (__idem_arg0 , __idem_arg1 , __idem_arg2)"),
            "{out}"
        );
    }

    /// Generated bindings must not collide with the user's items: a handler named `response`
    /// or `value` is a unit struct in scope, which a plain `response` pattern would match.
    #[test]
    fn generated_locals_are_prefixed() {
        let out = idempotent(
            r#"scope = "global""#.parse().unwrap(),
            "async fn h(a: A, b: B) {}".parse().unwrap(),
        );
        let mut names = Vec::new();
        idents(out, &mut names);
        for name in [
            "response",
            "value",
            "pending",
            "ready",
            "rejection",
            "request",
        ] {
            assert!(!names.iter().any(|n| n == name), "unprefixed `{name}`");
        }
    }

    #[test]
    fn on_error_the_function_is_kept_beside_every_error() {
        let out = expand_str(r#"ttl = "1h""#, "fn create() {}");
        assert!(out.starts_with("fn create () { }"), "{out}");
        assert_eq!(out.matches("compile_error").count(), 2, "{out}");
        assert!(out.contains("needs a scope"), "{out}");
        assert!(out.contains("must be `async`"), "{out}");
    }
}
