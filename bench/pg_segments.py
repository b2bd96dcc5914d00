#!/usr/bin/env python3
"""Where a request's time went, from the delay proxy's traces (`idem-bench-server --pg-trace`).

    bench/pg_segments.py ONE_WAY_US REQUESTS TRACE [TRACE ...]

Each TRACE holds the lines one server's proxy wrote while one load connection sent REQUESTS
requests to one route, one after another (`idem-bench-load --connections 1 --warmup 0
--requests N`, after a warm-up whose lines are cut off: `tail -n +K`), through a proxy holding
each chunk ONE_WAY_US in each direction (0 for the near run). The time between one chunk read
and the next is charged to one side:

- a chunk from the database after one to it: the proxy held the first (ONE_WAY_US); the rest is
  the database's answering;
- a chunk from the database after one from it: the database, still answering (a pipelined
  exchange answered in two writes);
- a chunk to the database after one from it: the proxy held the answer (ONE_WAY_US), then the
  application read it, ran, and sent what came next (for a request's first chunk, that
  includes answering the HTTP request before and the load generator sending the next);
- a chunk to the database after one to it: the application, still sending.

Prints, per request (means over the trace): the waits (chunks to the database after one from
it), the time held by the proxy, at the database and at the application, and the total.
"""

import sys


def chunks(path):
    """The chunks of a trace, in the order they were read: (µs, direction)."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4:
                out.append((int(parts[0]), parts[1]))
    out.sort()
    return out


def split(path, one_way, requests):
    waits = held = database = application = 0
    seen = chunks(path)
    for (t0, d0), (t1, d1) in zip(seen, seen[1:]):
        gap = t1 - t0
        if d0 == "up" and d1 == "down":
            held += one_way
            database += gap - one_way
        elif d0 == "down" and d1 == "down":
            database += gap
        elif d0 == "down" and d1 == "up":
            waits += 1
            held += one_way
            application += gap - one_way
        else:
            application += gap
    total = seen[-1][0] - seen[0][0] if seen else 0
    per = lambda x: x / requests
    return per(waits), per(held), per(database), per(application), per(total)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    one_way, requests = int(sys.argv[1]), int(sys.argv[2])
    print("| trace | waits | held by the proxy, µs | database, µs | application, µs | total, µs |")
    print("|---|--:|--:|--:|--:|--:|")
    for path in sys.argv[3:]:
        waits, held, database, application, total = split(path, one_way, requests)
        print(
            f"| {path} | {waits:.2f} | {held:.0f} | {database:.0f} | {application:.0f} "
            f"| {total:.0f} |"
        )


if __name__ == "__main__":
    main()
