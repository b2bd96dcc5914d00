//! `#[idem_runtime::grpc::service]`: the `#[idempotent]` methods of a tonic service's `impl`.
//!
//! The attribute goes on the `impl` block above `#[tonic::async_trait]`, so it runs first and
//! sees each method as written. Each method marked `#[idempotent(...)]` keeps its signature;
//! its body becomes a closure the engine runs once per key (on a task of its own, with a clone
//! of the service standing for `self`), and the marker is left as `#[idempotent(__idem_grpc)]`,
//! which expands to nothing. Without this attribute, `#[idempotent]` on a method is an error
//! that says where to put it.

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Attribute, FnArg, ImplItem, ImplItemFn, ItemImpl, Pat, PathArguments, Type};

use crate::attr::{Arg, Args};
use crate::{ttl, validate};

/// The argument the rewritten marker carries.
pub(crate) const EXPANDED: &str = "__idem_grpc";

/// The error for `#[idempotent]` on a method that `grpc::service` did not rewrite.
pub(crate) fn outside_service(span: Span, desugared: bool) -> syn::Error {
    let why = if desugared {
        " above `#[tonic::async_trait]` (which rewrites the methods before an attribute below \
         it runs)"
    } else {
        ""
    };
    syn::Error::new(
        span,
        format!(
            "`#[idempotent]` on a method needs `#[idem_runtime::grpc::service]` on its `impl` \
             block{why}: write `#[idem_runtime::grpc::service]` then `#[tonic::async_trait]` \
             above `impl YourService for ...`"
        ),
    )
}

/// `#[idempotent]` on a method (a function taking `self`) that `grpc::service` did not rewrite:
/// the error saying where that attribute goes.
pub(crate) fn method_outside_service(item: &TokenStream) -> Option<syn::Error> {
    let method = syn::parse2::<ImplItemFn>(item.clone()).ok()?;
    let sig = &method.sig;
    if !matches!(sig.inputs.first(), Some(FnArg::Receiver(_))) {
        return None;
    }
    // What `#[tonic::async_trait]` made of a method, or a method taking a `Request<..>` as
    // tonic's service traits do; any other method gets the attribute's usual error.
    let desugared = sig.asyncness.is_none() && returns_pin(sig);
    let takes_request = sig.inputs.iter().any(|input| match input {
        FnArg::Typed(typed) => last_segment_is(&typed.ty, "Request"),
        FnArg::Receiver(_) => false,
    });
    (desugared || takes_request).then(|| outside_service(sig.ident.span(), desugared))
}

