//! Fills a store with completed records before a load run, to measure whether a request costs the
//! same with a million records stored as with none (`idem-bench-server --preload N`).
//!
//! Records are written in each store's real format, under random-looking keys (SHA-256 or random
//! bytes, so indexes and hash tables see the spread of real keys), each holding a
//! [`PAYLOAD_BYTES`]-byte response, the size of the bench handler's stored response:
//!
//! - memory: through the `Store` API (claim, then complete), spread over 1 000 tenants;
//! - SQLite: one `INSERT .. SELECT` over a recursive CTE into `idem_records`;
//! - PostgreSQL: one `INSERT .. SELECT` over `generate_series` into the store's table, then
//!   `VACUUM ANALYZE`;
//! - Redis: a Lua script writing the store's hashes (`<prefix>{<hex>}`) with their `PEXPIRE`,
//!   5 000 keys per call (each call blocks that Redis for some tens of milliseconds).
//!
//! Of the `n` records, the last `expiring` written expire one after another over the next
//! `expiring_over` from when they are written (so the sweeper has work while the load runs);
//! the others live a day.

use std::time::Duration;

use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{ClaimRequest, Completion, LeaseToken, MemoryStore, Store};
use sha2::{Digest, Sha256};

/// Bytes of response each preloaded record holds.
pub const PAYLOAD_BYTES: usize = 200;

const DAY: Duration = Duration::from_secs(24 * 3600);

/// How many records, and how many of them expire soon.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Records to write.
    pub n: u64,
    /// Of which this many, written last, expire one after another over `expiring_over`.
    pub expiring: u64,
    /// Over how long the `expiring` records expire, from when they are written.
    pub expiring_over: Duration,
}

/// A run of records written together: `count` of them, living a day or expiring soon.
#[derive(Debug, Clone, Copy)]
struct Batch {
    count: u64,
    /// Milliseconds over which the batch's records expire one after another (0: a day).
    over_ms: i64,
}

impl Batch {
    /// How long record `j` of the batch (0-based) lives.
    fn ttl_ms(self, j: u64) -> i64 {
        if self.over_ms == 0 {
            DAY.as_millis() as i64
        } else {
            self.over_ms * (j as i64 + 1) / self.count.max(1) as i64
        }
    }
}

impl Plan {
    /// The records living a day, then those expiring soon.
    fn batches(&self) -> [Batch; 2] {
        let expiring = self.expiring.min(self.n);
        [
            Batch {
                count: self.n - expiring,
                over_ms: 0,
            },
            Batch {
                count: expiring,
                over_ms: i64::try_from(self.expiring_over.as_millis())
                    .unwrap_or(i64::MAX)
                    .max(1),
            },
        ]
    }
}

/// A record key that looks like a real one: SHA-256 of `seed` and `i`.
fn digest(seed: u64, i: u64) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(i.to_le_bytes());
    hasher.finalize().into()
}

/// Claims and completes `plan.n` records through the store's API.
pub async fn memory(store: &MemoryStore, plan: Plan) -> Result<(), String> {
    let seed = fastrand::u64(..);
    let payload = vec![b'x'; PAYLOAD_BYTES];
    let mut i = 0;
    for batch in plan.batches() {
        let now = SystemClock.now();
        for j in 0..batch.count {
            i += 1;
            let expires_at = Timestamp::from_millis(now.as_millis() + batch.ttl_ms(j));
            one(store, seed, i, now, expires_at, &payload).await?;
        }
    }
    Ok(())
}

/// Claims and completes record `i`.
async fn one(
    store: &MemoryStore,
    seed: u64,
    i: u64,
    now: Timestamp,
    expires_at: Timestamp,
    payload: &[u8],
) -> Result<(), String> {
    {
        let key = RecordKey::from_bytes(digest(seed, i));
        let fingerprint = Fingerprint::from_bytes(digest(!seed, i));
        let token = LeaseToken::random();
        store
            .claim(ClaimRequest {
                key: &key,
                fingerprint: &fingerprint,
                token,
                now,
                lease_until: now.after(Duration::from_secs(60)),
                expires_at,
                operation: "POST /preload",
                scope: "global",
                scope_value: "",
                tenant: i % 1000,
            })
            .await
            .map_err(|e| format!("preload claim {i}: {e}"))?;
        store
            .complete(
                &key,
                token,
                Completion {
                    payload,
                    status: Some(201),
                    completed_at: now,
                    expires_at,
                },
            )
            .await
            .map_err(|e| format!("preload completion {i}: {e}"))?;
    }
    Ok(())
}

