"""Python's grpcio against the ledger example, with stubs grpcio-tools generated from
examples/proto/ledger/v1/ledger.proto.

Run by examples/grpc/run.sh, which starts the server and passes its address in LEDGER_ADDR and
its SQLite file in LEDGER_DB. Errors are read as a Python client reads them: google.rpc.Status
from the `grpc-status-details-bin` trailer (grpcio-status), its details unpacked into
google.rpc.ErrorInfo and RetryInfo. Every test calls as a tenant of its own.
"""

import os
import queue
import sqlite3
import unittest
import uuid

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ledger.v1 import ledger_pb2 as pb
from ledger.v1 import ledger_pb2_grpc as rpc
from lossy_proxy import LossyProxy

ADDR = os.environ["LEDGER_ADDR"]
DB = os.environ["LEDGER_DB"]
# Every wait is bounded: no call of a test may hang the run.
TIMEOUT = 20
ENGINE_DOMAIN = "idem.rs"
LEDGER_DOMAIN = "ledger.idem.rs"
# gRPC's own retries, as a service config turns them on: UNAVAILABLE is tried up to 5 times.
RETRY_POLICY = """{"methodConfig":[{"name":[{"service":"ledger.v1.Ledger"}],"retryPolicy":{
    "maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
    "retryableStatusCodes":["UNAVAILABLE"]}}]}"""


def tenant(name):
    """A tenant of the test's own; returns its name and the call metadata naming it."""
    name = f"py_{name}_{uuid.uuid4().hex[:8]}"
    return name, [("authorization", f"Bearer tenant_{name}")]


def transfer(request_id, to="acct_b", amount=500, source="acct_a"):
    return pb.CreateTransferRequest(
        request_id=request_id, from_account=source, to_account=to, amount=amount, currency="EUR"
    )


def replayed(call):
    """Whether the engine answered from a stored result: `idempotent-replayed: true` in the
    headers, which an error answered without a body carries among its trailers."""
    metadata = list(call.initial_metadata() or []) + list(call.trailing_metadata() or [])
    return ("idempotent-replayed", "true") in metadata


def details(error, kind):
    """The detail of type `kind` (ErrorInfo, RetryInfo) in the google.rpc.Status of `error`."""
    status = rpc_status.from_call(error)
    assert status is not None, f"no grpc-status-details-bin in {error}"
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            found = kind()
            detail.Unpack(found)
            return found
    raise AssertionError(f"no {kind.DESCRIPTOR.full_name} in {status}")


def transfers_of(name):
    """How many transfers the database holds for tenant `name`, read past the server."""
    with sqlite3.connect(DB, timeout=TIMEOUT) as db:
        return db.execute("SELECT COUNT(*) FROM transfers WHERE tenant = ?", (name,)).fetchone()[0]


