// Stripe's official Node SDK (`stripe` on npm) against the payments example, with node's own
// test runner (`node --test`).
//
// Run by examples/sdk/run.sh, which starts the example with ERROR_FORMAT=stripe and passes its
// address in PAYMENTS_URL. Nothing here imitates Stripe's client: the SDK generates its own
// idempotency keys, encodes its own forms, reads its own errors and retries by its own rules.
// Every test authenticates as an org of its own, so each lists only its own charges.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import Stripe from 'stripe';

const BASE = new URL(process.env.PAYMENTS_URL);
// Every wait is bounded: no request of a test may hang the run.
const TIMEOUT_MS = 20_000;

/** An API key of an org of the test's own (`sk_test_<org>` names the org). */
const orgKey = (name) => `sk_test_node_${name}_${randomUUID().slice(0, 8)}`;

/** The SDK's client, as its README shows it, pointed at `port` on loopback. */
const client = (apiKey, { port = Number(BASE.port), retries = 2 } = {}) =>
  new Stripe(apiKey, {
    host: BASE.hostname,
    port,
    protocol: 'http',
    maxNetworkRetries: retries,
    timeout: TIMEOUT_MS,
  });

/** Whether the server answered `object` with a stored response (`Idempotent-Replayed`). */
const replayed = (object) => object.lastResponse.headers['idempotent-replayed'] === 'true';

/** How many in-flight duplicates the engine has answered 409 for charges (`/metrics`). */
async function inProgressCount() {
  const text = await (await fetch(new URL('/metrics', BASE))).text();
  const pattern = /idempotency_requests_total\{[^}]*endpoint="charges.create"[^}]*outcome="in_progress"[^}]*\} (\S+)/g;
  return [...text.matchAll(pattern)].reduce((sum, m) => sum + Number(m[1]), 0);
}

/**
 * A TCP proxy on loopback that loses the server's first `lose` answers: it forwards the
 * request, waits until the answer starts to arrive (so the server has done the work), and
 * closes the client's connection without passing it on. Later connections pass untouched.
 */
