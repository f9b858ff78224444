//! What the tests of real processes share: the example binaries they run
//! (`kvd`, `minimal`, `crashd`) and `steadfastctl` (its own package), built
//! — or brought up to date — once per name per test process, and
//! `steadfastctl` run as a child.
//!
//! Examples: `cargo test` builds examples only under hashed names, so a test
//! that ran `target/debug/examples/<name>` whenever it existed could run a
//! stale binary: not the code under test. `cargo build --example` costs
//! nothing when the binary is fresh — but it re-links
//! `target/debug/examples/<name>` even then, and nextest runs each test in
//! its own process, so one test's build could briefly remove the file
//! another test is about to spawn. So every test process builds under one
//! file lock and spawns its own hard link of the result
//! (`target/debug/steadfast-test-bins/<pid>/<name>`), which no later build
//! touches; links of processes that have ended are removed on the way.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a poll waits for a state.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The up-to-date binary of example `name`, as this test process's own
/// hard link.
pub fn example(name: &str) -> PathBuf {
    built(name, &["--example", name], Path::new("examples"))
}

/// [`example`], built with the package's cargo `features` (comma
/// separated): `crashd` needs `failpoints`.
pub fn example_with_features(name: &str, features: &str) -> PathBuf {
    built_as(
        &format!("{name}+{}", features.replace(',', "+")),
        name,
        &["--example", name, "--features", features],
        Path::new("examples"),
    )
}

/// The up-to-date `steadfastctl` (its own package, so no
/// `CARGO_BIN_EXE_steadfastctl` here), as this test process's own hard
/// link: built like the examples.
pub fn steadfastctl() -> PathBuf {
    built(
        "steadfastctl",
        &["-p", "steadfastctl", "--bin", "steadfastctl"],
        Path::new(""),
    )
}

/// `cargo build --quiet BUILD` under the build lock, then this process's
/// own hard link of `target/debug/UNDER/NAME`.
fn built(name: &str, build: &[&str], under: &Path) -> PathBuf {
    built_as(name, name, build, under)
}

/// [`built`], remembered and linked as `key`: one binary built with
/// different features is a different binary here.
fn built_as(key: &str, name: &str, build: &[&str], under: &Path) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = built.get(key) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("current exe");
    let debug_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .to_path_buf();
    let lock = File::create(debug_dir.join(".steadfast-test-bins.lock")).expect("lock file");
    lock.lock().expect("the build lock");
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet"])
        .args(build)
        .env("CARGO_TARGET_DIR", debug_dir.parent().expect("target dir"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "{name} builds");
    let bins = debug_dir.join("steadfast-test-bins");
    remove_ended(&bins);
    let own = bins.join(std::process::id().to_string());
    std::fs::create_dir_all(&own).expect("the test bins dir");
    let path = own.join(key);
    let _ = std::fs::remove_file(&path);
    std::fs::hard_link(debug_dir.join(under).join(name), &path).expect("link the binary");
    built.insert(key.to_owned(), path.clone());
    path
}

/// An executable at `dest` holding the bytes of `from`, written by a `cp`
/// child rather than by this process.
///
/// A test process runs many tests on threads at once. While one of them
/// holds a file open for writing, another thread's `fork` copies that
/// descriptor into a child that keeps it until its `exec`; if the first
/// test execs its new file in that window, the kernel refuses with
/// `ETXTBSY` ("Text file busy"). A file written by a child process is
/// never open for writing here, so no fork of ours can hold it.
pub fn copy_executable(from: &Path, dest: &Path) {
    let status = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(dest)
        .status()
        .expect("cp runs");
    assert!(status.success(), "cp {} {}", from.display(), dest.display());
    set_executable(dest);
}

/// A shell script at `dest` holding `body`, written like
/// [`copy_executable`] (the source is written here and never executed).
pub fn write_script(dest: &Path, body: &str) {
    let mut source = dest.as_os_str().to_owned();
    source.push(".source");
    let source = PathBuf::from(source);
    std::fs::write(&source, body).expect("write the script's source");
    copy_executable(&source, dest);
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Remove the links of test processes that have ended.
fn remove_ended(bins: &Path) {
    let Ok(entries) = std::fs::read_dir(bins) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let pid = entry.file_name();
        if !Path::new("/proc").join(&pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `steadfastctl --data-dir DATA_DIR ARGS…`, run to completion.
pub fn ctl(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(steadfastctl())
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .output()
        .expect("steadfastctl runs")
}

/// `setpriv`, which runs a program as another user.
pub const SETPRIV: &str = "/usr/bin/setpriv";
/// The Python a test runs a peer of another user with.
pub const PYTHON: &str = "/usr/bin/python3";

/// Whether this test may play another user: it runs as root and `tools`
/// are there. Says why it skips when not.
pub fn root_with(tools: &[&str]) -> bool {
    let able =
        rustix::process::geteuid().as_raw() == 0 && tools.iter().all(|t| Path::new(t).exists());
    if !able {
        eprintln!("skipped: needs root and {}", tools.join(", "));
    }
    able
}

/// `program` to be run as uid and gid 65534 (nobody), without root's
/// groups, through [`SETPRIV`].
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(SETPRIV);
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(program);
    command
}

/// A process's output bytes (stdout or stderr) as text, lossily: what an
/// assertion's message shows.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run the real `steadfastctl` with `args` off the async runtime's threads
/// (for a test on a tokio runtime). `STEADFAST_DATA_DIR` is removed from
/// its environment: only `args` say which daemon.
pub async fn ctl_async<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Output {
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(steadfastctl())
            .args(&args)
            .env_remove("STEADFAST_DATA_DIR")
            .output()
            .expect("steadfastctl runs")
    })
    .await
    .expect("task")
}

