//! The operators' methods on Redis: listing, reading, forgetting, purging and counting records.
//!
//! Listing, counting and purging walk the prefix's keys ([`Keys`]: `SCAN` on every node), read
//! each record's fields (not its payload) a batch at a time, and select with
//! [`RecordFilter::matches`] here, in process: Redis has no index to ask. Expiry is the engine's
//! `now` against the record's `expires_at`, never Redis's clock; a record Redis has already
//! dropped is simply not there. Forgetting, and deleting each record a purge chose, are Lua
//! scripts: the check and the delete are one atomic step.

use std::sync::LazyLock;

use bytes::Bytes;
use redis::{RedisError, RedisResult, Script, Value};
use tokio::task::JoinSet;

use super::RedisStore;
use super::codec::{millis, number};
use super::scan::Keys;
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::Admin;
use idem_core::store::records::{
    Forgotten, Oldest, Record, RecordFilter, RecordState, RecordStats, RecordTimes,
};

static FORGET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("forget.lua")));
static PURGE_COMPLETED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("purge_completed.lua")));

/// The fields of a record's hash an operator's view is made of, in the order [`decode`] reads
/// them (never the payload: a listing does not carry it).
const FIELDS: [&str; 10] = [
    "state",
    "token",
    "operation",
    "scope",
    "scope_value",
    "status",
    "created_at",
    "completed_at",
    "lease_until",
    "expires_at",
];

/// How many records are read, or deleted by a purge, at once: one command each, in flight
/// together on the multiplexed connection (and, on a cluster, each sent to the node of its key).
const AT_ONCE: usize = 256;

/// A record as a walk read it: what operators see, and the lease token a purge's delete checks.
#[derive(Debug)]
struct Stored {
    info: Record,
    token: Vec<u8>,
}

impl RedisStore {
    /// Reads the records under `keys`, [`AT_ONCE`] at a time; a record that is gone by now
    /// (deleted, or dropped by Redis, since the scan) is left out.
    async fn read_many(&self, keys: &[RecordKey]) -> Result<Vec<Stored>, StoreError> {
        let mut read = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(AT_ONCE) {
            let reads = chunk.iter().map(|key| {
                let (key, name, conn) = (*key, self.record_key(key), self.conn.clone());
                async move {
                    let mut hmget = redis::cmd("HMGET");
                    hmget.arg(&name).arg(&FIELDS[..]);
                    (key, corrupt_if_not_a_hash(conn.query(&hmget).await, &name))
                }
            });
            for (key, values) in self.all(reads.collect()).await? {
                let values = values.map_err(StoreError::unavailable)??;
                if let Some(stored) = decode(key, &values)? {
                    read.push(stored);
                }
            }
        }
        Ok(read)
    }

    /// Deletes the record a purge read and chose, if it is still that record, completed and
    /// live at `now` (`purge_completed.lua`): 1 when deleted, else 0.
    fn delete_if_unchanged(
        &self,
        stored: Stored,
        now: Timestamp,
    ) -> impl Future<Output = RedisResult<i64>> + Send + 'static {
        let conn = self.conn.clone();
        let mut script = PURGE_COMPLETED.prepare_invoke();
        script
            .key(self.record_key(&stored.info.key))
            .arg(stored.token)
            .arg(
                stored
                    .info
                    .completed_at
                    .map_or_else(String::new, |at| at.as_millis().to_string()),
            )
            .arg(now.as_millis());
        async move { conn.invoke(&script).await }
    }

    /// Runs `tasks` at once (their commands in flight together on the multiplexed connection,
    /// each to its key's node on a cluster) and returns their outputs, within the deadline of
    /// one operation.
    async fn all<T, F>(&self, tasks: Vec<F>) -> Result<Vec<T>, StoreError>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let count = tasks.len();
        let mut running: JoinSet<T> = tasks.into_iter().collect();
        self.within(async {
            let mut done = Vec::with_capacity(count);
            while let Some(task) = running.join_next().await {
                match task {
                    Ok(output) => done.push(output),
                    Err(failed) => std::panic::resume_unwind(failed.into_panic()),
                }
            }
            Ok::<_, RedisError>(done)
        })
        .await
    }
}

