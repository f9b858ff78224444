//! kvd under the outer service managers people really run, with the
//! snippets this repository ships (`examples/runit/kvd/`,
//! `examples/supervisord/kvd.conf`, `examples/systemd/kvd.service`): real
//! `runsv` (Debian's runit), real `supervisord` (PyPI's supervisor) and
//! systemd's own `systemd-analyze` (`.ci/run` installs all three).
//!
//! Under runit and supervisord each test drives every row of
//! `spec/exit-codes.md`: exit 75 (relaunch) is restarted; `kill -9` is
//! restarted with the previous run `crashed`; `replace` is refused with its
//! typed reason (the manager tracks the pid); the manager's own restart
//! (`sv restart`, `supervisorctl restart`: SIGTERM, drained to exit 0)
//! starts a new process; the manager's stop (`sv down`, `supervisorctl
//! stop`: the same exit 0) leaves it down; `steadfastctl exit` (halt, 80)
//! leaves it down; and a daemon that cannot start (78: a data dir writable
//! by others, then a missing `--config` file) is given up on (runit: down;
//! supervisord: `FATAL` after its start retries) instead of respawned for
//! ever. What each exit was is read from the manager (runit's `finish`
//! prints the code it got; supervisord logs it). Every wait is for a state,
//! with a generous deadline. A test skips with a printed reason only when
//! its tool is not installed, and never in CI (`CI` set), where a missing
//! tool fails it.

