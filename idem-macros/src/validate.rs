//! Checking parsed arguments and the annotated function; every error points at the offending
//! token and says how to fix it.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::{GenericParam, Type};

use crate::ast::{Handler, Param};
use crate::attr::{Arg, Args, edit_distance};
use crate::ttl::{self, ttl};

/// axum implements `Handler` for up to 16 extractors; so do we.
pub(crate) const MAX_EXTRACTORS: usize = 16;
const MAX_SCOPE_LEN: usize = 64;

/// The validated configuration of one endpoint.
pub(crate) struct Config {
    pub(crate) scope: String,
    /// `name = "..."`: the operation's stable identity.
    pub(crate) name: Option<String>,
    pub(crate) ttl_secs: u64,
    pub(crate) key_required: bool,
    pub(crate) wait: bool,
    /// `commits = "two"`: atomic mode on PostgreSQL commits the claim before the handler.
    pub(crate) two_commits: bool,
    /// `state = S`: the router state, declared.
    pub(crate) state: Option<Type>,
}

pub(crate) fn config(args: Args) -> syn::Result<Config> {
    if let Some(arg) = args.key_field.as_ref().or(args.key_metadata.as_ref()) {
        return Err(syn::Error::new_spanned(
            &arg.value,
            "`key_field` and `key_metadata` apply to tonic methods (in an `impl` under \
             `#[idem_runtime::grpc::service]`); an axum handler's key comes from the \
             `Idempotency-Key` header",
        ));
    }
    let Some(scope) = args.scope else {
        return Err(syn::Error::new(
            Span::call_site(),
            "`#[idempotent]` needs a scope: add `scope = \"global\"`, or the name of a scope \
             registered on the engine such as `scope = \"org\"`",
        ));
    };
    Ok(Config {
        scope: scope_name(&scope)?,
        name: args.name.as_ref().map(operation_name).transpose()?,
        ttl_secs: args
            .ttl
            .as_ref()
            .map_or(Ok(ttl::DEFAULT_SECS), |arg| ttl(&arg.value))?,
        key_required: choice(args.key.as_ref(), "key", ["optional", "required"])? == 1,
        wait: choice(args.in_flight.as_ref(), "in_flight", ["reject", "wait"])? == 1,
        two_commits: choice(args.commits.as_ref(), "commits", ["one", "two"])? == 1,
        state: args.state,
    })
}

pub(crate) fn scope_name(arg: &Arg) -> syn::Result<String> {
    let name = arg.value.value();
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if !name.is_empty() && name.len() <= MAX_SCOPE_LEN && name.chars().all(allowed) {
        return Ok(name);
    }
    let message = if name.is_empty() {
        "empty scope in `#[idempotent]`: write `scope = \"global\"`, or the name of a scope \
         registered on the engine such as `scope = \"org\"`"
            .to_owned()
    } else {
        let suggestion: String = name
            .trim()
            .chars()
            .map(|c| if allowed(c) { c } else { '_' })
            .take(MAX_SCOPE_LEN)
            .collect();
        format!(
            "invalid scope name \"{}\" in `#[idempotent]`: use 1 to {MAX_SCOPE_LEN} ASCII \
             letters, digits, `_`, `-` or `.`, such as `scope = \"{suggestion}\"`",
            name.escape_debug()
        )
    };
    Err(syn::Error::new_spanned(&arg.value, message))
}

/// `name = "..."`, by the rule the layer's and the programmatic API's names follow too.
pub(crate) fn operation_name(arg: &Arg) -> syn::Result<String> {
    let name = arg.value.value();
    match idem_rules::name::validate(&name) {
        Ok(()) => Ok(name),
        Err(error) => {
            let trimmed: String = name.trim().chars().filter(|c| !c.is_control()).collect();
            let fix = if trimmed.is_empty() || trimmed.len() > idem_rules::name::MAX_NAME_LEN {
                "give a stable name such as `name = \"charges.create\"`, or leave `name` out to \
                 key records by the route"
                    .to_owned()
            } else {
                format!("write `name = \"{}\"`", trimmed.escape_debug())
            };
            Err(syn::Error::new_spanned(
                &arg.value,
                format!("invalid `name` in `#[idempotent]`: {error}; {fix}"),
            ))
        }
    }
}

