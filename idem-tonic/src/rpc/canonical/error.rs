//! The errors of reading descriptor sets and of canonicalizing, worded to say which message, which
//! field and what was wrong, since they end up in logs of rejected requests.

use std::fmt;

/// The encoded `google.protobuf.FileDescriptorSet` did not decode.
#[derive(Debug)]
pub(crate) enum SchemaError {
    /// prost could not decode the bytes as a `FileDescriptorSet`.
    Decode(prost::DecodeError),
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => write!(
                f,
                "the bytes are not an encoded google.protobuf.FileDescriptorSet: {e}"
            ),
        }
    }
}

impl std::error::Error for SchemaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Decode(e) => Some(e),
        }
    }
}

/// Why [`Schemas::canonical`](super::Schemas::canonical) could not canonicalize a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CanonicalError {
    /// No added descriptor set defines the message.
    UnknownMessage(String),
    /// `skip` names no field of the message.
    UnknownSkipField {
        /// The message's full name.
        message: String,
        /// The field name that was asked to be skipped.
        field: String,
    },
    /// The bytes are not a valid encoding of the message.
    Malformed {
        /// The full name of the (possibly nested) message whose bytes are wrong.
        message: String,
        /// The field number, when the field's key could be read.
        field: Option<u32>,
        /// Where the field (or the unreadable key) starts in the input.
        offset: usize,
        /// What is wrong.
        problem: WireProblem,
    },
    /// Messages nest deeper than protobuf's recursion limit.
    TooDeep {
        /// The full name of the message found beyond the limit.
        message: String,
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownMessage(name) => {
                write!(f, "message `{name}` is in no added FileDescriptorSet")
            }
            Self::UnknownSkipField { message, field } => {
                write!(
                    f,
                    "message `{message}` has no field named `{field}` to skip"
                )
            }
            Self::Malformed {
                message,
                field,
                offset,
                problem,
            } => {
                write!(f, "malformed encoding of message `{message}`")?;
                if let Some(number) = field {
                    write!(f, ", field {number}")?;
                }
                write!(f, " at byte {offset}: {problem}")
            }
            Self::TooDeep { message, limit } => {
                write!(
                    f,
                    "message `{message}` is nested more than {limit} levels deep"
                )
            }
        }
    }
}

impl std::error::Error for CanonicalError {}

/// What is wrong with some wire bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireProblem {
    /// A varint runs past the end of its message.
    TruncatedVarint,
    /// A varint is longer than ten bytes or does not fit in 64 bits.
    OverlongVarint,
    /// A length-delimited or fixed-width value runs past the end of its message.
    Truncated {
        /// The bytes the value needs.
        needed: u64,
        /// The bytes left in the message.
        available: usize,
    },
    /// A field number of 0 or above 2^29 - 1.
    InvalidFieldNumber(u64),
    /// Wire type 3 or 4: proto2 groups, which are refused.
    Group(u8),
    /// Wire type 6 or 7, which do not exist.
    InvalidWireType(u8),
    /// A message-typed field whose wire type is not length-delimited.
    NotLengthDelimited(u8),
}

impl fmt::Display for WireProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TruncatedVarint => f.write_str("varint runs past the end of the message"),
            Self::OverlongVarint => {
                f.write_str("varint is longer than 10 bytes or overflows 64 bits")
            }
            Self::Truncated { needed, available } => {
                write!(
                    f,
                    "value needs {needed} bytes but only {available} are left"
                )
            }
            Self::InvalidFieldNumber(n) => {
                write!(f, "field number {n} is out of range 1..=536870911")
            }
            Self::Group(w) => write!(f, "wire type {w} (group) is not supported"),
            Self::InvalidWireType(w) => write!(f, "wire type {w} does not exist"),
            Self::NotLengthDelimited(w) => {
                write!(
                    f,
                    "message-typed field has wire type {w} instead of 2 (length-delimited)"
                )
            }
        }
    }
}
