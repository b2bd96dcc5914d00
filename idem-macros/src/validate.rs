//! Checking parsed arguments and the annotated function; every error points at the offending
//! token and says how to fix it.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, LitStr};

use crate::attr::{Arg, Args};

/// axum implements `Handler` for up to 16 extractors; so do we.
pub(crate) const MAX_EXTRACTORS: usize = 16;
const MIN_TTL_SECS: u64 = 1;
const MAX_TTL_SECS: u64 = 30 * 24 * 60 * 60;
const DEFAULT_TTL_SECS: u64 = 24 * 60 * 60;

/// The validated configuration of one endpoint.
pub(crate) struct Config {
    pub(crate) scope: String,
    pub(crate) ttl_secs: u64,
    pub(crate) key_required: bool,
    pub(crate) wait: bool,
}

pub(crate) fn config(args: Args) -> syn::Result<Config> {
    let Some(scope) = args.scope else {
        return Err(syn::Error::new(
            Span::call_site(),
            "`#[idempotent]` needs a scope: add `scope = \"global\"`, or the name of a scope \
             registered on the engine such as `scope = \"org\"`",
        ));
    };
    Ok(Config {
        scope: scope_name(&scope)?,
        ttl_secs: args
            .ttl
            .as_ref()
            .map_or(Ok(DEFAULT_TTL_SECS), |arg| ttl(&arg.value))?,
        key_required: choice(args.key.as_ref(), "key", ["optional", "required"])? == 1,
        wait: choice(args.in_flight.as_ref(), "in_flight", ["reject", "wait"])? == 1,
    })
}

fn scope_name(arg: &Arg) -> syn::Result<String> {
    let name = arg.value.value();
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(name)
    } else {
        Err(syn::Error::new_spanned(
            &arg.value,
            "invalid scope name: use 1 to 64 ASCII letters, digits, `_`, `-` or `.`, \
             e.g. `scope = \"org\"` or `scope = \"global\"`",
        ))
    }
}

/// Parses `"30s"`, `"15m"`, `"24h"`, `"7d"` into seconds within 1 s ..= 30 d.
pub(crate) fn ttl(lit: &LitStr) -> syn::Result<u64> {
    let text = lit.value();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_secs = match unit {
        "s" => Some(1),
        "m" => Some(60),
        "h" => Some(60 * 60),
        "d" => Some(24 * 60 * 60),
        _ => None,
    };
    let secs = match unit_secs {
        Some(unit) if !digits.is_empty() => digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .unwrap_or(u64::MAX),
        _ => {
            return Err(syn::Error::new_spanned(
                lit,
                format!(
                    "invalid ttl \"{text}\": write a whole number and a unit s, m, h or d, \
                     e.g. \"30s\", \"15m\", \"24h\" or \"7d\""
                ),
            ));
        }
    };
    if !(MIN_TTL_SECS..=MAX_TTL_SECS).contains(&secs) {
        return Err(syn::Error::new_spanned(
            lit,
            format!("ttl \"{text}\" is out of range: it must be between \"1s\" and \"30d\""),
        ));
    }
    Ok(secs)
}

/// The index of `arg`'s value among `options` (0, the default, when absent).
fn choice(arg: Option<&Arg>, name: &str, options: [&str; 2]) -> syn::Result<usize> {
    let Some(arg) = arg else { return Ok(0) };
    let value = arg.value.value();
    options.iter().position(|o| *o == value).ok_or_else(|| {
        syn::Error::new_spanned(
            &arg.value,
            format!(
                "invalid `{name}` value \"{value}\": expected \"{}\" (the default) or \"{}\"",
                options[0], options[1]
            ),
        )
    })
}

/// Checks that `item` can be an axum handler under `#[idempotent]`.
pub(crate) fn function(item: &ItemFn) -> syn::Result<()> {
    let sig = &item.sig;
    if let Some(constness) = &sig.constness {
        return Err(syn::Error::new_spanned(
            constness,
            "`#[idempotent]` handlers cannot be `const`",
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        return Err(syn::Error::new_spanned(
            unsafety,
            "`#[idempotent]` handlers cannot be `unsafe`",
        ));
    }
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "`#[idempotent]` requires an `async fn`: axum handlers are async, write `async fn`",
        ));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new_spanned(
            abi,
            "`#[idempotent]` handlers cannot have an `extern` ABI",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "`#[idempotent]` handlers cannot be generic: the endpoint's identity and extractors \
             are fixed at compile time; write one handler per concrete type",
        ));
    }
    if let Some(variadic) = &sig.variadic {
        return Err(syn::Error::new_spanned(
            variadic,
            "`#[idempotent]` handlers cannot be variadic",
        ));
    }
    for input in &sig.inputs {
        if let FnArg::Receiver(receiver) = input {
            return Err(syn::Error::new_spanned(
                receiver,
                "`#[idempotent]` handlers cannot take `self`: make it a free function and pass \
                 shared data through `State`",
            ));
        }
    }
    if let Some(extra) = sig.inputs.iter().nth(MAX_EXTRACTORS) {
        return Err(syn::Error::new_spanned(
            extra,
            format!(
                "`#[idempotent]` handlers take at most {MAX_EXTRACTORS} extractors, as axum \
                 handlers do: group some into a struct that implements `FromRequestParts`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ttl_of(s: &str) -> Result<u64, String> {
        ttl(&LitStr::new(s, Span::call_site())).map_err(|e| e.to_string())
    }

    #[test]
    fn ttl_units() {
        assert_eq!(ttl_of("30s"), Ok(30));
        assert_eq!(ttl_of("15m"), Ok(900));
        assert_eq!(ttl_of("24h"), Ok(86_400));
        assert_eq!(ttl_of("7d"), Ok(604_800));
        assert_eq!(ttl_of("1s"), Ok(1));
        assert_eq!(ttl_of("30d"), Ok(MAX_TTL_SECS));
        assert_eq!(ttl_of("720h"), Ok(MAX_TTL_SECS));
    }

    #[test]
    fn ttl_errors() {
        for bad in ["", "h", "24", "24 h", "1.5h", "24hours", "-1h", "1w"] {
            assert!(ttl_of(bad).unwrap_err().starts_with("invalid ttl"), "{bad}");
        }
        for out in ["0s", "31d", "721h", "99999999999999999999d"] {
            assert!(ttl_of(out).unwrap_err().contains("out of range"), "{out}");
        }
    }
}
