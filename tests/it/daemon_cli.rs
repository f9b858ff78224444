//! The standard daemon command line (`steadfast::daemon::cli`) through the
//! real example binaries: kvd started with the TCP flags and with the TLS
//! flags, then driven by the real `steadfastctl` over each transport as
//! the README writes it (status, stop, start); flags that can never work
//! refused with the flag and the file named, a non-zero exit, and nothing
//! created. Certificates are made here with rcgen, as in
//! `tests/it/control_tls.rs`.

use crate::support::pki;
use crate::support::processes;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pki::{Ca, write_private};
use processes::{PATIENCE, example, example_with_features, free_port, kv, steadfastctl, wait_exit};
use steadfast::daemon::{EXIT_HALT, EXIT_NEVER_WORKS};

/// The variables the daemon command line reads: removed from every child,
/// so only the test's flags say what it serves.
const ENV: [&str; 10] = [
    "STEADFAST_DATA_DIR",
    "STEADFAST_CONFIG",
    "STEADFAST_LOG_FORMAT",
    "STEADFAST_METRICS_ADDR",
    "STEADFAST_CONTROL_TCP",
    "STEADFAST_CONTROL_TOKEN_FILE",
    "STEADFAST_CONTROL_TLS",
    "STEADFAST_TLS_CERT",
    "STEADFAST_TLS_KEY",
    "STEADFAST_TLS_CLIENT_CA",
];

