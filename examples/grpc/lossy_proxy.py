"""A gRPC proxy on loopback that loses answers: every unary call is forwarded to the upstream
server as raw bytes (no stubs: a generic handler), and for the first `losses_per_call` attempts
of each request the server's answer is dropped once it has arrived, the client being told
UNAVAILABLE instead. The server did the work; the client never heard. Later attempts pass
through with their status, details and the `idempotent-replayed` header.

A "request" is known by its `request_id`, the first field of the ledger's CreateTransferRequest,
read from the raw bytes; calls without one are never lost.
"""

import threading
from concurrent import futures

import grpc
from grpc_status import rpc_status

# The metadata a client sends that the server reads; the rest is the transport's.
FORWARDED = ("authorization", "idempotency-key")
# The metadata the server answers with that the client reads.
PASSED_BACK = ("idempotent-replayed",)


def request_id(message):
    """Field 1 (a string) of a serialized protobuf message, if it comes first; else ''."""
    if len(message) < 2 or message[0] != 0x0A:
        return ""
    length, shift, at = 0, 0, 1
    while at < len(message):
        byte = message[at]
        length |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return message[at : at + length].decode("utf-8", "replace")
        shift += 7
    return ""


class LossyProxy:
    def __init__(self, upstream, losses_per_call, timeout):
        self.losses = losses_per_call
        self.timeout = timeout
        self.lock = threading.Lock()
        self.seen = {}  # request_id -> [(status code, replayed)] the server answered
        self.upstream = grpc.insecure_channel(upstream)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([self])
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self):
        self.server.stop(grace=None)
        self.upstream.close()

    def answers(self, key):
        """What the server answered each attempt of request `key`, in order."""
        with self.lock:
            return list(self.seen.get(key, []))

    # grpc.GenericRpcHandler
    def service(self, handler_call_details):
        method = handler_call_details.method
        # No (de)serializers: requests and responses stay bytes.
        forward = self.upstream.unary_unary(method)
        return grpc.unary_unary_rpc_method_handler(
            lambda message, context: self._forward(forward, message, context)
        )

    def _forward(self, forward, message, context):
        metadata = [(k, v) for k, v in context.invocation_metadata() if k in FORWARDED]
        key = request_id(message)
        try:
            response, call = forward.with_call(message, metadata=metadata, timeout=self.timeout)
            code, error = grpc.StatusCode.OK, None
        except grpc.RpcError as failed:
            response, call = None, failed
            code, error = failed.code(), failed
        headers = [
            (k, v)
            for k, v in list(call.initial_metadata() or []) + list(call.trailing_metadata() or [])
            if k in PASSED_BACK
        ]
        with self.lock:
            attempts = self.seen.setdefault(key, []) if key else []
            attempts.append((code, ("idempotent-replayed", "true") in headers))
            lose = bool(key) and len(attempts) <= self.losses
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy lost the server's answer")
        if error is None:
            context.send_initial_metadata(headers)
            return response
        context.set_trailing_metadata(headers)
        status = rpc_status.from_call(error)
        if status is not None:
            context.abort_with_status(rpc_status.to_status(status))
        context.abort(error.code(), error.details())
