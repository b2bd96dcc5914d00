\set k random(1, 9000000000000000000)
\set k2 :k + 1
BEGIN \; SELECT pgb.claim_once(sha256(int8send(:k)), :k);
INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
SELECT pgb.complete_once(sha256(int8send(:k)), sha256(int8send(:k2)), :k, 1800000000000, 1800086400001, convert_from(decode('6f70','hex'),'UTF8'), 1700000000000, convert_from(decode('6f70','hex'),'UTF8'), convert_from(decode('6f70','hex'),'UTF8'), decode('6f70', 'hex'), 201::smallint, 1700000000001) \; COMMIT \; BEGIN;
ROLLBACK;
