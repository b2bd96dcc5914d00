//! Parsing `#[idempotent(...)]` arguments into a typed [`Args`], keeping each keyword's span.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

mod kw {
    syn::custom_keyword!(scope);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(key);
    syn::custom_keyword!(in_flight);
}

/// The argument names, in the order the docs list them.
pub(crate) const NAMES: [&str; 4] = ["scope", "ttl", "key", "in_flight"];

/// One `name = "value"` argument.
pub(crate) struct Arg {
    pub(crate) value: LitStr,
}

/// Every argument, each at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) scope: Option<Arg>,
    pub(crate) ttl: Option<Arg>,
    pub(crate) key: Option<Arg>,
    pub(crate) in_flight: Option<Arg>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::scope) {
                set(
                    &mut args.scope,
                    input.parse::<kw::scope>()?.span,
                    "scope",
                    "org",
                    input,
                )?;
            } else if lookahead.peek(kw::ttl) {
                set(
                    &mut args.ttl,
                    input.parse::<kw::ttl>()?.span,
                    "ttl",
                    "24h",
                    input,
                )?;
            } else if lookahead.peek(kw::key) {
                set(
                    &mut args.key,
                    input.parse::<kw::key>()?.span,
                    "key",
                    "required",
                    input,
                )?;
            } else if lookahead.peek(kw::in_flight) {
                let span = input.parse::<kw::in_flight>()?.span;
                set(&mut args.in_flight, span, "in_flight", "wait", input)?;
            } else if input.peek(Ident) {
                return Err(unknown(&input.parse::<Ident>()?));
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

/// Parses `= "value"` after `name` and stores it, refusing a second occurrence. One helper for
/// every argument, so the checks cannot drift apart.
fn set(
    slot: &mut Option<Arg>,
    name_span: Span,
    name: &str,
    example: &str,
    input: ParseStream<'_>,
) -> syn::Result<()> {
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(
            name_span,
            format!("expected `=` after `{name}`: write `{name} = \"{example}\"`"),
        ));
    }
    input.parse::<Token![=]>()?;
    let value = match input.parse::<Expr>()? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => s,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                format!("`{name}` takes a string literal: write `{name} = \"{example}\"`"),
            ));
        }
    };
    if slot.is_some() {
        return Err(syn::Error::new(
            name_span,
            format!("`{name}` specified more than once in `#[idempotent]`"),
        ));
    }
    *slot = Some(Arg { value });
    Ok(())
}

fn unknown(ident: &Ident) -> syn::Error {
    let given = ident.to_string();
    let expected = "expected one of `scope`, `ttl`, `key`, `in_flight`";
    let message = match NAMES.iter().find(|name| edit_distance(name, &given) <= 2) {
        Some(close) => {
            format!("unknown argument `{given}` in `#[idempotent]`; did you mean `{close}`?")
        }
        None => format!("unknown argument `{given}` in `#[idempotent]`; {expected}"),
    };
    syn::Error::new_spanned(ident, message)
}

/// Levenshtein distance, for "did you mean" suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
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

    #[test]
    fn parses_every_argument() {
        let args =
            parse(r#"scope = "org", ttl = "15m", key = "required", in_flight = "wait","#).unwrap();
        assert_eq!(args.scope.unwrap().value.value(), "org");
        assert_eq!(args.ttl.unwrap().value.value(), "15m");
        assert_eq!(args.key.unwrap().value.value(), "required");
        assert_eq!(args.in_flight.unwrap().value.value(), "wait");
    }

    #[test]
    fn rejects_duplicates_unknowns_and_non_strings() {
        let err = |s| parse(s).err().unwrap().to_string();
        assert_eq!(
            err(r#"ttl = "1h", ttl = "2h""#),
            "`ttl` specified more than once in `#[idempotent]`"
        );
        assert!(err(r#"scpoe = "org""#).contains("did you mean `scope`?"));
        assert!(err(r#"colour = "red""#).contains("expected one of"));
        assert!(err("ttl = 24").contains("`ttl` takes a string literal"));
        assert!(err("scope").contains("expected `=` after `scope`"));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("scope", "scope"), 0);
        assert_eq!(edit_distance("scope", "scpoe"), 2);
        assert_eq!(edit_distance("ttl", "tl"), 1);
        assert_eq!(edit_distance("key", "colour"), 6);
    }
}
