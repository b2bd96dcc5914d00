//! Configuration from the environment: `BIND`, `DATABASE_URL`, `SLOW_MS`. Everything has a
//! default, so `cargo run` needs no set-up.

use std::time::Duration;

const DEFAULT_BIND: &str = "127.0.0.1:3001";
const DEFAULT_DATABASE_URL: &str = "sqlite://agents.db";
const DEFAULT_SLOW_MS: u64 = 2000;

/// The service's settings, read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    /// `BIND`: the listen address (`host:port`; port 0 picks a free one).
    pub(crate) bind: String,
    /// `DATABASE_URL`: app data and idempotency records, `sqlite:` or `postgres:`.
    pub(crate) database_url: String,
    /// `SLOW_MS`: how long the action `"slow"` takes.
    pub(crate) slow: Duration,
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
        let slow = match var("SLOW_MS") {
            None => Duration::from_millis(DEFAULT_SLOW_MS),
            Some(ms) => Duration::from_millis(ms.trim().parse().map_err(|_| {
                format!("SLOW_MS must be a whole number of milliseconds, got `{ms}`")
            })?),
        };
        Ok(Self {
            bind,
            database_url,
            slow,
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
        assert_eq!(c.bind, "127.0.0.1:3001");
        assert_eq!(c.database_url, "sqlite://agents.db");
        assert_eq!(c.slow, Duration::from_secs(2));
    }

    #[test]
    fn mistakes_name_the_variable() {
        let err = config(&[("DATABASE_URL", "mysql://x")]).unwrap_err();
        assert!(err.contains("DATABASE_URL"), "{err}");
        let err = config(&[("SLOW_MS", "soon")]).unwrap_err();
        assert!(err.contains("SLOW_MS"), "{err}");
        let pg = config(&[("DATABASE_URL", "postgres://u@h/db"), ("SLOW_MS", "5")]).unwrap();
        assert_eq!(pg.slow, Duration::from_millis(5));
    }
}
