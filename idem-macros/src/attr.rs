//! Parsing `#[idempotent(...)]` arguments into a typed [`Args`], keeping each keyword's span.

use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token, Type};

mod kw {
    syn::custom_keyword!(scope);
    syn::custom_keyword!(name);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(key);
    syn::custom_keyword!(in_flight);
    syn::custom_keyword!(commits);
    syn::custom_keyword!(state);
    syn::custom_keyword!(key_field);
    syn::custom_keyword!(key_metadata);
}

/// The argument names, in the order the docs list them, each with an example value.
pub(crate) const NAMES: [(&str, &str); 9] = [
    ("scope", "org"),
    ("name", "charges.create"),
    ("ttl", "24h"),
    ("key", "required"),
    ("in_flight", "wait"),
    ("commits", "two"),
    ("state", "AppState"),
    ("key_field", "request_id"),
    ("key_metadata", "idempotency-key"),
];

/// One `name = "value"` argument.
pub(crate) struct Arg {
    pub(crate) value: LitStr,
}

/// Every argument, each at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) scope: Option<Arg>,
    pub(crate) name: Option<Arg>,
    pub(crate) ttl: Option<Arg>,
    pub(crate) key: Option<Arg>,
    pub(crate) in_flight: Option<Arg>,
    pub(crate) commits: Option<Arg>,
    /// `state = AppState`: the router state, a type rather than a string.
    pub(crate) state: Option<Type>,
    /// `key_field = "request_id"`: a tonic method's request field holding the key.
    pub(crate) key_field: Option<Arg>,
    /// `key_metadata = "idempotency-key"`: a tonic method's metadata entry holding the key.
    pub(crate) key_metadata: Option<Arg>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            // The keyword is consumed: errors about it use its own span, never `input.error()`,
            // which would point at the next token.
            let (slot, keyword) = if lookahead.peek(kw::scope) {
                let span = input.parse::<kw::scope>()?.span;
                (&mut args.scope, Ident::new("scope", span))
            } else if lookahead.peek(kw::name) {
                let span = input.parse::<kw::name>()?.span;
                (&mut args.name, Ident::new("name", span))
            } else if lookahead.peek(kw::ttl) {
                let span = input.parse::<kw::ttl>()?.span;
                (&mut args.ttl, Ident::new("ttl", span))
            } else if lookahead.peek(kw::key_field) {
                let span = input.parse::<kw::key_field>()?.span;
                (&mut args.key_field, Ident::new("key_field", span))
            } else if lookahead.peek(kw::key_metadata) {
                let span = input.parse::<kw::key_metadata>()?.span;
                (&mut args.key_metadata, Ident::new("key_metadata", span))
            } else if lookahead.peek(kw::key) {
                let span = input.parse::<kw::key>()?.span;
                (&mut args.key, Ident::new("key", span))
            } else if lookahead.peek(kw::in_flight) {
                let span = input.parse::<kw::in_flight>()?.span;
                (&mut args.in_flight, Ident::new("in_flight", span))
            } else if lookahead.peek(kw::commits) {
                let span = input.parse::<kw::commits>()?.span;
                (&mut args.commits, Ident::new("commits", span))
            } else if lookahead.peek(kw::state) {
                let keyword = Ident::new("state", input.parse::<kw::state>()?.span);
                args.state = Some(state(&keyword, args.state.is_some(), input)?);
                if !next(input)? {
                    break;
                }
                continue;
            } else if input.peek(Ident::peek_any) {
                return Err(unknown(&input.call(Ident::parse_any)?));
            } else {
                return Err(not_an_argument(input));
            };
            set(slot, &keyword, input)?;
            if !next(input)? {
                break;
            }
        }
        Ok(args)
    }
}

/// After an argument: `,` and whether another may follow, or the end.
fn next(input: ParseStream<'_>) -> syn::Result<bool> {
    if input.is_empty() {
        return Ok(false);
    }
    if !input.peek(Token![,]) {
        return Err(syn::Error::new(
            input.span(),
            "expected `,` between `#[idempotent]` arguments",
        ));
    }
    input.parse::<Token![,]>()?;
    Ok(true)
}

/// Parses `= Type` after `state` (already consumed).
fn state(keyword: &Ident, seen: bool, input: ParseStream<'_>) -> syn::Result<Type> {
    if seen {
        return Err(syn::Error::new_spanned(
            keyword,
            "`state` is specified more than once in `#[idempotent]`: remove one of them",
        ));
    }
    if !input.peek(Token![=]) {
        return Err(syn::Error::new_spanned(
            keyword,
            "expected `=` after `state` in `#[idempotent]`: write `state = AppState`, the type \
             of the router's state",
        ));
    }
    let eq = input.parse::<Token![=]>()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(syn::Error::new_spanned(
            quote!(#keyword #eq),
            "`state` in `#[idempotent]` needs a type: write `state = AppState`, the type of the \
             router's state",
        ));
    }
    if let Ok(lit) = input.parse::<LitStr>() {
        let written = lit.value();
        let written = if syn::parse_str::<Type>(&written).is_ok() {
            written
        } else {
            "AppState".to_owned()
        };
        return Err(syn::Error::new_spanned(
            lit,
            format!(
                "`state` in `#[idempotent]` takes a type, not a string: write `state = {written}`"
            ),
        ));
    }
    input.parse::<Type>()
}