fn returns_pin(sig: &syn::Signature) -> bool {
    matches!(&sig.output, syn::ReturnType::Type(_, ty) if quote!(#ty).to_string().contains("Pin"))
}

fn last_segment_is(ty: &Type, name: &str) -> bool {
    matches!(ty, Type::Path(path) if path.path.segments.last().is_some_and(|s| s.ident == name))
}

/// Expands `#[idem_runtime::grpc::service]`.
pub(crate) fn service(args: TokenStream, item: TokenStream) -> TokenStream {
    let result = if args.is_empty() {
        expand(item.clone())
    } else {
        Err(syn::Error::new_spanned(
            args,
            "`#[idem_runtime::grpc::service]` takes no arguments: put them on each method's \
             `#[idempotent(...)]`",
        ))
    };
    match result {
        Ok(tokens) => tokens,
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item #error)
        }
    }
}

fn expand(item: TokenStream) -> syn::Result<TokenStream> {
    let mut block = syn::parse2::<ItemImpl>(item).map_err(|error| {
        syn::Error::new(
            error.span(),
            "`#[idem_runtime::grpc::service]` goes on the `impl` block of a tonic service, \
             above `#[tonic::async_trait]`",
        )
    })?;
    let mut errors: Option<syn::Error> = None;
    let mut idempotent = Vec::new();
    for item in &mut block.items {
        let ImplItem::Fn(method) = item else { continue };
        let Some(at) = method.attrs.iter().position(is_idempotent) else {
            continue;
        };
        let rust_name = method.sig.ident.to_string();
        idempotent.push(
            rust_name
                .strip_prefix("r#")
                .unwrap_or(&rust_name)
                .to_owned(),
        );
        if let Err(error) = rewrite(method, at) {
            match &mut errors {
                Some(errors) => errors.combine(error),
                None => errors = Some(error),
            }
        }
        // Marked as handled even when it failed: its error is reported once, here, and the
        // method compiles as written meanwhile.
        let path = method.attrs[at].path().clone();
        let expanded = Ident::new(EXPANDED, Span::call_site());
        method.attrs[at] = syn::parse_quote!(#[#path(#expanded)]);
    }
    let errors = errors.map(syn::Error::into_compile_error);
    let methods = methods_const(&block, &idempotent);
    Ok(quote!(#block #methods #errors))
}

/// `IDEMPOTENT_<TRAIT>` on the service type: its `#[idempotent]` methods, for
/// `Builder::serves`. Named after the trait, so one type can serve several tonic services.
fn methods_const(block: &ItemImpl, methods: &[String]) -> TokenStream {
    let Some((_, trait_path, _)) = &block.trait_ else {
        return TokenStream::new();
    };
    let Some(service) = trait_path.segments.last() else {
        return TokenStream::new();
    };
    let name = format_ident!(
        "IDEMPOTENT_{}",
        upper_snake(&service.ident.unraw().to_string()),
        span = service.ident.span()
    );
    let p = quote!(::idem_runtime::__private);
    let (impl_generics, _, where_clause) = block.generics.split_for_impl();
    let self_ty = &block.self_ty;
    let doc = format!(
        " The `#[idempotent]` methods of this type's `{}` service, for \
         `Builder::serves`: the engine then checks them when it is built.",
        service.ident.unraw()
    );
    quote! {
        impl #impl_generics #self_ty #where_clause {
            #[doc = #doc]
            #[allow(dead_code)]
            pub const #name: #p::Handlers = #p::Handlers(&[
                #(::core::concat!(::core::module_path!(), "::", #methods)),*
            ]);
        }
    }
}

/// `LedgerAdmin` as a constant's name: `LEDGER_ADMIN`.
fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.char_indices() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_uppercase());
    }
    out
}

fn is_idempotent(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "idempotent")
}

/// What the method's `#[idempotent(...)]` says, checked.
struct Method {
    name: Option<String>,
    scope: String,
    ttl_secs: u64,
    key_required: bool,
    wait: bool,
    one_commit: bool,
    key_field: Option<Ident>,
    key_metadata: Option<String>,
}

fn config(args: Args, method: &ImplItemFn) -> syn::Result<Method> {
    if let Some(state) = &args.state {
        return Err(syn::Error::new_spanned(
            state,
            "`state` applies to axum handlers; a tonic method's engine comes from its service \
             (`AsRef<Idempotency>`)",
        ));
    }
    let Some(scope) = &args.scope else {
        return Err(syn::Error::new_spanned(
            &method.sig.ident,
            "`#[idempotent]` needs a scope: add `scope = \"global\"`, or the name of a scope \
             registered on the engine such as `scope = \"tenant\"`",
        ));
    };
    if args.key_field.is_none() && args.key_metadata.is_none() {
        return Err(syn::Error::new_spanned(
            &method.sig.ident,
            "an idempotent tonic method needs a key source: `key_field = \"request_id\"` names \
             the request's `string` field holding the key (AIP-155; the `idempotency-key` \
             metadata entry is accepted too), or `key_metadata = \"idempotency-key\"` takes it \
             from the metadata alone",
        ));
    }
    Ok(Method {
        name: args
            .name
            .as_ref()
            .map(validate::operation_name)
            .transpose()?,
        scope: validate::scope_name(scope)?,
        ttl_secs: args
            .ttl
            .as_ref()
            .map_or(Ok(ttl::DEFAULT_SECS), |arg| ttl::ttl(&arg.value))?,
        key_required: validate::choice(args.key.as_ref(), "key", ["optional", "required"])? == 1,
        wait: validate::choice(args.in_flight.as_ref(), "in_flight", ["reject", "wait"])? == 1,
        one_commit: validate::choice(args.commits.as_ref(), "commits", ["two", "one"])? == 1,
        key_field: args.key_field.as_ref().map(field_ident).transpose()?,
        key_metadata: args.key_metadata.as_ref().map(metadata_name).transpose()?,
    })
}

