-- #54: the tables the tokio-postgres bench writes, as the bench and the store's migrations 1 to 4
-- create them (bench/src/pg.rs; idem-sql/src/postgres/migrations.rs, rendered for schema `idem`,
-- table `idempotency_records`), and the variants tpg.sh measures beside them. Migration 5 since
-- dropped the CHECK constraints: the store's table is now variant `nochk`.
DROP SCHEMA IF EXISTS idem, noidx, nochk, dom CASCADE;
DROP TABLE IF EXISTS public.bench_orders, public.bench_keys;
CREATE TABLE public.bench_orders (id bigserial PRIMARY KEY, amount bigint NOT NULL, items integer NOT NULL, customer text NOT NULL);
CREATE TABLE public.bench_keys (key text PRIMARY KEY, response bytea);
CREATE SCHEMA idem;
CREATE TABLE idem.idempotency_records (
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
CREATE INDEX idempotency_records_expires_at ON idem.idempotency_records (expires_at);
CREATE INDEX idempotency_records_in_flight ON idem.idempotency_records (operation, lease_until) WHERE state = 'in_flight';
-- Migration 4, as shipped.
CREATE FUNCTION idem.idempotency_records_tx_claim(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM "idem"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
CREATE FUNCTION idem.idempotency_records_tx_done(p_key bytea, p_token bigint, p_expires_at bigint,
    p_response bytea, p_status smallint, p_completed_at bigint, p_fingerprint bytea,
    p_lease_until bigint, p_operation text, p_created_at bigint, p_scope text,
    p_scope_value text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO "idem"."idempotency_records" (key, fingerprint, token, state, owners, lease_until, expires_at,
        operation, created_at, scope, scope_value, response, status, completed_at)
    VALUES (p_key, p_fingerprint, p_token, 'completed', 1, p_lease_until, p_expires_at,
        p_operation, p_created_at, p_scope, p_scope_value, p_response, p_status,
        p_completed_at);
END
$$;
-- (c) The claim without the advisory lock.
CREATE FUNCTION idem.claim_nolock(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM FROM "idem"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
-- The claim without its three settings (the lock wait and the transaction's timeouts).
CREATE FUNCTION idem.claim_noset(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM "idem"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
END
$$;
-- (a) The same table without its expires_at and in-flight indexes, and its own two functions.
CREATE SCHEMA noidx;
CREATE TABLE noidx.idempotency_records (LIKE idem.idempotency_records INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE noidx.idempotency_records ADD PRIMARY KEY (key);
CREATE FUNCTION noidx.claim(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM "noidx"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
CREATE FUNCTION noidx.done(p_key bytea, p_token bigint, p_expires_at bigint,
    p_response bytea, p_status smallint, p_completed_at bigint, p_fingerprint bytea,
    p_lease_until bigint, p_operation text, p_created_at bigint, p_scope text,
    p_scope_value text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO "noidx"."idempotency_records" (key, fingerprint, token, state, owners, lease_until, expires_at,
        operation, created_at, scope, scope_value, response, status, completed_at)
    VALUES (p_key, p_fingerprint, p_token, 'completed', 1, p_lease_until, p_expires_at,
        p_operation, p_created_at, p_scope, p_scope_value, p_response, p_status,
        p_completed_at);
END
$$;
-- The same table without its four CHECK constraints (PostgreSQL reads each table's CHECK
-- expressions back from text in every statement that inserts into it), and its own two functions.
CREATE SCHEMA nochk;
CREATE TABLE nochk.idempotency_records (LIKE idem.idempotency_records INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE FUNCTION nochk.claim(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM "nochk"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
CREATE FUNCTION nochk.done(p_key bytea, p_token bigint, p_expires_at bigint,
    p_response bytea, p_status smallint, p_completed_at bigint, p_fingerprint bytea,
    p_lease_until bigint, p_operation text, p_created_at bigint, p_scope text,
    p_scope_value text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO "nochk"."idempotency_records" (key, fingerprint, token, state, owners, lease_until, expires_at,
        operation, created_at, scope, scope_value, response, status, completed_at)
    VALUES (p_key, p_fingerprint, p_token, 'completed', 1, p_lease_until, p_expires_at,
        p_operation, p_created_at, p_scope, p_scope_value, p_response, p_status,
        p_completed_at);
END
$$;
-- The same table with its per-column checks as domains (PostgreSQL keeps a domain's checks
-- prepared for the session) and only the check across columns left on the table.
CREATE SCHEMA dom;
CREATE DOMAIN dom.digest AS bytea CHECK (octet_length(VALUE) = 32);
CREATE DOMAIN dom.state AS text CHECK (VALUE IN ('in_flight', 'completed'));
CREATE TABLE dom.idempotency_records (
    key         dom.digest PRIMARY KEY,
    fingerprint dom.digest NOT NULL,
    token       bigint  NOT NULL,
    state       dom.state NOT NULL,
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
CREATE INDEX ON dom.idempotency_records (expires_at);
CREATE INDEX ON dom.idempotency_records (operation, lease_until) WHERE state = 'in_flight';
CREATE FUNCTION dom.claim(p_key bytea, p_lock bigint, p_lock_wait text, p_timeout text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    PERFORM pg_advisory_xact_lock(p_lock);
    PERFORM FROM "dom"."idempotency_records" WHERE key = p_key;
    IF FOUND THEN
        RAISE EXCEPTION 'a record holds the idempotency key' USING ERRCODE = 'unique_violation';
    END IF;
    PERFORM set_config('lock_timeout', p_timeout, true),
            set_config('statement_timeout', p_timeout, true);
END
$$;
CREATE FUNCTION dom.done(p_key bytea, p_token bigint, p_expires_at bigint,
    p_response bytea, p_status smallint, p_completed_at bigint, p_fingerprint bytea,
    p_lease_until bigint, p_operation text, p_created_at bigint, p_scope text,
    p_scope_value text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO "dom"."idempotency_records" (key, fingerprint, token, state, owners, lease_until, expires_at,
        operation, created_at, scope, scope_value, response, status, completed_at)
    VALUES (p_key, p_fingerprint, p_token, 'completed', 1, p_lease_until, p_expires_at,
        p_operation, p_created_at, p_scope, p_scope_value, p_response, p_status,
        p_completed_at);
END
$$;
-- Without its CHECK constraints and without its expires_at and in-flight indexes: the key alone.
CREATE SCHEMA lean;
CREATE TABLE lean.idempotency_records (LIKE idem.idempotency_records INCLUDING DEFAULTS);
ALTER TABLE lean.idempotency_records ADD PRIMARY KEY (key);
