//! `jobs`: a task queue kept entirely in an object store, with idempotent submission. Producers
//! retry `submit` with the same `--key`, and get the same task every time.
//!
//! # Run it
//!
//! ```sh
//! # A task, idempotently: run it twice, the second answer is the same task, `"created": false`.
//! cargo run -p idem-examples --bin jobs -- submit --type email \
//!   --input '{"to": "ada@example.com"}' --key welcome-ada
//!
//! # The same key with another input: `IdempotencyConflict` on stderr, exit status 3.
//! cargo run -p idem-examples --bin jobs -- submit --type email \
//!   --input '{"to": "bob@example.com"}' --key welcome-ada
//!
//! # Read a task back.
//! cargo run -p idem-examples --bin jobs -- get 6f1c...
//!
//! # With the producers stopped: delete expired records and superseded generations.
//! cargo run -p idem-examples --bin jobs -- prune
//!
//! # On S3 (or a local S3 server):
//! JOBS_STORE=s3://my-bucket/queue AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_ALLOW_HTTP=true \
//!   cargo run -p idem-examples --bin jobs -- submit --type email --input '{}' --key k1
//! ```
//!
//! | env | default | meaning |
//! |---|---|---|
//! | `JOBS_STORE` | `./jobs-data` | a local folder (created on first use), or `s3://bucket/prefix` with the usual `AWS_*` variables |
//!
//! Exit status: 0 on success (stdout: one line of JSON), 1 when the store failed or the task
//! does not exist, 2 on bad arguments, 3 on `IdempotencyConflict`.

use std::process::ExitCode;
use std::time::Duration;

use idem_examples::jobs::{self, QueueError, Scope};
use serde_json::value::RawValue;

const DEFAULT_STORE: &str = "./jobs-data";
const USAGE: &str = "\
usage: jobs submit --type TYPE --input JSON [--key KEY] [--scope task_type|queue|NAME] [--ttl 30d]
       jobs get TASK_ID
       jobs prune     (with the producers stopped: deletes expired records)

  --type TYPE    the task type (1..=128 of A-Z a-z 0-9 . _ -)
  --input JSON   the task's input, a JSON document
  --key KEY      an idempotency key: every submit with it gets the same task
  --scope S      whose keys these are: the task type (default), the whole queue, or a name
  --ttl D        how long the key maps to its task: 30s, 15m, 24h, 30d (default 30d)

