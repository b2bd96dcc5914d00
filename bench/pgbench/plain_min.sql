\set k random(1, 9000000000000000000)
INSERT INTO pgb.bare_keys (key) VALUES (:k);
INSERT INTO pgb.bench_orders (amount, items, customer) VALUES (100, 3, 'cus_1') RETURNING id;
UPDATE pgb.bare_keys SET response = decode(:pl, 'hex') WHERE key = :k;
