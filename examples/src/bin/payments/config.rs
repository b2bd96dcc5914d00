//! Configuration from the environment: `BIND`, `DATABASE_URL`, `IDEM_STORE`, `REDIS_URL`,
//! `REDIS_PREFIX`, `DYNAMODB_TABLE` (and the AWS environment), `SLOW_MS`, `IDEM_LEASE_MS`,
//! `HEADER_TIMEOUT_MS`, `BODY_TIMEOUT_MS`, `MAX_CONNECTIONS`, `ERROR_FORMAT`. Everything has a
//! default, so `cargo run` needs no set-up.

use std::fmt;
use std::time::Duration;

use crate::envelope::ErrorFormat;
use crate::serve::Limits;

/// Where the service listens when `BIND` is unset.
const DEFAULT_BIND: &str = "127.0.0.1:3000";
/// App data and idempotency records when `DATABASE_URL` is unset: a file next to the process.
const DEFAULT_DATABASE_URL: &str = "sqlite://payments.db";
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";
/// What the keys of the records start with in Redis unless `REDIS_PREFIX` says otherwise.
const DEFAULT_REDIS_PREFIX: &str = "payments:idem:";
/// The table of the records with `IDEM_STORE=dynamodb` unless `DYNAMODB_TABLE` says otherwise.
const DEFAULT_DYNAMODB_TABLE: &str = "payments-idempotency";
const DEFAULT_SLOW_MS: u64 = 2000;
const DEFAULT_LEASE_MS: u64 = 30_000;
const DEFAULT_HEADER_TIMEOUT_MS: u64 = 5_000;
const DEFAULT_BODY_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The service's settings, read once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    /// `BIND`: the listen address (`host:port`; port 0 picks a free one).
    pub(crate) bind: String,
    /// `DATABASE_URL`: where app data lives.
    pub(crate) database_url: String,
    /// Which database `database_url` names.
    pub(crate) database: Backend,
    /// `IDEM_STORE`, or the database's own backend when unset.
    pub(crate) store: StoreKind,
    /// `REDIS_URL` and `REDIS_PREFIX`, read when `IDEM_STORE=redis`.
    pub(crate) redis: Option<Redis>,
    /// `DYNAMODB_TABLE`, read when `IDEM_STORE=dynamodb`: the table of the records (created if
    /// missing), reached with the client the AWS environment configures.
    pub(crate) dynamodb_table: Option<String>,
    /// `SLOW_MS`: how long the `tok_slow` test source takes.
    pub(crate) slow: Duration,
    /// `IDEM_LEASE_MS`: how long an in-flight record stays owned without a renewal, i.e. how
    /// soon after a crash a retry may take the request over.
    pub(crate) lease: Duration,
    /// `HEADER_TIMEOUT_MS`, `BODY_TIMEOUT_MS`, `MAX_CONNECTIONS`: what a client may hold.
    pub(crate) limits: Limits,
    /// `ERROR_FORMAT`: `problem` (problem+json, the default) or `stripe` (Stripe's envelope).
    pub(crate) errors: ErrorFormat,
}

/// The SQL databases app data can live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
    /// MySQL or MariaDB (`mysql:` or `mariadb:`); the database is created if missing.
    MySql,
}

/// Where idempotency records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    /// In this process only: records vanish on restart.
    Memory,
    /// The SQLite database of `DATABASE_URL`, sharing its pool.
    Sqlite,
    /// The PostgreSQL database of `DATABASE_URL`, sharing its pool.
    Postgres,
    /// The MySQL or MariaDB database of `DATABASE_URL`, sharing its pool.
    MySql,
    /// The Redis server of `REDIS_URL`; app data stays in `DATABASE_URL`.
    Redis,
    /// The DynamoDB table `DYNAMODB_TABLE`; app data stays in `DATABASE_URL`.
    DynamoDb,
}

impl StoreKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Redis => "redis",
            Self::DynamoDb => "dynamodb",
        }
    }
}

/// Where the records live with `IDEM_STORE=redis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Redis {
    /// `REDIS_URL`.
    pub(crate) url: String,
    /// `REDIS_PREFIX`: what every record's key starts with.
    pub(crate) prefix: String,
}

