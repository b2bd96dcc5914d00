//! The command line: global options (the store and how to reach it) and one subcommand.

use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};
use idem_runtime::store::records::RecordState;

/// See, explain and fix idempotency records, on any idem store.
///
/// Exit codes: 0 done, 1 store unreachable (or it failed), 2 bad arguments, 3 refused (a live
/// owner holds the record), 4 no such record.
#[derive(Debug, Parser)]
#[command(name = "idem", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// The store: sqlite://FILE, postgres://..., mysql://USER@HOST/DATABASE (MySQL or MariaDB),
    /// redis://HOST:PORT/DB (port and database
    /// optional), s3://BUCKET/PREFIX (records under PREFIX, default `idem`; the client from the
    /// AWS_* variables), dynamodb://TABLE (the client from the AWS environment: AWS_REGION,
    /// AWS_ENDPOINT_URL, credentials, AWS_PROFILE). Redis Cluster: --cluster, with one or more
    /// node URLs joined by commas.
    #[arg(long, env = "IDEM_STORE_URL", value_name = "URL")]
    pub(crate) store: String,

    /// PostgreSQL: the schema of the records table.
    #[arg(long, default_value = "idem", global = true)]
    pub(crate) schema: String,

    /// PostgreSQL and MySQL: the records table.
    #[arg(long, default_value = "idempotency_records", global = true)]
    pub(crate) table: String,

    /// Redis: what every record's key starts with (default `idem:`).
    #[arg(long, global = true)]
    pub(crate) prefix: Option<String>,

    /// Redis: the URL names nodes of a Redis Cluster.
    #[arg(long, global = true)]
    pub(crate) cluster: bool,

    /// Give up (exit 1) when the store has not answered within this long; more than zero.
    #[arg(long, default_value = "30s", value_parser = timeout, global = true)]
    pub(crate) timeout: Duration,

    /// Print one JSON document instead of a table.
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// One line per record: operation, scope, the key's hash prefix, state, status and times.
    Ls(Ls),
    /// One record, found by its raw key (hashed as the engine does), with its stored response.
    Show(Show),
    /// Delete one record so its next request runs again; refused while its owner runs.
    Forget(Forget),
    /// Delete the completed records of one operation, optionally in a window of completion times.
    Purge(Purge),
    /// Records by operation and state, and the oldest in flight.
    Stats(Stats),
}

/// `ls`'s options.
#[derive(Debug, Args)]
pub(crate) struct Ls {
    /// Only this operation's records (as `ls` prints it: `charges.create`, `POST /v1/charges`).
    #[arg(long, value_name = "OP")]
    pub(crate) operation: Option<String>,
    /// Only records in this state.
    #[arg(long, value_parser = state)]
    pub(crate) state: Option<RecordState>,
    /// Only records of this scope (`org`, `user`, `global`).
    #[arg(long, value_name = "S")]
    pub(crate) scope: Option<String>,
    /// Only records of this scope value (the tenant).
    #[arg(long, value_name = "V")]
    pub(crate) scope_value: Option<String>,
    /// Only records created at least this long ago (`10m`, `2h`, `3days`).
    #[arg(long, value_parser = duration, value_name = "AGE")]
    pub(crate) older_than: Option<Duration>,
    /// At most this many records, the oldest first.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

/// Which record: the parts its key was given in.
#[derive(Debug, Args)]
pub(crate) struct Locate {
    /// The operation, as `ls` prints it.
    #[arg(long, value_name = "OP")]
    pub(crate) operation: String,
    /// The scope, as `ls` prints it (`org` for `org=acme`).
    #[arg(long, value_name = "S")]
    pub(crate) scope: String,
    /// The scope's value, as `ls` prints it (`acme` for `org=acme`); empty for a global scope.
    #[arg(long, value_name = "V", default_value = "")]
    pub(crate) scope_value: String,
    /// The client's idempotency key, as sent in the header (bare or quoted).
    #[arg(long, value_name = "K")]
    pub(crate) key: String,
}

/// `show`'s options.
#[derive(Debug, Args)]
pub(crate) struct Show {
    #[command(flatten)]
    pub(crate) record: Locate,
    /// How much of the stored body to print.
    #[arg(long, default_value_t = 2048, value_name = "BYTES")]
    pub(crate) body_bytes: usize,
}

/// `forget`'s options.
#[derive(Debug, Args)]
pub(crate) struct Forget {
    #[command(flatten)]
    pub(crate) record: Locate,
    /// Forget it even while its owner holds a live lease: that owner's result is not stored, and
    /// a retry runs the operation again. In atomic mode its transaction rolls back (its client
    /// gets 409); docs/operators.md says what each mode does.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `purge`'s options.
#[derive(Debug, Args)]
pub(crate) struct Purge {
    /// The operation whose completed records go.
    #[arg(long, value_name = "OP")]
    pub(crate) operation: String,
    /// Only records that completed from T1 (included) to T2 (excluded): RFC 3339 times
    /// (`2026-11-27T10:00:00Z`).
    #[arg(long, num_args = 2, value_names = ["T1", "T2"], value_parser = time)]
    pub(crate) completed_between: Option<Vec<SystemTime>>,
    /// Count what would go, delete nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// `stats`'s options.
#[derive(Debug, Args)]
pub(crate) struct Stats {
    /// Only this operation's records.
    #[arg(long, value_name = "OP")]
    pub(crate) operation: Option<String>,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 30s, 10m, 2h, 3days)"))
}

/// A `--timeout`: a duration, and more than zero, whatever the store (a zero timeout could only
/// ever time out).
fn timeout(s: &str) -> Result<Duration, String> {
    match duration(s)? {
        Duration::ZERO => Err("must be more than zero (examples: 500ms, 30s, 2m)".to_owned()),
        timeout => Ok(timeout),
    }
}

fn time(s: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(s).map_err(|e| format!("{e} (example: 2026-11-27T10:00:00Z)"))
}

fn state(s: &str) -> Result<RecordState, String> {
    s.parse()
}
