//! The shared operators' statements on MySQL, whose parameters are positional (`?`): each `$n`
//! of a statement becomes a `?`, and its arguments are bound in the order the `?`s appear, a
//! value bound as many times as its `$n` occurs. Nothing of a value is ever written into the
//! text.

use sqlx::Arguments;
use sqlx::mysql::MySqlArguments;

use idem_core::error::StoreError;

/// A statement with `?` parameters and, for each, the `$n` it stood for (from 1).
#[derive(Debug)]
pub(super) struct Positional {
    pub(super) sql: String,
    order: Vec<usize>,
}

/// One argument of a statement, whatever its type.
#[derive(Clone, Copy, Debug)]
pub(super) enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<&'a str>),
    Bytes(&'a [u8]),
}

impl Positional {
    /// `sql` with each `$n` replaced by `?`. The templates hold no `$` but their parameters'.
    pub(super) fn new(sql: &str) -> Self {
        let mut out = String::with_capacity(sql.len());
        let mut order = Vec::new();
        let mut rest = sql;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let digits = rest[at + 1..]
                .bytes()
                .take_while(u8::is_ascii_digit)
                .count();
            let number = &rest[at + 1..at + 1 + digits];
            match number.parse::<usize>() {
                Ok(n) if n > 0 => {
                    order.push(n);
                    out.push('?');
                }
                _ => out.push('$'),
            }
            rest = &rest[at + 1 + digits..];
        }
        out.push_str(rest);
        Self { sql: out, order }
    }

    /// The arguments `args` (`$1` first) in the order of the statement's `?`s.
    pub(super) fn arguments(&self, args: &[Arg<'_>]) -> Result<MySqlArguments, StoreError> {
        let mut bound = MySqlArguments::default();
        for &n in &self.order {
            let arg = args.get(n - 1).copied().ok_or_else(|| {
                StoreError::Config(format!("statement parameter ${n} has no argument").into())
            })?;
            match arg {
                Arg::Int(value) => bound.add(value),
                Arg::Text(value) => bound.add(value),
                Arg::Bytes(value) => bound.add(value),
            }
            .map_err(StoreError::Unavailable)?;
        }
        Ok(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_numbered_parameter_becomes_a_question_mark_in_order() {
        let p = Positional::new("a = $2 OR ($2 IS NULL AND b = $10) LIMIT $1");
        assert_eq!(p.sql, "a = ? OR (? IS NULL AND b = ?) LIMIT ?");
        assert_eq!(p.order, [2, 2, 10, 1]);
        assert_eq!(Positional::new("no parameters").order, Vec::<usize>::new());
        let args = [Arg::Int(Some(1)), Arg::Text(None)];
        assert!(Positional::new("$3").arguments(&args).is_err());
        assert!(Positional::new("$1 $2 $2").arguments(&args).is_ok());
    }
}