/// Inserts `plan.n` completed records into the SQLite store's `idem_records`.
pub async fn sqlite(pool: &sqlx::SqlitePool, plan: Plan) -> Result<(), String> {
    for batch in plan.batches() {
        sqlx::query(
            "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?1)
             INSERT INTO idem_records (key, fingerprint, token, state, owners, lease_until,
                 expires_at, response, operation, status, created_at, completed_at)
             SELECT randomblob(32), randomblob(32), random(), 'completed', 1, ?2,
                 CASE WHEN ?3 = 0 THEN ?2 + ?4 ELSE ?2 + ?3 * (i + 1) / ?1 END,
                 zeroblob(?5), 'POST /preload', 201, ?2, ?2
             FROM c WHERE ?1 > 0",
        )
        .bind(i64::try_from(batch.count).unwrap_or(i64::MAX))
        .bind(SystemClock.now().as_millis())
        .bind(batch.over_ms)
        .bind(DAY.as_millis() as i64)
        .bind(PAYLOAD_BYTES as i64)
        .execute(pool)
        .await
        .map_err(|e| format!("SQLite preload: {e}"))?;
    }
    sqlx::query("ANALYZE")
        .execute(pool)
        .await
        .map_err(|e| format!("SQLite ANALYZE: {e}"))?;
    // Moves the preload's write-ahead log into the database file and empties it, as a store
    // that has held its records for a while is: otherwise the first checkpoint, hundreds of MB
    // of the preload's pages, would land in the measured run.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(pool)
        .await
        .map_err(|e| format!("SQLite checkpoint: {e}"))?;
    Ok(())
}

/// Inserts `plan.n` completed records into the PostgreSQL store's table `schema.table`.
pub async fn postgres(
    pool: &sqlx::PgPool,
    schema: &str,
    table: &str,
    plan: Plan,
) -> Result<(), String> {
    // The names come from the store, which validated them as plain identifiers.
    let records = format!("\"{schema}\".\"{table}\"");
    let insert = format!(
        "INSERT INTO {records} (key, fingerprint, token, state, owners, lease_until, expires_at,
             response, operation, status, created_at, completed_at)
         SELECT sha256(int8send(i) || $1), sha256(int8send(-i) || $1),
             (random() * 9e18)::bigint, 'completed', 1, $2,
             CASE WHEN $3 = 0 THEN $2 + $4 ELSE $2 + $3 * (i + 1) / $5 END,
             convert_to(repeat('x', $6), 'UTF8'), 'POST /preload', 201, $2, $2
         FROM generate_series(0, $5 - 1) AS i"
    );
    let failed = |e: sqlx::Error| format!("PostgreSQL preload: {e}");
    for batch in plan.batches() {
        // The store's sessions time statements out after 5 s; a million rows take longer.
        let mut tx = pool.begin().await.map_err(failed)?;
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(fastrand::u64(..).to_le_bytes().to_vec())
            .bind(SystemClock.now().as_millis())
            .bind(batch.over_ms)
            .bind(DAY.as_millis() as i64)
            .bind(i64::try_from(batch.count).unwrap_or(i64::MAX))
            .bind(PAYLOAD_BYTES as i32)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
    }
    let mut conn = pool.acquire().await.map_err(failed)?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await
        .map_err(failed)?;
    // As a table in service would be: vacuumed, so autovacuum does not pick the new rows up
    // in the middle of the measured runs.
    sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {records}")))
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("PostgreSQL VACUUM ANALYZE: {e}"))?;
    // Give the pooled connection back as the store configured it.
    sqlx::query("RESET statement_timeout")
        .execute(&mut *conn)
        .await
        .map_err(failed)?;
    Ok(())
}

/// Writes the Redis store's hashes for records `from..to` of a batch under `prefix`, with the
/// `PEXPIRE` the store would set.
const REDIS_SCRIPT: &str = r"
local prefix, from, to, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local count, over, day, seed = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local payload = string.rep('x', tonumber(ARGV[9]))
for i = from, to - 1 do
  local hex = redis.sha1hex(seed .. ':' .. i) .. string.sub(redis.sha1hex(seed .. '/' .. i), 1, 24)
  local key = prefix .. '{' .. hex .. '}'
  local px = day
  if over > 0 then px = math.floor(over * (i + 1) / count) end
  redis.call('HSET', key, 'state', 'completed',
    'fingerprint', redis.sha1hex(hex) .. string.sub(hex, 1, 24), 'token', tostring(i),
    'owners', '1', 'lease_until', string.format('%d', now), 'expires_at', string.format('%d', now + px),
    'operation', 'POST /preload', 'created_at', string.format('%d', now), 'payload', payload,
    'completed_at', string.format('%d', now), 'status', '201')
  redis.call('PEXPIRE', key, px)
end
return to - from
";

/// Fills the Redis server at `url` with `plan.n` records under the store's `prefix`, 5 000 per
/// script call.
pub async fn redis(url: &str, prefix: &str, plan: Plan) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| format!("Redis preload: {e}"))?;
    // A script call blocks the server for tens of milliseconds, more on a loaded machine.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_connection_timeout(Some(Duration::from_secs(10)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("Redis preload: {e}"))?;
    let script = redis::Script::new(REDIS_SCRIPT);
    for batch in plan.batches() {
        let now = SystemClock.now().as_millis();
        let seed = fastrand::u64(..).to_string();
        let mut from = 0u64;
        while from < batch.count {
            let to = (from + 5_000).min(batch.count);
            let _: i64 = script
                .arg(prefix)
                .arg(from)
                .arg(to)
                .arg(now)
                .arg(batch.count)
                .arg(batch.over_ms)
                .arg(DAY.as_millis() as i64)
                .arg(&seed)
                .arg(PAYLOAD_BYTES)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| format!("Redis preload: {e}"))?;
            from = to;
        }
    }
    Ok(())
}