/// A running example, killed if the test ends (or fails) before it exits;
/// its stderr collected as it comes.
struct Daemon {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    /// Its stderr so far.
    fn text(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Its stderr once `needle` is in it, within [`PATIENCE`].
    fn wait_for(&self, needle: &str) -> String {
        processes::logged(needle, || self.text())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The example `name`, or `name+FEATURES` built with those cargo features
/// (`kvd+tls` serves `--control-tls`).
fn built(name: &str) -> PathBuf {
    match name.split_once('+') {
        Some((name, features)) => example_with_features(name, features),
        None => example(name),
    }
}

/// `name ARGS…` (an example) with `env` set, stdin and stdout closed,
/// stderr collected; none of the daemon command line's variables (nor
/// `RUST_LOG`) set otherwise.
fn spawn_with(name: &str, args: &[String], env: &[(&str, &Path)]) -> Daemon {
    let mut command = Command::new(built(name));
    for var in ENV.iter().chain(&["RUST_LOG"]) {
        command.env_remove(var);
    }
    for (var, value) in env {
        command.env(var, value);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the example starts");
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().expect("stderr");
    let collected = Arc::clone(&stderr);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut pipe, &mut buf) {
            if n == 0 {
                return;
            }
            collected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Daemon { child, stderr }
}

fn spawn(name: &str, args: &[String]) -> Daemon {
    spawn_with(name, args, &[])
}

/// kvd over the data dir `data` with the config file `config`, and `extra`
/// flags after them.
fn kvd_at(data: &Path, config: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec![
        "--data-dir".to_owned(),
        s(data),
        "--config".to_owned(),
        s(config),
    ];
    args.extend(extra.iter().map(|&a| a.to_owned()));
    spawn("kvd", &args)
}

/// The daemon's exit code and its whole stderr, once it exits.
fn ended(mut daemon: Daemon) -> (Option<i32>, String) {
    let code = wait_exit(&mut daemon.child);
    // The pipe is closed once the process is gone: the reader ends.
    let deadline = Instant::now() + PATIENCE;
    while Arc::strong_count(&daemon.stderr) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    (code, daemon.text())
}

/// The real `steadfastctl ARGS…`, without `STEADFAST_DATA_DIR`.
fn ctl(args: &[String]) -> Output {
    Command::new(steadfastctl())
        .args(args)
        .env_remove("STEADFAST_DATA_DIR")
        .output()
        .expect("steadfastctl runs")
}

/// `transport ++ rest` as owned strings.
fn with(transport: &[String], rest: &[&str]) -> Vec<String> {
    let mut args = transport.to_vec();
    args.extend(rest.iter().map(|&a| a.to_owned()));
    args
}

fn s(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// `status --json` over `transport` until the lifecycle is `state`
/// (`status` exits 0 running, 3 answered but not running, 4 unreachable
/// while the daemon starts).
fn until_state(transport: &[String], state: &str) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    let mut last = None;
    while Instant::now() < deadline {
        let out = ctl(&with(transport, &["status", "--json"]));
        if matches!(out.status.code(), Some(0 | 3))
            && let Ok(snapshot) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        {
            if snapshot["lifecycle"]["state"] == state {
                return snapshot;
            }
            last = Some(snapshot);
        } else {
            last = Some(serde_json::Value::String(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {state} over {transport:?}; last: {last:#?}")
}

/// A data dir path (not created) and a kvd config listening on a free port.
fn kvd_setup(dir: &Path) -> (PathBuf, PathBuf, u16) {
    let data = dir.join("data");
    let config = dir.join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    (data, config, port)
}

/// Status, stop and start over `transport`, each answered and done, and
/// the store served again after the start; then `exit`: kvd exits 0.
fn status_stop_start_exit(transport: &[String], kvd: Daemon, port: u16) {
    let snapshot = until_state(transport, "running");
    assert_eq!(snapshot["lifecycle"]["state"], "running");
    let out = ctl(&with(transport, &["status"]));
    assert_eq!(out.status.code(), Some(0), "status: running");
    assert_eq!(kv(port, "SET k v"), "OK");

    let out = ctl(&with(transport, &["stop"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "stop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = ctl(&with(transport, &["status"]));
    assert_eq!(out.status.code(), Some(3), "status: not running");
    until_state(transport, "stopped");

    let out = ctl(&with(transport, &["start", "--wait"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    until_state(transport, "running");
    assert_eq!(kv(port, "GET k"), "v", "the store is served again");

    let out = ctl(&with(transport, &["exit"]));
    assert_eq!(out.status.code(), Some(0), "exit accepted");
    let (code, stderr) = ended(kvd);
    assert_eq!(code, Some(EXIT_HALT), "{stderr}");
}

/// The README's TCP lines: kvd with `--control-tcp --control-token-file
/// --create-token`, then `steadfastctl --tcp ADDR --token-file FILE`
/// status, stop, start. The token file is created private; the control
/// socket is served beside the port.
#[test]
fn kvd_serves_steadfastctl_over_tcp_from_its_flags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, port) = kvd_setup(tmp.path());
    let token = tmp.path().join("control.token");
    let addr = format!("127.0.0.1:{}", free_port());
    let kvd = spawn(
        "kvd",
        &[
            "--data-dir".to_owned(),
            s(&data),
            "--config".to_owned(),
            s(&config),
            "--control-tcp".to_owned(),
            addr.clone(),
            "--control-token-file".to_owned(),
            s(&token),
            "--create-token".to_owned(),
        ],
    );
    let transport = [
        "--tcp".to_owned(),
        addr,
        "--token-file".to_owned(),
        s(&token),
    ];
    until_state(&transport, "running");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token)
            .expect("the token file")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the created token file is private");
    let socket = ["--data-dir".to_owned(), s(&data)];
    assert_eq!(ctl(&with(&socket, &["status"])).status.code(), Some(0));

    // A wrong token is refused.
    let wrong = tmp.path().join("wrong.token");
    write_private(&wrong, &format!("{}\n", "ab".repeat(32)));
    let out = ctl(&with(
        &[transport[0].clone(), transport[1].clone()],
        &["--token-file", &s(&wrong), "status"],
    ));
    assert_eq!(out.status.code(), Some(4), "a wrong token reaches nothing");

    status_stop_start_exit(&transport, kvd, port);
}

/// The README's TLS lines: kvd with `--control-tls --tls-cert --tls-key
/// --tls-client-ca --tls-read-only-cert`, then `steadfastctl --tls ADDR
/// --ca --cert --key` status, stop, start with an operator's
/// certificate; the read-only certificate reads and is refused a command.
#[test]
fn kvd_serves_steadfastctl_over_tls_from_its_flags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (data, config, port) = kvd_setup(dir);
    let server_ca = Ca::new(dir, "server-ca");
    let client_ca = Ca::new(dir, "client-ca");
    let (cert, key) = server_ca.leaf(dir, "daemon", true, false);
    let operator = client_ca.leaf(dir, "operator", false, false);
    let dashboard = client_ca.leaf(dir, "dashboard", false, false);
    let addr = format!("127.0.0.1:{}", free_port());
    let kvd = spawn(
        "kvd+tls",
        &[
            "--data-dir".to_owned(),
            s(&data),
            "--config".to_owned(),
            s(&config),
            "--control-tls".to_owned(),
            addr.clone(),
            "--tls-cert".to_owned(),
            s(&cert),
            "--tls-key".to_owned(),
            s(&key),
            "--tls-client-ca".to_owned(),
            s(&client_ca.pem),
            "--tls-read-only-cert".to_owned(),
            s(&dashboard.0),
        ],
    );
    let tls = |who: &(PathBuf, PathBuf)| {
        [
            "--tls".to_owned(),
            addr.clone(),
            "--ca".to_owned(),
            s(&server_ca.pem),
            "--cert".to_owned(),
            s(&who.0),
            "--key".to_owned(),
            s(&who.1),
        ]
    };
    until_state(&tls(&operator), "running");

    let out = ctl(&with(&tls(&dashboard), &["status"]));
    assert_eq!(out.status.code(), Some(0), "a read-only certificate reads");
    let out = ctl(&with(&tls(&dashboard), &["stop"]));
    assert_eq!(out.status.code(), Some(3), "and is refused a command");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("forbidden"), "{stderr}");
    until_state(&tls(&operator), "running");

    status_stop_start_exit(&tls(&operator), kvd, port);
}

/// A value that does not parse is refused by the command line, naming the
/// flag: exit 78 (never works), and no data dir is created.
#[test]
fn a_bad_flag_value_exits_78_naming_the_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, _) = kvd_setup(tmp.path());
    for (flag, value) in [
        ("--control-tcp", "localhost:7433"),
        ("--metrics-addr", "nowhere"),
        ("--log-format", "xml"),
        ("--log-level", "kvd=loud"),
        // Words that are not levels: EnvFilter took them as targets, and
        // the daemon logged nothing at all.
        ("--log-level", "inf"),
        ("--log-level", "warnings"),
        ("--log-level", "kvd"),
    ] {
        let kvd = spawn(
            "kvd",
            &[
                "--data-dir".to_owned(),
                s(&data),
                "--config".to_owned(),
                s(&config),
                flag.to_owned(),
                value.to_owned(),
            ],
        );
        let (code, stderr) = ended(kvd);
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{flag}: {stderr}");
        assert!(stderr.contains(flag) && stderr.contains(value), "{stderr}");
        assert!(!data.exists(), "{flag}: nothing was created");
    }
    // A listener without its companion flag is refused the same way.
    let kvd = spawn(
        "kvd",
        &[
            "--data-dir".to_owned(),
            s(&data),
            "--control-tcp".to_owned(),
            "127.0.0.1:7433".to_owned(),
        ],
    );
    let (code, stderr) = ended(kvd);
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(stderr.contains("--control-token-file"), "{stderr}");
    assert!(!data.exists());
}

/// What the flags and the environment say is checked before the data dir
/// is touched, so a launch that can never work exits 78 (never works:
/// managers leave it down) with the reason and creates nothing:
/// - `--config FILE/x`, a path under a regular file, or a name too long to
///   be a file: before, it panicked after creating the data dir and exited
///   75 (relaunch), which every manager restarts once a second for ever;
/// - a `RUST_LOG` that names no level (`inf`) or is no filter: before, the
///   first was taken as a target and silenced every line, the second said
///   once and dropped.
#[test]
fn what_can_never_work_exits_78_before_the_data_dir_is_touched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, _) = kvd_setup(tmp.path());
    let under_a_file = config.join("x");
    let too_long = tmp.path().join("n".repeat(300));
    for (path, why) in [(&under_a_file, "Not a directory"), (&too_long, "too long")] {
        let kvd = kvd_at(&data, path, &[]);
        let (code, stderr) = ended(kvd);
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
        assert!(
            stderr.contains("--config") && stderr.contains(why),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!data.exists(), "nothing was created: {stderr}");
    }
    for value in ["inf", "kvd=loudest", "warnings,kvd=debug"] {
        let kvd = spawn_with(
            "kvd",
            &[
                "--data-dir".to_owned(),
                s(&data),
                "--config".to_owned(),
                s(&config),
            ],
            &[("RUST_LOG", Path::new(value))],
        );
        let (code, stderr) = ended(kvd);
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{value}: {stderr}");
        assert!(
            stderr.contains("RUST_LOG: invalid log level") && stderr.contains(value),
            "{value}: {stderr}"
        );
        assert!(!data.exists(), "{value}: nothing was created");
    }
}

/// Another local user (uid 65534, through `setpriv`) who may write a
/// directory on the way to root's data dir chooses where it lands: a link
/// planted in a sticky shared directory (`mkdir -m1777 /srv/s; ln -s
/// /root/private /srv/s/data`), or a data dir under a directory that user
/// owns (`/home/nobody/sub`, which they could rename and replace by a
/// link). kvd exits 78 (never works) naming the link or the ancestor, and
/// nothing is created, neither the data dir nor anything in the link's
/// target. Before: kvd ran with `.steadfast/`, the lock and `store.log` in
/// the private directory. Runs only as root with `setpriv`; otherwise says
/// why it skips.
#[test]
fn a_data_dir_another_user_can_redirect_exits_78_naming_where() {
    use std::os::unix::fs::PermissionsExt;
    if !processes::root_with(&[processes::SETPRIV]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (_, config, _) = kvd_setup(dir);
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let private = dir.join("private");
    std::fs::create_dir(&private).expect("mkdir");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let planted = shared.join("data");
    let status = processes::as_nobody("ln")
        .arg("-s")
        .arg(&private)
        .arg(&planted)
        .status()
        .expect("setpriv runs");
    assert!(status.success(), "the link is planted as uid 65534");
    let home = dir.join("home-nobody");
    std::fs::create_dir(&home).expect("mkdir");
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
    let under_home = home.join("sub");
    for (data, named) in [(&planted, &planted), (&under_home, &home)] {
        let kvd = kvd_at(data, &config, &[]);
        let (code, stderr) = ended(kvd);
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
        assert!(
            stderr.contains(&s(named)) && stderr.contains("owned by uid 65534"),
            "{stderr}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&private).expect("private").count(),
        0,
        "nothing was made in the link's target"
    );
    assert!(
        !under_home.exists(),
        "nothing was made under another user's directory"
    );
}

/// `--log-level warning` (syslog's word, as the help says) is `warn`: the
/// daemon starts and logs at warn, so a failed boot is said while no info
/// line is. Before, `warning` was taken as a target and the failed boot
/// was not logged at all. A `config set log_level` to a word that is not a
/// level is refused with the reason.
#[test]
fn warning_is_taken_as_warn() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, _) = kvd_setup(tmp.path());
    std::fs::write(&config, "listen_addr = \"nowhere\"\n").expect("config");
    let kvd = kvd_at(&data, &config, &["--log-level", "warning"]);
    let socket = ["--data-dir".to_owned(), s(&data)];
    until_state(&socket, "failed");
    kvd.wait_for("the boot failed");
    let refused = ctl(&with(&socket, &["config", "set", "log_level", "warnings"]));
    assert_eq!(refused.status.code(), Some(3), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("invalid log level") && stderr.contains("\"warnings\" is not a level"),
        "{stderr}"
    );
    let out = ctl(&with(&socket, &["exit"]));
    assert_eq!(out.status.code(), Some(0));
    let (code, stderr) = ended(kvd);
    assert_eq!(code, Some(EXIT_HALT), "{stderr}");
    assert!(stderr.contains(" WARN "), "{stderr}");
    assert!(!stderr.contains(" INFO "), "no info line at warn: {stderr}");
}

/// A file a flag names that cannot be used — a TLS key others may read, a
/// missing certificate, a token file others may read, a missing client
/// CA — is refused before the supervisor is built: exit 78 (never works), the message
/// names the flag and the file, and the data dir is not created.
#[test]
fn an_unusable_file_exits_78_naming_the_flag_and_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (data, config, _) = kvd_setup(dir);
    let server_ca = Ca::new(dir, "server-ca");
    let client_ca = Ca::new(dir, "client-ca");
    let (cert, key) = server_ca.leaf(dir, "daemon", true, false);
    let loose_key = dir.join("loose.key");
    std::fs::copy(&key, &loose_key).expect("copy the key");
    std::fs::set_permissions(
        &loose_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let loose_token = dir.join("loose.token");
    std::fs::write(&loose_token, format!("{}\n", "cd".repeat(32))).expect("token");
    std::fs::set_permissions(
        &loose_token,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let missing = dir.join("missing.pem");
    let tls = |cert: &Path, key: &Path, ca: &Path| {
        vec![
            "--control-tls".to_owned(),
            format!("127.0.0.1:{}", free_port()),
            "--tls-cert".to_owned(),
            s(cert),
            "--tls-key".to_owned(),
            s(key),
            "--tls-client-ca".to_owned(),
            s(ca),
        ]
    };
    let tcp = vec![
        "--control-tcp".to_owned(),
        format!("127.0.0.1:{}", free_port()),
        "--control-token-file".to_owned(),
        s(&loose_token),
    ];
    for (flags, flag, file, why) in [
        (
            tls(&cert, &loose_key, &client_ca.pem),
            "--tls-key",
            &loose_key,
            "mode 644",
        ),
        (
            tls(&missing, &key, &client_ca.pem),
            "--tls-cert",
            &missing,
            "No such file",
        ),
        (
            tls(&cert, &key, &missing),
            "--tls-client-ca",
            &missing,
            "No such file",
        ),
        (tcp, "--control-token-file", &loose_token, "mode 644"),
    ] {
        let mut args = vec![
            "--data-dir".to_owned(),
            s(&data),
            "--config".to_owned(),
            s(&config),
        ];
        args.extend(flags);
        let (code, stderr) = ended(spawn("kvd+tls", &args));
        assert_eq!(code, Some(EXIT_NEVER_WORKS), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("kvd: {flag}: ")),
            "{flag} named: {stderr}"
        );
        assert!(
            stderr.contains(&s(file)),
            "{flag}: the file named: {stderr}"
        );
        assert!(stderr.contains(why), "{flag}: why: {stderr}");
        assert!(!data.exists(), "{flag}: nothing was created");
    }
}

/// A daemon built without the cargo feature `tls` refuses `--control-tls`
/// by name, exit 78 (never works), creating nothing: it never starts
/// without the port it was asked to serve.
#[test]
fn a_build_without_tls_refuses_control_tls_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (data, config, _port) = kvd_setup(dir);
    let args = [
        "--data-dir".to_owned(),
        s(&data),
        "--config".to_owned(),
        s(&config),
        "--control-tls".to_owned(),
        format!("127.0.0.1:{}", free_port()),
        "--tls-cert".to_owned(),
        s(&dir.join("cert.pem")),
        "--tls-key".to_owned(),
        s(&dir.join("key.pem")),
        "--tls-token-file".to_owned(),
        s(&dir.join("token")),
    ];
    let (code, stderr) = ended(spawn("kvd", &args));
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(
        stderr.contains("kvd: --control-tls: ") && stderr.contains("without TLS"),
        "{stderr}"
    );
    assert!(!data.exists(), "nothing was created");
}

/// `minimal` with no data dir (no argument, no flag, no variable, no
/// default) says so and exits 78 (never works); `--version` prints the version, exit 0.
#[test]
fn no_data_dir_exits_78_and_version_answers() {
    let (code, stderr) = ended(spawn("minimal", &[]));
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(stderr.contains("--data-dir"), "{stderr}");

    let out = Command::new(example("kvd"))
        .arg("--version")
        .output()
        .expect("kvd runs");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("kvd ") && stdout.contains(env!("CARGO_PKG_VERSION")),
        "{stdout}"
    );
}

/// `--log-level debug` logs kvd's requests (debug lines) from the start,
/// without `RUST_LOG`; a level the config sets replaces it in place, and
/// unsetting that goes back to the flag's level, not to `info`.
#[test]
fn the_log_level_flag_holds_until_the_config_sets_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, port) = kvd_setup(tmp.path());
    let kvd = kvd_at(&data, &config, &["--log-level", "debug"]);
    let socket = ["--data-dir".to_owned(), s(&data)];
    until_state(&socket, "running");
    assert_eq!(kv(port, "GET flagged"), "NOT_FOUND");
    kvd.wait_for("request=GET flagged");

    let set = ctl(&with(&socket, &["config", "set", "log_level", "info"]));
    assert_eq!(set.status.code(), Some(0), "{set:?}");
    kvd.wait_for("log level set level=info");
    let unset = ctl(&with(&socket, &["config", "unset", "log_level"]));
    assert_eq!(unset.status.code(), Some(0), "{unset:?}");
    kvd.wait_for("log level set level=debug");
    assert_eq!(kv(port, "GET again"), "NOT_FOUND");
    kvd.wait_for("request=GET again");

    let out = ctl(&with(&socket, &["exit"]));
    assert_eq!(out.status.code(), Some(0));
    let (code, stderr) = ended(kvd);
    assert_eq!(code, Some(EXIT_HALT), "{stderr}");
}

/// `STEADFAST_DATA_DIR` names the data dir for kvd as it does for
/// `steadfastctl`: one exported variable points both at it. Set but
/// empty, it is refused (exit 78, never works), as `steadfastctl` refuses it.
#[test]
fn steadfast_data_dir_names_the_data_dir_for_kvd_and_steadfastctl() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, port) = kvd_setup(tmp.path());
    let kvd = spawn_with(
        "kvd",
        &["--config".to_owned(), s(&config)],
        &[("STEADFAST_DATA_DIR", &data)],
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = Command::new(steadfastctl())
            .arg("status")
            .env("STEADFAST_DATA_DIR", &data)
            .output()
            .expect("steadfastctl runs");
        if out.status.code() == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {}", kvd.text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(kv(port, "SET k v"), "OK");
    assert!(data.join("store.log").exists(), "the store is under it");
    let out = ctl(&["--data-dir".to_owned(), s(&data), "exit".to_owned()]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(ended(kvd).0, Some(EXIT_HALT));

    let (code, stderr) = ended(spawn_with(
        "kvd",
        &["--config".to_owned(), s(&config)],
        &[("STEADFAST_DATA_DIR", Path::new(""))],
    ));
    assert_eq!(code, Some(EXIT_NEVER_WORKS), "{stderr}");
    assert!(
        stderr.contains("STEADFAST_DATA_DIR is set but empty"),
        "{stderr}"
    );
}

/// A control port that cannot be bound (the address is in use) stops the
/// daemon before it runs: exit 1, the error logged with the address, and
/// the flag named.
#[test]
fn a_control_port_in_use_exits_1_naming_the_flag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (data, config, _) = kvd_setup(tmp.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (code, stderr) = ended(spawn(
        "kvd",
        &[
            "--data-dir".to_owned(),
            s(&data),
            "--config".to_owned(),
            s(&config),
            "--control-tcp".to_owned(),
            addr.clone(),
            "--control-token-file".to_owned(),
            s(&tmp.path().join("control.token")),
            "--create-token".to_owned(),
        ],
    ));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&addr), "the address: {stderr}");
    assert!(
        stderr.contains("kvd: not started: --control-tcp cannot be served"),
        "the flag: {stderr}"
    );
}

