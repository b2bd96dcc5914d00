CREATE OR REPLACE FUNCTION pgb.claim_once(k bytea, lock_id bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(lock_id);
  PERFORM FROM pgb.recw WHERE key = k;
  IF FOUND THEN RAISE EXCEPTION 'idempotency record exists' USING ERRCODE = 'unique_violation'; END IF;
END $$;
CREATE OR REPLACE FUNCTION pgb.complete_once(k bytea, fp bytea, tok bigint, lease bigint, exp bigint, op text, created bigint, sc text, sv text, payload bytea, st smallint, done_ms bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pgb.recw (key, fingerprint, token, state, owners, lease_until, expires_at, operation, created_at, scope, scope_value, response, status, completed_at)
  VALUES (k, fp, tok, 'completed', 1, lease, exp, op, created, sc, sv, payload, st, done_ms);
END $$;