/// A setting the service cannot start with. Each message is one line that names the variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConfigError {
    /// `DATABASE_URL` is neither `sqlite:`, `postgres:` nor `mysql:`.
    DatabaseUrl(String),
    /// `IDEM_STORE` is not one of the known stores.
    UnknownStore(String),
    /// `REDIS_URL` is not a `redis://` or `rediss://` URL.
    RedisUrl(String),
    /// `IDEM_STORE=sqlite|postgres|mysql` while `DATABASE_URL` names another database.
    StoreNeedsDatabase { store: StoreKind },
    /// `SLOW_MS` is not a whole number of milliseconds.
    SlowMs(String),
    /// `IDEM_LEASE_MS` is not a positive whole number of milliseconds.
    LeaseMs(String),
    /// A limit (`HEADER_TIMEOUT_MS`, `BODY_TIMEOUT_MS`, `MAX_CONNECTIONS`) is not a positive
    /// whole number.
    Limit { name: &'static str, value: String },
    /// `ERROR_FORMAT` is neither `problem` nor `stripe`.
    ErrorFormat(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DatabaseUrl(url) => write!(
                f,
                "DATABASE_URL must start with `sqlite:`, `postgres:` or `mysql:`, got `{}`",
                redact(url)
            ),
            Self::UnknownStore(value) => write!(
                f,
                "IDEM_STORE must be one of memory, sqlite, postgres, mysql, redis, dynamodb; got \
                 `{value}`"
            ),
            Self::RedisUrl(url) => write!(
                f,
                "REDIS_URL must start with `redis://` or `rediss://`, got `{}`",
                redact(url)
            ),
            Self::StoreNeedsDatabase { store } => write!(
                f,
                "IDEM_STORE={0} keeps records in the app's database, so DATABASE_URL must be a \
                 `{0}:` URL",
                store.name()
            ),
            Self::SlowMs(value) => write!(
                f,
                "SLOW_MS must be a whole number of milliseconds, got `{value}`"
            ),
            Self::LeaseMs(value) => write!(
                f,
                "IDEM_LEASE_MS must be a positive whole number of milliseconds, got `{value}`"
            ),
            Self::Limit { name, value } => {
                write!(f, "{name} must be a positive whole number, got `{value}`")
            }
            Self::ErrorFormat(value) => {
                write!(
                    f,
                    "ERROR_FORMAT must be `problem` or `stripe`, got `{value}`"
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads the process environment.
    pub(crate) fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// Reads settings through `var`, which returns a variable's value or `None` when unset.
    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let bind = var("BIND").unwrap_or_else(|| DEFAULT_BIND.to_owned());
        let database_url = var("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
        let database = if database_url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if database_url.starts_with("postgres:") || database_url.starts_with("postgresql:") {
            Backend::Postgres
        } else if database_url.starts_with("mysql:") || database_url.starts_with("mariadb:") {
            Backend::MySql
        } else {
            return Err(ConfigError::DatabaseUrl(database_url));
        };
        let store = match var("IDEM_STORE").map(|s| s.trim().to_ascii_lowercase()) {
            None => match database {
                Backend::Sqlite => StoreKind::Sqlite,
                Backend::Postgres => StoreKind::Postgres,
                Backend::MySql => StoreKind::MySql,
            },
            Some(s) if s == "memory" => StoreKind::Memory,
            Some(s) if s == "sqlite" => StoreKind::Sqlite,
            Some(s) if s == "postgres" || s == "postgresql" => StoreKind::Postgres,
            Some(s) if s == "mysql" || s == "mariadb" => StoreKind::MySql,
            Some(s) if s == "redis" => StoreKind::Redis,
            Some(s) if s == "dynamodb" => StoreKind::DynamoDb,
            Some(other) => return Err(ConfigError::UnknownStore(other)),
        };
        let redis = if store == StoreKind::Redis {
            let url = var("REDIS_URL").unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
            if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                return Err(ConfigError::RedisUrl(url));
            }
            let prefix = var("REDIS_PREFIX").unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_owned());
            Some(Redis { url, prefix })
        } else {
            None
        };
        let dynamodb_table = (store == StoreKind::DynamoDb)
            .then(|| var("DYNAMODB_TABLE").unwrap_or_else(|| DEFAULT_DYNAMODB_TABLE.to_owned()));
        let in_the_database = match store {
            StoreKind::Sqlite => Some(Backend::Sqlite),
            StoreKind::Postgres => Some(Backend::Postgres),
            StoreKind::MySql => Some(Backend::MySql),
            StoreKind::Memory | StoreKind::Redis | StoreKind::DynamoDb => None,
        };
        if in_the_database.is_some_and(|backend| backend != database) {
            return Err(ConfigError::StoreNeedsDatabase { store });
        }
        let slow = match var("SLOW_MS") {
            None => Duration::from_millis(DEFAULT_SLOW_MS),
            Some(ms) => Duration::from_millis(
                ms.trim()
                    .parse()
                    .map_err(|_| ConfigError::SlowMs(ms.clone()))?,
            ),
        };
        let lease = match var("IDEM_LEASE_MS") {
            None => Duration::from_millis(DEFAULT_LEASE_MS),
            Some(ms) => match ms.trim().parse() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => return Err(ConfigError::LeaseMs(ms)),
            },
        };
        let limit = |name: &'static str, default: u64| match var(name) {
            None => Ok(default),
            Some(value) => match value.trim().parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConfigError::Limit { name, value }),
            },
        };
        let limits = Limits {
            header_timeout: Duration::from_millis(limit(
                "HEADER_TIMEOUT_MS",
                DEFAULT_HEADER_TIMEOUT_MS,
            )?),
            body_timeout: Duration::from_millis(limit("BODY_TIMEOUT_MS", DEFAULT_BODY_TIMEOUT_MS)?),
            max_connections: limit("MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS as u64)?
                .try_into()
                .unwrap_or(usize::MAX),
        };
        let errors = match var("ERROR_FORMAT").map(|s| s.trim().to_ascii_lowercase()) {
            None => ErrorFormat::Problem,
            Some(s) if s == "problem" => ErrorFormat::Problem,
            Some(s) if s == "stripe" => ErrorFormat::Stripe,
            Some(other) => return Err(ConfigError::ErrorFormat(other)),
        };
        Ok(Self {
            bind,
            database_url,
            database,
            store,
            redis,
            dynamodb_table,
            slow,
            lease,
            limits,
            errors,
        })
    }
}