/// The example value of argument `name`.
fn example(name: &str) -> &'static str {
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("...", |(_, e)| e)
}

/// Parses `= "value"` after the keyword `name` (already consumed) and stores it, refusing a
/// second occurrence. One helper for every argument, so the checks cannot drift apart.
fn set(slot: &mut Option<Arg>, keyword: &Ident, input: ParseStream<'_>) -> syn::Result<()> {
    let name = keyword.to_string();
    let name = name.as_str();
    let example = example(name);
    if slot.is_some() {
        return Err(syn::Error::new_spanned(
            keyword,
            format!("`{name}` is specified more than once in `#[idempotent]`: remove one of them"),
        ));
    }
    if !input.peek(Token![=]) {
        // `scope "org"`: span the name and the value, and suggest the user's own value.
        let (tokens, value) = match input.fork().parse::<LitStr>() {
            Ok(lit) => (quote!(#keyword #lit), lit.value()),
            Err(_) => (keyword.to_token_stream(), example.to_owned()),
        };
        return Err(syn::Error::new_spanned(
            tokens,
            format!("expected `=` after `{name}` in `#[idempotent]`: write `{name} = \"{value}\"`"),
        ));
    }
    let eq = input.parse::<Token![=]>()?;
    if input.is_empty() || input.peek(Token![,]) {
        return Err(syn::Error::new_spanned(
            quote!(#keyword #eq),
            format!("`{name}` in `#[idempotent]` needs a value: write `{name} = \"{example}\"`"),
        ));
    }
    let value = match input.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s,
        other => return Err(not_a_string(name, &other)),
    };
    *slot = Some(Arg { value });
    Ok(())
}

/// `ttl = 24h`, `scope = org`: suggest the quoted form of what was written.
fn not_a_string(name: &str, value: &Expr) -> syn::Error {
    let written = value.to_token_stream().to_string();
    let suggestion = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) if name == "ttl" && int.suffix().is_empty() => {
            let n = int.base10_digits();
            format!(
                "`ttl` in `#[idempotent]` takes a string with a unit: write `ttl = \"{n}s\"`, \
                 `\"{n}m\"`, `\"{n}h\"` or `\"{n}d\"`"
            )
        }
        Expr::Lit(_) | Expr::Path(_) if !written.contains(char::is_whitespace) => {
            let written = written.trim_matches('"');
            format!(
                "`{name}` in `#[idempotent]` takes a string literal: write `{name} = \"{written}\"`"
            )
        }
        _ => format!(
            "`{name}` in `#[idempotent]` takes a string literal, such as `{name} = \"{}\"`",
            example(name)
        ),
    };
    syn::Error::new_spanned(value, suggestion)
}

/// `#[idempotent("org")]`, `#[idempotent(= "org")]`: anything but a name where one is expected.
fn not_an_argument(input: ParseStream<'_>) -> syn::Error {
    if let Ok(lit) = input.fork().parse::<LitStr>() {
        // Guess which argument the value belongs to.
        let name = match lit.value().as_str() {
            "optional" | "required" => "key",
            "reject" | "wait" => "in_flight",
            "one" | "two" => "commits",
            _ if crate::ttl::ttl(&lit).is_ok() => "ttl",
            _ => "scope",
        };
        return syn::Error::new_spanned(
            &lit,
            format!(
                "`#[idempotent]` arguments are named: write `{name} = {}`",
                lit.to_token_stream()
            ),
        );
    }
    syn::Error::new(
        input.span(),
        "expected an argument of `#[idempotent]`: `scope`, `name`, `ttl`, `key`, `in_flight`, \
         `commits` or `state`, as in `#[idempotent(scope = \"org\", ttl = \"24h\")]`",
    )
}

