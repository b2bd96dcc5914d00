"""moto's server, handling one request at a time.

moto checks a conditional write's precondition and then writes, with no lock between the two
(DynamoDB's `PutItem` with a `ConditionExpression`, S3's `If-None-Match: *` and `If-Match`). Its
server runs each request on a thread of its own, so two racing writers can both pass the check
and both write: in bursts of 30 conditional `PutItem`s on one key, about one burst in 300 had
two winners. Real DynamoDB and S3 apply each conditional write atomically, and idem's stores
rely on that. This launcher runs moto's own server with its request handling serialised, which
restores that atomicity; replies are still written outside the lock.

Usage: python .ci/moto_server.py -H 127.0.0.1 -p PORT  (the same arguments as moto_server)
"""

import threading

from moto import server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication

_one_at_a_time = threading.Lock()
_handle = DomainDispatcherApplication.__call__


def _handle_alone(self, environ, start_response):
    with _one_at_a_time:
        return _handle(self, environ, start_response)


DomainDispatcherApplication.__call__ = _handle_alone

if __name__ == "__main__":
    server.main()
