//! The annotated item, read once into a typed [`Handler`] that validation and expansion share.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident};
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, Item, ItemFn, Pat, PathArguments, Receiver, Type,
    Visibility,
};

/// An `async fn` under `#[idempotent]`, before validation.
pub(crate) struct Handler {
    /// The function as written: the source of the signature checks, and re-emitted unchanged
    /// beside any error.
    pub(crate) item: ItemFn,
    pub(crate) name: Ident,
    pub(crate) vis: Visibility,
    pub(crate) attrs: Attrs,
    /// `self`, which a handler cannot take.
    pub(crate) receiver: Option<Receiver>,
    /// The arguments, in order; each is an extractor.
    pub(crate) params: Vec<Param>,
}

/// The function's attributes, by where the expansion puts them.
pub(crate) struct Attrs {
    /// `///` docs: they describe the endpoint, so they go on the struct.
    pub(crate) docs: Vec<Attribute>,
    /// `#[cfg]` and `#[cfg_attr]`: they apply to everything generated.
    pub(crate) cfgs: Vec<Attribute>,
    /// Anything else (`#[tracing::instrument]`, `#[allow]`, ...): on the function that runs.
    pub(crate) others: Vec<Attribute>,
}

/// One argument of the handler.
pub(crate) struct Param {
    /// The pattern as written (`Json(body)`), for errors about the whole argument.
    pub(crate) pat: Pat,
    /// The type as written.
    pub(crate) ty: Type,
    /// The position among the arguments, from 0.
    pub(crate) index: usize,
    pub(crate) role: Role,
    /// `X` when the type is written `State<X>` (any path ending in `State`). The wording of the
    /// error when the router state does not provide `X` depends on it, and the router state may
    /// be inferred from it ([`KnownState::Inferred`]); the bound is the same as for any other
    /// extractor, and an inferred state only adds checks where it provides the engine, so a
    /// misread type cannot change what compiles in a program that is otherwise correct.
    pub(crate) state: Option<Type>,
}

/// The router state, as far as it is known where the handler is written.
#[derive(Clone, Copy)]
pub(crate) enum KnownState<'a> {
    /// `state = S`.
    Declared(&'a Type),
    /// `S` from the handler's `State<S>` arguments, all of one type. It may be only a part of
    /// the router state (`S: FromRef<AppState>`): the checks apply only if `S` provides the
    /// engine, as a router state must.
    Inferred(&'a Type),
    /// Neither: no `State<S>` argument, or several types (parts of a router state that cannot
    /// be named from them). Everything is checked where the handler is routed.
    Unknown,
}

/// How an argument is extracted: axum's `FromRequestParts` versus `FromRequest` distinction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Before the last: reads the request head (`FromRequestParts`); the body is still unread.
    Head,
    /// The last: may consume the body (`FromRequest`).
    Last,
}

impl Handler {
    /// Reads the annotated item, which must be a function.
    pub(crate) fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let item = match syn::parse2::<Item>(tokens.clone()) {
            Ok(Item::Fn(function)) => return Ok(Self::from_fn(function)),
            Ok(item) => item,
            Err(_) => Item::Verbatim(tokens),
        };
        let (what, at) = match (&item, describe(&item)) {
            (_, Some(found)) => found,
            (Item::Verbatim(tokens), None) if has_fn_token(tokens) => {
                return Err(syn::Error::new_spanned(
                    tokens,
                    "`#[idempotent]` needs the handler's body: write `async fn name(..) { .. }`",
                ));
            }
            (_, None) => ("this item", first_token(&item.to_token_stream())),
        };
        Err(syn::Error::new_spanned(
            at,
            format!("`#[idempotent]` goes on an `async fn` axum handler, not on {what}"),
        ))
    }

    /// Reads a function. Nothing is rejected here: that is [`crate::validate`]'s job.
    pub(crate) fn from_fn(item: ItemFn) -> Self {
        let mut receiver = None;
        let mut types = Vec::new();
        for input in &item.sig.inputs {
            match input {
                FnArg::Receiver(r) => receiver = receiver.or_else(|| Some(r.clone())),
                FnArg::Typed(arg) => types.push(((*arg.pat).clone(), (*arg.ty).clone())),
            }
        }
        let count = types.len();
        let params = types
            .into_iter()
            .enumerate()
            .map(|(index, (pat, ty))| Param {
                state: state_inner(&ty),
                role: if index + 1 == count {
                    Role::Last
                } else {
                    Role::Head
                },
                index,
                pat,
                ty,
            })
            .collect();
        Self {
            name: item.sig.ident.clone(),
            vis: item.vis.clone(),
            attrs: Attrs::split(&item.attrs),
            receiver,
            params,
            item,
        }
    }

    /// The router state: `declared`, else inferred from the `State<S>` arguments.
    pub(crate) fn known_state<'a>(&'a self, declared: Option<&'a Type>) -> KnownState<'a> {
        if let Some(state) = declared {
            return KnownState::Declared(state);
        }
        let mut states = self.params.iter().filter_map(|param| param.state.as_ref());
        let Some(first) = states.next() else {
            return KnownState::Unknown;
        };
        let spelled = |ty: &Type| ty.to_token_stream().to_string();
        if states.all(|other| spelled(other) == spelled(first)) {
            KnownState::Inferred(first)
        } else {
            KnownState::Unknown
        }
    }

    /// The function that runs: the user's, private, with only the attributes that belong on it.
    pub(crate) fn body_fn(&self) -> ItemFn {
        ItemFn {
            attrs: self.attrs.others.clone(),
            vis: Visibility::Inherited,
            sig: self.item.sig.clone(),
            block: self.item.block.clone(),
        }
    }
}

