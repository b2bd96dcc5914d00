//! How a command fails, and the exit code each failure gets.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use idem_runtime::StoreError;

/// Why a command did not do what it was asked.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The arguments or the store URL are wrong (exit 2).
    Usage(String),
    /// The store failed or could not be reached (exit 1; a store configuration it refused: 2).
    Store(StoreError),
    /// The store did not answer within `--timeout` (exit 1).
    Timeout(Duration),
    /// The change was refused: a live owner holds the record (exit 3). Already reported.
    Refused,
    /// No record under that key (exit 4). Already reported.
    NotFound,
}

impl Failure {
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Store(StoreError::Config(_)) | Self::Usage(_) => 2,
            Self::Store(_) | Self::Timeout(_) => 1,
            Self::Refused => 3,
            Self::NotFound => 4,
        })
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(reason) => f.write_str(reason),
            Self::Store(error) => {
                // Each cause once: some errors repeat their source in their own message.
                let mut said = error.to_string();
                let mut source = std::error::Error::source(error);
                while let Some(cause) = source {
                    let cause_text = cause.to_string();
                    if !said.ends_with(&cause_text) {
                        said = format!("{said}: {cause_text}");
                    }
                    source = cause.source();
                }
                f.write_str(&said)
            }
            Self::Timeout(after) => write!(
                f,
                "the store did not answer within {} (--timeout)",
                humantime::format_duration(*after)
            ),
            Self::Refused => f.write_str("refused"),
            Self::NotFound => f.write_str("no such record"),
        }
    }
}
