-- #54: the hand-written tokio-postgres handler (bench/src/tokio_pg.rs): five statements, five waits; the key an increasing number as text, the response 64 bytes.
\set n :n + 1
\set key :base + :n * 16 + :client_id
BEGIN;
INSERT INTO bench_keys (key) VALUES (:key) ON CONFLICT DO NOTHING RETURNING 1;
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
UPDATE bench_keys SET response = :resp WHERE key = :key;
COMMIT;
