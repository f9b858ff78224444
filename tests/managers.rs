//! kvd under the outer service managers people really run, with the
//! snippets this repository ships (`examples/runit/kvd/`,
//! `examples/supervisord/kvd.conf`, `examples/systemd/kvd.service`): real
//! `runsv` (Debian's runit), real `supervisord` (PyPI's supervisor) and
//! systemd's own `systemd-analyze` (`.ci/run` installs all three).
//!
//! Under runit and supervisord each test drives the same contract: exit 75
//! is relaunched, exit 0 stays down, `kill -9` is relaunched with the
//! previous run `crashed`, SIGTERM drains (the next run reads `clean_stop`)
//! and exits 0 (so the manager leaves it down), exit 2 (its `--config` file
//! is gone) stays down, and `replace` is refused
//! with its typed reason (the manager tracks the pid). A test skips with a
//! printed reason only when its tool is not installed, and never in CI
//! (`CI` set), where a missing tool fails it.

mod processes;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use processes::{PATIENCE, ctl, status, tool, until};

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

/// One outer manager, as the contract below drives it.
trait Manager {
    /// Whether the manager reports kvd down (and means to leave it so).
    fn is_down(&self) -> bool;
    /// Ask the manager to start kvd again.
    fn start(&self);
    /// What the manager logged (for failure messages).
    fn log(&self) -> String;
}

/// The contract every manager's snippet must give, over `data`.
fn drive(manager: &dyn Manager, data: &Path, config: &Path, dir: &Path, name: &str) {
    let first = until(data, "kvd running under the manager", running);
    assert_eq!(first["previous_run"]["kind"], "first_ever");
    let pid = pid_of(&first);

    // Exit 75 (relaunch): the manager starts it again.
    let out = ctl(data, &["exit", "--relaunch"]);
    assert_eq!(out.status.code(), Some(0), "{}", manager.log());
    let relaunched = until(data, "kvd relaunched after exit 75", |s| {
        running(s) && pid_of(s) != pid
    });
    assert_eq!(relaunched["previous_run"]["kind"], "clean_stop");
    let pid = pid_of(&relaunched);

    // kill -9: relaunched, and the previous run is crashed, with its pid.
    signal(pid, "-KILL");
    let after_crash = until(data, "kvd relaunched after kill -9", |s| {
        running(s) && pid_of(s) != pid
    });
    assert_eq!(after_crash["previous_run"]["kind"], "crashed");
    assert_eq!(after_crash["previous_run"]["pid"], pid);
    assert_eq!(
        after_crash["previous_run"]["attempt"], relaunched["attempts"][0]["attempt"],
        "the attempt the killed process was on"
    );
    let pid = pid_of(&after_crash);

    // Replacement is refused, typed: the manager tracks this pid.
    let candidate = dir.join("kvd-2");
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

    // SIGTERM: drained, exit 0, so the manager leaves it down.
    signal(pid, "-TERM");
    poll(
        manager,
        "the manager to report kvd down after SIGTERM",
        || manager.is_down() && status(data).is_none(),
    );
    manager.start();
    poll(manager, "kvd started again by the manager", || {
        status(data).is_some_and(|s| running(&s))
    });
    let again = status(data).expect("status");
    assert_eq!(
        again["previous_run"]["kind"],
        "clean_stop",
        "SIGTERM drained and released the store: {}",
        manager.log()
    );

    // Exit 0 (halt): stays down.
    let out = ctl(data, &["exit"]);
    assert_eq!(out.status.code(), Some(0));
    poll(
        manager,
        "the manager to report kvd down after exit 0",
        || manager.is_down() && status(data).is_none(),
    );

    // Exit 2 (a mistake on the command line: its --config file is gone):
    // stays down too, since a restart would only repeat it.
    std::fs::remove_file(config).expect("remove the config");
    manager.start();
    poll(
        manager,
        "kvd to exit 2 and the manager to leave it down",
        || manager.log().contains("does not exist; create it") && manager.is_down(),
    );
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
}

impl Manager for Runit {
    /// Down and meant to stay so: `down: …, want up` is the moment after
    /// ./finish exited and before runsv read the `sv down` it sent (an
    /// `sv up` then is dropped by sv as already wanted).
    fn is_down(&self) -> bool {
        let status = self.sv("status");
        status.starts_with("down:") && !status.contains("want up")
    }
    fn start(&self) {
        self.sv("up");
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
    // variables it reads (the defaults are the systemd unit's).
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
    drive(&runit, &s.data, &s.config, &s.dir, "runit");
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
}

impl Manager for Supervisord {
    fn is_down(&self) -> bool {
        self.ctl(&["status", "kvd"]).contains("EXITED")
    }
    fn start(&self) {
        self.ctl(&["start", "kvd"]);
    }
    /// supervisord's own log, then kvd's output (its child log).
    fn log(&self) -> String {
        let mut log = std::fs::read_to_string(&self.log).unwrap_or_default();
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
    drive(&manager, &s.data, &s.config, &s.dir, "supervisord");
    let log = manager.log();
    assert!(
        log.contains("exit status 0; expected") && log.contains("exit status 2; expected"),
        "SIGTERM and exit ended kvd with 0, the missing config with 2: {log}"
    );
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
