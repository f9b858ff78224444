//! `steadfastctl --inventory FILE …`, the real binary,
//! against fleets of real in-process supervisors, each over its own data
//! dir with its control socket served in this process: one line (or one
//! JSON object) per daemon in inventory order, the exit codes (`status`: 0
//! all running, 3 some not running, 4 some unreachable; commands: 0, 3
//! refused, 1 not reached), commands sent only to the daemons named, a bad
//! inventory refused whole, and one deadline that a silent daemon does not
//! stretch.

use crate::support::common;
use crate::support::processes;
use crate::support::processes::text;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use common::*;
use steadfast::control::{ServerGuard, serve_unix, socket_path};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::{ExitIntent, Hold, SupervisorHandle};
use tokio::task::JoinHandle;

/// One daemon of a fleet: a supervisor over `dir`, its socket served.
struct Daemon {
    name: String,
    dir: PathBuf,
    run: JoinHandle<ExitIntent>,
    handle: SupervisorHandle,
    /// Its config (`None`: does not resolve).
    switch: Switch,
    _server: ServerGuard,
}

/// `count` supervisors under `root`, named `d00`, `d01`, …, all running.
async fn fleet(root: &Path, count: usize) -> Vec<Daemon> {
    let mut daemons = Vec::with_capacity(count);
    for i in 0..count {
        let name = format!("d{i:02}");
        let dir = root.join(&name);
        std::fs::create_dir(&dir).expect("data dir");
        let switch = Switch::new(Some(good()));
        let (run, handle) = supervise(&dir, switch.source(), None);
        let server = serve_unix(handle.clone(), socket_path(&dir)).expect("serves");
        daemons.push(Daemon {
            name,
            dir,
            run,
            handle,
            switch,
            _server: server,
        });
    }
    for daemon in &daemons {
        until(&daemon.handle, "running", running).await;
    }
    daemons
}

async fn exit_all(daemons: Vec<Daemon>) {
    for daemon in daemons {
        exit(daemon.run, &daemon.handle, ExitIntent::Halt).await;
    }
}

/// An inventory of `entries` (name, TOML lines of its transport) at `path`.
fn inventory(path: &Path, entries: &[(String, String)]) -> PathBuf {
    let mut text = String::new();
    for (name, transport) in entries {
        text.push_str(&format!("[[daemon]]\nname = {name:?}\n{transport}\n\n"));
    }
    std::fs::write(path, text).expect("write the inventory");
    path.to_owned()
}

fn data_dir_entry(name: &str, dir: &Path) -> (String, String) {
    (
        name.to_owned(),
        format!("data_dir = {:?}", dir.display().to_string()),
    )
}

fn entries_of(daemons: &[Daemon]) -> Vec<(String, String)> {
    daemons
        .iter()
        .map(|d| data_dir_entry(&d.name, &d.dir))
        .collect()
}

/// `steadfastctl --inventory FILE ARGS…`, off the runtime's threads.
async fn ctl(inventory: &Path, args: &[&str]) -> Output {
    processes::ctl_async_at("--inventory", inventory, args).await
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// The line of daemon `name` in a table (the header is the first line).
fn line_of<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no line for {name} in:\n{out}"))
}

fn attempt(handle: &SupervisorHandle) -> Option<u32> {
    match handle.snapshot().lifecycle {
        LifecycleState::Running { attempt, .. } => Some(attempt.get()),
        _ => None,
    }
}

