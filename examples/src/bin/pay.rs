//! `pay`: a command-line client for the `payments` example that retries the way every client of
//! an idempotent API should, with [`idem_client`]: one key per charge, the same key on every
//! attempt, backoff with jitter, `Retry-After` honoured, and no retry of a 4xx.
//!
//! # Run it
//!
//! ```sh
//! cargo run -p idem-examples --bin payments     # in one terminal
//!
//! # A charge: its JSON on stdout.
//! cargo run -p idem-examples --bin pay -- charge --amount 2000 --currency usd --source tok_visa
//!
//! # With a key of your own: run it twice, the second answer is the first charge, replayed.
//! cargo run -p idem-examples --bin pay -- charge --amount 2000 --currency usd \
//!   --source tok_visa --key order-1001 --org acme
//!
//! # The same key for another amount: 422, not retried, exit status 1.
//! cargo run -p idem-examples --bin pay -- charge --amount 9900 --currency usd \
//!   --source tok_visa --key order-1001
//!
//! # A processor outage (503 + Retry-After): retried, one note per retry on stderr, then 1.
//! cargo run -p idem-examples --bin pay -- charge --amount 700 --currency usd \
//!   --source tok_processorOutage
//! ```
//!
//! | env | default | meaning |
//! |---|---|---|
//! | `PAYMENTS_URL` | `http://127.0.0.1:3000` | where the payments service listens |
//!
//! Exit status: 0 when the charge succeeded (stdout: the charge), 1 on a final error answer
//! (stderr: the problem document) or no answer at all (stderr: the key to retry with), 2 on bad
//! arguments.

use std::process::ExitCode;

use idem_client::reqwest::{self, Url};
use idem_client::{Client, IdempotencyKey};

const DEFAULT_URL: &str = "http://127.0.0.1:3000";
const DEFAULT_ORG: &str = "acme";
const USAGE: &str = "\
usage: pay charge --amount N --currency C --source TOKEN [--key KEY] [--org ORG] [--description TEXT]

  --amount N          amount in the currency's smallest unit (cents)
  --currency C        e.g. usd
  --source TOKEN      tok_visa, tok_chargeDeclined, tok_processorOutage or tok_slow
  --key KEY           the charge's idempotency key (default: a fresh UUID v4); reuse it to retry
  --org ORG           the org to charge for, sent as `Bearer sk_test_ORG` (default: acme)
  --description TEXT  a note kept with the charge

env: PAYMENTS_URL (default http://127.0.0.1:3000)";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Help,
    Charge(Charge),
}

/// `pay charge ...`.
#[derive(Debug, PartialEq)]
struct Charge {
    amount: i64,
    currency: String,
    source: String,
    description: Option<String>,
    key: Option<IdempotencyKey>,
    org: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let command = parse(std::env::args().skip(1));
    let base = std::env::var("PAYMENTS_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    match (command, parse_base_url(&base)) {
        (Ok(Command::Help), _) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        (Ok(Command::Charge(charge)), Ok(base)) => run(charge, base).await,
        (Err(error), _) => {
            eprintln!("pay: {error}\n\n{USAGE}");
            ExitCode::from(2)
        }
        (_, Err(error)) => {
            eprintln!("pay: {error}");
            ExitCode::from(2)
        }
    }
}