impl Attrs {
    fn split(attrs: &[Attribute]) -> Self {
        let mut split = Self {
            docs: Vec::new(),
            cfgs: Vec::new(),
            others: Vec::new(),
        };
        for attr in attrs {
            let path = attr.path();
            let list = if path.is_ident("doc") {
                &mut split.docs
            } else if path.is_ident("cfg") || path.is_ident("cfg_attr") {
                &mut split.cfgs
            } else {
                &mut split.others
            };
            list.push(attr.clone());
        }
        split
    }
}

impl Param {
    /// The local holding the argument's value in the generated code.
    pub(crate) fn local(&self) -> Ident {
        format_ident!("__idem_arg{}", self.index)
    }

    /// Where errors about the argument point: its type (the first token of it, on stable Rust).
    pub(crate) fn span(&self) -> Span {
        self.ty.span()
    }
}

/// `X` in `State<X>`, `axum::extract::State<X>`.
fn state_inner(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [GenericArgument::Type(inner)] if last.ident == "State" => Some(inner.clone()),
        _ => None,
    }
}

/// What the item is, for the error when it is not a function, and where to point.
fn describe(item: &Item) -> Option<(&'static str, TokenStream)> {
    fn pair(a: &dyn ToTokens, b: &dyn ToTokens) -> TokenStream {
        let mut tokens = a.to_token_stream();
        b.to_tokens(&mut tokens);
        tokens
    }
    Some(match item {
        Item::Struct(i) => ("a struct", pair(&i.struct_token, &i.ident)),
        Item::Enum(i) => ("an enum", pair(&i.enum_token, &i.ident)),
        Item::Union(i) => ("a union", pair(&i.union_token, &i.ident)),
        Item::Trait(i) => ("a trait", pair(&i.trait_token, &i.ident)),
        Item::Impl(i) => ("an `impl` block", i.impl_token.to_token_stream()),
        Item::Mod(i) => ("a module", pair(&i.mod_token, &i.ident)),
        Item::Const(i) => ("a constant", pair(&i.const_token, &i.ident)),
        Item::Static(i) => ("a static", pair(&i.static_token, &i.ident)),
        Item::Type(i) => ("a type alias", pair(&i.type_token, &i.ident)),
        Item::Use(i) => ("a `use` declaration", i.use_token.to_token_stream()),
        _ => return None,
    })
}

fn has_fn_token(tokens: &TokenStream) -> bool {
    tokens
        .clone()
        .into_iter()
        .any(|t| matches!(&t, TokenTree::Ident(i) if i == "fn"))
}

