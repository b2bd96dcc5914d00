//! Configuration from the environment: `BIND`, `DATABASE_URL`, `SLOW_MS`, `IDEM_LEASE_MS`.
//! Everything has a default, so `cargo run` needs no set-up.

use std::time::Duration;

const DEFAULT_BIND: &str = "127.0.0.1:50051";
const DEFAULT_DATABASE_URL: &str = "sqlite://ledger.db";
const DEFAULT_SLOW_MS: u64 = 2000;
const DEFAULT_LEASE_MS: u64 = 30_000;

/// The service's settings, read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    /// `BIND`: the listen address (`host:port`; port 0 picks a free one).
    pub(crate) bind: String,
    /// `DATABASE_URL`: transfers and idempotency records, `sqlite:` or `postgres:`.
    pub(crate) database_url: String,
    /// `SLOW_MS`: how long a transfer to `acct_slow` takes.
    pub(crate) slow: Duration,
    /// `IDEM_LEASE_MS`: the lease of a request in flight, renewed while it runs; how soon a
    /// retry may take over the request of a process that died.
    pub(crate) lease: Duration,
}

impl Config {
    /// Reads the process environment; the error is one line naming the variable.
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let bind = var("BIND").unwrap_or_else(|| DEFAULT_BIND.to_owned());
        let database_url = var("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
        if !["sqlite:", "postgres:", "postgresql:"]
            .iter()
            .any(|scheme| database_url.starts_with(scheme))
        {
            return Err("DATABASE_URL must start with `sqlite:` or `postgres:`".to_owned());
        }
        let millis = |name: &str, default: u64, positive: bool| match var(name) {
            None => Ok(Duration::from_millis(default)),
            Some(ms) => match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 || !positive => Ok(Duration::from_millis(ms)),
                _ => Err(format!(
                    "{name} must be a whole number of milliseconds{}, got `{ms}`",
                    if positive { " above 0" } else { "" }
                )),
            },
        };
        Ok(Self {
            bind,
            database_url,
            slow: millis("SLOW_MS", DEFAULT_SLOW_MS, false)?,
            lease: millis("IDEM_LEASE_MS", DEFAULT_LEASE_MS, true)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_need_no_set_up() {
        let c = config(&[]).unwrap();
        assert_eq!(c.bind, "127.0.0.1:50051");
        assert_eq!(c.database_url, "sqlite://ledger.db");
        assert_eq!(c.slow, Duration::from_secs(2));
        assert_eq!(c.lease, Duration::from_secs(30));
    }

    #[test]
    fn settings_are_read() {
        let c = config(&[
            ("BIND", "0.0.0.0:6000"),
            ("DATABASE_URL", "postgres://u@h/db"),
            ("SLOW_MS", "0"),
            ("IDEM_LEASE_MS", "1500"),
        ])
        .unwrap();
        assert_eq!(c.bind, "0.0.0.0:6000");
        assert_eq!(c.database_url, "postgres://u@h/db");
        assert_eq!(c.slow, Duration::ZERO);
        assert_eq!(c.lease, Duration::from_millis(1500));
    }

    #[test]
    fn mistakes_name_the_variable() {
        for (vars, name) in [
            (&[("DATABASE_URL", "mysql://x")][..], "DATABASE_URL"),
            (&[("SLOW_MS", "soon")][..], "SLOW_MS"),
            (&[("IDEM_LEASE_MS", "0")][..], "IDEM_LEASE_MS"),
            (&[("IDEM_LEASE_MS", "1.5s")][..], "IDEM_LEASE_MS"),
        ] {
            let err = config(vars).unwrap_err();
            assert!(err.contains(name), "{err}");
        }
    }
}
