-- #54 (a): tpg_atomic.sql on a records table without its expires_at and in-flight indexes.
\set n :n + 1
\set k random(1, 9000000000000000000)
\set k2 :k + 1
\set exp :exp0 + :n
\startpipeline
BEGIN;
SELECT noidx.claim(sha256(int8send(:k)), :k, '1000', '5000');
\endpipeline
INSERT INTO bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
\startpipeline
SELECT noidx.done(sha256(int8send(:k)), :k, :exp, :pl, 201::smallint, 1700000000001, sha256(int8send(:k2)), 1800000000000, 'POST /tpg/atomic', 1700000000000, 'global', '');
COMMIT;
\endpipeline