use crate::support::processes;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, status, tool, until};
use steadfast::daemon::{
    EXIT_DRAINED, EXIT_HALT, EXIT_NEVER_WORKS, EXIT_RELAUNCH, EXIT_START_FAILED,
};

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Poll `pred` until it holds, within [`PATIENCE`].
fn poll(manager: &dyn Manager, what: &str, mut pred: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !pred() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the manager's log:\n{}",
            manager.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pid_of(s: &serde_json::Value) -> u32 {
    u32::try_from(s["pid"].as_u64().expect("pid")).expect("a pid")
}

fn running(s: &serde_json::Value) -> bool {
    s["lifecycle"]["state"] == "running"
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// One outer manager, as the contract below drives it.
trait Manager {
    /// Whether the manager counts kvd as up (supervisord: `RUNNING`, past
    /// `startsecs`, so an exit now is not a failed start).
    fn is_up(&self) -> bool;
    /// Whether the manager reports kvd down and means to leave it so.
    fn is_down(&self) -> bool;
    /// How many times the manager gave up on a kvd that cannot start
    /// (runit: `finish` put it down for a 78; supervisord: `FATAL`), and
    /// whether it is in that state now.
    fn gave_up(&self) -> (usize, bool);
    /// How many exits with `code` the manager recorded.
    fn exits(&self, code: i32) -> usize;
    /// How many deaths by SIGKILL the manager recorded.
    fn killed(&self) -> usize;
    /// Ask the manager to start kvd.
    fn start(&self);
    /// The manager's own restart (it sends SIGTERM, then starts kvd).
    fn restart(&self);
    /// The manager's own stop (it sends SIGTERM and leaves kvd down).
    fn stop(&self);
    /// What the manager logged (for failure messages).
    fn log(&self) -> String;
}

/// Wait until kvd runs and the manager counts it as up; its status.
fn up(manager: &dyn Manager, data: &Path, what: &str, pid_not: Option<u32>) -> serde_json::Value {
    let s = until(data, what, |s| running(s) && Some(pid_of(s)) != pid_not);
    poll(
        manager,
        &format!("the manager to count kvd up ({what})"),
        || manager.is_up(),
    );
    s
}

/// Every row of `spec/exit-codes.md` under one manager's snippet.
fn drive(manager: &dyn Manager, s: &Setup, name: &str) {
    let data = s.data.as_path();
    let first = up(manager, data, "kvd running under the manager", None);
    assert_eq!(first["previous_run"]["kind"], "first_ever");
    let pid = pid_of(&first);

    // Exit 75 (relaunch): the manager starts it again.
    let out = ctl(data, &["exit", "--relaunch"]);
    assert_eq!(out.status.code(), Some(0), "{}", manager.log());
    let relaunched = up(manager, data, "kvd relaunched after exit 75", Some(pid));
    assert_eq!(relaunched["previous_run"]["kind"], "clean_stop");
    assert_eq!(manager.exits(EXIT_RELAUNCH), 1, "{}", manager.log());
    let pid = pid_of(&relaunched);

    // kill -9: restarted, and the previous run is crashed, with its pid.
    signal(pid, "-KILL");
    let after_crash = up(manager, data, "kvd relaunched after kill -9", Some(pid));
    assert_eq!(after_crash["previous_run"]["kind"], "crashed");
    assert_eq!(after_crash["previous_run"]["pid"], pid);
    assert_eq!(
        after_crash["previous_run"]["attempt"], relaunched["attempts"][0]["attempt"],
        "the attempt the killed process was on"
    );
    assert_eq!(manager.killed(), 1, "{}", manager.log());
    let pid = pid_of(&after_crash);

    // Replacement is refused, typed: the manager tracks this pid.
    let candidate = s.dir.join("kvd-2");
    processes::copy_executable(&processes::example("kvd"), &candidate);
    let out = ctl(
        data,
        &[
            "replace",
            "--binary",
            candidate.to_str().expect("utf-8"),
            "--mode",
            "overlap",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("replace is refused under {name}")),
        "{stderr}"
    );
    assert_eq!(pid_of(&status(data).expect("still serving")), pid);

    // The manager's restart: SIGTERM drains (exit 0), and the manager
    // starts a new process (runit's `finish` once put every exit 0 down,
    // so `sv restart` left kvd down).
    manager.restart();
    let restarted = up(manager, data, "kvd restarted by the manager", Some(pid));
    assert_eq!(
        restarted["previous_run"]["kind"],
        "clean_stop",
        "SIGTERM drained and released the store: {}",
        manager.log()
    );
    assert_eq!(manager.exits(EXIT_DRAINED), 1, "{}", manager.log());

    // The manager's stop: the same drained exit 0, and kvd stays down.
    manager.stop();
    poll(manager, "the manager to report kvd stopped", || {
        manager.is_down() && status(data).is_none()
    });
    assert_eq!(manager.exits(EXIT_DRAINED), 2, "{}", manager.log());
    manager.start();
    let again = up(manager, data, "kvd started again by the manager", None);
    assert_eq!(again["previous_run"]["kind"], "clean_stop");

    // Exit 80 (halt): stays down.
    let out = ctl(data, &["exit"]);
    assert_eq!(out.status.code(), Some(0));
    poll(
        manager,
        "the manager to record exit 80 and leave kvd down",
        || manager.exits(EXIT_HALT) == 1 && manager.is_down() && status(data).is_none(),
    );

    // Exit 78 (never works): a data dir others can write is refused at
    // start; the manager gives up instead of respawning it for ever.
    set_mode(data, 0o777);
    manager.start();
    poll(
        manager,
        "the manager to give up on a refused data dir",
        || manager.gave_up() == (1, true) && status(data).is_none(),
    );
    let log = manager.log();
    assert!(log.contains("has mode 0777"), "{log}");
    let refused = manager.exits(EXIT_NEVER_WORKS);
    assert!(refused >= 1, "{log}");

    // Exit 78 again: its --config file is gone.
    set_mode(data, 0o700);
    std::fs::remove_file(&s.config).expect("remove the config");
    manager.start();
    poll(
        manager,
        "the manager to give up on a missing config",
        || manager.gave_up() == (2, true) && status(data).is_none(),
    );
    let log = manager.log();
    assert!(log.contains("does not exist; create it"), "{log}");
    assert!(manager.exits(EXIT_NEVER_WORKS) > refused, "{log}");

    // Nothing ended in a code the table does not name.
    assert_eq!(manager.exits(EXIT_START_FAILED), 0, "{log}");
}

struct Setup {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    data: PathBuf,
    config: PathBuf,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let data = dir.join("kvd-data");
    let config = dir.join("kvd.toml");
    let port = processes::free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    Setup {
        _tmp: tmp,
        dir,
        data,
        config,
    }
}

/// A manager the test started, killed (and reaped) when the test ends,
/// and the kvd it may still run over the data dir with it.
struct Reaped(Child, PathBuf);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if let Some(s) = status(&self.1) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid_of(&s).to_string()])
                .status();
        }
    }
}

struct Runit {
    sv: PathBuf,
    service: PathBuf,
    log: PathBuf,
}

