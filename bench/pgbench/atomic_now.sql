\set k random(1, 9000000000000000000)
\set k2 :k + 1
BEGIN \; SET LOCAL lock_timeout = 1000 \; INSERT INTO pgb.rec (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at, scope, scope_value) VALUES (sha256(int8send(:k)), sha256(int8send(:k2)), :k, 'in_flight', 1, 1800000000000, 1800086400000, convert_from(decode('6f70','hex'),'UTF8'), 1700000000000, convert_from(decode('6f70','hex'),'UTF8'), convert_from(decode('6f70','hex'),'UTF8')) \; SET LOCAL lock_timeout = 5000 \; SET LOCAL statement_timeout = 5000;
INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
WITH done AS (UPDATE pgb.rec SET state = 'completed', response = decode(':pl', 'hex'), expires_at = 1800086400001, status = 201, completed_at = 1700000000001 WHERE key = sha256(int8send(:k)) AND token = :k AND state = 'in_flight' RETURNING 1) SELECT 1 / count(*)::int FROM done \; COMMIT \; BEGIN;
ROLLBACK;