fn first_token(tokens: &TokenStream) -> TokenStream {
    tokens.clone().into_iter().take(1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handler(item: &str) -> Handler {
        Handler::from_fn(syn::parse_str(item).unwrap())
    }

    fn roles(h: &Handler) -> Vec<Role> {
        h.params.iter().map(|p| p.role).collect()
    }

    #[test]
    fn reads_parameters_once_with_their_roles() {
        let h =
            handler("async fn f(State(s): State<App>, Path(id): Path<u64>, Json(b): Json<B>) {}");
        assert_eq!(roles(&h), [Role::Head, Role::Head, Role::Last]);
        assert_eq!(h.params[2].local(), "__idem_arg2");
        assert_eq!(h.params[2].index, 2);
        assert!(h.receiver.is_none());
        assert!(roles(&handler("async fn f() {}")).is_empty());
        assert_eq!(roles(&handler("async fn f(a: A) {}")), [Role::Last]);
    }

    #[test]
    fn a_receiver_is_kept_apart_from_the_parameters() {
        let h = handler("async fn f(&self, a: A) {}");
        assert!(h.receiver.is_some());
        assert_eq!(roles(&h), [Role::Last]);
    }

    #[test]
    fn state_arguments_are_recognised_for_the_wording_only() {
        let inner = |ty: &str| {
            state_inner(&syn::parse_str(ty).unwrap()).map(|t| t.to_token_stream().to_string())
        };
        assert_eq!(inner("State<Db>").as_deref(), Some("Db"));
        assert_eq!(
            inner("axum::extract::State<Arc<Db>>").as_deref(),
            Some("Arc < Db >")
        );
        assert_eq!(inner("Stateful<Db>"), None);
        assert_eq!(inner("State"), None);
        assert_eq!(inner("Json<Db>"), None);
    }

    #[test]
    fn the_state_is_declared_or_inferred_from_state_arguments_of_one_type() {
        let known = |item: &str, declared: Option<&str>| {
            let declared = declared.map(|d| syn::parse_str::<Type>(d).unwrap());
            match handler(item).known_state(declared.as_ref()) {
                KnownState::Declared(t) => format!("declared {}", t.to_token_stream()),
                KnownState::Inferred(t) => format!("inferred {}", t.to_token_stream()),
                KnownState::Unknown => "unknown".to_owned(),
            }
        };
        assert_eq!(known("async fn f(a: A) {}", None), "unknown");
        assert_eq!(known("async fn f(a: A) {}", Some("App")), "declared App");
        assert_eq!(
            known("async fn f(s: State<Db>) {}", Some("App")),
            "declared App"
        );
        assert_eq!(
            known("async fn f(s: State<App>, b: B) {}", None),
            "inferred App"
        );
        assert_eq!(
            known(
                "async fn f(s: State<App>, t: axum::extract::State<App>) {}",
                None
            ),
            "inferred App"
        );
        assert_eq!(
            known("async fn f(s: State<Db>, t: State<Mailer>) {}", None),
            "unknown"
        );
    }

    #[test]
    fn attributes_are_split_by_destination() {
        let h = handler(
            "/// Docs.\n#[cfg(all())]\n#[cfg_attr(all(), allow(unused))]\n#[tracing::instrument]\n\
             pub async fn f() {}",
        );
        assert_eq!(h.attrs.docs.len(), 1);
        assert_eq!(h.attrs.cfgs.len(), 2);
        assert_eq!(h.attrs.others.len(), 1);
        let body = h.body_fn();
        assert!(matches!(body.vis, Visibility::Inherited));
        assert_eq!(body.attrs.len(), 1);
        assert!(matches!(h.vis, Visibility::Public(_)));
    }

    #[test]
    fn items_that_are_not_functions() {
        let err = |s: &str| {
            Handler::parse(s.parse().unwrap())
                .err()
                .unwrap()
                .to_string()
        };
        for (item, what) in [
            ("struct A { x: u8 }", "a struct"),
            ("enum E { A }", "an enum"),
            ("union U { a: u8 }", "a union"),
            ("trait T {}", "a trait"),
            ("impl A {}", "an `impl` block"),
            ("mod m {}", "a module"),
            ("const C: u8 = 1;", "a constant"),
            ("static S: u8 = 1;", "a static"),
            ("type T = u8;", "a type alias"),
            ("use std::io;", "a `use` declaration"),
            ("extern crate alloc;", "this item"),
        ] {
            assert!(err(item).ends_with(&format!("not on {what}")), "{item}");
        }
        assert!(err("async fn f();").contains("needs the handler's body"));
        // Not an item at all, and no `fn` in it: not mistaken for a function without a body.
        assert!(err("let x = 1;").ends_with("not on this item"));
        assert!(Handler::parse("async fn f() {}".parse().unwrap()).is_ok());
    }
}