impl Runit {
    fn sv(&self, command: &str) -> String {
        let out = Command::new(&self.sv)
            .arg(command)
            .arg(&self.service)
            .output()
            .expect("sv runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// How many lines of `finish` hold `what`.
    fn finish_said(&self, what: &str) -> usize {
        self.log()
            .lines()
            .filter(|line| line.starts_with("finish: ") && line.contains(what))
            .count()
    }
}

impl Manager for Runit {
    fn is_up(&self) -> bool {
        self.sv("status").starts_with("run:")
    }
    /// Down and meant to stay so: `down: …, want up` is the moment after
    /// ./finish exited and before runsv read the `sv down` it sent, or
    /// before runsv starts ./run again.
    fn is_down(&self) -> bool {
        let status = self.sv("status");
        status.starts_with("down:") && !status.contains("want up")
    }
    fn gave_up(&self) -> (usize, bool) {
        (
            self.finish_said("(never works as configured)"),
            self.is_down(),
        )
    }
    fn exits(&self, code: i32) -> usize {
        self.finish_said(&format!("finish: exit {code} ("))
    }
    fn killed(&self) -> usize {
        self.finish_said("finish: ended by signal 9 ")
    }
    fn start(&self) {
        self.sv("up");
    }
    fn restart(&self) {
        self.sv("restart");
    }
    fn stop(&self) {
        self.sv("down");
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[test]
fn kvd_under_runit_runsv() {
    let (Some(runsv), Some(sv)) = (tool("runsv"), tool("sv")) else {
        return;
    };
    let s = setup();
    let service = s.dir.join("sv-kvd");
    std::fs::create_dir(&service).expect("service dir");
    for file in ["run", "finish"] {
        processes::copy_executable(
            &repo_file(&format!("examples/runit/kvd/{file}")),
            &service.join(file),
        );
    }
    let log = s.dir.join("runsv.log");
    // The shipped run script, unchanged: its paths come from the
    // variables it reads (the defaults are the systemd unit's). runsv's
    // output (./run's, as it sends stderr to stdout, and ./finish's) is
    // the log.
    let child = Command::new(runsv)
        .arg(&service)
        .env("KVD", processes::example("kvd"))
        .env("KVD_DATA_DIR", &s.data)
        .env("KVD_CONFIG", &s.config)
        .env_remove("STEADFAST_SERVICE_MANAGER")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("runsv starts");
    let _runsv = Reaped(child, s.data.clone());
    let runit = Runit { sv, service, log };
    drive(&runit, &s, "runit");
    // `sv exit`: runsv ends (the service is down already).
    runit.sv("exit");
}

struct Supervisord {
    ctl: PathBuf,
    conf: PathBuf,
    log: PathBuf,
}

impl Supervisord {
    fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new(&self.ctl)
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("supervisorctl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// supervisord's own log.
    fn own_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Manager for Supervisord {
    fn is_up(&self) -> bool {
        self.ctl(&["status", "kvd"]).contains("RUNNING")
    }
    fn is_down(&self) -> bool {
        let status = self.ctl(&["status", "kvd"]);
        status.contains("EXITED") || status.contains("STOPPED")
    }
    fn gave_up(&self) -> (usize, bool) {
        (
            self.own_log()
                .matches("gave up: kvd entered FATAL state")
                .count(),
            self.ctl(&["status", "kvd"]).contains("FATAL"),
        )
    }
    /// `exited: kvd (exit status N; expected)` and `stopped: kvd (exit
    /// status N)`.
    fn exits(&self, code: i32) -> usize {
        let log = self.own_log();
        log.matches(&format!("(exit status {code};")).count()
            + log.matches(&format!("(exit status {code})")).count()
    }
    fn killed(&self) -> usize {
        self.own_log().matches("(terminated by SIGKILL").count()
    }
    fn start(&self) {
        self.ctl(&["start", "kvd"]);
    }
    fn restart(&self) {
        self.ctl(&["restart", "kvd"]);
    }
    fn stop(&self) {
        self.ctl(&["stop", "kvd"]);
    }
    /// supervisord's own log, then kvd's output (its child log).
    fn log(&self) -> String {
        let mut log = self.own_log();
        let children = std::fs::read_dir(self.log.parent().expect("the test dir"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("kvd-stdout"));
        for child in children {
            log.push_str(&std::fs::read_to_string(child.path()).unwrap_or_default());
        }
        log
    }
}

#[test]
fn kvd_under_supervisord() {
    let (Some(supervisord), Some(supervisorctl)) = (tool("supervisord"), tool("supervisorctl"))
    else {
        return;
    };
    let s = setup();
    // The shipped program section, with only its three paths made the
    // test's.
    let program = std::fs::read_to_string(repo_file("examples/supervisord/kvd.conf"))
        .expect("the shipped snippet")
        .replace(
            "/usr/local/bin/kvd",
            processes::example("kvd").to_str().expect("utf-8"),
        )
        .replace("/var/lib/kvd", s.data.to_str().expect("utf-8"))
        .replace("/etc/kvd/kvd.toml", s.config.to_str().expect("utf-8"));
    let program_path = s.dir.join("kvd.conf");
    std::fs::write(&program_path, program).expect("program");
    let dir = s.dir.display();
    let conf = s.dir.join("supervisord.conf");
    std::fs::write(
        &conf,
        format!(
            "[supervisord]\nnodaemon=true\nlogfile={dir}/supervisord.log\n\
             pidfile={dir}/supervisord.pid\nchildlogdir={dir}\n\
             [unix_http_server]\nfile={dir}/supervisor.sock\n\
             [rpcinterface:supervisor]\n\
             supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\
             [supervisorctl]\nserverurl=unix://{dir}/supervisor.sock\n\
             [include]\nfiles={}\n",
            program_path.display()
        ),
    )
    .expect("supervisord.conf");
    let child = Command::new(supervisord)
        .arg("-c")
        .arg(&conf)
        .env_remove("STEADFAST_SERVICE_MANAGER")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("supervisord starts");
    let _supervisord = Reaped(child, s.data.clone());
    let manager = Supervisord {
        ctl: supervisorctl,
        conf,
        log: s.dir.join("supervisord.log"),
    };
    drive(&manager, &s, "supervisord");
    let log = manager.own_log();
    for line in [
        "stopped: kvd (exit status 0)",
        "exited: kvd (exit status 80; expected)",
        "exited: kvd (exit status 78; not expected)",
        "exited: kvd (exit status 75; not expected)",
    ] {
        assert!(log.contains(line), "{line}: {log}");
    }
    manager.ctl(&["shutdown"]);
}

/// The shipped systemd unit, with only its `ExecStart=` binary made the
/// test's kvd (`verify` checks that the binary exists and is executable).
fn shipped_unit(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(repo_file("examples/systemd/kvd.service"))
        .expect("the shipped unit")
        .replace(
            "/usr/local/bin/kvd",
            processes::example("kvd").to_str().expect("utf-8"),
        );
    let path = dir.join("kvd.service");
    std::fs::write(&path, unit).expect("the unit");
    path
}

/// `systemd-analyze verify` passes on the shipped unit, silently (any
/// warning it prints about the unit fails the test too).
#[test]
fn the_shipped_systemd_unit_verifies() {
    let Some(analyze) = tool("systemd-analyze") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let unit = shipped_unit(tmp.path());
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "systemd-analyze verify: {stderr}");
    assert!(
        !stderr.contains("kvd.service"),
        "systemd-analyze verify warned about the unit: {stderr}"
    );
}

/// The shipped unit is hardened: `systemd-analyze security` rates its
/// exposure below 2.0 (it was 8.4, EXPOSED, before the hardening). The
/// score is printed.
#[test]
fn the_shipped_systemd_unit_is_hardened() {
    let Some(analyze) = tool("systemd-analyze") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let unit = shipped_unit(tmp.path());
    let out = Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let score: f64 = text
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for kvd.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure score in: {text}"));
    eprintln!("systemd-analyze security kvd.service: exposure {score}");
    assert!(score < 2.0, "exposure {score}:\n{text}");
}

/// The values of every `KEY=` line of `text` (a unit or an ini section),
/// split on white space and commas, in order.
fn directive(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .flat_map(|values| values.split([' ', ',']).filter(|v| !v.is_empty()))
        .map(str::to_owned)
        .collect()
}

fn codes(values: &[String]) -> Vec<i32> {
    let mut codes: Vec<i32> = values
        .iter()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("not an exit code: {v}"))
        })
        .collect();
    codes.sort_unstable();
    codes
}

/// The shipped unit restarts exactly what `spec/exit-codes.md` says it
/// does, read from the library's own constants: a halt (80) is clean and
/// never restarted, a never-works exit (78, and 2 from a daemon whose parser
/// exits 2) is never restarted, a relaunch (75) always is, and a crash or a
/// start that may work later (1) is restarted by `Restart=on-failure`.
#[test]
fn the_shipped_systemd_unit_restarts_by_the_exit_codes() {
    let unit = std::fs::read_to_string(repo_file("examples/systemd/kvd.service"))
        .expect("the shipped unit");
    assert_eq!(directive(&unit, "Restart"), ["on-failure"]);
    assert_eq!(codes(&directive(&unit, "SuccessExitStatus")), [EXIT_HALT]);
    assert_eq!(
        codes(&directive(&unit, "RestartPreventExitStatus")),
        [2, EXIT_NEVER_WORKS, EXIT_HALT]
    );
    assert_eq!(
        codes(&directive(&unit, "RestartForceExitStatus")),
        [EXIT_RELAUNCH]
    );
    // SIGTERM drains to 0, which systemd counts clean without being told.
    assert_eq!(EXIT_DRAINED, 0);
    assert_eq!(directive(&unit, "KillSignal"), ["SIGTERM"]);
}

/// The shipped supervisord program expects exactly a drained exit (0) and
/// a halt (80), and gives a daemon that cannot start a `startsecs` window
/// and a bounded number of retries, so it ends `FATAL`
/// (`kvd_under_supervisord` runs it).
#[test]
fn the_shipped_supervisord_program_expects_the_halts() {
    let conf = std::fs::read_to_string(repo_file("examples/supervisord/kvd.conf"))
        .expect("the shipped program");
    assert_eq!(directive(&conf, "autorestart"), ["unexpected"]);
    assert_eq!(
        codes(&directive(&conf, "exitcodes")),
        [EXIT_DRAINED, EXIT_HALT]
    );
    let startsecs = codes(&directive(&conf, "startsecs"));
    assert!(matches!(startsecs[..], [n] if n > 0), "{startsecs:?}");
    assert_eq!(directive(&conf, "startretries").len(), 1);
}

/// The exit codes of kvd and the other examples, without a manager: each
/// never-works start (a data dir others can write, a bad flag, a missing
/// `--config` file, a missing argument) exits 78; `--help` exits 0; a
/// halt exits 80, a relaunch 75 and SIGTERM (drained) 0.
#[test]
fn each_way_a_daemon_ends_has_its_exit_code() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kvd = processes::example("kvd");
    let run = |program: &Path, args: &[&std::ffi::OsStr]| {
        let out = Command::new(program)
            .args(args)
            .current_dir(tmp.path())
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).expect("dir");
    set_mode(&open, 0o777);
    let (code, stderr) = run(&kvd, &["--data-dir".as_ref(), open.as_os_str()]);
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(stderr.contains("has mode 0777"), "{stderr}");
    let (code, stderr) = run(&kvd, &["--no-such-flag".as_ref()]);
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    let missing = tmp.path().join("missing.toml");
    let (code, stderr) = run(&kvd, &["--config".as_ref(), missing.as_os_str()]);
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    let (code, stderr) = run(&kvd, &["--help".as_ref()]);
    assert_eq!(code, Some(0), "{stderr}");
    for example in ["minimal", "counter"] {
        let (code, stderr) = run(&processes::example(example), &[]);
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{example}: {stderr}");
        let (code, stderr) = run(
            &processes::example(example),
            &["--data-dir".as_ref(), open.as_os_str()],
        );
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{example}: {stderr}");
    }

    let s = setup();
    let mut daemon = processes::kvd(&s.data, &s.config, Stdio::null());
    until(&s.data, "kvd running", running);
    assert_eq!(ctl(&s.data, &["exit"]).status.code(), Some(0));
    assert_eq!(processes::wait_exit(&mut daemon), Some(EXIT_HALT), "halt");
    let mut daemon = processes::kvd(&s.data, &s.config, Stdio::null());
    until(&s.data, "kvd running", running);
    assert_eq!(ctl(&s.data, &["exit", "--relaunch"]).status.code(), Some(0));
    assert_eq!(
        processes::wait_exit(&mut daemon),
        Some(EXIT_RELAUNCH),
        "relaunch"
    );
    let mut daemon = processes::kvd(&s.data, &s.config, Stdio::null());
    let s2 = until(&s.data, "kvd running", running);
    signal(pid_of(&s2), "-TERM");
    assert_eq!(
        processes::wait_exit(&mut daemon),
        Some(EXIT_DRAINED),
        "SIGTERM"
    );
}
