//! The five commands: each turns its arguments into calls on [`Records`] and prints the answer.

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, RecordFilter};
use idem_runtime::{IdempotencyKey, Records, StoreError};

use crate::args::{Cli, Command, Forget, Locate, Ls, Purge, Show, Stats};
use crate::fail::Failure;
use crate::{open, render};

/// A command with its arguments checked: what it will do, before any store is touched.
enum Plan<'a> {
    Ls(&'a Ls),
    Show(&'a Show, RecordKey),
    Forget(&'a Forget, RecordKey),
    Purge(&'a Purge, Option<(Timestamp, Timestamp)>),
    Stats(&'a Stats),
}

impl<'a> Plan<'a> {
    /// Checks the arguments the parser cannot: the key, the purge window (exit 2).
    fn of(command: &'a Command) -> Result<Self, Failure> {
        Ok(match command {
            Command::Ls(ls) => Self::Ls(ls),
            Command::Show(show) => Self::Show(show, locate(&show.record)?),
            Command::Forget(forget) => Self::Forget(forget, locate(&forget.record)?),
            Command::Purge(purge) => Self::Purge(purge, window(purge)?),
            Command::Stats(stats) => Self::Stats(stats),
        })
    }
}

/// Runs the command `cli` names against its store, once its arguments are checked.
pub(crate) async fn run(cli: &Cli) -> Result<(), Failure> {
    let plan = Plan::of(&cli.command)?;
    let records = open::records(cli).await?;
    let json = cli.json;
    match plan {
        Plan::Ls(ls) => list(&records, ls, json).await,
        Plan::Show(show, key) => self::show(&records, show, &key, json).await,
        Plan::Forget(forget, key) => self::forget(&records, forget, &key, json).await,
        Plan::Purge(purge, window) => self::purge(&records, purge, window, json).await,
        Plan::Stats(stats) => self::stats(&records, stats, json).await,
    }
}

async fn list(records: &Records, ls: &Ls, json: bool) -> Result<(), Failure> {
    let now = records.now();
    let mut filter = RecordFilter::new();
    filter.operation.clone_from(&ls.operation);
    filter.state = ls.state;
    filter.scope.clone_from(&ls.scope);
    filter.scope_value.clone_from(&ls.scope_value);
    if let Some(age) = ls.older_than {
        filter = filter.created_before(before(now, age));
    }
    let found = records.list(&filter, ls.limit).await?;
    emit(&render::list(&found, now, json));
    Ok(())
}

async fn show(records: &Records, show: &Show, key: &RecordKey, json: bool) -> Result<(), Failure> {
    match records.show(key).await? {
        Some(detail) => {
            let now = records.now();
            emit(&render::detail(&detail, now, show.body_bytes, json));
            Ok(())
        }
        None => {
            complain(&render::absent(&show.record, key, json), json);
            Err(Failure::NotFound)
        }
    }
}

async fn forget(
    records: &Records,
    forget: &Forget,
    key: &RecordKey,
    json: bool,
) -> Result<(), Failure> {
    let forgotten = if forget.force {
        records.force_forget(key).await?
    } else {
        records.forget(key).await?
    };
    let now = records.now();
    match forgotten {
        Forgotten::Deleted(record) => {
            emit(&render::forgotten(&record, now, json));
            Ok(())
        }
        Forgotten::Leased(record) => {
            complain(&render::refused(&record, now, json), json);
            Err(Failure::Refused)
        }
        Forgotten::Absent => {
            complain(&render::absent(&forget.record, key, json), json);
            Err(Failure::NotFound)
        }
        _ => Err(Failure::Store(StoreError::Unsupported(
            "an answer to `forget` this command does not know",
        ))),
    }
}

/// `--completed-between T1 T2`, checked.
fn window(purge: &Purge) -> Result<Option<(Timestamp, Timestamp)>, Failure> {
    match purge.completed_between.as_deref() {
        Some([from, to]) if from >= to => Err(Failure::Usage(
            "--completed-between: T1 must be before T2".into(),
        )),
        Some([from, to]) => Ok(Some((timestamp(*from)?, timestamp(*to)?))),
        _ => Ok(None),
    }
}

async fn purge(
    records: &Records,
    purge: &Purge,
    window: Option<(Timestamp, Timestamp)>,
    json: bool,
) -> Result<(), Failure> {
    let mut filter = RecordFilter::new().operation(&purge.operation);
    if let Some((from, to)) = window {
        filter = filter.completed_between(from, to);
    }
    let matched = records.purgeable(&filter).await?;
    if !json {
        // The count first: an operator sees what is about to go before it goes.
        emit(&render::purge_plan(
            &purge.operation,
            window,
            matched,
            purge.dry_run,
        ));
    }
    let purged = if purge.dry_run || matched == 0 {
        None
    } else {
        Some(records.purge(&filter).await?)
    };
    emit(&render::purged(
        &purge.operation,
        window,
        matched,
        purged,
        purge.dry_run,
        json,
    ));
    Ok(())
}

async fn stats(records: &Records, stats: &Stats, json: bool) -> Result<(), Failure> {
    let mut filter = RecordFilter::new();
    filter.operation.clone_from(&stats.operation);
    let counts = records.stats(&filter).await?;
    emit(&render::stats(&counts, records.now(), json));
    Ok(())
}

/// The record key of the parts `record` names, hashed as the engine hashes a request's.
fn locate(record: &Locate) -> Result<RecordKey, Failure> {
    let key = IdempotencyKey::parse(record.key.as_bytes())
        .map_err(|e| Failure::Usage(format!("--key: {e}")))?;
    Ok(RecordKey::derive(
        &record.scope,
        &record.scope_value,
        &record.operation,
        &key,
    ))
}

fn before(now: Timestamp, age: Duration) -> Timestamp {
    let age = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millis(now.as_millis().saturating_sub(age))
}

fn timestamp(at: SystemTime) -> Result<Timestamp, Failure> {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Failure::Usage("times before 1970 name no record".into()))?
        .as_millis();
    Ok(Timestamp::from_millis(
        i64::try_from(ms).unwrap_or(i64::MAX),
    ))
}

/// Prints `text` to standard output (nothing when empty), flushed so a count shows before a
/// long purge starts.
fn emit(text: &str) {
    if text.is_empty() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Prints why a command did not do what it was asked: the JSON document to standard output
/// (scripts read one document there, whatever happened), a sentence to standard error.
fn complain(text: &str, json: bool) {
    if json {
        emit(text);
    } else {
        eprint!("idem: {text}");
    }
}