/// `HMGET`'s reply, with Redis's refusal to read a key of another type as a hash turned into
/// [`StoreError::Corrupt`] (a key under a record's name that is not one), and other failures
/// left to the caller. The outer result is Redis's, the inner one the record's.
fn corrupt_if_not_a_hash(
    reply: RedisResult<Vec<Option<Vec<u8>>>>,
    name: &str,
) -> RedisResult<Result<Vec<Option<Vec<u8>>>, StoreError>> {
    match reply {
        Ok(values) => Ok(Ok(values)),
        Err(error) if is_wrong_type(&error) => Ok(Err(StoreError::Corrupt(
            format!("record {name}: not a hash").into(),
        ))),
        Err(error) => Err(error),
    }
}

fn is_wrong_type(error: &RedisError) -> bool {
    error.code() == Some("WRONGTYPE")
}

/// A record from its [`FIELDS`] as `HMGET` read them: `None` when none is there (the hash is
/// gone), [`StoreError::Corrupt`] when a field a record always has is missing or does not parse.
/// `scope` and `scope_value` read empty on records written before the store kept them, as
/// `completed_at` reads `None`.
fn decode(key: RecordKey, values: &[Option<Vec<u8>>]) -> Result<Option<Stored>, StoreError> {
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    let corrupt =
        |what: String| StoreError::Corrupt(format!("record {}: {what}", key.to_hex()).into());
    let field = |name: &str| {
        FIELDS
            .iter()
            .position(|f| *f == name)
            .and_then(|i| values.get(i))
            .and_then(Option::as_deref)
    };
    let text = |name: &str| match field(name) {
        None => Ok(""),
        Some(bytes) => {
            std::str::from_utf8(bytes).map_err(|_| corrupt(format!("{name} is not UTF-8")))
        }
    };
    let time = |name: &str| match field(name) {
        None => Ok(None),
        Some(ms) => millis(ms)
            .map(Some)
            .ok_or_else(|| corrupt(format!("{name} is not a number"))),
    };
    let required = |name: &str| time(name)?.ok_or_else(|| corrupt(format!("no {name}")));
    let completed = match field("state") {
        Some(b"in_flight") => false,
        Some(b"completed") => true,
        Some(other) => {
            return Err(corrupt(format!(
                "unknown state {:?}",
                String::from_utf8_lossy(other)
            )));
        }
        None => return Err(corrupt("no state".to_owned())),
    };
    let token = field("token").ok_or_else(|| corrupt("no token".to_owned()))?;
    let expires_at = required("expires_at")?;
    let times = RecordTimes {
        created_at: required("created_at")?,
        completed_at: time("completed_at")?,
        // Kept by a completed record, and not shown for it.
        lease_until: if completed {
            time("lease_until")?.unwrap_or(expires_at)
        } else {
            required("lease_until")?
        },
        expires_at,
    };
    let status = match field("status") {
        None => None,
        Some(digits) => Some(
            number(digits)
                .and_then(|n| u16::try_from(n).ok())
                .ok_or_else(|| corrupt("status is not a status code".to_owned()))?,
        ),
    };
    let info = Record::new(
        key,
        text("operation")?,
        text("scope")?,
        text("scope_value")?,
        completed,
        status,
        times,
    );
    Ok(Some(Stored {
        info,
        token: token.to_vec(),
    }))
}

