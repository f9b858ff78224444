#!/usr/bin/env python3
"""Whole-process figures of steadfast next to runit and supervisord, from one run.

What it measures (each figure the median of N rounds; in every round each case
runs once, and the order of the cases shifts by one from round to round, so a
noisy neighbour on the machine slows every side alike):

  status           `steadfastctl status` (human and --json) against a running kvd,
                   `sv status`, `supervisorctl status`, and `/bin/true` as the
                   floor of any command that is a process of its own.
  restart          until the service runs again: `steadfastctl restart --wait`
                   (one process; the daemon restarts its runtime inside
                   itself) against the `minimal` example — the like-for-like
                   of runit restarting `/bin/sleep`: steadfast's trivial
                   runtime, one step binding a port — and against kvd (a
                   figure of its own: kvd's runtime opens and replays its
                   store); `sv term` + watching supervise/ for the new pid
                   (runsv re-execs `/bin/sleep infinity`), supervisord's
                   XML-RPC stopProcess + startProcess. The ratio is ÷ runit.
  launch           a fresh daemon until its service runs: kvd (five steps, a
                   store) and the `minimal` example (one step) on an empty data
                   dir until `steadfastctl probe ready` says so, runsv until
                   `sv status` says `run:`, supervisord until XML-RPC says
                   RUNNING. Every side polls the same way: one check after
                   another with LAUNCH_POLL_PAUSE (1 ms) between them, the
                   check a process of each side's own tool (steadfastctl,
                   sv) or one XML-RPC call (supervisord); the median cost of
                   one check that found the daemon not yet running is printed
                   beside the table, since a launch is seen up to one check
                   (plus the pause) late.
  usage            the `minimal` example with no arguments (it says what it
                   needs and exits 78): its wall time beside its own CPU time
                   (user + system, from wait4), and `/bin/true`. A process
                   whose wall time is far above its CPU time waits on
                   something (a thread started and scheduled) rather than
                   working.
  idle RSS         VmRSS of each daemon (and of the peers' `sleep` child) after
                   the run.

First it prints the build it measures: each binary's profile (the directory
name, and that profile's `lto`/`codegen-units`/`panic` from Cargo.toml),
whether it is linked statically, whether its relocations are packed
(DT_RELR), and its size; `--json` keeps them under "build".

The peers supervise `/bin/sleep infinity`, the cheapest child there is.

  python3 scripts/compare_peers.py [--bin target/release] [--ctl PATH] [--rounds 30] [--json FILE]
  python3 scripts/compare_peers.py --smoke --bin target/debug     (what .ci/run runs)

--bin is a cargo profile dir holding `steadfastctl`, `examples/kvd` and
`examples/minimal`; by default `target/release`, what the README's set-up
builds (`cargo build --release --example kvd --example minimal && cargo
build --release -p steadfastctl`), so the ratios are what a user gets.
--ctl names another steadfastctl: `cargo build-ctl` writes the statically
linked one to `target/ctl/steadfastctl` (README "Performance").
--smoke: 3 rounds; a peer that is not installed is skipped with a line saying
so; the exit code is non-zero only when a steadfast case fails. Outside
--smoke a missing peer is an error. Every process started here is stopped by
its pid when the script ends, also on an error.
"""

import argparse
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
import json

CHILDREN = []  # Popen objects started here, stopped by pid at the end
LAUNCH_POLL_PAUSE = 0.001  # s between two checks of a launch, the same for every side
STRAYS = []  # pids of the peers' `sleep` children, killed if still alive


def note(text):
    print(f"# {text}", file=sys.stderr, flush=True)


def start(argv, **kw):
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.DEVNULL)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)
    CHILDREN.append(child)
    return child


def stop(child, sig=signal.SIGTERM):
    if child.poll() is None:
        try:
            child.send_signal(sig)
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)
    if child in CHILDREN:
        CHILDREN.remove(child)
    return child.returncode


def stop_everything():
    for child in reversed(list(CHILDREN)):
        try:
            stop(child)
        except OSError as error:
            note(f"stopping pid {child.pid}: {error}")
    for pid in STRAYS:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(argv, ok=(0,)):
    """Run argv to its end; its wall time in seconds."""
    began = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
    took = time.perf_counter() - began
    if done.returncode not in ok:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[:200]}")
    return took


