//! `idem`: see, explain and fix idempotency records from a terminal, on every idem store.
//!
//! ```text
//! idem --store sqlite://payments.db ls --state in-flight --older-than 10m
//! idem --store postgres://localhost/app show --operation charges.create --scope org \
//!      --scope-value acme --key 8e03978e-40d5-43e8-bc93-6894a57f9324
//! idem --store redis://127.0.0.1 forget --operation charges.create --scope org \
//!      --scope-value acme --key 8e03978e-40d5-43e8-bc93-6894a57f9324
//! idem --store s3://bucket/idem purge --operation charges.create \
//!      --completed-between 2026-11-27T10:00:00Z 2026-11-27T11:00:00Z --dry-run
//! idem --store redis://127.0.0.1 stats --json
//! ```
//!
//! Every command reads and changes records through the store code the engine runs on
//! (`idem_runtime::Records`). Exit codes: 0 done, 1 store unreachable (or failed, or slower
//! than `--timeout`), 2 bad arguments, 3 refused (a live owner holds the record; `--force`),
//! 4 no such record. The guide: docs/operators.md in the repository.

use std::process::ExitCode;

use clap::Parser;

mod args;
mod commands;
mod fail;
mod open;
mod render;

use args::Cli;
use fail::Failure;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idem: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    let timeout = cli.timeout;
    let outcome = runtime.block_on(async {
        tokio::time::timeout(timeout, commands::run(&cli))
            .await
            .unwrap_or(Err(Failure::Timeout(timeout)))
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !matches!(failure, Failure::Refused | Failure::NotFound) {
                eprintln!("idem: {failure}");
            }
            failure.exit_code()
        }
    }
}
