#!/usr/bin/env python3
"""Every figure of compare_peers.py for two or more steadfast builds and runit, interleaved in one run.

    python3 scripts/ab_peers.py ROUNDS BIN_DIR [BIN_DIR ...]

Each BIN_DIR holds `steadfastctl` and `examples/{kvd,minimal}` (copy one build
aside, e.g. to target/before, to set it beside another). In every section each
round runs every case of every build and runit's once, the order shifted by
one each round (compare_peers.rounds), so the builds see the same load: status
(`steadfastctl status` against that build's kvd, `sv status`), restart until
running (`restart --wait` of each build's minimal and kvd, `sv term` + the new
pid running), launch until running (kvd and minimal on a fresh data dir until
`probe ready`, runsv until `run:`), `minimal` with no arguments (wall time and
its own CPU time) beside `/bin/true`, and each daemon's RSS at the end.
Medians; ratios ÷ runit's case (÷ `/bin/true` for the usage).
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_peers as cp  # noqa: E402


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    n = int(sys.argv[1])
    work = tempfile.mkdtemp(prefix="ab-peers-")
    try:
        builds = []
        for i, d in enumerate(sys.argv[2:]):
            # Each build's data dirs under a directory of its own: never one
            # build's daemon on another's data dir.
            own = os.path.join(work, str(i))
            os.mkdir(own)
            builds.append((os.path.basename(os.path.normpath(d)), cp.Steadfast(d, own)))
        for name, sf in builds:
            print(f"# {name}:")
            cp.describe_build(sf, None)
        rit = cp.Runit(work)
        daemons = {}
        for name, sf in builds:
            kvd, data = sf.launch()
            minimal, minimal_data = sf.launch_minimal()
            cp.poll_until(lambda: sf.ready(data))
            cp.poll_until(lambda: sf.ready(minimal_data))
            sf.data, sf.minimal_data = data, minimal_data
            daemons[f"kvd ({name})"] = kvd.pid
            daemons[f"minimal ({name})"] = minimal.pid
        runsv, service = rit.launch()
        cp.poll_until(lambda: rit.pid(service) and rit.running(service))
        daemons["runsv"] = runsv.pid
        time.sleep(2.0)

        cases = [(f"steadfastctl status ({name})", "steadfast",
                  lambda sf=sf: cp.run([sf.ctl, "--data-dir", sf.data, "status"])) for name, sf in builds]
        cases.append(("sv status", "runit", lambda: cp.run(["sv", "status", service])))
        samples, failures = cp.rounds(cases, n)
        cp.table("status, whole process", cases, samples, failures, "sv status")

        def sv_restart():
            rit.unthrottled(service)
            before = rit.pid(service)
            began = time.perf_counter()
            cp.run(["sv", "term", service])
            cp.poll_until(lambda: rit.pid(service) not in (None, before) and rit.running(service), patience=10)
            return time.perf_counter() - began

        ref = "sv term + supervise/ shows the new pid running"
        cases = []
        for name, sf in builds:
            cases.append((f"restart --wait minimal ({name})", "steadfast",
                          lambda sf=sf: cp.run([sf.ctl, "--data-dir", sf.minimal_data, "restart", "--wait"])))
            cases.append((f"restart --wait kvd ({name})", "steadfast",
                          lambda sf=sf: cp.run([sf.ctl, "--data-dir", sf.data, "restart", "--wait"])))
        cases.append((ref, "runit", sv_restart))
        samples, failures = cp.rounds(cases, n)
        cp.table("restart until running again", cases, samples, failures, ref)

        def sf_launch(sf, launch):
            def case():
                began = time.perf_counter()
                child, fresh = launch()
                try:
                    cp.poll_until(lambda: sf.ready(fresh), pause=cp.LAUNCH_POLL_PAUSE)
                    return time.perf_counter() - began
                finally:
                    cp.stop(child)
            return case

        def runsv_launch():
            began = time.perf_counter()
            child, fresh = rit.launch()
            try:
                cp.poll_until(lambda: rit.say_up(fresh), pause=cp.LAUNCH_POLL_PAUSE)
                return time.perf_counter() - began
            finally:
                rit.finish(child, fresh)

        ref = "runsv until sv status says run:"
        cases = []
        for name, sf in builds:
            cases.append((f"launch kvd ({name})", "steadfast", sf_launch(sf, sf.launch)))
            cases.append((f"launch minimal ({name})", "steadfast", sf_launch(sf, sf.launch_minimal)))
        cases.append((ref, "runit", runsv_launch))
        samples, failures = cp.rounds(cases, n)
        cp.table("launch until running", cases, samples, failures, ref)

        cpu = {}

        def usage(name, argv, nonzero):
            def case():
                wall, spent, status = cp.run_usage(argv)
                if (status == 0) == nonzero:
                    raise RuntimeError(f"{argv[0]} exited {status}")
                cpu.setdefault(name, []).append(spent)
                return wall
            return case

        ref = "/bin/true"
        cases = [(f"minimal, no arguments ({name})", "steadfast",
                  usage(f"minimal, no arguments ({name})", [sf.minimal], True)) for name, sf in builds]
        cases.append((ref, "floor", usage(ref, ["/bin/true"], False)))
        samples, failures = cp.rounds(cases, n)
        cp.table("usage (wall)", cases, samples, failures, ref)
        for name, _, _ in cases:
            if cpu.get(name) and samples[name]:
                spent = statistics.median(cpu[name])
                print(f"  {name:50s} CPU {spent * 1e3:7.3f} ms, wall ÷ CPU {statistics.median(samples[name]) / spent:5.2f}x")

        print("\n== RSS after the run (VmRSS)")
        for name, pid in daemons.items():
            kib = cp.rss_kib(pid) if os.path.exists(f"/proc/{pid}") else None
            print(f"{name:52s} {kib if kib is not None else 'gone':>8} KiB")
        return 0
    finally:
        cp.stop_everything()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
