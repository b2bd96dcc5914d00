//! Code generation: the handler becomes a unit struct implementing axum's `Handler`.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ext::IdentExt;

use crate::ast::Handler;
use crate::{attr::Args, validate};

mod checks;
mod handler;

/// Parses, validates and expands. On error, the user's function is emitted unchanged beside the
/// error, so one mistake in the attribute does not cascade into errors at every route using it.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    if args.to_string() == crate::grpc::EXPANDED {
        // A tonic method `#[idem_runtime::grpc::service]` already rewrote.
        return item;
    }
    if let Some(error) = crate::grpc::method_outside_service(&item) {
        let error = error.into_compile_error();
        return quote!(#item #error);
    }
    if let Some(reordered) = utoipa_path_above(&args, &item) {
        return reordered;
    }
    match try_expand(args, item.clone()) {
        Ok(tokens) => tokens,
        Err(error) => {
            let error = error.into_compile_error();
            quote!(#item #error)
        }
    }
}

/// `#[utoipa::path]` written below `#[idempotent]`: the function again, with `#[utoipa::path]`
/// moved above `#[idempotent]`, which then expands again. Left where it was, `#[utoipa::path]`
/// would document the function hidden inside the expansion, and its `__path_name` type would be
/// out of reach of `paths(name)` and `routes!(name)`. Moved, utoipa reads the same function as
/// when written above, so both orders give the same document.
fn utoipa_path_above(args: &TokenStream, item: &TokenStream) -> Option<TokenStream> {
    let mut function = syn::parse2::<syn::ItemFn>(item.clone()).ok()?;
    let at = function.attrs.iter().position(|attr| {
        let segments = &attr.path().segments;
        segments.len() == 2 && segments[0].ident == "utoipa" && segments[1].ident == "path"
    })?;
    let utoipa = function.attrs.remove(at);
    Some(quote! {
        #utoipa
        #[::idem_runtime::idempotent(#args)]
        #function
    })
}

/// Reports the attribute's and the function's mistakes together, so fixing one does not reveal
/// the next.
fn try_expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let handler = Handler::parse(item)?;
    let config = syn::parse2::<Args>(args).and_then(validate::config);
    let checked = validate::handler(&handler);
    match (config, checked) {
        (Ok(config), Ok(())) => Ok(expand(&handler, &config)),
        (Err(mut error), Err(other)) => {
            error.combine(other);
            Err(error)
        }
        (Err(error), Ok(())) | (Ok(_), Err(error)) => Err(error),
    }
}

