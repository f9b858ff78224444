//! The data dir's files against real processes:
//! kvd's own files are private, and a daemon whose data dir is removed
//! under it exits for a relaunch instead of running on beside a second
//! daemon on the same path (`steadfast_actors::root`, "The data-dir lock is
//! watched").

use crate::support::processes;

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use processes::{free_port, kv, until, wait_exit};

fn running(s: &serde_json::Value) -> bool {
    s["lifecycle"]["state"] == "running"
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("the file exists")
        .permissions()
        .mode()
        & 0o777
}

/// kvd's `store.log` and `store.lock` were 0644: any local user read the
/// stored values. Both are 0600 now, created so or made so at open (a data
/// dir left by an older version, here `store.log` already 0644).
#[test]
fn kvd_files_are_private() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    std::fs::write(data.join("store.log"), b"S old value\n").expect("an old store.log");
    std::fs::set_permissions(
        data.join("store.log"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    until(&data, "running", running);
    assert_eq!(kv(port, "GET old"), "value");
    assert_eq!(kv(port, "SET secret value"), "OK");
    let log = mode(&data.join("store.log"));
    let lock = mode(&data.join("store.lock"));
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(
        (log, lock),
        (0o600, 0o600),
        "store.log {log:o}, store.lock {lock:o}"
    );
}

/// `store.log` planted as a link to a file outside the data dir (0644, not
/// the daemon's to write): kvd replayed it and appended every `SET` to it.
/// Now its open step is refused, naming the link, and the target keeps its
/// bytes and mode.
#[test]
fn a_kvd_store_log_symlink_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("data dir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"S planted value\n").expect("victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::os::unix::fs::symlink(&victim, data.join("store.log")).expect("plant the link");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let refused = std::panic::catch_unwind(|| {
        until(&data, "the store.log link refused", |s| {
            s.to_string().contains("store.log is a symbolic link")
        })
    });
    // Before the fix kvd ran: show what a write does to the target.
    if refused.is_err() && TcpStream::connect(("127.0.0.1", port)).is_ok() {
        let _ = kv(port, "SET key value");
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        b"S planted value\n",
        "the link's target was written"
    );
    assert_eq!(mode(&victim), 0o644);
    assert!(refused.is_ok(), "kvd did not refuse the store.log link");
}

/// `rm -rf` of a running daemon's data dir: its locks belonged to deleted
/// files, so it ran on while a second daemon could start on the same path.
/// Root's periodic lock check now ends it with intent relaunch (75).
#[test]
fn a_daemon_whose_data_dir_is_removed_exits_for_a_relaunch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(&config, "listen_addr = \"127.0.0.1:0\"\n").expect("config");
    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    until(&data, "running", running);
    std::fs::remove_dir_all(&data).expect("rm -rf the data dir");
    assert_eq!(wait_exit(&mut daemon), Some(75), "exit code of kvd");
}