fn unknown(ident: &Ident) -> syn::Error {
    let given = ident.unraw().to_string();
    let close = NAMES
        .iter()
        .map(|(name, _)| (edit_distance(name, &given), name))
        .filter(|(distance, name)| *distance <= 2.max(name.len() / 3))
        .min_by_key(|(distance, _)| *distance);
    let message = match close {
        Some((_, name)) => {
            format!("unknown argument `{given}` in `#[idempotent]`: did you mean `{name}`?")
        }
        None => format!(
            "unknown argument `{given}` in `#[idempotent]`: expected `scope`, `name`, `ttl`, \
             `key`, `in_flight`, `commits` or `state`"
        ),
    };
    syn::Error::new_spanned(ident, message)
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(tokens: &str) -> syn::Result<Args> {
        syn::parse_str::<Args>(tokens)
    }

    fn err(tokens: &str) -> String {
        parse(tokens).err().unwrap().to_string()
    }

    #[test]
    fn parses_every_argument() {
        let args =
            parse(r#"scope = "org", name = "orders.create", ttl = "15m", key = "required", in_flight = "wait","#).unwrap();
        assert_eq!(args.scope.unwrap().value.value(), "org");
        assert_eq!(args.name.unwrap().value.value(), "orders.create");
        assert_eq!(args.ttl.unwrap().value.value(), "15m");
        assert_eq!(args.key.unwrap().value.value(), "required");
        assert_eq!(args.in_flight.unwrap().value.value(), "wait");
        assert!(parse("").unwrap().scope.is_none());
    }

    #[test]
    fn rejects_duplicates_and_unknowns() {
        assert_eq!(
            err(r#"ttl = "1h", ttl = "2h""#),
            "`ttl` is specified more than once in `#[idempotent]`: remove one of them"
        );
        assert!(err(r#"scpoe = "org""#).contains("did you mean `scope`?"));
        assert!(err(r#"inflight = "wait""#).contains("did you mean `in_flight`?"));
        assert!(
            err(r#"colour = "red""#).contains(
                "expected `scope`, `name`, `ttl`, `key`, `in_flight`, `commits` or `state`"
            )
        );
        assert!(err(r#"commit = "two""#).contains("did you mean `commits`?"));
        assert!(err(r#""two""#).ends_with("write `commits = \"two\"`"));
        assert!(err(r#"type = "x""#).starts_with("unknown argument `type`"));
        assert!(err(r#""org""#).contains("are named: write `scope = \"org\"`"));
        assert!(err(r#"scope = "org", "7d""#).ends_with("write `ttl = \"7d\"`"));
        assert!(err(r#"scope = "org", "wait""#).ends_with("write `in_flight = \"wait\"`"));
        assert!(err(r#"= "org""#).starts_with("expected an argument of `#[idempotent]`"));
    }

    #[test]
    fn rejects_malformed_values_with_a_suggestion() {
        assert!(err("ttl = 24h").ends_with("write `ttl = \"24h\"`"));
        assert!(err("ttl = 30").contains("write `ttl = \"30s\"`"));
        assert!(err("scope = org").ends_with("write `scope = \"org\"`"));
        assert!(err("ttl = Duration::from_secs(1)").ends_with("such as `ttl = \"24h\"`"));
        assert!(err(r#"scope "team""#).ends_with("write `scope = \"team\"`"));
        assert!(err("scope").contains("expected `=` after `scope`"));
        assert!(err("ttl =").contains("`ttl` in `#[idempotent]` needs a value"));
        assert!(err(r#"scope = "org" ttl = "1h""#).starts_with("expected `,` between"));
        // A path with `::` is not a word to quote: an example instead.
        assert!(err("scope = crate::ORG").ends_with("such as `scope = \"org\"`"));
    }

    #[test]
    fn an_unnamed_value_is_given_the_name_it_belongs_to() {
        for (value, name) in [
            ("required", "key"),
            ("optional", "key"),
            ("reject", "in_flight"),
            ("two", "commits"),
            ("15m", "ttl"),
            ("org", "scope"),
        ] {
            let err = err(&format!(r#""{value}""#));
            let fix = format!("write `{name} = \"{value}\"`");
            assert!(err.ends_with(&fix), "{value}: {err}");
        }
    }

    #[test]
    fn a_long_names_suggestion_allows_more_edits() {
        // Three edits from `in_flight`: within a third of its nine letters.
        assert!(err(r#"flight = "wait""#).ends_with("did you mean `in_flight`?"));
        assert!(err(r#"zzzzz = "wait""#).ends_with("`commits` or `state`"));
    }

    #[test]
    fn state_takes_a_type() {
        let args = parse(r#"scope = "org", state = crate::AppState<u8>, ttl = "1h""#).unwrap();
        assert_eq!(
            args.state.unwrap().to_token_stream().to_string(),
            "crate :: AppState < u8 >"
        );
        assert_eq!(args.ttl.unwrap().value.value(), "1h");
        assert!(parse("state = AppState,").unwrap().state.is_some());
        assert!(err(r#"state = "AppState""#).ends_with("not a string: write `state = AppState`"));
        assert!(err(r#"state = "not a type!""#).ends_with("write `state = AppState`"));
        assert!(err("state = A, state = B").contains("`state` is specified more than once"));
        assert!(err("state AppState").starts_with("expected `=` after `state`"));
        assert!(err("state =").contains("needs a type"));
        assert!(err("stat = A").ends_with("did you mean `state`?"));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("scope", "scope"), 0);
        assert_eq!(edit_distance("scope", "scpoe"), 2);
        assert_eq!(edit_distance("ttl", "tl"), 1);
        assert_eq!(edit_distance("key", "colour"), 6);
    }
}
