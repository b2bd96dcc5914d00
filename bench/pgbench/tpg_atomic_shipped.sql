-- #54: one-commit atomic mode as idem-tokio-postgres sends it since migration 5 (no CHECKs): BEGIN with the claim's call, the handler's INSERT, the record's prepared INSERT with COMMIT (three waits).
\set n :n + 1
\set k random(1, 9000000000000000000)
\set k2 :k + 1
\set exp :exp0 + :n
\startpipeline
BEGIN;
SELECT nochk.claim(sha256(int8send(:k)), :k, '1000', '5000');
\endpipeline
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
\startpipeline
INSERT INTO nochk.idempotency_records (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at, scope, scope_value, response, status, completed_at) VALUES (sha256(int8send(:k)), sha256(int8send(:k2)), :k, 'completed', 1, 1800000000000, :exp, 'POST /tpg/atomic', 1700000000000, 'global', '', :pl, 201, 1700000000001);
COMMIT;
\endpipeline
