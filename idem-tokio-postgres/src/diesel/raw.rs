//! The store's own statements on a diesel-async connection, as diesel prepares and caches them:
//! its `sql_query` is never cached (a Parse and a round trip of its own each time), but a query
//! fragment made of SQL text and bound parameters is, by its text, once per connection.

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bytea, Nullable, SmallInt, Text};

/// A parameter of one of the store's statements.
#[derive(Debug, Clone, Copy)]
pub(super) enum Param<'a> {
    Bytes(&'a [u8]),
    Int(i64),
    Text(&'a str),
    Status(Option<i16>),
}

/// A statement whose text holds `$1`..`$n`, each once, and its parameters, `params[i]` for
/// `$(i + 1)`: run with diesel-async's `execute`, prepared once per connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Raw<'a> {
    pub(super) sql: &'a str,
    pub(super) params: &'a [Param<'a>],
}

impl QueryId for Raw<'_> {
    type QueryId = ();
    // Not a type of its own per statement: diesel then caches it by its text.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl QueryFragment<Pg> for Raw<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let mut rest = self.sql;
        while let Some(at) = rest.find('$') {
            out.push_sql(&rest[..at]);
            let digits = rest[at + 1..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len() - at - 1, |n| n);
            let index: usize = rest[at + 1..at + 1 + digits].parse().map_err(|_| {
                diesel::result::Error::QueryBuilderError(
                    "a `$` without a parameter's number".into(),
                )
            })?;
            match self.params.get(index - 1) {
                Some(Param::Bytes(v)) => out.push_bind_param::<Bytea, _>(v)?,
                Some(Param::Int(v)) => out.push_bind_param::<BigInt, _>(v)?,
                Some(Param::Text(v)) => out.push_bind_param::<Text, _>(v)?,
                Some(Param::Status(v)) => out.push_bind_param::<Nullable<SmallInt>, _>(v)?,
                None => {
                    return Err(diesel::result::Error::QueryBuilderError(
                        format!("no parameter ${index}").into(),
                    ));
                }
            }
            rest = &rest[at + 1 + digits..];
        }
        out.push_sql(rest);
        Ok(())
    }
}
