\set k random(1, 9000000000000000000)
\set k2 :k + 1
BEGIN;
INSERT INTO pgb.bench_keys (key) VALUES (:k::text) ON CONFLICT DO NOTHING RETURNING 1;
INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
UPDATE pgb.bench_keys SET response = decode(:pl, 'hex') WHERE key = :k::text;
COMMIT;