def poll_until(check, patience=20.0, pause=0.0):
    """Call check() until it is truthy; its value. Raises after `patience` s."""
    give_up = time.perf_counter() + patience
    while time.perf_counter() < give_up:
        value = check()
        if value:
            return value
        if pause:
            time.sleep(pause)
    raise RuntimeError(f"gave up after {patience} s")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def profile_settings(name):
    """The `[profile.NAME]` settings of the workspace's Cargo.toml that decide
    how fast a binary starts, following `inherits` (cargo's defaults where
    unset); {} when there is no such profile."""
    import tomllib
    manifest = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Cargo.toml")
    with open(manifest, "rb") as f:
        profiles = tomllib.load(f).get("profile", {})
    builtin = {"debug": ("dev", {"opt-level": 0, "lto": False, "codegen-units": 256, "panic": "unwind"}),
               "release": ("release", {"opt-level": 3, "lto": False, "codegen-units": 16, "panic": "unwind"})}
    name, base = builtin.get(name, (name, None))
    chain, seen = [], set()
    while name and name not in seen:
        seen.add(name)
        table = profiles.get(name, {})
        chain.append(table)
        if name in ("dev", "release"):
            base = builtin["debug" if name == "dev" else "release"][1]
            break
        name = table.get("inherits")
    if base is None:
        return {}
    settings = dict(base)
    for table in reversed(chain):
        settings.update({k: table[k] for k in settings if k in table})
    return settings


def elf_facts(path):
    """How `path` was linked: {"static", "packed_relocations", "bytes"}, from
    its program headers (no PT_INTERP: static) and dynamic section (DT_RELR:
    packed relative relocations)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    facts = {"bytes": len(data), "static": None, "packed_relocations": None}
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # 64-bit little-endian only
        return facts
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    interp, relr = False, False
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            interp = True
        elif p_type == 2:  # PT_DYNAMIC
            for at in range(p_offset, p_offset + p_filesz, 16):
                tag, _ = struct.unpack_from("<qQ", data, at)
                if tag == 0:
                    break
                if tag == 36:  # DT_RELR
                    relr = True
    facts.update(static=not interp, packed_relocations=relr)
    return facts


BUILD = {}


def describe_build(sf, bin_dir):
    """Print (and keep for --json) how every steadfast binary measured was built."""
    print("== build measured")
    for name, path in (("steadfastctl", sf.ctl), ("kvd", sf.kvd), ("minimal", sf.minimal)):
        profile = os.path.basename(os.path.dirname(path if name == "steadfastctl" else os.path.dirname(path)))
        settings = profile_settings(profile)
        facts = elf_facts(path)
        BUILD[name] = {"path": path, "profile": profile, "settings": settings, **facts}
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "settings unknown"
        linked = {None: "not ELF", True: "static", False: "dynamic"}[facts["static"]]
        packed = ", packed relocations" if facts["packed_relocations"] else ""
        print(f"{name:13s} {path}: profile {profile} ({shown}); {linked}{packed}; "
              f"{facts['bytes'] / 1e6:.1f} MB")
    sys.stdout.flush()


def run_usage(argv):
    """Run argv (stdin, stdout and stderr on /dev/null) to its end:
    (wall seconds, CPU seconds of the process, exit status)."""
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    began = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=null)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - began
    if os.WIFSIGNALED(status):
        raise RuntimeError(f"{argv[0]} was killed by signal {os.WTERMSIG(status)}")
    return wall, usage.ru_utime + usage.ru_stime, os.WEXITSTATUS(status)


def loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ the sides

class Steadfast:
    name = "steadfast"

    def __init__(self, bin_dir, work, ctl=None):
        self.ctl = ctl or os.path.join(bin_dir, "steadfastctl")
        self.kvd = os.path.join(bin_dir, "examples", "kvd")
        self.minimal = os.path.join(bin_dir, "examples", "minimal")
        for path in (self.ctl, self.kvd, self.minimal):
            if not os.access(path, os.X_OK):
                raise SystemExit(f"{path}: not built (see --help)")
        self.work = work
        self.count = 0

    def launch(self):
        """A kvd on a fresh data dir with a config naming a free port: (child, data dir)."""
        return self._fresh("kvd", lambda data, conf: [self.kvd, "--data-dir", data, "--config", conf])

    def launch_minimal(self):
        """The `minimal` example (one step: bind a port) on a fresh data dir: (child, data dir)."""
        return self._fresh("minimal", lambda data, conf: [self.minimal, "--data-dir", data, "--config", conf])

    def _fresh(self, name, argv):
        """`argv(data dir, config)` started on a fresh data dir whose config names a free port."""
        self.count += 1
        data = os.path.join(self.work, f"{name}-{self.count}")
        conf = data + ".toml"
        with open(conf, "w") as f:
            f.write(f'listen_addr = "127.0.0.1:{loopback_port()}"\n')
        log = open(data + ".log", "ab")
        child = start(argv(data, conf), stdout=log, stderr=log)
        return child, data

    def ready(self, data):
        probe = subprocess.run([self.ctl, "--data-dir", data, "probe", "ready"],
                               stdin=subprocess.DEVNULL, capture_output=True)
        return probe.returncode == 0


class Runit:
    name = "runit"

    def __init__(self, work):
        self.work = work
        self.count = 0

    def make_dir(self):
        self.count += 1
        service = os.path.join(self.work, f"runit-{self.count}")
        os.makedirs(service)
        run_script = os.path.join(service, "run")
        with open(run_script, "w") as f:
            f.write("#!/bin/sh\nexec /bin/sleep infinity\n")
        os.chmod(run_script, 0o755)
        return service

    def launch(self):
        service = self.make_dir()
        return start(["runsv", service], start_new_session=True), service

    @staticmethod
    def pid(service):
        try:
            with open(os.path.join(service, "supervise", "pid")) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        if not text:
            return None
        pid = int(text)
        if pid not in STRAYS:
            STRAYS.append(pid)
        return pid

    @staticmethod
    def running(service):
        try:
            with open(os.path.join(service, "supervise", "stat")) as f:
                return f.read().strip() == "run"
        except FileNotFoundError:
            return False

    def unthrottled(self, service):
        """runsv holds back a restart of a child that ran under a second: let the
        current child reach 1.1 s (untimed), so a restart is measured unthrottled."""
        pid = self.pid(service)
        if pid is None:
            return
        with open(f"/proc/{pid}/stat") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        age = uptime - started_ticks / os.sysconf("SC_CLK_TCK")
        if age < 1.1:
            time.sleep(1.1 - age)

    @staticmethod
    def say_up(service):
        status = subprocess.run(["sv", "status", service], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        return status.stdout.startswith("run:")

    @staticmethod
    def finish(child, service):
        subprocess.run(["sv", "exit", service], stdin=subprocess.DEVNULL, capture_output=True)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        stop(child)


class UnixHTTP(http.client.HTTPConnection):
    """HTTP over supervisord's Unix socket."""

    def __init__(self, path):
        super().__init__("localhost")
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path_)


