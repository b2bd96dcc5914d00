-- #54: tpg_atomic.sql with every statement its own wait (five).
\set n :n + 1
\set k random(1, 9000000000000000000)
\set k2 :k + 1
\set exp :exp0 + :n
BEGIN;
SELECT idem.idempotency_records_tx_claim(sha256(int8send(:k)), :k, '1000', '5000');
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
SELECT idem.idempotency_records_tx_done(sha256(int8send(:k)), :k, :exp, :pl, 201::smallint, 1700000000001, sha256(int8send(:k2)), 1800000000000, 'POST /tpg/atomic', 1700000000000, 'global', '');
COMMIT;
