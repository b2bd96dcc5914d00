-- #54: tpg_hand.sql pipelined as TokioPostgresTx pipelines (BEGIN with the key's INSERT, the UPDATE with COMMIT): three waits.
\set n :n + 1
\set key :base + :n * 16 + :client_id
\startpipeline
BEGIN;
INSERT INTO bench_keys (key) VALUES (:key) ON CONFLICT DO NOTHING RETURNING 1;
\endpipeline
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
\startpipeline
UPDATE bench_keys SET response = :resp WHERE key = :key;
COMMIT;
\endpipeline