class UnixTransport(xmlrpc.client.Transport):
    def __init__(self, path):
        super().__init__()
        self.path_ = path

    def make_connection(self, host):
        return UnixHTTP(self.path_)


def console_script(name):
    """The console script beside this interpreter (not a pyenv shim, which adds a bash)."""
    here = os.path.join(os.path.dirname(os.path.realpath(sys.executable)), name)
    return here if os.access(here, os.X_OK) else shutil.which(name)


class Supervisord:
    name = "supervisord"

    def __init__(self, work):
        self.work = work
        self.count = 0
        self.daemon = console_script("supervisord")
        self.ctl = console_script("supervisorctl")

    def launch(self):
        self.count += 1
        d = os.path.join(self.work, f"supervisord-{self.count}")
        os.makedirs(d)
        conf = os.path.join(d, "supervisord.conf")
        sock = os.path.join(d, "supervisor.sock")
        with open(conf, "w") as f:
            f.write(
                f"[unix_http_server]\nfile={sock}\nchmod=0700\n"
                f"[supervisord]\nlogfile={d}/supervisord.log\npidfile={d}/supervisord.pid\nchildlogdir={d}\n"
                "[rpcinterface:supervisor]\n"
                "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
                f"[supervisorctl]\nserverurl=unix://{sock}\n"
                "[program:sleeper]\ncommand=/bin/sleep infinity\nstartsecs=0\nautorestart=true\n"
            )
        child = start([self.daemon, "-n", "-c", conf])
        rpc = xmlrpc.client.ServerProxy("http://localhost", transport=UnixTransport(sock))
        return child, (conf, rpc)

    @staticmethod
    def running_pid(rpc):
        try:
            info = rpc.supervisor.getProcessInfo("sleeper")
        except (OSError, xmlrpc.client.Fault, http.client.HTTPException):
            return None
        if info["statename"] != "RUNNING":
            return None
        if info["pid"] not in STRAYS:
            STRAYS.append(info["pid"])
        return info["pid"]

    @staticmethod
    def finish(child, rpc):
        try:
            rpc.supervisor.shutdown()
            child.wait(timeout=15)
        except Exception:  # the daemon may be gone already; stop() makes sure
            pass
        stop(child)


