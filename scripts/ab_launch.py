#!/usr/bin/env python3
"""Launch until running, two or more steadfast builds against runsv, alternated.

    python3 scripts/ab_launch.py [--floor PATH] ROUNDS BIN_DIR [BIN_DIR ...]

Each BIN_DIR holds `steadfastctl` and `examples/{kvd,minimal}` (as
`target/release` does; copy one build aside to compare it with another). Every
round launches runsv once, and kvd and minimal of every build once, in an
order shuffled each round (seeded), each polled the way
`compare_peers.py`'s launch section polls (a check, 1 ms, a check, ...), so
the builds see the same machine load. Prints each median and
its ratio to runsv until `sv status` says `run:` in the same run.

--floor PATH adds the floor of any daemon's launch to every round: the
`launch_floor` example (`cargo build --release --example launch_floor`: a
file fsynced once, a loopback listener bound, `ready` printed), timed until
its `ready` line arrives on a pipe (no poll: a floor).
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_peers as cp  # noqa: E402


def main():
    args = sys.argv[1:]
    floor = None
    if args[:1] == ["--floor"] and len(args) > 1:
        floor, args = args[1], args[2:]
    if len(args) < 2:
        raise SystemExit(__doc__)
    rounds = int(args[0])
    work = tempfile.mkdtemp(prefix="ab-launch-")
    try:
        # A work dir per build: each names its data dirs kvd-1, kvd-2, ...
        # on its own, so every launch is on a fresh data dir.
        sides = []
        for i, d in enumerate(args[1:]):
            own = os.path.join(work, str(i))
            os.makedirs(own)
            sides.append((d, cp.Steadfast(d, own)))
        rit = cp.Runit(work)

        def poll(check):
            cp.poll_until(check, pause=cp.LAUNCH_POLL_PAUSE)

        def sf_case(sf, launch):
            began = time.perf_counter()
            child, fresh = launch()
            try:
                poll(lambda: sf.ready(fresh))
                return time.perf_counter() - began
            finally:
                cp.stop(child)

        def runsv_case():
            began = time.perf_counter()
            child, fresh = rit.launch()
            try:
                poll(lambda: rit.say_up(fresh))
                return time.perf_counter() - began
            finally:
                rit.finish(child, fresh)

        # Every case once a round, in an order shuffled each round (seeded:
        # the same sequence every run). A fixed order, or one only shifted
        # by one each round (which keeps each case's predecessor), puts one
        # build right after runsv's teardown in most rounds; that launch was
        # the slower one, whichever build it was.
        floors = [0]

        def floor_case():
            floors[0] += 1
            began = time.perf_counter()
            child = cp.start([floor, os.path.join(work, f"floor-{floors[0]}")],
                             stdout=subprocess.PIPE)
            try:
                line = child.stdout.readline()
                took = time.perf_counter() - began
                if not line.startswith(b"ready "):
                    raise RuntimeError(f"launch_floor said {line!r}")
                return took
            finally:
                cp.stop(child)

        cases = [("runsv", runsv_case)]
        if floor:
            cases.append((("floor", floor), floor_case))
        for d, sf in sides:
            cases.append((("kvd", d), lambda sf=sf: sf_case(sf, sf.launch)))
            cases.append((("minimal", d), lambda sf=sf: sf_case(sf, sf.launch_minimal)))
        order = random.Random(16)
        samples = {}
        for _ in range(rounds):
            order.shuffle(cases)
            for name, case in cases:
                samples.setdefault(name, []).append(case())
    finally:
        cp.stop_everything()
        shutil.rmtree(work, ignore_errors=True)
    ref = statistics.median(samples.pop("runsv"))
    print(f"load average {os.getloadavg()}, {rounds} rounds")
    print(f"runsv until run: median {ref * 1e3:.2f} ms")
    for (name, d), xs in samples.items():
        m = statistics.median(xs)
        print(f"{name:8s} {d:40s} median {m * 1e3:7.2f} ms  {m / ref:5.2f}x runsv")


if __name__ == "__main__":
    main()