async function lossyProxy(lose) {
  const proxy = { lost: 0 };
  const server = net.createServer((conn) => {
    const upstream = net.connect(Number(BASE.port), BASE.hostname);
    const both = [conn, upstream];
    both.forEach((s) => {
      s.setTimeout(TIMEOUT_MS, () => both.forEach((x) => x.destroy()));
      s.on('error', () => both.forEach((x) => x.destroy()));
      s.on('close', () => both.forEach((x) => x.destroy()));
    });
    conn.pipe(upstream);
    upstream.once('data', (first) => {
      if (proxy.lost < lose) {
        proxy.lost += 1;
        both.forEach((s) => s.destroy());
        return;
      }
      conn.write(first);
      upstream.pipe(conn);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.port = server.address().port;
  proxy.close = () => server.close();
  return proxy;
}

test('create, retrieve and list', async () => {
  const stripe = client(orgKey('list'));
  const charge = await stripe.charges.create({
    amount: 2000, currency: 'usd', source: 'tok_visa', metadata: { order: '42' },
  });
  assert.match(charge.id, /^ch_/);
  assert.deepEqual([charge.amount, charge.status], [2000, 'succeeded']);
  assert.deepEqual(charge.metadata, { order: '42' });
  assert.equal(replayed(charge), false);

  const fetched = await stripe.charges.retrieve(charge.id);
  assert.deepEqual([fetched.id, fetched.amount], [charge.id, 2000]);

  const more = [];
  for (const amount of [1, 2]) {
    more.push(await stripe.charges.create({ amount, currency: 'usd', source: 'tok_visa' }));
  }
  const page = await stripe.charges.list({ limit: 2 });
  assert.equal(page.has_more, true);
  assert.deepEqual(page.data.map((c) => c.id), [more[1].id, more[0].id]);
  // The SDK pages by itself (starting_after), and stops.
  const every = [];
  for await (const c of stripe.charges.list({ limit: 1 })) every.push(c.id);
  assert.deepEqual(every, [more[1].id, more[0].id, charge.id]);
});

test('the same key twice is the same charge', async () => {
  const stripe = client(orgKey('same'));
  const idempotencyKey = randomUUID();
  const params = { amount: 1500, currency: 'usd', source: 'tok_visa' };
  const first = await stripe.charges.create(params, { idempotencyKey });
  const again = await stripe.charges.create(params, { idempotencyKey });
  assert.equal(again.id, first.id);
  assert.equal(replayed(first), false);
  assert.equal(replayed(again), true);
  assert.deepEqual((await stripe.charges.list()).data.map((c) => c.id), [first.id]);
});

test('the same key for another amount is an idempotency error', async () => {
  const stripe = client(orgKey('reuse'));
  const idempotencyKey = randomUUID();
  await stripe.charges.create({ amount: 1500, currency: 'usd', source: 'tok_visa' }, { idempotencyKey });
  await assert.rejects(
    stripe.charges.create({ amount: 1600, currency: 'usd', source: 'tok_visa' }, { idempotencyKey }),
    (error) => {
      assert.ok(error instanceof Stripe.errors.StripeIdempotencyError, error.constructor.name);
      assert.deepEqual([error.statusCode, error.code], [400, 'idempotency_key_reused']);
      assert.equal(error.headers['stripe-should-retry'], 'false');
      return true;
    },
  );
  assert.equal((await stripe.charges.list()).data.length, 1);
});

test('a decline is a card error', async () => {
  const stripe = client(orgKey('decline'));
  let charge;
  await assert.rejects(
    stripe.charges.create({ amount: 700, currency: 'usd', source: 'tok_chargeDeclined' }),
    (error) => {
      assert.ok(error instanceof Stripe.errors.StripeCardError, error.constructor.name);
      assert.deepEqual([error.statusCode, error.code], [402, 'card_declined']);
      charge = error.raw.charge;
      return true;
    },
  );
  assert.equal((await stripe.charges.retrieve(charge)).status, 'failed');
});

test('a bad parameter is an invalid request naming it', async () => {
  const stripe = client(orgKey('invalid'));
  await assert.rejects(
    stripe.charges.create({ amount: 700, currency: 'eur', source: 'tok_visa' }),
    (error) => error instanceof Stripe.errors.StripeInvalidRequestError && error.param === 'currency',
  );
  await assert.rejects(
    client('sk_live_nope').charges.list(),
    (error) => error instanceof Stripe.errors.StripeAuthenticationError,
  );
});

test('refunds', async () => {
  const stripe = client(orgKey('refund'));
  const charge = await stripe.charges.create({ amount: 2000, currency: 'usd', source: 'tok_visa' });
  const refund = await stripe.refunds.create({ charge: charge.id, amount: 500 });
  assert.deepEqual([refund.charge, refund.amount, refund.status], [charge.id, 500, 'succeeded']);
  assert.equal((await stripe.refunds.create({ charge: charge.id })).amount, 1500);
  await assert.rejects(
    stripe.refunds.create({ charge: `ch_${'0'.repeat(24)}` }),
    (error) => error instanceof Stripe.errors.StripeInvalidRequestError && error.param === 'charge',
  );
});

test('lost answers are retried into one charge', async (t) => {
  const apiKey = orgKey('lossy');
  const proxy = await lossyProxy(2);
  t.after(proxy.close);
  // No idempotency key given: the SDK makes one and keeps it across its retries.
  const charge = await client(apiKey, { port: proxy.port, retries: 2 }).charges.create({
    amount: 4200, currency: 'usd', source: 'tok_visa',
  });
  assert.equal(proxy.lost, 2, 'the first two answers were lost');
  assert.equal(replayed(charge), true, "the third attempt got the first one's answer");
  const listed = await client(apiKey).charges.list();
  assert.deepEqual(listed.data.map((c) => c.id), [charge.id], 'one charge');
});

test('an in-flight duplicate is retried until it replays', async () => {
  const apiKey = orgKey('inflight');
  const idempotencyKey = randomUUID();
  const params = { amount: 900, currency: 'usd', source: 'tok_slow' };
  const before = await inProgressCount();
  const first = client(apiKey).charges.create(params, { idempotencyKey });
  await sleep(300); // the first is running (tok_slow takes SLOW_MS)
  const duplicate = await client(apiKey, { retries: 4 }).charges.create(params, { idempotencyKey });
  const original = await first;
  assert.ok((await inProgressCount()) > before, 'the duplicate met a 409 first');
  assert.equal(duplicate.id, original.id);
  assert.equal(replayed(duplicate), true);
  const listed = await client(apiKey).charges.list();
  assert.deepEqual(listed.data.map((c) => c.id), [duplicate.id]);
});
