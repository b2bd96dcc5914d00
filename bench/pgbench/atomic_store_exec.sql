\set k random(1, 9000000000000000000)
\set k2 :k + 1
\if :prepared = 0
PREPARE c1(bytea, bigint) AS SELECT pgb.claim_once($1, $2) \; PREPARE c2(bytea, bytea, bigint, bigint, bigint, text, bigint, text, text, bytea, smallint, bigint) AS SELECT pgb.complete_once($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12) \; PREPARE ins AS INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
\set prepared 1
\endif
BEGIN \; EXECUTE c1(sha256(int8send(:k)), :k);
EXECUTE ins;
EXECUTE c2(sha256(int8send(:k)), sha256(int8send(:k2)), :k, 1800000000000, 1800086400001, convert_from(decode('6f70','hex'),'UTF8'), 1700000000000, convert_from(decode('6f70','hex'),'UTF8'), convert_from(decode('6f70','hex'),'UTF8'), decode(':pl', 'hex'), 201::smallint, 1700000000001) \; COMMIT \; BEGIN;
ROLLBACK;