class Ledger(unittest.TestCase):
    def setUp(self):
        self.channel = grpc.insecure_channel(ADDR)
        self.ledger = rpc.LedgerStub(self.channel)

    def tearDown(self):
        self.channel.close()

    def create(self, request, metadata):
        return self.ledger.CreateTransfer.with_call(request, metadata=metadata, timeout=TIMEOUT)

    def fails(self, request, metadata, code):
        with self.assertRaises(grpc.RpcError) as raised:
            self.create(request, metadata)
        self.assertEqual(raised.exception.code(), code, raised.exception)
        return raised.exception

    def assert_error_info(self, error, domain, reason):
        info = details(error, error_details_pb2.ErrorInfo)
        self.assertEqual((info.domain, info.reason), (domain, reason))
        return info

    def test_create_and_replay(self):
        name, auth = tenant("replay")
        request = transfer(str(uuid.uuid4()))
        made, call = self.create(request, auth)
        self.assertTrue(made.id.startswith("tr_"))
        self.assertFalse(replayed(call))
        again, call = self.create(request, auth)
        self.assertEqual(again, made)
        self.assertTrue(replayed(call), "idempotent-replayed: true")
        got = self.ledger.GetTransfer(pb.GetTransferRequest(id=made.id), metadata=auth, timeout=TIMEOUT)
        self.assertEqual(got, made)
        self.assertEqual(transfers_of(name), 1)

    def test_reused_request_id(self):
        name, auth = tenant("reused")
        request_id = str(uuid.uuid4())
        self.create(transfer(request_id), auth)
        error = self.fails(transfer(request_id, amount=900), auth, grpc.StatusCode.FAILED_PRECONDITION)
        self.assert_error_info(error, ENGINE_DOMAIN, "IDEMPOTENCY_KEY_REUSED")
        self.assertEqual(transfers_of(name), 1)

    def test_in_flight_duplicate_is_aborted(self):
        name, auth = tenant("inflight")
        request = transfer(str(uuid.uuid4()), to="acct_slow")
        answers = queue.Queue()
        calls = [
            self.ledger.CreateTransfer.future(request, metadata=auth, timeout=TIMEOUT) for _ in range(2)
        ]
        for call in calls:
            call.add_done_callback(answers.put)
        # The first answered is the duplicate: the other runs for SLOW_MS.
        duplicate = answers.get(timeout=TIMEOUT)
        self.assertEqual(duplicate.code(), grpc.StatusCode.ABORTED)
        self.assert_error_info(duplicate, ENGINE_DOMAIN, "IDEMPOTENCY_KEY_IN_PROGRESS")
        delay = details(duplicate, error_details_pb2.RetryInfo).retry_delay
        self.assertGreater(delay.seconds * 10**9 + delay.nanos, 0)
        first = answers.get(timeout=TIMEOUT)
        made = first.result()
        again, call = self.create(request, auth)
        self.assertEqual(again, made)
        self.assertTrue(replayed(call))
        self.assertEqual(transfers_of(name), 1)

    def test_insufficient_funds_is_replayed(self):
        name, auth = tenant("funds")
        request = transfer(str(uuid.uuid4()), source="acct_empty")
        first = self.fails(request, auth, grpc.StatusCode.FAILED_PRECONDITION)
        info = self.assert_error_info(first, LEDGER_DOMAIN, "INSUFFICIENT_FUNDS")
        self.assertEqual(info.metadata["account"], "acct_empty")
        self.assertFalse(replayed(first))
        again = self.fails(request, auth, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertTrue(replayed(again), "idempotent-replayed: true")
        self.assertEqual(rpc_status.from_call(again), rpc_status.from_call(first))
        self.assertEqual(transfers_of(name), 0)

    def test_two_tenants_same_request_id(self):
        request = transfer(str(uuid.uuid4()))
        (acme, acme_auth), (globex, globex_auth) = tenant("acme"), tenant("globex")
        a, _ = self.create(request, acme_auth)
        b, call = self.create(request, globex_auth)
        self.assertFalse(replayed(call))
        self.assertNotEqual(a.id, b.id)
        self.assertEqual((transfers_of(acme), transfers_of(globex)), (1, 1))
        with self.assertRaises(grpc.RpcError) as raised:
            self.ledger.GetTransfer(pb.GetTransferRequest(id=a.id), metadata=globex_auth, timeout=TIMEOUT)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_no_authorization_is_unauthenticated(self):
        self.fails(transfer(str(uuid.uuid4())), [], grpc.StatusCode.UNAUTHENTICATED)
        self.fails(transfer(str(uuid.uuid4())), [("authorization", "Bearer acme")], grpc.StatusCode.UNAUTHENTICATED)


class RetryPolicy(unittest.TestCase):
    """gRPC's own retries (a service config's retryPolicy) through a proxy that passes each
    call to the server and then loses the server's answer, telling the client UNAVAILABLE
    instead: every retry carries the same request_id, so each logical create leaves exactly one
    transfer, and the answer the client finally gets is the replay of the first."""

    LOSSES = 3  # per call, fewer than maxAttempts

    def setUp(self):
        self.proxy = LossyProxy(ADDR, losses_per_call=self.LOSSES, timeout=TIMEOUT)
        options = [("grpc.enable_retries", 1), ("grpc.service_config", RETRY_POLICY)]
        self.channel = grpc.insecure_channel(self.proxy.addr, options=options)
        self.ledger = rpc.LedgerStub(self.channel)

    def tearDown(self):
        self.channel.close()
        self.proxy.stop()

    def test_each_logical_create_makes_one_transfer(self):
        name, auth = tenant("retries")
        made = []
        for amount in (100, 200, 300):
            request = transfer(str(uuid.uuid4()), amount=amount)
            response, call = self.ledger.CreateTransfer.with_call(request, metadata=auth, timeout=TIMEOUT)
            self.assertEqual(response.amount, amount)
            self.assertTrue(replayed(call), "the first answers were lost: this one is the replay")
            made.append(response.id)
            seen = self.proxy.answers(request.request_id)
            self.assertEqual(len(seen), self.LOSSES + 1, "the client retried by itself")
            self.assertEqual(seen[0], (grpc.StatusCode.OK, False), "the first attempt ran it")
            self.assertEqual(set(seen[1:]), {(grpc.StatusCode.OK, True)}, "the retries replayed it")
        self.assertEqual(len(set(made)), 3)
        self.assertEqual(transfers_of(name), 3, "one transfer per logical create")
        with grpc.insecure_channel(ADDR) as channel:
            direct = rpc.LedgerStub(channel)
            for id in made:
                got = direct.GetTransfer(pb.GetTransferRequest(id=id), metadata=auth, timeout=TIMEOUT)
                self.assertEqual(got.id, id)


if __name__ == "__main__":
    unittest.main()