# ------------------------------------------------------------------ rounds and tables

def rounds(cases, n):
    """cases: [(name, side, fn)], fn() -> seconds (None: time the call itself).
    Returns ({name: [seconds]}, {name: failures})."""
    samples = {name: [] for name, _, _ in cases}
    failures = {name: 0 for name, _, _ in cases}
    for i in range(n):
        shift = i % len(cases)
        for name, _, fn in cases[shift:] + cases[:shift]:
            began = time.perf_counter()
            try:
                took = fn()
            except Exception as error:  # recorded, reported, and fatal only for steadfast
                failures[name] += 1
                note(f"{name}: {error}")
                continue
            samples[name].append(took if took is not None else time.perf_counter() - began)
    return samples, failures


RESULTS = []


def table(title, cases, samples, failures, reference):
    medians = {name: statistics.median(xs) for name, xs in samples.items() if xs}
    ref = medians.get(reference)
    print(f"\n== {title}" + (f" (ratio: ÷ {reference})" if ref else ""))
    print(f"{'case':52s} {'n':>3s} {'median ms':>10s} {'min ms':>9s} {'ratio':>9s}")
    for name, side, _ in cases:
        xs = samples[name]
        if not xs:
            print(f"{name:52s}   -  no samples ({failures[name]} failed)")
            continue
        ratio = f"{medians[name] / ref:8.2f}x" if ref else f"{'-':>9s}"
        print(f"{name:52s} {len(xs):3d} {medians[name] * 1e3:10.3f} {min(xs) * 1e3:9.3f} {ratio}"
              + (f"  ({failures[name]} failed)" if failures[name] else ""))
        RESULTS.append({"section": title, "case": name, "side": side, "n": len(xs),
                        "median_ms": medians[name] * 1e3, "min_ms": min(xs) * 1e3,
                        "ratio": medians[name] / ref if ref else None, "reference": reference})
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/release", help="cargo profile dir with steadfastctl, examples/kvd and examples/minimal")
    parser.add_argument("--ctl", default=None, help="the steadfastctl to run (default: the --bin dir's); `cargo build-ctl` writes target/ctl/steadfastctl")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of each figure")
    parser.add_argument("--smoke", action="store_true", help="3 rounds; skip peers that are not installed")
    parser.add_argument("--json", help="write every median here")
    args = parser.parse_args()
    n = 3 if args.smoke else max(3, args.rounds)

    work = tempfile.mkdtemp(prefix="compare-peers-")
    sides_missing = []
    try:
        sf = Steadfast(args.bin, work, args.ctl)
        describe_build(sf, args.bin)
        rit = Runit(work) if shutil.which("runsv") and shutil.which("sv") else None
        sup = Supervisord(work)
        if not (sup.daemon and sup.ctl):
            sup = None
        for side, fix in ((rit, "runit: runsv/sv not found (apt-get install -y runit)"),
                          (sup, "supervisord: not found (pip install supervisor)")):
            if side is None:
                if not args.smoke:
                    raise SystemExit(f"{fix}; --smoke skips a missing peer")
                print(f"skipped {fix}")
                sides_missing.append(fix)
        failed = steadfast_failed = figures(sf, rit, sup, n, args.smoke)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rounds": n, "build": BUILD, "results": RESULTS, "skipped": sides_missing}, f, indent=1)
        if steadfast_failed:
            print(f"\nsteadfast failed in {failed} case run(s)", file=sys.stderr)
            return 1
        return 0
    finally:
        stop_everything()
        shutil.rmtree(work, ignore_errors=True)