fn field_ident(arg: &Arg) -> syn::Result<Ident> {
    let name = arg.value.value();
    // Located at the literal, resolved in the expansion: rustc's "a field with a similar name
    // exists" then names the field without offering to rewrite the string as an identifier.
    let span = Span::mixed_site().located_at(arg.value.span());
    syn::parse_str::<Ident>(&name)
        .map(|ident| Ident::new(&ident.to_string(), span))
        .map_err(|_| {
            syn::Error::new_spanned(
                &arg.value,
                format!(
                    "`key_field = \"{}\"` is not a field name: write the Rust name of the \
                     request message's `string` field, such as `key_field = \"request_id\"`",
                    name.escape_debug()
                ),
            )
        })
}

fn metadata_name(arg: &Arg) -> syn::Result<String> {
    let name = arg.value.value();
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c);
    if !name.is_empty() && name.chars().all(allowed) && !name.ends_with("-bin") {
        return Ok(name);
    }
    Err(syn::Error::new_spanned(
        &arg.value,
        format!(
            "`key_metadata = \"{}\"` is not an ASCII metadata key: use lowercase letters, \
             digits, `-`, `_` or `.`, not ending in `-bin`, such as `key_metadata = \
             \"idempotency-key\"`",
            name.escape_debug()
        ),
    ))
}

/// The method's request type, `tonic::Request<M>`, and `M`.
fn request(method: &ImplItemFn) -> syn::Result<(&Pat, &Type, &Type)> {
    let sig = &method.sig;
    let shape = || {
        syn::Error::new_spanned(
            sig,
            "an idempotent tonic method is `async fn name(&self, request: \
             tonic::Request<Message>) -> Result<tonic::Response<Reply>, tonic::Status>`, as \
             tonic's generated service trait declares it (streaming methods are not supported)",
        )
    };
    if sig.asyncness.is_none() {
        return Err(if returns_pin(sig) {
            outside_service(sig.ident.span(), true)
        } else {
            shape()
        });
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(receiver))
            if receiver.reference.is_some() && receiver.mutability.is_none() => {}
        _ => return Err(shape()),
    }
    let (Some(FnArg::Typed(request)), None) = (inputs.next(), inputs.next()) else {
        return Err(shape());
    };
    let Type::Path(path) = &*request.ty else {
        return Err(shape());
    };
    let Some(last) = path.path.segments.last() else {
        return Err(shape());
    };
    let PathArguments::AngleBracketed(generics) = &last.arguments else {
        return Err(shape());
    };
    let message = match generics.args.first() {
        Some(syn::GenericArgument::Type(message)) if last.ident == "Request" => message,
        _ => return Err(shape()),
    };
    if quote!(#message).to_string().contains("Streaming") {
        return Err(shape());
    }
    if matches!(sig.output, syn::ReturnType::Default) {
        return Err(shape());
    }
    Ok((&request.pat, &request.ty, message))
}