env: JOBS_STORE (default ./jobs-data; s3://bucket/prefix for S3, with the AWS_* variables)";

#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Submit {
        task_type: String,
        /// The input's JSON text, without insignificant whitespace, numbers as written.
        input: String,
        key: Option<String>,
        scope: Scope,
        ttl: Option<Duration>,
    },
    Get {
        task_id: String,
    },
    Prune,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let command = match parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("jobs: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if command == Command::Help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let location = std::env::var("JOBS_STORE").unwrap_or_else(|_| DEFAULT_STORE.to_owned());
    let queue = match jobs::open(&location) {
        Ok(queue) => queue,
        Err(error) => return fail(&error),
    };
    match command {
        Command::Help => unreachable!("answered above"),
        Command::Submit {
            task_type,
            input,
            key,
            scope,
            ttl,
        } => {
            let input = RawValue::from_string(input).expect("validated as JSON by `parse`");
            let mut submit = queue.submit(&task_type, &input).scope(scope);
            if let Some(key) = key {
                submit = submit.idempotency_key(key);
            }
            if let Some(ttl) = ttl {
                submit = submit.idempotency_ttl(ttl);
            }
            match submit.await {
                Ok(submitted) => print_json(&submitted),
                Err(error) => fail(&error),
            }
        }
        Command::Get { task_id } => match queue.get(&task_id).await {
            Ok(Some(task)) => print_json(&task),
            Ok(None) => {
                eprintln!("jobs: no task {task_id}");
                ExitCode::FAILURE
            }
            Err(error) => fail(&error),
        },
        Command::Prune => match queue.prune().await {
            Ok(pruned) => print_json(&pruned),
            Err(error) => fail(&error),
        },
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> ExitCode {
    println!("{}", serde_json::to_string(value).expect("serialisable"));
    ExitCode::SUCCESS
}

/// Prints the error with its causes; the exit status says what kind it was.
fn fail(error: &QueueError) -> ExitCode {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("jobs: {message}");
    match error {
        QueueError::IdempotencyConflict { .. } => ExitCode::from(3),
        QueueError::InvalidKey(_) | QueueError::Invalid { .. } | QueueError::Input(_) => {
            ExitCode::from(2)
        }
        _ => ExitCode::FAILURE,
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    match args.next().as_deref() {
        None | Some("help" | "-h" | "--help") => Ok(Command::Help),
        Some("get") => match (args.next(), args.next()) {
            (Some(task_id), None) => Ok(Command::Get { task_id }),
            _ => Err("`get` takes one task id".into()),
        },
        Some("submit") => parse_submit(args),
        Some("prune") => match args.next() {
            None => Ok(Command::Prune),
            Some(_) => Err("`prune` takes no arguments".into()),
        },
        Some(other) => Err(format!("unknown command `{other}`")),
    }
}

fn parse_submit(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let (mut task_type, mut input, mut key, mut scope, mut ttl) = (None, None, None, None, None);
    while let Some(flag) = args.next() {
        let slot = match flag.as_str() {
            "--type" => &mut task_type,
            "--input" => &mut input,
            "--key" => &mut key,
            "--scope" => &mut scope,
            "--ttl" => &mut ttl,
            other => return Err(format!("unknown argument `{other}`")),
        };
        let value = args
            .next()
            .ok_or_else(|| format!("`{flag}` needs a value"))?;
        if slot.replace(value).is_some() {
            return Err(format!("`{flag}` given twice"));
        }
    }
    let task_type = task_type.ok_or("`--type` is required")?;
    let input = input.ok_or("`--input` is required")?;
    let input = compact(&input).map_err(|e| format!("`--input` is not JSON: {e}"))?;
    let scope = match scope.as_deref() {
        None | Some("task_type") => Scope::TaskType,
        Some("queue") => Scope::Queue,
        Some(name) => Scope::Custom(name.to_owned()),
    };
    let ttl = ttl
        .map(|text| humantime::parse_duration(&text).map_err(|e| format!("`--ttl {text}`: {e}")))
        .transpose()?;
    Ok(Command::Submit {
        task_type,
        input,
        key,
        scope,
        ttl,
    })
}

/// `json` validated, and written without whitespace between its tokens; strings and numbers
/// are kept exactly as written (parsing into a `serde_json::Value` would take numbers through
/// `f64`).
fn compact(json: &str) -> Result<String, serde_json::Error> {
    serde_json::from_str::<&RawValue>(json)?;
    let (mut out, mut in_string, mut escaped) = (String::with_capacity(json.len()), false, false);
    for c in json.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ' ' | '\t' | '\n' | '\r' if !in_string => continue,
            _ => {}
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> impl Iterator<Item = String> {
        line.split(' ')
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn submit_arguments() {
        let command = parse(args(
            "submit --type email --input {} --key k --scope queue --ttl 1d",
        ));
        assert_eq!(
            command,
            Ok(Command::Submit {
                task_type: "email".into(),
                input: "{}".into(),
                key: Some("k".into()),
                scope: Scope::Queue,
                ttl: Some(Duration::from_secs(86_400)),
            })
        );
        let custom = parse(args("submit --type email --input 1 --scope tenant-42")).unwrap();
        assert!(
            matches!(custom, Command::Submit { scope: Scope::Custom(name), .. } if name == "tenant-42")
        );
    }

    #[test]
    fn the_input_keeps_its_numbers_and_strings_exactly() {
        let text = "{ \"n\": 18446744073709551616,\n \"x\": 0.10000000000000000001, \"s\": \" a\\\" b \" }";
        assert_eq!(
            compact(text).unwrap(),
            r#"{"n":18446744073709551616,"x":0.10000000000000000001,"s":" a\" b "}"#
        );
        assert!(compact("[1,").is_err());
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(parse(args("submit --type email")).is_err(), "no input");
        assert!(
            parse(args("submit --type email --input {")).is_err(),
            "not JSON"
        );
        assert!(
            parse(args("submit --type a --type b --input 1")).is_err(),
            "twice"
        );
        assert!(
            parse(args("submit --type a --input 1 --ttl soon")).is_err(),
            "bad ttl"
        );
        assert!(parse(args("submit --type a --input 1 --bogus x")).is_err());
        assert!(parse(args("get")).is_err());
        assert_eq!(parse(args("prune")), Ok(Command::Prune));
        assert!(parse(args("prune now")).is_err());
        assert!(parse(args("frobnicate")).is_err());
    }
}
