//! An operation's name: the identity of its records (part of every record key), and the
//! `endpoint` label of its metrics and traces. Stable across deploys by design: renaming or
//! moving code never changes a name given explicitly.
//!
//! A name is 1..=[`MAX_NAME_LEN`] bytes with no control characters and no whitespace at either
//! end: `charges.create`, `POST /v1/charges`, `jobs::submit`.

/// The longest name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Why a string is not an operation name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error("an operation name must not be empty")]
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    #[error("an operation name has at most {MAX_NAME_LEN} bytes, this one has {len}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A control character (a newline, a tab), which would break log lines and metric labels.
    #[error("an operation name has no control characters; byte {position} is one")]
    ControlCharacter {
        /// Where it is, from 0.
        position: usize,
    },
    /// Whitespace at either end, which would make two names look alike.
    #[error("an operation name does not start or end with whitespace")]
    Padded,
}

/// Checks an operation name.
///
/// ```
/// use idem_rules::name::{NameError, validate};
///
/// assert_eq!(validate("charges.create"), Ok(()));
/// assert_eq!(validate("POST /v1/charges"), Ok(()));
/// assert_eq!(validate(""), Err(NameError::Empty));
/// assert_eq!(validate(" charges"), Err(NameError::Padded));
/// ```
pub fn validate(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { len: name.len() });
    }
    if let Some((position, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(NameError::ControlCharacter { position });
    }
    if name.trim() != name {
        return Err(NameError::Padded);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_printable_trimmed_and_bounded() {
        assert_eq!(validate("jobs::submit"), Ok(()));
        assert_eq!(validate("créer une charge"), Ok(()));
        assert_eq!(validate(&"n".repeat(MAX_NAME_LEN)), Ok(()));
        assert_eq!(
            validate(&"n".repeat(MAX_NAME_LEN + 1)),
            Err(NameError::TooLong { len: 129 })
        );
        assert_eq!(
            validate("a\nb"),
            Err(NameError::ControlCharacter { position: 1 })
        );
        assert_eq!(validate("charges "), Err(NameError::Padded));
    }
}
