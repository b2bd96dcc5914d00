\set k random(1, 9000000000000000000)
\set k2 :k + 1
BEGIN;
SELECT pg_advisory_xact_lock(:k);
SELECT 1 FROM pgb.recw WHERE key = sha256(int8send(:k));
INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
INSERT INTO pgb.recw (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at, scope, scope_value, response, status, completed_at) VALUES (sha256(int8send(:k)), sha256(int8send(:k2)), :k, 'completed', 1, 1800000000000, 1800086400001, 'op', 1700000000000, 'op', 'op', decode(:pl, 'hex'), 201, 1700000000001);
COMMIT;