impl Admin for RedisStore {
    async fn list_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut oldest = Oldest::new(limit);
        let mut keys = Keys::new(self).await?;
        while let Some(batch) = keys.next().await? {
            for stored in self.read_many(&batch).await? {
                if filter.matches(&stored.info, now) {
                    oldest.offer(stored.info);
                }
            }
        }
        Ok(oldest.into_vec())
    }

    async fn read_record(&self, key: &RecordKey) -> Result<Option<Record>, StoreError> {
        let name = self.record_key(key);
        let mut hmget = redis::cmd("HMGET");
        hmget.arg(&name).arg(&FIELDS[..]).arg("payload");
        let mut values: Vec<Option<Vec<u8>>> = self
            .within(async { corrupt_if_not_a_hash(self.conn.query(&hmget).await, &name) })
            .await??;
        let payload = values.pop().flatten();
        let Some(stored) = decode(*key, &values)? else {
            return Ok(None);
        };
        if !stored.info.completed {
            return Ok(Some(stored.info));
        }
        let payload = payload.ok_or_else(|| {
            StoreError::Corrupt(format!("record {name}: completed without a payload").into())
        })?;
        Ok(Some(stored.info.with_payload(Some(Bytes::from(payload)))))
    }

    async fn forget_record(
        &self,
        key: &RecordKey,
        now: Timestamp,
        force: bool,
    ) -> Result<Forgotten, StoreError> {
        let name = self.record_key(key);
        let mut script = FORGET.prepare_invoke();
        script
            .key(&name)
            .arg(now.as_millis())
            .arg(if force { "1" } else { "0" })
            .arg(&FIELDS[..]);
        let reply: Value = self.within(self.conn.invoke(&script)).await?;
        let corrupt = |what: &str| StoreError::Corrupt(format!("record {name}: {what}").into());
        let Value::Array(items) = reply else {
            return Err(corrupt("the forget script's reply is not an array"));
        };
        let mut items = items.into_iter();
        let outcome = match items.next() {
            Some(Value::BulkString(tag)) => tag,
            Some(Value::SimpleString(tag)) => tag.into_bytes(),
            _ => return Err(corrupt("the forget script's reply has no outcome")),
        };
        let fields = match items.next() {
            Some(fields) => redis::from_redis_value::<Vec<Option<Vec<u8>>>>(fields)
                .map_err(|_| corrupt("the forget script's fields are not strings"))?,
            None => Vec::new(),
        };
        let info = |fields: &[Option<Vec<u8>>]| match decode(*key, fields) {
            Ok(Some(stored)) => Ok(stored.info),
            Ok(None) => Err(corrupt("a hash without a record's fields")),
            Err(error) => Err(error),
        };
        match outcome.as_slice() {
            b"absent" => Ok(Forgotten::Absent),
            b"not_a_hash" => Err(corrupt("not a hash")),
            b"leased" => Ok(Forgotten::Leased(info(&fields)?)),
            b"deleted" => match info(&fields) {
                Ok(info) => Ok(Forgotten::Deleted(info)),
                // Only a forced forget deletes what does not read as a record: say it is gone.
                Err(StoreError::Corrupt(what)) => Err(StoreError::Corrupt(
                    format!("{what} (deleted, as forced)").into(),
                )),
                Err(error) => Err(error),
            },
            other => Err(corrupt(&format!(
                "unknown forget outcome {:?}",
                String::from_utf8_lossy(other)
            ))),
        }
    }

    async fn purge_records(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut purged = 0u64;
        if limit == 0 {
            return Ok(0);
        }
        let mut keys = Keys::new(self).await?;
        while let Some(batch) = keys.next().await? {
            let mut chosen = self.read_many(&batch).await?.into_iter().filter(|stored| {
                stored.info.state(now) == RecordState::Completed
                    && filter.matches(&stored.info, now)
            });
            // Never more deletes at once than are left to do, so the limit holds exactly.
            loop {
                let left = usize::try_from(u64::from(limit) - purged).unwrap_or(usize::MAX);
                let deletes: Vec<_> = chosen
                    .by_ref()
                    .take(left.min(AT_ONCE))
                    .map(|stored| self.delete_if_unchanged(stored, now))
                    .collect();
                if deletes.is_empty() {
                    break;
                }
                for deleted in self.all(deletes).await? {
                    purged += u64::from(deleted.map_err(StoreError::unavailable)? == 1);
                }
                if purged >= u64::from(limit) {
                    return Ok(purged);
                }
            }
        }
        Ok(purged)
    }

    async fn record_stats(
        &self,
        filter: &RecordFilter,
        now: Timestamp,
    ) -> Result<RecordStats, StoreError> {
        let mut stats = RecordStats::new();
        let mut keys = Keys::new(self).await?;
        while let Some(batch) = keys.next().await? {
            for stored in self.read_many(&batch).await? {
                if filter.matches(&stored.info, now) {
                    stats.add(&stored.info, now);
                }
            }
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: RecordKey = RecordKey::from_bytes([0xcd; 32]);

    /// The fields of a record, as `HMGET` returns them, with `changes` applied (`None` removes).
    fn hash(changes: &[(&str, Option<&[u8]>)]) -> Vec<Option<Vec<u8>>> {
        let mut fields: Vec<(&str, Option<&[u8]>)> = vec![
            ("state", Some(b"completed")),
            ("token", Some(b"-7")),
            ("operation", Some(b"charges.create")),
            ("scope", Some(b"org")),
            ("scope_value", Some(b"acme")),
            ("status", Some(b"201")),
            ("created_at", Some(b"1000")),
            ("completed_at", Some(b"2000")),
            ("lease_until", Some(b"31000")),
            ("expires_at", Some(b"86402000")),
        ];
        for (name, value) in changes {
            if let Some(field) = fields.iter_mut().find(|(n, _)| n == name) {
                field.1 = *value;
            }
        }
        assert_eq!(fields.iter().map(|(n, _)| *n).collect::<Vec<_>>(), FIELDS);
        fields
            .into_iter()
            .map(|(_, v)| v.map(<[u8]>::to_vec))
            .collect()
    }

    fn info(changes: &[(&str, Option<&[u8]>)]) -> Record {
        decode(KEY, &hash(changes)).unwrap().unwrap().info
    }

    #[test]
    fn a_hash_reads_as_what_operators_see() {
        let t = Timestamp::from_millis;
        let done = decode(KEY, &hash(&[])).unwrap().unwrap();
        assert_eq!(done.token, b"-7");
        let times = RecordTimes {
            created_at: t(1000),
            completed_at: Some(t(2000)),
            lease_until: t(31000),
            expires_at: t(86_402_000),
        };
        let expected = Record::new(KEY, "charges.create", "org", "acme", true, Some(201), times);
        assert_eq!(done.info, expected);
        let running = info(&[
            ("state", Some(b"in_flight")),
            ("status", None),
            ("completed_at", None),
        ]);
        assert!(!running.completed);
        assert_eq!(running.lease_until, Some(t(31000)));
        // Written before the store kept them: the scope reads empty, the completion time none.
        let old = info(&[
            ("scope", None),
            ("scope_value", None),
            ("completed_at", None),
        ]);
        assert_eq!((old.scope.as_str(), old.scope_value.as_str()), ("", ""));
        assert_eq!(old.completed_at, None);
        assert!(
            decode(KEY, &vec![None; FIELDS.len()]).unwrap().is_none(),
            "gone"
        );
    }

    #[test]
    fn a_hash_that_is_not_a_record_is_corrupt() {
        for changes in [
            &[("state", None)][..],
            &[("state", Some(&b"running"[..]))],
            &[("token", None)],
            &[("created_at", None)],
            &[("expires_at", Some(b"soon"))],
            &[("state", Some(b"in_flight")), ("lease_until", None)],
            &[("completed_at", Some(b"1.5"))],
            &[("status", Some(b"70000"))],
            &[("scope_value", Some(b"\xff\xfe"))],
        ] {
            assert!(
                matches!(decode(KEY, &hash(changes)), Err(StoreError::Corrupt(_))),
                "{changes:?}"
            );
        }
    }
}