/// A URL fit for logs: any password is replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_need_no_set_up() {
        let c = config(&[]).unwrap();
        assert_eq!(c.bind, "127.0.0.1:3000");
        assert_eq!(c.database_url, "sqlite://payments.db");
        assert_eq!(c.database, Backend::Sqlite);
        assert_eq!(c.store, StoreKind::Sqlite);
        assert_eq!(c.slow, Duration::from_millis(2000));
        assert_eq!(c.lease, Duration::from_secs(30));
        assert_eq!(c.errors, ErrorFormat::Problem);
        assert_eq!(
            c.limits,
            Limits {
                header_timeout: Duration::from_secs(5),
                body_timeout: Duration::from_secs(10),
                max_connections: 1024,
            }
        );
    }

    #[test]
    fn the_limits_are_configurable() {
        let c = config(&[
            ("HEADER_TIMEOUT_MS", "250"),
            ("BODY_TIMEOUT_MS", "750"),
            ("MAX_CONNECTIONS", "4"),
        ])
        .unwrap();
        assert_eq!(c.limits.header_timeout, Duration::from_millis(250));
        assert_eq!(c.limits.body_timeout, Duration::from_millis(750));
        assert_eq!(c.limits.max_connections, 4);
    }

    #[test]
    fn errors_may_be_in_stripes_format() {
        let c = config(&[("ERROR_FORMAT", "Stripe")]).unwrap();
        assert_eq!(c.errors, ErrorFormat::Stripe);
        let c = config(&[("ERROR_FORMAT", "problem")]).unwrap();
        assert_eq!(c.errors, ErrorFormat::Problem);
    }

    #[test]
    fn the_lease_is_configurable() {
        let c = config(&[("IDEM_LEASE_MS", "1500")]).unwrap();
        assert_eq!(c.lease, Duration::from_millis(1500));
    }

    #[test]
    fn the_store_follows_database_url_unless_overridden() {
        let pg = config(&[("DATABASE_URL", "postgres://u@localhost/db")]).unwrap();
        assert_eq!(
            (pg.database, pg.store),
            (Backend::Postgres, StoreKind::Postgres)
        );
        let my = config(&[("DATABASE_URL", "mysql://root@127.0.0.1:3306/pay")]).unwrap();
        assert_eq!((my.database, my.store), (Backend::MySql, StoreKind::MySql));
        let mem = config(&[("IDEM_STORE", "Memory")]).unwrap();
        assert_eq!(
            (mem.database, mem.store),
            (Backend::Sqlite, StoreKind::Memory)
        );
    }

    #[test]
    fn redis_keeps_the_records_and_the_database_the_data() {
        let c = config(&[("IDEM_STORE", "redis")]).unwrap();
        assert_eq!((c.store, c.database), (StoreKind::Redis, Backend::Sqlite));
        let redis = c.redis.unwrap();
        assert_eq!(redis.url, "redis://127.0.0.1:6379");
        assert_eq!(redis.prefix, "payments:idem:");
        let c = config(&[
            ("IDEM_STORE", "redis"),
            ("REDIS_URL", "redis://:pw@cache:6380/2"),
            ("REDIS_PREFIX", "acme:"),
            ("DATABASE_URL", "postgres://u@db/pay"),
        ])
        .unwrap();
        assert_eq!(c.database, Backend::Postgres);
        assert_eq!(
            c.redis,
            Some(Redis {
                url: "redis://:pw@cache:6380/2".into(),
                prefix: "acme:".into()
            })
        );
        // Without IDEM_STORE=redis, REDIS_URL is not read.
        assert_eq!(config(&[("REDIS_URL", "nonsense")]).unwrap().redis, None);
    }

    #[test]
    fn dynamodb_keeps_the_records_in_its_table() {
        let c = config(&[("IDEM_STORE", "DynamoDB")]).unwrap();
        assert_eq!(
            (c.store, c.database),
            (StoreKind::DynamoDb, Backend::Sqlite)
        );
        assert_eq!(c.dynamodb_table.as_deref(), Some("payments-idempotency"));
        let c = config(&[("IDEM_STORE", "dynamodb"), ("DYNAMODB_TABLE", "pay-idem")]).unwrap();
        assert_eq!(c.dynamodb_table.as_deref(), Some("pay-idem"));
        // Without IDEM_STORE=dynamodb, DYNAMODB_TABLE is not read.
        let c = config(&[("DYNAMODB_TABLE", "pay-idem")]).unwrap();
        assert_eq!(c.dynamodb_table, None);
    }

    #[test]
    fn mistakes_name_the_variable() {
        let cases = [
            (&[("DATABASE_URL", "mongodb://x")][..], "DATABASE_URL"),
            (&[("IDEM_STORE", "dynamo")][..], "IDEM_STORE"),
            (
                &[("IDEM_STORE", "redis"), ("REDIS_URL", "127.0.0.1:6379")][..],
                "REDIS_URL must start with `redis://`",
            ),
            (&[("SLOW_MS", "fast")][..], "SLOW_MS"),
            (&[("IDEM_LEASE_MS", "0")][..], "IDEM_LEASE_MS"),
            (&[("IDEM_LEASE_MS", "1.5s")][..], "IDEM_LEASE_MS"),
            (&[("HEADER_TIMEOUT_MS", "0")][..], "HEADER_TIMEOUT_MS"),
            (&[("BODY_TIMEOUT_MS", "-1")][..], "BODY_TIMEOUT_MS"),
            (&[("MAX_CONNECTIONS", "many")][..], "MAX_CONNECTIONS"),
            (&[("ERROR_FORMAT", "xml")][..], "ERROR_FORMAT"),
            (
                &[
                    ("IDEM_STORE", "postgres"),
                    ("DATABASE_URL", "sqlite://a.db"),
                ][..],
                "DATABASE_URL must be a `postgres:` URL",
            ),
        ];
        for (vars, expected) in cases {
            let msg = config(vars).unwrap_err().to_string();
            assert!(msg.contains(expected), "{msg}");
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/pay?sslmode=require"),
            "postgres://app:***@db:5432/pay?sslmode=require"
        );
        assert_eq!(redact("sqlite://payments.db"), "sqlite://payments.db");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(
            redact("redis://:s3cret@cache:6379/0"),
            "redis://:***@cache:6379/0"
        );
    }
}