/// The struct, and everything else attached to it through `__private::items`: when the struct
/// cannot be declared (the function is inside an `impl` block), rustc then reports that one
/// error, "struct is not supported in `trait`s or `impl`s", at the attribute, rather than a
/// cascade about the code that would use it.
fn expand(handler: &Handler, config: &validate::Config) -> TokenStream {
    let p = quote!(::idem_runtime::__private);
    let Handler { vis, name, .. } = handler;
    let (docs, cfgs) = (&handler.attrs.docs, &handler.attrs.cfgs);
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
    // Left out unless given, so most expansions read as before.
    let commits = config
        .two_commits
        .then(|| quote!(.with_commits(#p::AtomicCommits::Two)));
    let stable_name = config.name.as_ref().map(|name| quote!(.with_name(#name)));
    let call = handler::call_fn(handler);
    let arguments = checks::arguments_fn(handler, handler.known_state(config.state.as_ref()));
    let body = handler.body_fn();
    let handler_impl = handler::handler_impl(handler, config.state.as_ref());

    quote! {
        #(#cfgs)*
        #[#p::items(
            const _: () = {
                static __IDEM_ENDPOINT: #p::Endpoint = #p::Endpoint::new(
                    ::core::concat!(::core::module_path!(), "::", #name_str),
                    #scope,
                    #ttl,
                    #p::KeyMode::#key_mode,
                    #p::InFlightMode::#in_flight,
                )
                .with_atomic(__idem_arguments)
                #commits
                #stable_name;
                #arguments
                #p::inventory::submit! { #p::Registration(&__IDEM_ENDPOINT) }
                impl #p::Serves for #name {
                    fn add_to(&self, served: &mut #p::Served) {
                        served.endpoint(&__IDEM_ENDPOINT);
                    }
                }

                #body

                #call

                #handler_impl
            };
        )]
        #(#docs)*
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug)]
        #vis struct #name;
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

    /// The struct, and the items hung on it through `__private::items`.
    fn expand_items(args: &str, item: &str) -> (syn::ItemStruct, String) {
        let out = idempotent(args.parse().unwrap(), item.parse().unwrap());
        let file: syn::File = syn::parse2(out.clone()).unwrap();
        let [syn::Item::Struct(endpoint)] = &file.items[..] else {
            panic!("{out}");
        };
        let items = endpoint
            .attrs
            .iter()
            .find(|a| a.path().segments.last().unwrap().ident == "items")
            .unwrap_or_else(|| panic!("{out}"));
        let items: syn::File = items.parse_args().unwrap();
        let [syn::Item::Const(block)] = &items.items[..] else {
            panic!("{out}");
        };
        (endpoint.clone(), block.to_token_stream().to_string())
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
    fn expands_into_a_struct_carrying_the_rest() {
        let (endpoint, block) = expand_items(
            r#"scope = "org", ttl = "15m", key = "required""#,
            "/// Docs.\n#[cfg(all())]\n#[tracing::instrument]\npub async fn create(\
             State(s): State<App>, Json(b): Json<B>) -> String { b }",
        );
        let endpoint = endpoint.to_token_stream().to_string();
        // `cfg` first, so a compiled-out handler leaves nothing, not even the items.
        assert!(endpoint.starts_with("# [cfg (all ())] # [:: idem_runtime :: __private :: items"));
        assert!(endpoint.contains("doc = \" Docs.\""), "{endpoint}");
        assert!(endpoint.ends_with("pub struct create ;"), "{endpoint}");
        assert!(block.starts_with("const _ : () ="), "{block}");
        assert!(block.contains("900u64"), "{block}");
        assert!(block.contains("KeyMode :: Required"), "{block}");
        assert!(block.contains("InFlightMode :: Reject"), "{block}");
        assert!(
            block.contains("# [tracing :: instrument] async fn create"),
            "{block}"
        );
        // The user's docs stay on the struct, once.
        assert!(!block.contains("Docs."), "{block}");
        assert!(block.contains("__IdemS : :: idem_runtime :: __private :: IdempotencyState"));
        assert!(block.contains("Handler < (__IdemM0 , __IdemM1 ,) , __IdemS > for create"));
    }

    #[test]
    fn a_name_is_the_endpoints_identity_and_the_body_stays_callable() {
        let (_, block) = expand_items(
            r#"scope = "org", name = "charges.create""#,
            "pub(crate) async fn create(s: State<App>, Json(b): Json<B>) -> StatusCode { s }",
        );
        assert!(
            block.contains(". with_name (\"charges.create\")"),
            "{block}"
        );
        assert!(
            block.contains("impl create { # [doc = \" Calls the function `#[idempotent]` wraps"),
            "{block}"
        );
        assert!(
            block.contains(
                "pub (crate) async fn call (__idem_arg0 : State < App > , __idem_arg1 : \
                 Json < B >) -> StatusCode { create (__idem_arg0 , __idem_arg1) . await }"
            ),
            "{block}"
        );
        let (_, unnamed) = expand_items(r#"scope = "org""#, "async fn create() {}");
        assert!(!unnamed.contains("with_name"), "{unnamed}");
    }

    #[test]
    fn each_argument_is_bounded_by_its_role() {
        let (_, block) = expand_items(
            r#"scope = "global""#,
            "async fn f(a: Path<u64>, s: axum::extract::State<Db>, b: Json<B>) {}",
        );
        assert!(block.contains("__private :: ExtractParts < Path < u64 > , __IdemM0 >"));
        // `State<X>` words the error differently, on the same bound.
        assert!(
            block.contains("StateParts < axum :: extract :: State < Db > , Db , __IdemM1 >"),
            "{block}"
        );
        assert!(block.contains("__private :: ExtractLast < Json < B > , __IdemM2 >"));
        let (_, block) = expand_items(r#"scope = "global""#, "async fn f(s: State<Db>) {}");
        assert!(
            block.contains("StateLast < State < Db > , Db , __IdemM0 >"),
            "{block}"
        );
    }

    #[test]
    fn arguments_before_the_last_are_checked_for_the_body_where_written() {
        let (_, block) = expand_items(r#"scope = "global""#, "async fn f(a: A, b: B, c: C) {}");
        assert!(
            block.contains("Probe :: < A > :: NEW) . before_last ()"),
            "{block}"
        );
        assert!(
            block.contains("Probe :: < B > :: NEW) . before_last ()"),
            "{block}"
        );
        assert!(
            !block.contains("Probe :: < C > :: NEW) . before_last ()"),
            "{block}"
        );
    }

    #[test]
    fn transactions_are_probed_by_type_pair_by_pair() {
        let (_, block) = expand_items(
            r#"scope = "global""#,
            "async fn create(s: State<A>, mut tx: Db, b: Json<B>) {}",
        );
        assert!(
            block.contains(". with_atomic (__idem_arguments)"),
            "{block}"
        );
        assert!(
            block.contains("Probe :: < Db > :: NEW) . atomic_need ()"),
            "{block}"
        );
        assert_eq!(block.matches(". at_most_one_transaction ()").count(), 3);
        assert!(
            block.contains("Pair :: < Db , Json < B > > :: NEW)"),
            "{block}"
        );
        assert!(block.contains("ExtractParts < Db , __IdemM1 >"), "{block}");
        assert!(
            block.contains("create (__idem_arg0 , __idem_arg1 , __idem_arg2)"),
            "{block}"
        );
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
        assert!(!out.contains("before_last"), "{out}");
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
    fn a_declared_state_checks_each_argument_where_written_and_fixes_the_state() {
        let (_, block) = expand_items(
            r#"scope = "global", state = AppState"#,
            "async fn f(s: State<Db>, u: User, b: Json<B>) {}",
        );
        assert!(block.contains("type __IdemState = AppState ;"), "{block}");
        assert!(block.contains("Declared :: < __IdemState , () , () > :: NEW . idempotency ()"));
        assert!(
            block
                .contains("Declared :: < __IdemState , State < Db > , Db > :: NEW . head_state ()"),
            "{block}"
        );
        assert!(block.contains("Declared :: < __IdemState , User , () > :: NEW . head ()"));
        assert!(block.contains("Declared :: < __IdemState , Json < B > , () > :: NEW . last ()"));
        // One impl, for the declared state, with no bound left to fail where it is routed.
        assert!(
            block.contains(
                "Handler < :: idem_runtime :: __private :: Declared < AppState , () , \
                            () > , __IdemS > for f where __IdemS : :: idem_runtime :: __private \
                            :: DeclaredState < AppState > + :: core :: marker :: Send"
            ),
            "{block}"
        );
        assert!(block.contains(
            "let __idem_state : AppState = :: idem_runtime :: __private :: \
                                DeclaredState :: < AppState > :: declared (__idem_state) ;"
        ));
        assert!(!block.contains("ExtractParts <"), "{block}");
        assert!(block.contains("Known :: < User , AppState > :: NEW) . extract_head"));
        assert!(block.contains("Known :: < Json < B > , AppState > :: NEW) . extract_last"));
    }

    #[test]
    fn a_state_of_one_type_is_inferred_and_several_are_not() {
        let (_, block) = expand_items(
            r#"scope = "global""#,
            "async fn f(s: State<App>, u: User, b: Json<B>) {}",
        );
        assert!(block.contains("type __IdemState = App ;"), "{block}");
        assert!(block.contains("Inferred :: < __IdemState , User > :: NEW) . head ()"));
        assert!(block.contains("Inferred :: < __IdemState , Json < B > > :: NEW) . last ()"));
        assert!(!block.contains(". idempotency ()"), "{block}");
        // The router's state may be another type, of which `App` is a part: any state.
        assert!(
            block.contains("ExtractParts < User , __IdemM1 >"),
            "{block}"
        );
        let (_, block) = expand_items(
            r#"scope = "global""#,
            "async fn f(s: State<Db>, m: State<Mailer>, b: Json<B>) {}",
        );
        assert!(!block.contains("__IdemState"), "{block}");
    }

    #[test]
    fn utoipa_path_below_is_moved_above() {
        let out = expand_str(
            r#"scope = "global""#,
            "/// Docs.\n#[utoipa::path(post, path = \"/a\")]\n#[tracing::instrument]\n\
             async fn create() {}",
        );
        assert_eq!(
            out,
            "# [utoipa :: path (post , path = \"/a\")] \
             # [:: idem_runtime :: idempotent (scope = \"global\")] \
             # [doc = \" Docs.\"] # [tracing :: instrument] async fn create () { }"
        );
        // Above, utoipa has already expanded: `#[idempotent]` sees no `#[utoipa::path]`.
        assert!(
            expand_str(r#"scope = "global""#, "async fn create() {}").contains("struct create")
        );
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
