#!/usr/bin/env python3
"""The launch timeline of kvd, two or more builds alternated.

    python3 scripts/launch_timeline.py ROUNDS BIN_DIR [BIN_DIR ...]

Each BIN_DIR holds `steadfastctl` and `examples/kvd` (as `target/release`
does). Every round launches kvd of every build once on a fresh data dir, in
an order shuffled each round (seeded), with
`RUST_LOG=info,steadfast::launch=debug`: the daemon says its launch
timeline (`steadfast::launch`, README "The launch timeline") once it first
settles. The launch is stopped once the timeline is out. Prints, for each
build, each mark's median `at_us` (microseconds since the first mark) and
the median step between marks, in the order the marks come.
"""
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_peers as cp  # noqa: E402

MARK = re.compile(r'steadfast::launch: launch step=(.+?) at_us=(\d+) delta_us=(\d+)')


def timeline(log_path, patience=20.0):
    """The (step, at_us) marks of the log at log_path, once the last
    (`first state published`) is there."""
    give_up = time.perf_counter() + patience
    while time.perf_counter() < give_up:
        with open(log_path, "rb") as f:
            text = re.sub(r"\x1b\[[0-9;]*m", "", f.read().decode("utf-8", "replace"))
        marks = [(m.group(1).strip('"'), int(m.group(2))) for m in MARK.finditer(text)]
        if marks and "published" in marks[-1][0]:
            return marks
        time.sleep(0.005)
    raise RuntimeError(f"{log_path}: no complete launch timeline within {patience} s")


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    rounds = int(sys.argv[1])
    work = tempfile.mkdtemp(prefix="launch-timeline-")
    os.environ["RUST_LOG"] = "info,steadfast::launch=debug"
    os.environ["NO_COLOR"] = "1"
    try:
        # A work dir per build: each names its data dirs and logs kvd-1,
        # kvd-2, ... on its own.
        sides = []
        for i, d in enumerate(sys.argv[2:]):
            own = os.path.join(work, str(i))
            os.makedirs(own)
            sides.append((d, cp.Steadfast(d, own)))
        order = random.Random(30)
        samples = {d: {} for d, _ in sides}
        steps = {d: [] for d, _ in sides}
        for _ in range(rounds):
            order.shuffle(sides)
            for d, sf in sides:
                child, data = sf.launch()
                try:
                    marks = timeline(data + ".log")
                finally:
                    cp.stop(child)
                for step, at in marks:
                    step = re.sub(r"^step (\S+) executed$", r"step \1 executed", step)
                    if step not in steps[d]:
                        steps[d].append(step)
                    samples[d].setdefault(step, []).append(at)
    finally:
        cp.stop_everything()
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average {os.getloadavg()}, {rounds} launches of kvd per build")
    for d, _ in sorted(sides):
        print(f"\n{d}")
        before = 0.0
        for step in steps[d]:
            m = statistics.median(samples[d][step])
            print(f"  {step:32s} at {m / 1e3:7.2f} ms  (+{(m - before) / 1e3:6.2f})  n={len(samples[d][step])}")
            before = m


if __name__ == "__main__":
    main()