async fn run(charge: Charge, base: Url) -> ExitCode {
    let client = Client::builder(reqwest::Client::new())
        .on_retry(|note| eprintln!("pay: {note}"))
        .build();
    let url = base.join("v1/charges").expect("a path joins any base URL");
    let mut body = serde_json::json!({
        "amount": charge.amount,
        "currency": charge.currency,
        "source": charge.source,
    });
    if let Some(description) = charge.description {
        body["description"] = description.into();
    }
    let request = client
        .post(url)
        .bearer_auth(format!("sk_test_{}", charge.org))
        .json(&body);
    let key = charge.key.unwrap_or_else(IdempotencyKey::generate);
    match client.send_with_key(request, key).await {
        Ok(outcome) if outcome.is_success() => {
            println!("{}", outcome.text());
            if outcome.replayed() {
                eprintln!(
                    "pay: the server replayed its answer after {} attempt(s): the charge ran once",
                    outcome.attempts()
                );
            }
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            let gave_up = if outcome.retries_exhausted() {
                format!(
                    " (gave up after {} attempts; retry with --key {})",
                    outcome.attempts(),
                    outcome.key().map_or("", IdempotencyKey::as_str)
                )
            } else {
                String::new()
            };
            eprintln!("pay: the server answered {}{gave_up}", outcome.status());
            eprintln!("{}", outcome.text());
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("pay: {}", error_chain(&error));
            if let Some(key) = error.key() {
                eprintln!(
                    "pay: the charge may have run; retry with --key {} to find out",
                    key.as_str()
                );
            }
            ExitCode::FAILURE
        }
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut args = args.into_iter();
    match args.next().as_deref() {
        Some("charge") => {}
        Some("-h" | "--help" | "help") => return Ok(Command::Help),
        Some(other) => {
            return Err(format!(
                "unknown command `{other}`; the command is `charge`"
            ));
        }
        None => return Err("missing the command `charge`".to_owned()),
    }
    let mut flags: Vec<(String, String)> = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Command::Help);
        }
        let Some(flag) = arg.strip_prefix("--") else {
            return Err(format!("unexpected argument `{arg}`"));
        };
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            None => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("--{flag} needs a value"))?;
                (flag.to_owned(), value)
            }
        };
        if !["amount", "currency", "source", "key", "org", "description"].contains(&&*name) {
            return Err(format!("unknown option --{name}"));
        }
        if flags.iter().any(|(n, _)| *n == name) {
            return Err(format!("--{name} given more than once"));
        }
        flags.push((name, value));
    }
    let mut take = |name: &str| {
        flags
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| flags.swap_remove(i).1)
    };
    let required =
        |value: Option<String>, name: &str| value.ok_or_else(|| format!("--{name} is required"));
    let amount = required(take("amount"), "amount")?;
    let amount = amount
        .parse()
        .map_err(|_| format!("--amount must be a whole number of cents, got `{amount}`"))?;
    let currency = required(take("currency"), "currency")?;
    let source = required(take("source"), "source")?;
    let key = take("key")
        .map(|key| IdempotencyKey::new(key).map_err(|e| format!("--key: {e}")))
        .transpose()?;
    let org = take("org").unwrap_or_else(|| DEFAULT_ORG.to_owned());
    let org_ok = (1..=64).contains(&org.len())
        && org
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !org_ok {
        return Err(format!(
            "--org must be 1 to 64 letters, digits, `_` or `-`, got `{org}`"
        ));
    }
    Ok(Command::Charge(Charge {
        amount,
        currency,
        source,
        description: take("description"),
        key,
        org,
    }))
}

/// `PAYMENTS_URL`, with a trailing slash so that paths join under it.
fn parse_base_url(raw: &str) -> Result<Url, String> {
    let with_slash = if raw.ends_with('/') {
        raw.to_owned()
    } else {
        format!("{raw}/")
    };
    match Url::parse(&with_slash) {
        Ok(url) if url.scheme() == "http" => Ok(url),
        Ok(url) => Err(format!(
            "PAYMENTS_URL must be an http:// URL (this build has no TLS), got `{}://...`",
            url.scheme()
        )),
        Err(error) => Err(format!("PAYMENTS_URL `{raw}` is not a URL: {error}")),
    }
}

/// An error and its causes on one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Command, String> {
        parse(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn a_charge_with_every_option() {
        let command = args(
            "charge --amount 2000 --currency usd --source tok_visa --key order-1 --org globex \
             --description=gift",
        )
        .unwrap();
        assert_eq!(
            command,
            Command::Charge(Charge {
                amount: 2000,
                currency: "usd".into(),
                source: "tok_visa".into(),
                description: Some("gift".into()),
                key: Some(IdempotencyKey::new("order-1").unwrap()),
                org: "globex".into(),
            })
        );
    }

    #[test]
    fn the_org_defaults_to_acme_and_the_key_to_none() {
        let Command::Charge(charge) =
            args("charge --source tok_visa --amount=5 --currency usd").unwrap()
        else {
            panic!("a charge");
        };
        assert_eq!((charge.org.as_str(), charge.key), ("acme", None));
    }

    #[test]
    fn mistakes_are_named() {
        for (line, expected) in [
            ("", "missing the command"),
            ("refund --amount 1", "unknown command `refund`"),
            (
                "charge --currency usd --source tok_visa",
                "--amount is required",
            ),
            (
                "charge --amount ten --currency usd --source t",
                "whole number of cents",
            ),
            ("charge --amount 1 --currency usd", "--source is required"),
            ("charge --amount 1 --amount 2", "more than once"),
            ("charge --amount", "--amount needs a value"),
            ("charge --amont 1", "unknown option --amont"),
            ("charge 2000", "unexpected argument `2000`"),
            (
                "charge --amount 1 --currency usd --source t --key a\u{7f}b",
                "--key",
            ),
            (
                "charge --amount 1 --currency usd --source t --org a.b",
                "--org must be",
            ),
        ] {
            let error = args(line).unwrap_err();
            assert!(error.contains(expected), "{line:?}: {error}");
        }
        assert_eq!(args("charge --help"), Ok(Command::Help));
    }

    #[test]
    fn the_base_url_takes_paths_under_it() {
        let base = parse_base_url("http://127.0.0.1:3000").unwrap();
        assert_eq!(
            base.join("v1/charges").unwrap().as_str(),
            "http://127.0.0.1:3000/v1/charges"
        );
        let prefixed = parse_base_url("http://gw.local/payments/").unwrap();
        assert_eq!(
            prefixed.join("v1/charges").unwrap().as_str(),
            "http://gw.local/payments/v1/charges"
        );
        assert!(parse_base_url("https://x").unwrap_err().contains("no TLS"));
        assert!(parse_base_url("not a url").is_err());
    }
}