def figures(sf, rit, sup, n, smoke):
    """Run every section; the number of failed steadfast case runs."""
    kvd, data = sf.launch()
    minimal, minimal_data = sf.launch_minimal()
    poll_until(lambda: sf.ready(data))
    poll_until(lambda: sf.ready(minimal_data))
    daemons = {"kvd (steadfast)": kvd.pid, "minimal (steadfast)": minimal.pid}
    if rit:
        runsv, service = rit.launch()
        try:
            poll_until(lambda: rit.pid(service) and rit.running(service))
            daemons["runsv"] = runsv.pid
        except RuntimeError as error:
            if not smoke:
                raise
            print(f"skipped runit: runsv did not start its service ({error})")
            rit = None
    if sup:
        supd, (conf, rpc) = sup.launch()
        try:
            poll_until(lambda: sup.running_pid(rpc), pause=0.005)
            daemons["supervisord"] = supd.pid
        except RuntimeError as error:
            if not smoke:
                raise
            print(f"skipped supervisord: it did not start its program ({error})")
            sup = None
    time.sleep(0.2 if smoke else 2.0)  # let every daemon settle before it is measured

    bad = 0

    def steadfast_failures(failures, cases):
        return sum(failures[name] for name, side, _ in cases if side == "steadfast")

    # -- status as a whole process
    cases = [
        ("steadfastctl status (kvd)", "steadfast", lambda: run([sf.ctl, "--data-dir", data, "status"])),
        ("steadfastctl --json status (kvd)", "steadfast", lambda: run([sf.ctl, "--data-dir", data, "--json", "status"])),
        ("/bin/true (the floor of any process)", "floor", lambda: run(["/bin/true"])),
    ]
    if rit:
        cases.append(("sv status", "runit", lambda: run(["sv", "status", service])))
    if sup:
        cases.append(("supervisorctl status", "supervisord", lambda: run([sup.ctl, "-c", conf, "status"])))
    samples, failures = rounds(cases, n)
    table("status, whole process", cases, samples, failures, "sv status" if rit else "/bin/true (the floor of any process)")
    bad += steadfast_failures(failures, cases)

    # -- restart until running again
    def sf_restart():
        return run([sf.ctl, "--data-dir", data, "restart", "--wait"])

    def sf_restart_minimal():
        return run([sf.ctl, "--data-dir", minimal_data, "restart", "--wait"])

    def sv_restart():
        rit.unthrottled(service)
        before = rit.pid(service)
        began = time.perf_counter()
        run(["sv", "term", service])
        poll_until(lambda: rit.pid(service) not in (None, before) and rit.running(service), patience=10)
        return time.perf_counter() - began

    def sup_restart():
        began = time.perf_counter()
        rpc.supervisor.stopProcess("sleeper")
        rpc.supervisor.startProcess("sleeper")  # answers once RUNNING
        return time.perf_counter() - began

    cases = [("steadfastctl restart --wait (minimal)", "steadfast", sf_restart_minimal),
             ("steadfastctl restart --wait (kvd)", "steadfast", sf_restart)]
    if rit:
        cases.append(("sv term + supervise/ shows the new pid running", "runit", sv_restart))
    if sup:
        cases.append(("supervisord XML-RPC stopProcess + startProcess", "supervisord", sup_restart))
    samples, failures = rounds(cases, n)
    ref = "sv term + supervise/ shows the new pid running" if rit else "steadfastctl restart --wait (minimal)"
    table("restart until running again", cases, samples, failures, ref)
    bad += steadfast_failures(failures, cases)

    # -- launch until running. Every side: a check, LAUNCH_POLL_PAUSE, a
    # check, ... (the same loop); the cost of one check that said "not yet"
    # is kept per side, since a launch is seen up to a check + a pause late.
    check_costs = {}

    def polled(name, check):
        def timed_check():
            began = time.perf_counter()
            ok = check()
            if not ok:
                check_costs.setdefault(name, []).append(time.perf_counter() - began)
            return ok
        poll_until(timed_check, pause=LAUNCH_POLL_PAUSE)

    def sf_launch(launch, name):
        def case():
            began = time.perf_counter()
            child, fresh = launch()
            try:
                polled(name, lambda: sf.ready(fresh))
                return time.perf_counter() - began
            finally:
                stop(child)
        return case

    def runsv_launch():
        began = time.perf_counter()
        child, fresh = rit.launch()
        try:
            polled("runsv until sv status says run:", lambda: rit.say_up(fresh))
            return time.perf_counter() - began
        finally:
            rit.finish(child, fresh)

    def sup_launch():
        began = time.perf_counter()
        child, (_, fresh_rpc) = sup.launch()
        try:
            polled("supervisord until XML-RPC says RUNNING", lambda: sup.running_pid(fresh_rpc))
            return time.perf_counter() - began
        finally:
            sup.finish(child, fresh_rpc)

    cases = [("kvd on a fresh dir until probe ready", "steadfast",
              sf_launch(sf.launch, "kvd on a fresh dir until probe ready"))]
    if sf.minimal:
        cases.append(("minimal on a fresh dir until probe ready", "steadfast",
                      sf_launch(sf.launch_minimal, "minimal on a fresh dir until probe ready")))
    else:
        print("skipped minimal: examples/minimal not built (cargo build --release --example minimal)")
    if rit:
        cases.append(("runsv until sv status says run:", "runit", runsv_launch))
    if sup:
        cases.append(("supervisord until XML-RPC says RUNNING", "supervisord", sup_launch))
    # As many rounds as every other figure: a launch costs tens of ms (a
    # third of --rounds 20 was 6 samples, too few for a median on a noisy
    # machine; supervisord's ~0.3 s each is the longest).
    samples, failures = rounds(cases, n)
    table("launch until running", cases, samples, failures,
          "runsv until sv status says run:" if rit else "kvd on a fresh dir until probe ready")
    print(f"(polled: a check, {LAUNCH_POLL_PAUSE * 1e3:g} ms pause, a check, ...; "
          "median cost of one check that said not yet:)")
    for name, _, _ in cases:
        xs = check_costs.get(name)
        if xs:
            print(f"  {name:50s} {statistics.median(xs) * 1e3:8.3f} ms ({len(xs)} checks)")
            RESULTS.append({"section": "launch poll", "case": name, "n": len(xs),
                            "median_check_ms": statistics.median(xs) * 1e3})
    bad += steadfast_failures(failures, cases)

    # -- a command line refused: `minimal` with no arguments says what it
    # needs (a data directory) and exits non-zero. Its wall time beside its own CPU time.
    cpu = {}

    def usage_case(name, argv, code):
        def case():
            wall, spent, status = run_usage(argv)
            if (status == 0) if code is None else (status != code):
                raise RuntimeError(f"{argv[0]} exited {status}, not {code or 'non-zero'}")
            cpu.setdefault(name, []).append(spent)
            return wall
        return case

    cases = [("minimal with no arguments (refused)", "steadfast", usage_case("minimal with no arguments (refused)", [sf.minimal], None)),
             ("/bin/true (the floor of any process)", "floor", usage_case("/bin/true (the floor of any process)", ["/bin/true"], 0))]
    samples, failures = rounds(cases, n)
    table("usage, whole process (wall time)", cases, samples, failures, "/bin/true (the floor of any process)")
    print("(CPU time, user + system, median; wall ÷ CPU:)")
    for name, _, _ in cases:
        xs, walls = cpu.get(name), samples[name]
        if xs and walls:
            spent = statistics.median(xs)
            over = f"{statistics.median(walls) / spent:6.2f}x" if spent else "     -"
            print(f"  {name:50s} {spent * 1e3:8.3f} ms CPU  {over}")
            RESULTS.append({"section": "usage cpu", "case": name, "n": len(xs),
                            "median_cpu_ms": spent * 1e3,
                            "wall_over_cpu": statistics.median(walls) / spent if spent else None})
    bad += steadfast_failures(failures, cases)

    # -- idle RSS, after all of the above
    print("\n== RSS after the run (VmRSS)")
    if rit:
        child = rit.pid(service)
        if child:
            daemons["sleep under runsv"] = child
    if sup:
        child = sup.running_pid(rpc)
        if child:
            daemons["sleep under supervisord"] = child
    for name, pid in daemons.items():
        kib = rss_kib(pid)
        print(f"{name:52s} {kib:8d} KiB")
        RESULTS.append({"section": "rss", "case": name, "rss_kib": kib})
    for name, child in (("kvd", kvd), ("minimal", minimal)):
        if child.poll() is not None:
            note(f"{name} exited early: {child.returncode}")
            bad += 1
    return bad


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
