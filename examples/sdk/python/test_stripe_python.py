"""Stripe's official Python SDK (`stripe` on PyPI) against the payments example.

Run by examples/sdk/run.sh, which starts the example with ERROR_FORMAT=stripe and passes its
address in PAYMENTS_URL. Nothing here imitates Stripe's client: the SDK generates its own
idempotency keys, encodes its own forms, reads its own errors and retries by its own rules.
Every test authenticates as an org of its own, so each lists only its own charges.
"""

import os
import re
import socket
import threading
import unittest
import urllib.request
import uuid

import stripe

BASE = os.environ["PAYMENTS_URL"]
# Every wait is bounded: no request of a test may hang the run.
TIMEOUT = 20


def org_key(name):
    """An API key of an org of the test's own (`sk_test_<org>` names the org)."""
    return f"sk_test_py_{name}_{uuid.uuid4().hex[:8]}"


def client(api_key, base=BASE, retries=2):
    """The SDK's client, as its README shows it, pointed at `base`."""
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": base},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=TIMEOUT),
    )


def replayed(obj):
    """Whether the server answered `obj` with a stored response (`Idempotent-Replayed`)."""
    return obj.last_response.headers.get("Idempotent-Replayed") == "true"


def in_progress_count():
    """How many in-flight duplicates the engine has answered 409 for charges (`/metrics`)."""
    with urllib.request.urlopen(f"{BASE}/metrics", timeout=TIMEOUT) as response:
        text = response.read().decode()
    pattern = r'idempotency_requests_total\{[^}]*endpoint="charges.create"[^}]*outcome="in_progress"[^}]*\} (\S+)'
    return sum(int(float(v)) for v in re.findall(pattern, text))


class LossyProxy:
    """A TCP proxy on loopback that loses the server's first `lose` answers: it forwards the
    request, waits until the answer starts to arrive (so the server has done the work), and
    closes the client's connection without passing it on. Later connections pass untouched."""

    def __init__(self, upstream, lose):
        self.upstream = upstream
        self.lose = lose
        self.lost = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.listener.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.settimeout(TIMEOUT)
        server = socket.create_connection(self.upstream, timeout=TIMEOUT)
        threading.Thread(target=self._pipe, args=(conn, server), daemon=True).start()
        try:
            first = server.recv(65536)
            with self.lock:
                lose = self.lost < self.lose
                self.lost += lose
            if not lose:
                data = first
                while data:
                    conn.sendall(data)
                    data = server.recv(65536)
        except OSError:
            pass
        finally:
            # shutdown, not just close: it wakes the other direction's thread, blocked in recv.
            for sock in (server, conn):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass


