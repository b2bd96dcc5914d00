//! The `jobs` queue's idempotent submit, on three backends: `InMemory`, a local folder
//! (`LocalFileSystem`, records swapped by generations) and a real S3 protocol server on loopback
//! (moto, which the test harness installs and starts: `idem_tests::moto`).
//!
//! What proves what:
//! - [`design`]: the record's rules (same key -> same task, conflict, repair after a crash
//!   between record and task, expiry replaced by compare-and-swap, scopes, request counts), on
//!   every backend, sequentially. On moto these prove the S3 protocol path: `If-None-Match: *`
//!   and `If-Match` on PUT, as a real S3 client sends them.
//! - [`races`]: 50 concurrent submits of one key (threads, and processes through the CLI),
//!   concurrent repairs, concurrent replacement of an expired record, on every backend. These
//!   need a store whose conditional PUT is atomic, as S3's is: the harness starts moto through
//!   `.ci/moto_server.py`, which handles one request at a time, since moto's own server checks a
//!   precondition and then writes without a lock between the two. The processes race on a
//!   folder.
//! - [`prune`]: what a prune (producers stopped) deletes and keeps, on every backend.
//! - [`cli`]: the command line as documented: JSON line, exit statuses, `get`, `JOBS_STORE`
//!   on a folder and on S3.
//!
//! ```text
//! cargo test -p idem-examples --test jobs
//! ```

#[path = "jobs/cli.rs"]
mod cli;
#[path = "jobs/design.rs"]
mod design;
#[path = "jobs/prune.rs"]
mod prune;
#[path = "jobs/races.rs"]
mod races;
#[path = "jobs/support.rs"]
mod support;