/// [`ctl_async`] with `flag PATH` before `args` (`--data-dir DIR`,
/// `--inventory FILE`): the daemons `args` are for.
pub async fn ctl_async_at(flag: &str, path: &Path, args: &[&str]) -> Output {
    let flag: [&std::ffi::OsStr; 2] = [flag.as_ref(), path.as_os_str()];
    ctl_async(
        flag.into_iter()
            .chain(args.iter().map(std::ffi::OsStr::new)),
    )
    .await
}

/// `status --json`, parsed; `None` while no daemon answers. `status`
/// exits 0 running, 3 answered but not running, 4 no daemon answered
/// (`spec/control.md`).
pub fn status(data_dir: &Path) -> Option<serde_json::Value> {
    let out = ctl(data_dir, &["status", "--json"]);
    if !matches!(out.status.code(), Some(0 | 3)) {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Poll `status --json` until `pred` holds.
pub fn until(
    data_dir: &Path,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(s) = status(data_dir) {
            if pred(&s) {
                return s;
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}; last status: {last:#?}")
}

/// Wait for `child` to exit; its exit code (`None`: killed by a signal).
/// Kills it and fails the test if it does not exit within [`PATIENCE`].
pub fn wait_exit(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("the child did not exit");
}

/// A free loopback TCP port (bound, read, released: another process may
/// take it first, which a test then sees as a failed bind, never a hang).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One request on kvd's line protocol, answered within [`PATIENCE`].
pub fn kv(port: u16, line: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to kvd");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream
        .write_all(format!("{line}\n").as_bytes())
        .expect("send");
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .expect("an answer");
    answer.trim_end().to_owned()
}

/// `kvd --data-dir DATA_DIR --config CONFIG` (this process's up-to-date
/// build), stdin and stdout closed, stderr as the test wants it.
pub fn kvd(data_dir: &Path, config: &Path, stderr: std::process::Stdio) -> Child {
    Command::new(example("kvd"))
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--config")
        .arg(config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("kvd starts")
}

/// Send `signal` to `child`; for SIGSTOP, return once it has stopped.
pub fn signal(child: &Child, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).expect("pid")).expect("pid");
    rustix::process::kill_process(pid, signal).expect("signal");
    if signal == rustix::process::Signal::STOP {
        wait_stopped(child.id());
    }
}

/// Wait until every thread of `pid` is stopped (`T` in its
/// `/proc/<pid>/task/<tid>/stat`). `kill(SIGSTOP)` returns before the
/// target has stopped: on a loaded machine a thread of it can still read
/// and run a request sent just after (seen: an `exit` decoded 1 ms after
/// the signal, with 999 ms of its deadline left), which is not what these
/// tests are about.
pub fn wait_stopped(pid: u32) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let all_stopped = std::fs::read_dir(&tasks)
            .expect("the process's tasks")
            .filter_map(Result::ok)
            .all(|task| {
                std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                    // The state follows the parenthesised command name.
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
                })
            });
        if all_stopped {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `tool` on the PATH, or `None` after saying why the test skips (a panic
/// in CI, where the tools must be there).
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is not installed; .ci/run installs it"
        );
        eprintln!("skipped: {name} is not installed (.ci/run installs it)");
    }
    found
}

/// Run `python3 -c script` with `input` on its stdin and read what it
/// printed as JSON: how the tests hold a text to a real parser (Python's
/// `prometheus_client` for OpenMetrics). A script that fails (the parser
/// refused `input`) fails the test, with its stderr and the input.
pub fn python_json(script: &str, input: &str) -> serde_json::Value {
    use std::io::Write as _;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "the parser refused the text ({}):\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// What `read` returns (a log, a child's stderr) once it holds `needle`,
/// read again every 50 ms for [`PATIENCE`]; a panic with what it held
/// otherwise.
pub fn logged(needle: &str, read: impl Fn() -> String) -> String {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        let text = read();
        if text.contains(needle) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{needle:?} never logged: {}", read())
}
