
DROP SCHEMA IF EXISTS pgb CASCADE;
CREATE SCHEMA pgb;
CREATE TABLE pgb.bench_orders (id bigserial PRIMARY KEY, amount bigint NOT NULL, items integer NOT NULL, customer text NOT NULL);
CREATE TABLE pgb.bench_keys (key text PRIMARY KEY, response bytea);
-- The store's records table as its migrations 1 to 3 leave it.
CREATE TABLE pgb.rec (
    key         bytea   PRIMARY KEY CHECK (octet_length(key) = 32),
    fingerprint bytea   NOT NULL CHECK (octet_length(fingerprint) = 32),
    token       bigint  NOT NULL,
    state       text    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owners      integer NOT NULL,
    lease_until bigint  NOT NULL,
    expires_at  bigint  NOT NULL,
    response    bytea,
    operation    text     NOT NULL DEFAULT '',
    status       smallint,
    created_at   bigint   NOT NULL DEFAULT 0,
    completed_at bigint,
    scope       text NOT NULL DEFAULT '',
    scope_value text NOT NULL DEFAULT '',
    CHECK ((state = 'completed') = (response IS NOT NULL))
);
CREATE INDEX ON pgb.rec (expires_at);
CREATE INDEX ON pgb.rec (operation, lease_until) WHERE state = 'in_flight';
-- The same table made for HOT completions: no in-flight index, room on each page.
CREATE TABLE pgb.rech (LIKE pgb.rec INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (fillfactor = 20);
ALTER TABLE pgb.rech ADD PRIMARY KEY (key);
CREATE INDEX ON pgb.rech (expires_at);
-- Written once, by one-commit mode's functions: the same table.
CREATE TABLE pgb.recw (LIKE pgb.rec INCLUDING ALL);
-- plain_min.sql's claims: a bigint key and the response, no other index.
CREATE TABLE pgb.bare_keys (key bigint PRIMARY KEY, response bytea);