/// `RUST_LOG=…,steadfast::launch=debug` says the launch's timeline once
/// the daemon settles: one line a step, from the command line parsed to
/// the first state published, in the order the steps happened, each with
/// its microseconds since the first (`at_us`).
#[test]
fn the_launch_timeline_is_said_at_debug() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("minimal.toml");
    let addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(&config, format!("listen_addr = \"{addr}\"\n")).expect("config");
    let daemon = spawn_with(
        "minimal",
        &[
            "--data-dir".to_owned(),
            s(&data),
            "--config".to_owned(),
            s(&config),
        ],
        &[("RUST_LOG", Path::new("info,steadfast::launch=debug"))],
    );
    let text = daemon.wait_for("published: running");
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("steadfast::launch"))
        .collect();
    let at = |step: &str| {
        lines
            .iter()
            .position(|line| line.contains(&format!("step={step}")))
            .unwrap_or_else(|| panic!("no {step:?} in the timeline: {text}"))
    };
    let order = [
        "command line parsed",
        "runtime built, signals caught",
        "data dir locked",
        "journal open",
        "status record written",
        "control socket bound",
        "supervision tree starting",
        "step serve executed",
        "published: running",
    ];
    for pair in order.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?} out of order: {text}");
    }
    for step in ["config resolved", "first journal record durable"] {
        at(step);
    }
    assert!(
        lines.iter().all(|line| line.contains("at_us=")),
        "every line says when: {text}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.contains("published"))
            .count(),
        1,
        "said once: {text}"
    );
}
