-- #54: tpg_atomic_shipped.sql with the claim as two plain prepared statements: the lock with its wait, then (a snapshot taken after the wait) the look for a record and the transaction's timeouts. Still three waits.
\set n :n + 1
\set k random(1, 9000000000000000000)
\set k2 :k + 1
\set exp :exp0 + :n
\startpipeline
BEGIN;
SELECT set_config('lock_timeout', '1000', true), pg_advisory_xact_lock(:k);
SELECT set_config('lock_timeout', '5000', true), set_config('statement_timeout', '5000', true) WHERE NOT EXISTS (SELECT FROM nochk.idempotency_records WHERE key = sha256(int8send(:k)));
\endpipeline
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
\startpipeline
INSERT INTO nochk.idempotency_records (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at, scope, scope_value, response, status, completed_at) VALUES (sha256(int8send(:k)), sha256(int8send(:k2)), :k, 'completed', 1, 1800000000000, :exp, 'POST /tpg/atomic', 1700000000000, 'global', '', :pl, 201, 1700000000001);
COMMIT;
\endpipeline