class ModuleStyle(unittest.TestCase):
    """The SDK's module-level style, as a new user first tries it: `stripe.api_base`."""

    def setUp(self):
        stripe.api_key = org_key(self._testMethodName[:20])
        stripe.api_base = BASE
        stripe.max_network_retries = 2
        stripe.default_http_client = stripe.RequestsClient(timeout=TIMEOUT)

    def test_create_retrieve_and_list(self):
        charge = stripe.Charge.create(
            amount=2000, currency="usd", source="tok_visa", metadata={"order": "42"}
        )
        self.assertTrue(charge.id.startswith("ch_"))
        self.assertEqual((charge.amount, charge.status), (2000, "succeeded"))
        self.assertEqual(charge.metadata.to_dict(), {"order": "42"})
        self.assertFalse(replayed(charge))

        fetched = stripe.Charge.retrieve(charge.id)
        self.assertEqual((fetched.id, fetched.amount), (charge.id, 2000))

        more = [stripe.Charge.create(amount=a, currency="usd", source="tok_visa") for a in (1, 2)]
        page = stripe.Charge.list(limit=2)
        self.assertTrue(page.has_more)
        self.assertEqual([c.id for c in page.data], [more[1].id, more[0].id])
        # The SDK pages by itself (starting_after), and stops.
        every = [c.id for c in stripe.Charge.list(limit=1).auto_paging_iter()]
        self.assertEqual(every, [more[1].id, more[0].id, charge.id])

    def test_the_same_key_twice_is_the_same_charge(self):
        key = str(uuid.uuid4())
        first = stripe.Charge.create(amount=1500, currency="usd", source="tok_visa", idempotency_key=key)
        again = stripe.Charge.create(amount=1500, currency="usd", source="tok_visa", idempotency_key=key)
        self.assertEqual(again.id, first.id)
        self.assertFalse(replayed(first))
        self.assertTrue(replayed(again))
        self.assertEqual([c.id for c in stripe.Charge.list().data], [first.id])

    def test_the_same_key_for_another_amount_is_an_idempotency_error(self):
        key = str(uuid.uuid4())
        stripe.Charge.create(amount=1500, currency="usd", source="tok_visa", idempotency_key=key)
        with self.assertRaises(stripe.IdempotencyError) as raised:
            stripe.Charge.create(amount=1600, currency="usd", source="tok_visa", idempotency_key=key)
        self.assertEqual(raised.exception.http_status, 400)
        self.assertEqual(raised.exception.headers.get("Stripe-Should-Retry"), "false")
        self.assertEqual(len(stripe.Charge.list().data), 1)

    def test_a_decline_is_a_card_error(self):
        with self.assertRaises(stripe.CardError) as raised:
            stripe.Charge.create(amount=700, currency="usd", source="tok_chargeDeclined")
        error = raised.exception
        self.assertEqual((error.http_status, error.code), (402, "card_declined"))
        declined = stripe.Charge.retrieve(error.json_body["error"]["charge"])
        self.assertEqual(declined.status, "failed")

    def test_a_bad_parameter_is_an_invalid_request_naming_it(self):
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            stripe.Charge.create(amount=700, currency="eur", source="tok_visa")
        self.assertEqual(raised.exception.param, "currency")
        with self.assertRaises(stripe.AuthenticationError):
            stripe.Charge.list(api_key="sk_live_nope")

    def test_refunds(self):
        charge = stripe.Charge.create(amount=2000, currency="usd", source="tok_visa")
        refund = stripe.Refund.create(charge=charge.id, amount=500)
        self.assertEqual((refund.charge, refund.amount, refund.status), (charge.id, 500, "succeeded"))
        rest = stripe.Refund.create(charge=charge.id)
        self.assertEqual(rest.amount, 1500)
        with self.assertRaises(stripe.InvalidRequestError) as raised:
            stripe.Refund.create(charge="ch_" + "0" * 24)
        self.assertEqual(raised.exception.param, "charge")


class Retries(unittest.TestCase):
    """The SDK's own retries, through `StripeClient`."""

    def test_lost_answers_are_retried_into_one_charge(self):
        api_key = org_key("lossy")
        host, port = BASE.removeprefix("http://").rsplit(":", 1)
        proxy = LossyProxy((host, int(port)), lose=2)
        self.addCleanup(proxy.close)
        # No idempotency key given: the SDK makes one and keeps it across its retries.
        charge = client(api_key, base=proxy.url, retries=2).v1.charges.create(
            params={"amount": 4200, "currency": "usd", "source": "tok_visa"}
        )
        self.assertEqual(proxy.lost, 2, "the first two answers were lost")
        self.assertTrue(replayed(charge), "the third attempt got the first one's answer")
        listed = client(api_key).v1.charges.list()
        self.assertEqual([c.id for c in listed.data], [charge.id], "one charge")

    def test_an_in_flight_duplicate_is_retried_until_it_replays(self):
        api_key = org_key("inflight")
        key = str(uuid.uuid4())
        params = {"amount": 900, "currency": "usd", "source": "tok_slow"}
        results = {}

        def first():
            results["first"] = client(api_key).v1.charges.create(
                params=params, options={"idempotency_key": key}
            )

        before = in_progress_count()
        runner = threading.Thread(target=first)
        runner.start()
        threading.Event().wait(0.3)  # the first is running (tok_slow takes SLOW_MS)
        duplicate = client(api_key, retries=4).v1.charges.create(
            params=params, options={"idempotency_key": key}
        )
        runner.join(TIMEOUT)
        self.assertGreater(in_progress_count(), before, "the duplicate met a 409 first")
        self.assertEqual(duplicate.id, results["first"].id)
        self.assertTrue(replayed(duplicate))
        listed = client(api_key).v1.charges.list()
        self.assertEqual([c.id for c in listed.data], [duplicate.id])


if __name__ == "__main__":
    unittest.main(verbosity=2)