fn running_at(attempt: u32) -> impl Fn(&steadfast::protocol::snapshot::Snapshot) -> bool {
    move |s| matches!(s.lifecycle, LifecycleState::Running { attempt: a, .. } if a.get() == attempt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_daemons_are_seen_by_one_status_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 50).await;
    let all = inventory(&tmp.path().join("fleet.toml"), &entries_of(&daemons));

    // Measured, not asserted: what one call to 50 daemons costs (the
    // binary built first: `processes::steadfastctl` runs cargo once).
    tokio::task::spawn_blocking(processes::steadfastctl)
        .await
        .expect("built");
    let mut took = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let out = ctl(&all, &["status"]).await;
        took.push(started.elapsed());
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines.len(),
            51,
            "a header and one line per daemon:\n{stdout}"
        );
        assert!(lines[0].starts_with("NAME"), "{stdout}");
        for (line, daemon) in lines[1..].iter().zip(&daemons) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[0], daemon.name, "inventory order:\n{stdout}");
            assert_eq!(fields[1], daemon.dir.display().to_string());
            assert_eq!(fields[2], "running", "{line}");
            assert_eq!(fields[3], "1", "the attempt: {line}");
            assert_eq!(fields[4], std::process::id().to_string(), "the pid: {line}");
            assert!(line.contains("since"), "{line}");
        }
    }
    took.sort();
    // Beside it, one daemon's `status` (the same binary, one socket).
    let mut single = Vec::new();
    for _ in 0..3 {
        let dir = daemons[0].dir.clone();
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || processes::ctl(&dir, &["status"]))
            .await
            .expect("task");
        single.push(started.elapsed());
        assert_eq!(out.status.code(), Some(0));
    }
    single.sort();
    eprintln!(
        "fleet: `steadfastctl --inventory status` of 50 daemons took {:?} (median of 3; all: \
         {took:?}); one daemon's `status`: {:?} (median of 3)",
        took[1], single[1]
    );

    let out = ctl(&all, &["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(0));
    let doc = json(&out);
    assert_eq!(doc["schema"], 2);
    assert_eq!(doc["command"], "status");
    let listed = doc["daemons"].as_array().expect("daemons");
    assert_eq!(listed.len(), 50);
    for (seen, daemon) in listed.iter().zip(&daemons) {
        assert_eq!(seen["name"], daemon.name.as_str());
        assert_eq!(seen["transport"], "data_dir");
        assert_eq!(seen["ok"], true);
        assert_eq!(seen["state"], "running");
        assert_eq!(seen["attempt"], 1);
        assert_eq!(seen["pid"], std::process::id());
        assert_eq!(seen["snapshot"]["lifecycle"]["state"], "running", "{seen}");
    }
    assert_eq!(doc["not_running"], serde_json::json!([]));
    assert_eq!(doc["unreachable"], serde_json::json!([]));

    // One stopped: 3, and named.
    daemons[17].handle.stop(Hold::None).await.expect("stop");
    let out = ctl(&all, &["status"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("1 not running: d17"), "{stderr}");
    let stdout = text(&out.stdout);
    assert!(line_of(&stdout, "d17").contains("stopped"), "{stdout}");
    assert!(line_of(&stdout, "d18").contains("running"), "{stdout}");
    let out = ctl(&all, &["probe", "ready"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "probe prints nothing without --verbose"
    );
    assert!(text(&out.stderr).contains("d17"), "{}", text(&out.stderr));
    let out = ctl(&all, &["probe", "live"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // And one unreachable (a data dir no daemon serves): 4, both named.
    let ghost = tmp.path().join("ghost");
    std::fs::create_dir(&ghost).expect("ghost dir");
    let mut entries = entries_of(&daemons);
    entries.insert(30, data_dir_entry("ghost", &ghost));
    let with_ghost = inventory(&tmp.path().join("ghost.toml"), &entries);
    let out = ctl(&with_ghost, &["status"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("1 not running: d17"), "{stderr}");
    assert!(
        stderr.contains("1 unreachable or silent: ghost"),
        "{stderr}"
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[31].starts_with("ghost"),
        "in inventory order:\n{stdout}"
    );
    assert!(lines[31].contains("unreachable"), "{}", lines[31]);
    assert!(lines[31].contains("cannot connect"), "{}", lines[31]);

    let out = ctl(&with_ghost, &["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(4));
    let doc = json(&out);
    assert_eq!(doc["not_running"], serde_json::json!(["d17"]));
    assert_eq!(doc["unreachable"], serde_json::json!(["ghost"]));
    let listed = doc["daemons"].as_array().expect("daemons");
    assert_eq!(listed.len(), 51);
    assert_eq!(listed[30]["name"], "ghost");
    assert_eq!(listed[30]["ok"], false);
    assert_eq!(listed[30]["failure"], "unreachable");
    assert!(
        listed[30]["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot connect")),
        "{}",
        listed[30]
    );
    assert_eq!(listed[17]["state"], "stopped");
    assert_eq!(listed[17]["ok"], false);

    // `--only` narrows a query too.
    let out = ctl(&with_ghost, &["status", "--only", "d03,d04"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);

    exit_all(daemons).await;
}

#[tokio::test]
async fn a_bad_inventory_is_refused_naming_the_entry() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("bad.toml");
    for (body, needles) in [
        (
            "[[daemon]]\nname = \"web\"\ndata_dir = \"/srv/web\"\nsockett = \"/x\"\n",
            &["daemon #1 (\"web\")", "unknown key `sockett`"][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\n[[daemon]]\nname = \"a\"\nsocket = \"/s\"\n",
            &["daemons #1 and #2 are both named \"a\""][..],
        ),
        (
            "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\n[[daemon]]\nname = \"db\"\n",
            &["daemon #2 (\"db\")", "no transport"][..],
        ),
        (
            "[[daemon]]\nname = \"db\"\nsocket = \"/s\"\ntcp = \"127.0.0.1:7000\"\ntoken_file = \"t\"\n",
            &["daemon #1 (\"db\")", "2 transports", "give exactly one"][..],
        ),
        (
            "[[daemon]]\nname = \"edge\"\ntls = \"edge.example:7443\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
            &["daemon #1 (\"edge\")", "needs `ca`"][..],
        ),
        ("[[daemon]\n", &["is not TOML"][..]),
        ("", &["lists no daemon"][..]),
    ] {
        std::fs::write(&file, body).expect("write");
        let out = ctl(&file, &["status"]).await;
        assert_eq!(
            out.status.code(),
            Some(2),
            "{body:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
        }
    }
    let out = ctl(&tmp.path().join("missing.toml"), &["status"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read the inventory"));

    // A good inventory, with a name `--only` does not know: 2, nothing asked.
    let good = inventory(
        &tmp.path().join("good.toml"),
        &[
            data_dir_entry("a", tmp.path()),
            (
                "edge".to_owned(),
                "tls = \"edge.example:7443\"\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"k.pem\""
                    .to_owned(),
            ),
        ],
    );
    let out = ctl(&good, &["status", "--only", "a,nosuch"]).await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--only nosuch"), "{stderr}");
    assert!(stderr.contains("it lists: a, edge"), "{stderr}");

    // A TLS entry parses; its CA file does not exist, which is that
    // daemon's own failure, named.
    let out = ctl(&good, &["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(4));
    let doc = json(&out);
    assert_eq!(doc["unreachable"], serde_json::json!(["a", "edge"]));
    assert_eq!(doc["daemons"][1]["transport"], "tls");
    assert_eq!(doc["daemons"][1]["endpoint"], "tls:edge.example:7443");
    let error = doc["daemons"][1]["error"].as_str().expect("an error");
    assert!(error.contains("ca.pem"), "{error}");

    // Fleet flags without an inventory, or with one daemon's flags: usage.
    let out = tokio::task::spawn_blocking(|| {
        std::process::Command::new(processes::steadfastctl())
            .args(["restart", "--all"])
            .output()
            .expect("runs")
    })
    .await
    .expect("task");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("go with --inventory"));
    let out = ctl(&good, &["status", "--data-dir", "/tmp"]).await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_go_only_to_the_daemons_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 3).await;
    let file = inventory(&tmp.path().join("fleet.toml"), &entries_of(&daemons));
    let (d0, d1, d2) = (&daemons[0].handle, &daemons[1].handle, &daemons[2].handle);
    let versions: Vec<u64> = daemons
        .iter()
        .map(|d| d.handle.snapshot().version)
        .collect();

    // Neither names nor --all: refused, nothing sent.
    for command in ["restart", "stop", "start", "retry"] {
        let out = ctl(&file, &[command]).await;
        assert_eq!(out.status.code(), Some(2), "{command}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains("--only") && stderr.contains("--all"),
            "{stderr}"
        );
        assert!(stderr.contains("nothing was sent"), "{stderr}");
    }
    for (daemon, version) in daemons.iter().zip(&versions) {
        assert_eq!(
            attempt(&daemon.handle),
            Some(1),
            "{} was not restarted",
            daemon.name
        );
        assert_eq!(
            daemon.handle.snapshot().version,
            *version,
            "{} was not touched",
            daemon.name
        );
    }

    // Named: exactly those.
    let out = ctl(&file, &["restart", "--only", "d00,d02"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(line_of(&stdout, "d00").contains("restart:"), "{stdout}");
    assert!(!stdout.contains("d01"), "{stdout}");
    until(d0, "d00 on attempt 2", running_at(2)).await;
    until(d2, "d02 on attempt 2", running_at(2)).await;
    assert_eq!(attempt(d1), Some(1), "d01 was not named");
    assert_eq!(d1.snapshot().version, versions[1]);

    // --all, two at a time: every one goes up by one.
    let out = ctl(&file, &["restart", "--all", "--parallel", "2", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["schema"], 2);
    assert_eq!(doc["command"], "restart");
    let listed = doc["daemons"].as_array().expect("daemons");
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|d| d["ok"] == true), "{doc}");
    until(d0, "d00 on attempt 3", running_at(3)).await;
    until(d1, "d01 on attempt 2", running_at(2)).await;
    until(d2, "d02 on attempt 3", running_at(3)).await;

    // Refused everywhere (start --strict while running): 3, each named.
    let out = ctl(&file, &["start", "--all", "--strict"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("3 refused: d00, d01, d02"), "{stderr}");
    assert!(
        line_of(&text(&out.stdout), "d01").contains("runtime_running"),
        "{}",
        text(&out.stdout)
    );

    // A stop to one, then a start to it: the others untouched.
    let out = ctl(&file, &["stop", "--only", "d01"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(matches!(
        d1.snapshot().lifecycle,
        LifecycleState::Stopped { .. }
    ));
    assert_eq!(attempt(d0), Some(3));
    let out = ctl(&file, &["status"]).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains("1 not running: d01"));
    let out = ctl(&file, &["start", "--only", "d01"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    until(d1, "d01 on attempt 3", running_at(3)).await;

    // --wait: each boot followed to its end; one that fails is named (3).
    let out = ctl(&file, &["restart", "--all", "--wait"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(line_of(&text(&out.stdout), "d01").contains("restart: running"));
    // Answered running by the daemons themselves: no polling needed.
    assert_eq!(
        [attempt(d0), attempt(d1), attempt(d2)],
        [Some(4), Some(4), Some(4)]
    );
    daemons[2].switch.set(None);
    let out = ctl(&file, &["restart", "--force", "--wait", "--all"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("1 did not reach running: d02"), "{stderr}");
    assert!(line_of(&text(&out.stdout), "d02").contains("restart: failed"));
    assert_eq!([attempt(d0), attempt(d1)], [Some(5), Some(5)]);
    daemons[2].switch.set(Some(good()));
    let out = ctl(&file, &["retry", "--only", "d02", "--wait"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let d2_attempt = attempt(d2).expect("d02 runs again");

    // One named daemon unreachable: 1, named; the reachable one still done.
    let ghost = tmp.path().join("ghost");
    std::fs::create_dir(&ghost).expect("ghost dir");
    let mut entries = entries_of(&daemons);
    entries.push(data_dir_entry("ghost", &ghost));
    let with_ghost = inventory(&tmp.path().join("ghost.toml"), &entries);
    let out = ctl(&with_ghost, &["restart", "--only", "ghost,d02"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("1 not reached or not answered: ghost"));
    until(d2, "d02 restarted", running_at(d2_attempt + 1)).await;
    assert_eq!(attempt(d0), Some(5));

    exit_all(daemons).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_that_never_answers_is_reported_at_the_deadline() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 2).await;
    // A socket that accepts and never says a byte (a hung daemon).
    let silent_dir = tmp.path().join("silent");
    std::fs::create_dir(&silent_dir).expect("dir");
    let silent_socket = silent_dir.join("control.sock");
    let listener = tokio::net::UnixListener::bind(&silent_socket).expect("bind");
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            match listener.accept().await {
                Ok((stream, _)) => held.push(stream),
                Err(error) => panic!("accept: {error}"),
            }
        }
    });
    let mut entries = entries_of(&daemons);
    entries.insert(
        1,
        (
            "silent".to_owned(),
            format!("socket = {:?}", silent_socket.display().to_string()),
        ),
    );
    let file = inventory(&tmp.path().join("fleet.toml"), &entries);

    let out = ctl(&file, &["status", "--timeout", "2"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    // The others answered: their lines are their state, not the deadline's.
    assert!(line_of(&stdout, "d00").contains("running"), "{stdout}");
    assert!(line_of(&stdout, "d01").contains("running"), "{stdout}");
    let silent = line_of(&stdout, "silent");
    assert!(silent.contains("no_answer"), "{silent}");
    assert!(
        text(&out.stderr).contains("1 unreachable or silent: silent"),
        "{}",
        text(&out.stderr)
    );

    let out = ctl(&file, &["status", "--timeout", "2", "--json"]).await;
    assert_eq!(out.status.code(), Some(4));
    let doc = json(&out);
    assert_eq!(doc["timeout_ms"], 2000);
    assert_eq!(doc["unreachable"], serde_json::json!(["silent"]));
    assert_eq!(doc["daemons"][1]["failure"], "no_answer");
    assert_eq!(doc["daemons"][0]["state"], "running");
    assert_eq!(doc["daemons"][2]["state"], "running");

    // metrics and journal: the answers of the others, the silent one named.
    let out = ctl(&file, &["metrics", "--timeout", "2"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("{daemon=\"d00\""), "{stdout}");
    assert!(stdout.contains("{daemon=\"d01\""), "{stdout}");
    assert!(
        stdout.contains("steadfastctl_fleet_up{daemon=\"silent\"} 0"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("# EOF").count(), 1, "{stdout}");
    assert!(
        text(&out.stderr).contains("silent: no_answer: "),
        "{}",
        text(&out.stderr)
    );
    let out = ctl(&file, &["journal", "-n", "1", "--timeout", "2", "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let doc = json(&out);
    assert_eq!(doc["daemons"][0]["offline"], false);
    assert_eq!(
        doc["daemons"][0]["attempts"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(doc["unreachable"], serde_json::json!(["silent"]));

    held.abort();
    exit_all(daemons).await;
}

#[tokio::test]
async fn journal_reads_the_file_of_a_daemon_that_is_down() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let down = tmp.path().join("down");
    std::fs::create_dir(&down).expect("dir");
    run_once(&down).await;
    let file = inventory(
        &tmp.path().join("fleet.toml"),
        &[data_dir_entry("down", &down)],
    );
    let out = ctl(&file, &["journal", "-n", "5"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("== down ("), "{stdout}");
    assert!(stdout.contains("read from the journal file"), "{stdout}");
    assert!(stdout.contains("#1 booted"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tcp_entries_present_their_token_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 1).await;
    let token = tmp.path().join("d00.token");
    steadfast::control::auth::Token::create_file(&token).expect("a token file");
    let server = steadfast::control::serve_tcp(
        daemons[0].handle.clone(),
        "127.0.0.1:0".parse().expect("addr"),
        &token,
    )
    .expect("serves tcp");
    steadfast::control::auth::Token::create_file(tmp.path().join("other.token")).expect("another");
    let addr = server.local_addr();
    let file = inventory(
        &tmp.path().join("fleet.toml"),
        &[
            data_dir_entry("unix", &daemons[0].dir),
            // Relative: the inventory file's directory.
            (
                "tcp".to_owned(),
                format!("tcp = \"{addr}\"\ntoken_file = \"d00.token\""),
            ),
            (
                "wrong".to_owned(),
                format!("tcp = \"{addr}\"\ntoken_file = \"other.token\""),
            ),
        ],
    );
    let out = ctl(&file, &["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["daemons"][0]["state"], "running");
    assert_eq!(
        doc["daemons"][1]["state"], "running",
        "{}",
        doc["daemons"][1]
    );
    assert_eq!(doc["daemons"][1]["endpoint"], format!("tcp:{addr}"));
    assert_eq!(doc["unreachable"], serde_json::json!(["wrong"]));
    assert!(
        doc["daemons"][2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused the token")),
        "{}",
        doc["daemons"][2]
    );
    let out = ctl(&file, &["status", "--only", "unix,tcp"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    drop(server);
    exit_all(daemons).await;
}

/// Real kvd processes: one stopped with SIGSTOP (it accepts, in the
/// kernel's backlog, and never answers) is reported at the deadline; the
/// others answer with their own pids. Once it resumes, all run.
#[test]
fn a_sigstopped_kvd_is_reported_at_the_deadline() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut kvds = Vec::new();
    let mut entries = Vec::new();
    for i in 0..3 {
        let name = format!("kvd{i}");
        let dir = tmp.path().join(&name);
        std::fs::create_dir(&dir).expect("dir");
        let config = dir.join("kvd.toml");
        std::fs::write(
            &config,
            format!("listen_addr = \"127.0.0.1:{}\"\n", processes::free_port()),
        )
        .expect("config");
        let data = dir.join("data");
        let child = processes::kvd(&data, &config, std::process::Stdio::null());
        entries.push(data_dir_entry(&name, &data));
        kvds.push((child, data));
    }
    for (_, data) in &kvds {
        processes::until(data, "running", |s| s["lifecycle"]["state"] == "running");
    }
    let file = inventory(&tmp.path().join("fleet.toml"), &entries);
    let fleet_ctl = |args: &[&str]| {
        std::process::Command::new(processes::steadfastctl())
            .arg("--inventory")
            .arg(&file)
            .args(args)
            .output()
            .expect("steadfastctl runs")
    };
    let stopped = &kvds[1].0;
    processes::signal(stopped, rustix::process::Signal::STOP);
    let out = fleet_ctl(&["status", "--timeout", "2", "--json"]);
    processes::signal(stopped, rustix::process::Signal::CONT);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("1 unreachable or silent: kvd1"),
        "{}",
        text(&out.stderr)
    );
    let doc = json(&out);
    assert_eq!(doc["unreachable"], serde_json::json!(["kvd1"]));
    assert_eq!(
        doc["daemons"][1]["failure"], "no_answer",
        "{}",
        doc["daemons"][1]
    );
    for i in [0, 2] {
        assert_eq!(doc["daemons"][i]["state"], "running");
        assert_eq!(doc["daemons"][i]["pid"], kvds[i].0.id());
    }

    let out = fleet_ctl(&["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for (mut child, data) in kvds {
        assert_eq!(processes::ctl(&data, &["exit"]).status.code(), Some(0));
        assert_eq!(
            processes::wait_exit(&mut child),
            Some(steadfast::daemon::EXIT_HALT)
        );
    }
}

/// The samples of OpenMetrics `text` as Python's `prometheus_client`
/// parser reads them (the parser `tests/it/metrics.rs` holds the daemon's
/// text to): `[family, type, sample name, labels, value]`.
fn parse_openmetrics(exposition: &str) -> Vec<serde_json::Value> {
    const PARSE: &str = "
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append([family.name, family.type, s.name, s.labels, s.value])
print(json.dumps(out))
";
    match processes::python_json(PARSE, exposition) {
        serde_json::Value::Array(samples) => samples,
        other => panic!("not a list of samples: {other}"),
    }
}

/// `--inventory … metrics` prints ONE OpenMetrics exposition: each family
/// once, one `# EOF`, every sample with `daemon="NAME"` (the inventory's
/// name), and `steadfastctl_fleet_up` 1 for each daemon that answered, 0
/// for one that did not (exit 1, named on stderr). It parses with the
/// real OpenMetrics parser. Before: the texts one after another under
/// comment lines, several `# EOF`, each family once per daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_metrics_are_one_exposition() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 3).await;
    // One of them stopped, so the daemons' samples differ.
    daemons[1].handle.stop(Hold::None).await.expect("stop");
    let mut entries = entries_of(&daemons);
    let file = inventory(&tmp.path().join("fleet.toml"), &entries);

    let out = ctl(&file, &["metrics"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exposition = text(&out.stdout);
    assert_eq!(exposition.matches("# EOF").count(), 1, "{exposition}");
    assert!(exposition.ends_with("# EOF\n"), "{exposition}");
    let mut types = std::collections::BTreeSet::new();
    for line in exposition.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(types.insert(line.to_owned()), "{line} twice:\n{exposition}");
    }
    let samples = parse_openmetrics(&exposition);
    let names: Vec<&str> = daemons.iter().map(|d| d.name.as_str()).collect();
    for sample in &samples {
        let daemon = sample[3]["daemon"].as_str().unwrap_or_default();
        assert!(names.contains(&daemon), "{sample}");
    }
    // Each daemon's own counters, under its name.
    let value = |family: &str, daemon: &str, labels: &[(&str, &str)]| -> Option<f64> {
        samples
            .iter()
            .find(|s| {
                s[0] == family
                    && s[3]["daemon"] == daemon
                    && labels.iter().all(|(k, v)| s[3][*k] == *v)
            })
            .and_then(|s| s[4].as_f64())
    };
    for name in &names {
        assert!(
            value("steadfast_boots", name, &[]).is_some_and(|boots| boots >= 1.0),
            "{name}'s boots: {exposition}"
        );
        assert_eq!(
            value("steadfastctl_fleet_up", name, &[]),
            Some(1.0),
            "{exposition}"
        );
        assert!(
            samples
                .iter()
                .any(|s| s[3]["daemon"] == *name && s[0] != "steadfastctl_fleet_up"),
            "{name}'s own samples: {exposition}"
        );
    }

    // A daemon that does not answer: 0, named, exit 1; the others still
    // one exposition.
    let ghost = tmp.path().join("ghost");
    std::fs::create_dir(&ghost).expect("dir");
    entries.push(data_dir_entry("ghost", &ghost));
    let file = inventory(&tmp.path().join("fleet.toml"), &entries);
    let out = ctl(&file, &["metrics"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ghost"), "{}", text(&out.stderr));
    let exposition = text(&out.stdout);
    let samples = parse_openmetrics(&exposition);
    assert!(
        samples
            .iter()
            .any(|s| s[0] == "steadfastctl_fleet_up" && s[3]["daemon"] == "ghost" && s[4] == 0.0),
        "{exposition}"
    );
    assert!(
        samples
            .iter()
            .all(|s| s[0] == "steadfastctl_fleet_up" || s[3]["daemon"] != "ghost"),
        "{exposition}"
    );
    exit_all(daemons).await;
}

/// `--inventory … exit` ends the daemons named (`--only`, or `--all`),
/// as the single `exit` does (`--relaunch`: exit 75 for a relaunch), and
/// refuses without either; `start` of a running fleet and `stop` of a
/// stopped one are accepted (`already running`), and refused with
/// `--strict`. Before: `exit` did not go with `--inventory` (exit 2), and
/// `start --all` of a running fleet was refused (3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fleet_exits_and_starts_what_already_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut daemons = fleet(tmp.path(), 3).await;
    let file = inventory(&tmp.path().join("fleet.toml"), &entries_of(&daemons));

    let out = ctl(&file, &["start", "--all"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        line_of(&stdout, "d01").contains("start: already running"),
        "{stdout}"
    );
    let out = ctl(&file, &["start", "--all", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = json(&out);
    assert_eq!(doc["daemons"][0]["already"], true, "{doc:#}");
    assert_eq!(doc["daemons"][0]["state"], "running", "{doc:#}");
    let out = ctl(&file, &["start", "--only", "d00", "--strict"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    daemons[2].handle.stop(Hold::None).await.expect("stop");
    let out = ctl(&file, &["stop", "--only", "d02"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        line_of(&text(&out.stdout), "d02").contains("stop: already stopped"),
        "{}",
        text(&out.stdout)
    );

    let out = ctl(&file, &["exit"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing was sent"));
    assert!(daemons.iter().all(|d| !d.run.is_finished()));

    let out = ctl(&file, &["exit", "--relaunch", "--only", "d01"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        line_of(&text(&out.stdout), "d01").contains("exit:"),
        "{}",
        text(&out.stdout)
    );
    let d01 = daemons.remove(1);
    let intent = tokio::time::timeout(PATIENCE, d01.run)
        .await
        .expect("d01 ends")
        .expect("its task");
    assert_eq!(intent, ExitIntent::Relaunch);
    assert!(daemons.iter().all(|d| !d.run.is_finished()), "only d01");

    let out = ctl(
        &inventory(&tmp.path().join("rest.toml"), &entries_of(&daemons)),
        &["exit", "--all"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for daemon in daemons {
        let intent = tokio::time::timeout(PATIENCE, daemon.run)
            .await
            .expect("it ends")
            .expect("its task");
        assert_eq!(intent, ExitIntent::Halt, "{}", daemon.name);
    }
}

/// A command answered from the snapshot (`ping`) asks every daemon as a
/// query does: one line each, its answer as the single command prints it
/// (or why none came), `--json` each answer under `answer`; exit 1 when
/// one did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ping_asks_every_daemon_and_names_the_silent() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let daemons = fleet(tmp.path(), 2).await;
    daemons[1].handle.stop(Hold::None).await.expect("stop");
    let mut entries = entries_of(&daemons);
    entries.push(data_dir_entry("gone", &tmp.path().join("nowhere")));
    let file = inventory(&tmp.path().join("fleet.toml"), &entries);
    let pid = std::process::id();

    let out = ctl(&file, &["ping"]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert_eq!(line_of(&stdout, "d00"), format!("d00   pid {pid}: running"));
    assert_eq!(line_of(&stdout, "d01"), format!("d01   pid {pid}: stopped"));
    assert!(
        line_of(&stdout, "gone").starts_with("gone  unreachable: "),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("gone"), "{}", text(&out.stderr));

    let out = ctl(&file, &["--json", "ping"]).await;
    let document = json(&out);
    assert_eq!(document["command"], "ping");
    assert_eq!(document["daemons"][0]["answer"]["pid"], pid);
    assert_eq!(document["daemons"][0]["answer"]["state"], "running");
    assert_eq!(document["daemons"][1]["answer"]["state"], "stopped");
    assert_eq!(document["daemons"][2]["ok"], false);
    assert_eq!(document["unreachable"], serde_json::json!(["gone"]));
    exit_all(daemons).await;
}