fn rewrite(method: &mut ImplItemFn, at: usize) -> syn::Result<()> {
    let marker = method.attrs[at].clone();
    let args = match &marker.meta {
        syn::Meta::List(list) => syn::parse2::<Args>(list.tokens.clone())?,
        _ => Args::default(),
    };
    let config = config(args, method)?;
    let (pattern, request_ty, message) = request(method)?;
    let (pattern, request_ty, message) = (pattern.clone(), request_ty.clone(), message.clone());
    let syn::ReturnType::Type(_, reply_ty) = &method.sig.output else {
        unreachable!("checked by `request`");
    };
    let reply_ty = reply_ty.clone();
    let p = quote!(::idem_runtime::__private);
    let rust_name = method.sig.ident.to_string();
    let rust_name = rust_name
        .strip_prefix("r#")
        .unwrap_or(&rust_name)
        .to_owned();
    let gmethod = camel(&rust_name);
    let option = |value: Option<String>| match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let name = option(config.name.clone());
    let key_field_name = option(config.key_field.as_ref().map(ToString::to_string));
    let key_metadata = option(config.key_metadata.clone());
    let scope = &config.scope;
    let ttl = config.ttl_secs;
    let key_mode = format_ident!(
        "{}",
        if config.key_required {
            "Required"
        } else {
            "Optional"
        }
    );
    let in_flight = format_ident!("{}", if config.wait { "Wait" } else { "Reject" });
    let commits = format_ident!("{}", if config.one_commit { "One" } else { "Two" });
    let (accessor, field) = match &config.key_field {
        Some(field) => (
            quote_spanned! {field.span()=>
                fn __idem_key_field(message: &mut #message) -> &mut ::std::string::String {
                    #p::grpc::key_field(&mut message.#field)
                }
            },
            quote!(::core::option::Option::Some(__idem_key_field)),
        ),
        None => (quote!(), quote!(::core::option::Option::None)),
    };
    let block = &method.block;
    let body = replace_self(quote!(#block));
    let request_arg = format_ident!("__idem_request");
    if let Some(FnArg::Typed(typed)) = method.sig.inputs.iter_mut().nth(1) {
        *typed.pat = syn::parse_quote!(#request_arg);
    }
    method.block = syn::parse_quote! {{
        static __IDEM_METHOD: #p::grpc::GrpcMethod = #p::grpc::GrpcMethod::new(
            ::core::concat!(::core::module_path!(), "::", #rust_name),
            #p::grpc::full_name::<#message>,
            #gmethod,
            #name,
            #scope,
            #ttl,
            #p::KeyMode::#key_mode,
            #key_field_name,
            #key_metadata,
            #p::InFlightMode::#in_flight,
            #p::AtomicCommits::#commits,
        );
        #p::inventory::submit! { #p::grpc::GrpcRegistration(&__IDEM_METHOD) }
        #accessor
        #p::grpc::run(
            &__IDEM_METHOD,
            self,
            #request_arg,
            #field,
            move |__idem_service, #pattern: #request_ty| async move {
                #[allow(unused_variables)]
                let __idem_self = &__idem_service;
                let __idem_reply: #reply_ty = #body;
                #[allow(unreachable_code)]
                __idem_reply
            },
        )
        .await
    }};
    Ok(())
}

/// `create_transfer` as gRPC spells it: `CreateTransfer`.
fn camel(snake: &str) -> String {
    let snake = snake.strip_prefix("r#").unwrap_or(snake);
    snake
        .split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect()
}

/// The body with `self` standing for the service's clone (`__idem_self`), except in paths
/// (`self::module`).
fn replace_self(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            TokenTree::Ident(ident) if ident == "self" => {
                let path = matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if path {
                    out.push(TokenTree::Ident(ident));
                } else {
                    out.push(TokenTree::Ident(Ident::new("__idem_self", ident.span())));
                }
            }
            TokenTree::Group(group) => {
                let mut replaced =
                    proc_macro2::Group::new(group.delimiter(), replace_self(group.stream()));
                replaced.set_span(group.span());
                out.push(TokenTree::Group(replaced));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests;
