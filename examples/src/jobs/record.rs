//! What the queue keeps in the object store: task objects, and the idempotency record that maps
//! a key to its task. Both are JSON, readable by producers and consumers in any language.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::clock::Timestamp;
use serde::{Deserialize, Serialize};

/// A task, as stored at `tasks/{task_id}.json` and printed by `jobs get`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    /// A UUID v4.
    pub task_id: String,
    /// What kind of work it is (`email`, `transcode`...).
    pub task_type: String,
    /// The work's input, as submitted: its JSON text, numbers exactly as written.
    pub input: Box<serde_json::value::RawValue>,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
}

/// Tasks are equal when every field is, the input compared as its JSON text.
impl PartialEq for Task {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.task_id,
            &self.task_type,
            self.input.get(),
            &self.created_at,
        ) == (
            &other.task_id,
            &other.task_type,
            other.input.get(),
            &other.created_at,
        )
    }
}

/// Whether a record's task object exists yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The record is written, its task object may not be (its producer may have crashed in
    /// between): the next submit of the key creates the task and flips the record to `ready`.
    Creating,
    /// The task object exists.
    Ready,
}

/// The idempotency record at `idempotency/{scope}/{key_hash}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The client's key, as given.
    pub key: String,
    /// `sha256(scope + ":" + key)`, lower-case hex: the record's file name.
    pub key_hash: String,
    /// The scope the key belongs to.
    pub scope: String,
    /// The task this key maps to, chosen when the record was created.
    pub task_id: String,
    /// Where the task object is, relative to the queue's root.
    pub task_path: String,
    /// The submitted task type.
    pub task_type: String,
    /// SHA-256 of the canonical JSON of the task type and input: a retry with another input is
    /// a conflict.
    pub input_hash: String,
    /// `creating` until the task object exists, then `ready`.
    pub status: Status,
    /// When the record was created (RFC 3339, UTC).
    pub created_at: String,
    /// When the record stops mapping its key (RFC 3339, UTC): after this a submit with the key
    /// replaces it and creates a new task.
    pub expires_at: String,
}

impl Record {
    /// Whether the record has expired at `now`; a record whose time does not parse counts as
    /// expired, so a damaged record is replaced (by compare-and-swap) rather than wedging its key.
    pub(crate) fn expired(&self, now: Timestamp) -> bool {
        parse_time(&self.expires_at).is_none_or(|expires_at| expires_at <= now)
    }
}

/// RFC 3339 with milliseconds, UTC.
pub(crate) fn format_time(at: Timestamp) -> String {
    let millis = u64::try_from(at.as_millis()).unwrap_or(0);
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
}

pub(crate) fn parse_time(text: &str) -> Option<Timestamp> {
    let at = humantime::parse_rfc3339(text).ok()?;
    let millis = at.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_millis();
    Some(Timestamp::from_millis(i64::try_from(millis).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_to_the_millisecond() {
        let at = Timestamp::from_millis(1_750_000_000_123);
        let text = format_time(at);
        assert_eq!(text, "2025-06-15T15:06:40.123Z");
        assert_eq!(parse_time(&text), Some(at));
        assert_eq!(parse_time("yesterday"), None);
    }
}