/// The index of `arg`'s value among `options` (0, the default, when absent).
pub(crate) fn choice(arg: Option<&Arg>, name: &str, options: [&str; 2]) -> syn::Result<usize> {
    let Some(arg) = arg else { return Ok(0) };
    let value = arg.value.value();
    if let Some(index) = options.iter().position(|o| *o == value) {
        return Ok(index);
    }
    let [default, other] = options;
    let shown = value.escape_debug();
    let lower = value.to_ascii_lowercase();
    let close = options
        .iter()
        .find(|o| **o == lower || edit_distance(o, &lower) <= 2);
    let message = match close {
        Some(close) => format!(
            "invalid `{name}` value \"{shown}\" in `#[idempotent]`: did you mean \"{close}\"? \
             (the values are \"{default}\", the default, and \"{other}\")"
        ),
        None => format!(
            "invalid `{name}` value \"{shown}\" in `#[idempotent]`: expected \"{default}\" \
             (the default) or \"{other}\""
        ),
    };
    Err(syn::Error::new_spanned(&arg.value, message))
}

/// Checks that the function can be an axum handler under `#[idempotent]`.
pub(crate) fn handler(handler: &Handler) -> syn::Result<()> {
    let sig = &handler.item.sig;
    let name = &handler.name;
    if let Some(constness) = &sig.constness {
        return Err(syn::Error::new_spanned(
            constness,
            "`#[idempotent]` handlers cannot be `const`: write `async fn`",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        return Err(syn::Error::new_spanned(
            unsafety,
            "`#[idempotent]` handlers cannot be `unsafe`: axum calls them without a safety \
             contract; remove `unsafe` and use an `unsafe` block inside",
        ));
    }
    if sig.asyncness.is_none() {
        let fn_token = sig.fn_token;
        return Err(syn::Error::new_spanned(
            quote!(#fn_token #name),
            format!("`#[idempotent]` handlers must be `async`: write `async fn {name}`"),
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new_spanned(
            abi,
            "`#[idempotent]` handlers cannot have an `extern` ABI: remove it",
        ));
    }
    generics(&sig.generics)?;
    if let Some(variadic) = &sig.variadic {
        return Err(syn::Error::new_spanned(
            variadic,
            "`#[idempotent]` handlers cannot be variadic: take at most 16 extractors",
        ));
    }
    if let Some(receiver) = &handler.receiver {
        return Err(syn::Error::new_spanned(
            receiver,
            format!(
                "`#[idempotent]` handlers cannot take `self`: move `{name}` out of the `impl` \
                 block and pass shared data through `State`"
            ),
        ));
    }
    for param in &handler.params {
        extractor_type(&param.ty)?;
    }
    if let Some(Param { pat, ty, .. }) = handler.params.get(MAX_EXTRACTORS) {
        return Err(syn::Error::new_spanned(
            quote!(#pat: #ty),
            format!(
                "`#[idempotent]` handlers take at most {MAX_EXTRACTORS} extractors, as axum \
                 handlers do: group some into a struct that implements `FromRequestParts`"
            ),
        ));
    }
    Ok(())
}

fn generics(generics: &syn::Generics) -> syn::Result<()> {
    let fixed = "the endpoint and its extractors are fixed at compile time";
    if let Some(param) = generics.params.first() {
        let message = match param {
            GenericParam::Type(t) => format!(
                "`#[idempotent]` handlers cannot be generic over `{}`: {fixed}; write one \
                 handler per concrete type",
                t.ident
            ),
            GenericParam::Lifetime(l) => format!(
                "`#[idempotent]` handlers cannot have lifetime parameters: extractors are owned \
                 values (`String`, not `&{} str`); remove `{}`",
                l.lifetime, l.lifetime
            ),
            GenericParam::Const(c) => format!(
                "`#[idempotent]` handlers cannot have const parameters: {fixed}; write one \
                 handler per value of `{}`",
                c.ident
            ),
        };
        return Err(syn::Error::new_spanned(param, message));
    }
    if let Some(clause) = &generics.where_clause {
        return Err(syn::Error::new_spanned(
            clause,
            format!("`#[idempotent]` handlers cannot have a `where` clause: {fixed}"),
        ));
    }
    Ok(())
}

/// Rejects argument types that cannot name an extractor outside the function: `impl Trait`,
/// references and borrowed lifetimes (axum extractors are owned, `'static` values).
fn extractor_type(ty: &Type) -> syn::Result<()> {
    let error = |at: &dyn ToTokens, message: &str| Err(syn::Error::new_spanned(at, message));
    match ty {
        Type::ImplTrait(_) => error(
            ty,
            "`#[idempotent]` handler arguments cannot be `impl Trait`: name the extractor type",
        ),
        Type::Reference(_) => error(
            ty,
            "`#[idempotent]` handler arguments cannot be references: extractors are owned \
             values, such as `String` rather than `&str`",
        ),
        _ => {
            let mut found = Ok(());
            visit_tokens(ty.to_token_stream(), &mut |tree, next| {
                if found.is_err() {
                    return;
                }
                match (tree, next) {
                    (TokenTree::Ident(i), _) if i == "impl" => {
                        found = error(
                            ty,
                            "`#[idempotent]` handler arguments cannot contain `impl Trait`: \
                             name the type",
                        );
                    }
                    (TokenTree::Punct(p), Some(TokenTree::Ident(i)))
                        if p.as_char() == '\'' && i != "static" =>
                    {
                        found = error(
                            &quote!(#p #i),
                            "`#[idempotent]` handler arguments cannot borrow: extractors are \
                             owned values; use an owned type or `'static`",
                        );
                    }
                    (TokenTree::Punct(p), _) if p.as_char() == '&' => {
                        found = error(
                            ty,
                            "`#[idempotent]` handler arguments cannot contain references: \
                             extractors are owned values, such as `String` rather than `&str`",
                        );
                    }
                    _ => {}
                }
            });
            found
        }
    }
}

/// Calls `f` on every token tree (recursing into groups) with the token that follows it.
fn visit_tokens(tokens: TokenStream, f: &mut dyn FnMut(&TokenTree, Option<&TokenTree>)) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        f(tree, trees.get(i + 1));
        if let TokenTree::Group(group) = tree {
            visit_tokens(group.stream(), f);
        }
    }
}

/// A string literal, for the argument checks' tests.
#[cfg(test)]
pub(crate) fn lit(value: &str) -> syn::LitStr {
    syn::LitStr::new(value, Span::call_site())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(value: &str) -> Arg {
        Arg { value: lit(value) }
    }

    fn check(item: &str) -> syn::Result<()> {
        handler(&Handler::from_fn(syn::parse_str(item).unwrap()))
    }

    fn fn_err(item: &str) -> String {
        check(item).unwrap_err().to_string()
    }

    #[test]
    fn scope_names() {
        assert_eq!(scope_name(&arg("org")).unwrap(), "org");
        assert_eq!(scope_name(&arg("api_key.v2-x")).unwrap(), "api_key.v2-x");
        let err = scope_name(&arg("my org")).unwrap_err().to_string();
        assert!(err.ends_with("such as `scope = \"my_org\"`"), "{err}");
        let err = scope_name(&arg("")).unwrap_err().to_string();
        assert!(err.starts_with("empty scope"), "{err}");
        assert!(scope_name(&arg(&"a".repeat(65))).is_err());
    }

    #[test]
    fn operation_names_follow_the_shared_rule() {
        assert_eq!(
            operation_name(&arg("charges.create")).unwrap(),
            "charges.create"
        );
        assert_eq!(
            operation_name(&arg("POST /v1/charges")).unwrap(),
            "POST /v1/charges"
        );
        let err = operation_name(&arg(" charges ")).unwrap_err().to_string();
        assert!(err.ends_with("write `name = \"charges\"`"), "{err}");
        let err = operation_name(&arg("a\nb")).unwrap_err().to_string();
        assert!(err.contains("no control characters"), "{err}");
        let err = operation_name(&arg("")).unwrap_err().to_string();
        assert!(err.contains("leave `name` out"), "{err}");
        // The suggestion is the name trimmed while that fits the limit; past it, a hint.
        let limit = idem_rules::name::MAX_NAME_LEN;
        let padded = format!(" {} ", "n".repeat(limit));
        let err = operation_name(&arg(&padded)).unwrap_err().to_string();
        let fix = format!("write `name = \"{}\"`", "n".repeat(limit));
        assert!(err.ends_with(&fix), "{err}");
        for long in [limit + 1, 2 * limit] {
            let err = operation_name(&arg(&"n".repeat(long)))
                .unwrap_err()
                .to_string();
            assert!(err.contains("leave `name` out"), "{long}: {err}");
        }
    }

    #[test]
    fn a_config_reads_each_choice_and_defaults_to_the_first() {
        let read = |tokens: &str| {
            let config = config(syn::parse_str::<Args>(tokens).unwrap()).unwrap();
            let choices = (config.key_required, config.wait, config.two_commits);
            (config.scope, choices, config.ttl_secs)
        };
        assert_eq!(
            read(r#"scope = "org""#),
            ("org".to_owned(), (false, false, false), 86_400)
        );
        let all =
            r#"scope = "user", ttl = "15m", key = "required", in_flight = "wait", commits = "two""#;
        assert_eq!(read(all), ("user".to_owned(), (true, true, true), 900));
        let firsts = r#"scope = "org", key = "optional", in_flight = "reject", commits = "one""#;
        assert_eq!(read(firsts).1, (false, false, false));
    }

    #[test]
    fn choices() {
        let options = ["reject", "wait"];
        assert_eq!(choice(None, "in_flight", options).unwrap(), 0);
        assert_eq!(choice(Some(&arg("wait")), "in_flight", options).unwrap(), 1);
        let err = |v| {
            choice(Some(&arg(v)), "in_flight", options)
                .unwrap_err()
                .to_string()
        };
        assert!(err("Wait").contains("did you mean \"wait\"?"));
        assert!(err("rejcet").contains("did you mean \"reject\"?"));
        assert!(err("queue").ends_with("expected \"reject\" (the default) or \"wait\""));
    }

    #[test]
    fn functions() {
        assert!(check("async fn f(a: A, b: Json<B>) {}").is_ok());
        assert!(fn_err("fn f() {}").ends_with("write `async fn f`"));
        assert!(fn_err("const async fn f() {}").contains("cannot be `const`"));
        assert!(fn_err("async unsafe fn f() {}").contains("cannot be `unsafe`"));
        assert!(fn_err("async fn f(&self) {}").contains("cannot take `self`"));
        assert!(fn_err("async fn f<T>() {}").contains("generic over `T`"));
        assert!(fn_err("async fn f<'a>() {}").contains("lifetime parameters"));
        assert!(fn_err("async fn f<const N: u8>() {}").contains("per value of `N`"));
        assert!(fn_err("async fn f() where u8: Copy {}").contains("`where` clause"));
        assert!(fn_err("async fn f(a: impl X) {}").contains("cannot be `impl Trait`"));
        assert!(fn_err("async fn f(a: Option<impl X>) {}").contains("contain `impl Trait`"));
        assert!(fn_err("async fn f(a: &str) {}").contains("cannot be references"));
        assert!(fn_err("async fn f(a: Option<&str>) {}").contains("contain references"));
        assert!(fn_err("async fn f(a: Cow<'_, str>) {}").contains("cannot borrow"));
        assert!(check("async fn f(a: Cow<'static, str>) {}").is_ok());
        let many = (0..17).map(|i| format!("a{i}: A")).collect::<Vec<_>>();
        let many = format!("async fn f({}) {{}}", many.join(", "));
        assert!(fn_err(&many).contains("at most 16 extractors"));
    }
}
