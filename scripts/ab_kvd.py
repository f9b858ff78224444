#!/usr/bin/env python3
"""kvd's SET and GET round trips, two or more kvd builds side by side, alternated.

    python3 scripts/ab_kvd.py ROUNDS KVD [KVD ...]

Each KVD is a kvd binary (copy one build aside to compare it with another).
Every build serves a fresh data dir under the temp dir (set TMPDIR to choose
the disk) on a port of its own. Each round sends one `SET` and then one
`GET` to every build in turn, on a kept connection with TCP_NODELAY, the
order shifted by one each round. So the builds see the same machine load
and the same drift of the disk's fsync latency. That is what a change worth
tens of microseconds per request needs on a noisy machine (kvd's
`SET` went from `spawn_blocking` to `block_in_place`). The script prints
each build's medians, and each build's ratio to the first.
"""
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_peers as cp  # noqa: E402


def serve(kvd, work, index):
    """A kvd on a fresh data dir: (child, connection)."""
    data = os.path.join(work, f"kvd-{index}")
    conf = data + ".toml"
    port = cp.loopback_port()
    with open(conf, "w") as f:
        f.write(f'listen_addr = "127.0.0.1:{port}"\n')
    child = cp.start([kvd, "--data-dir", data, "--config", conf])

    def connected():
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            return None

    conn = cp.poll_until(connected, pause=0.01)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return child, conn.makefile("rwb", buffering=0)


def ask(conn, request, expect):
    """One request and its one-line answer; the round trip in seconds."""
    began = time.perf_counter()
    conn.write(request)
    answer = conn.readline()
    took = time.perf_counter() - began
    if answer != expect:
        raise RuntimeError(f"{request!r} answered {answer!r}, expected {expect!r}")
    return took


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    rounds = int(sys.argv[1])
    builds = sys.argv[2:]
    work = tempfile.mkdtemp(prefix="ab-kvd-")
    try:
        sides = [serve(kvd, work, i) for i, kvd in enumerate(builds)]
        for _, conn in sides:
            ask(conn, b"SET key value\n", b"OK\n")
        sets = [[] for _ in sides]
        gets = [[] for _ in sides]
        for r in range(rounds):
            for k in range(len(sides)):
                i = (r + k) % len(sides)
                conn = sides[i][1]
                sets[i].append(ask(conn, b"SET key value\n", b"OK\n"))
                gets[i].append(ask(conn, b"GET key\n", b"value\n"))
    finally:
        cp.stop_everything()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average {os.getloadavg()}, {rounds} rounds, data under {tempfile.gettempdir()}")
    first_set = statistics.median(sets[0])
    first_get = statistics.median(gets[0])
    for kvd, s, g in zip(builds, sets, gets):
        ms, mg = statistics.median(s), statistics.median(g)
        print(f"{kvd:40s} SET median {ms * 1e6:7.1f} us ({ms / first_set:4.2f}x)  "
              f"GET median {mg * 1e6:6.1f} us ({mg / first_get:4.2f}x)")


if __name__ == "__main__":
    main()
