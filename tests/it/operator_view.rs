//! What operators look at, through the real
//! `steadfastctl` against real kvd processes (`spec/control.md`,
//! "Snapshot JSON" and "steadfastctl"):
//!
//! - a lean `status`: the current attempt only, whatever the history
//!   (`a_lean_status_with_32_attempts_and_the_journal_with_the_daemon_down`,
//!   which also reads the journal with the daemon down: read-only, a torn
//!   tail ignored, corruption reported);
//! - `watch` answers what changed (`watch_answers_only_what_changed`);
//! - absolute RFC 3339 times beside relative ones, a `schema` in every JSON
//!   answer, `resolve_config` counted in the phase total
//!   (`times_schema_and_the_phase_total`);
//! - a multi-line error stays in its column
//!   (`a_multi_line_error_is_indented`).

use crate::support::processes;
use crate::support::processes::text;

use std::path::Path;
use std::process::{Output, Stdio};

use steadfast::protocol::snapshot::SCHEMA;

fn ctl_ok(data: &Path, args: &[&str]) -> Output {
    let out = processes::ctl(data, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "steadfastctl {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

fn attempt(s: &serde_json::Value) -> u64 {
    s["lifecycle"]["attempt"].as_u64().unwrap_or(0)
}

/// A kvd config binding `addr`.
fn config(dir: &Path, addr: std::net::SocketAddr) -> std::path::PathBuf {
    let config = dir.join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"{addr}\"\n")).expect("config");
    config
}

/// `YYYY-MM-DDTHH:MM:SS.mmm` followed by `Z` or `±HH:MM`: RFC 3339 as
/// steadfastctl prints it.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() >= 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && (&s[23..] == "Z"
            || (s.len() == 29 && matches!(b[23], b'+' | b'-') && digits(24..26) && b[26] == b':'))
}

/// `ms` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (civil from days,
/// H. Hinnant), to check what steadfastctl prints against the JSON's value.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// kvd over a taken port: 31 failed boots (the operator's `retry`s hurry
/// them), then the port is freed and the 32nd runs. `status --json` stays
/// the size of one attempt; the history comes from `--history N` or the
/// journal, which also reads with the daemon down.
#[test]
fn a_lean_status_with_32_attempts_and_the_journal_with_the_daemon_down() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let config = config(tmp.path(), squatter.local_addr().expect("addr"));
    let data = tmp.path().join("data");
    let mut child = processes::kvd(&data, &config, Stdio::null());

    loop {
        let s = processes::until(&data, "a failed boot", |s| state(s) == "failed");
        if attempt(&s) >= 31 {
            break;
        }
        // Refused (exit 3) when an automatic retry got there first.
        let _ = processes::ctl(&data, &["retry"]);
        processes::until(&data, "the next boot", |n| {
            attempt(n) > attempt(&s) || state(n) != "failed"
        });
    }
    drop(squatter);
    let _ = processes::ctl(&data, &["retry"]);
    let up = processes::until(&data, "running", |s| state(s) == "running");
    let attempts = attempt(&up);
    assert!(attempts >= 32, "{attempts} attempts");

    let lean = ctl_ok(&data, &["status", "--json"]);
    let status = json(&lean);
    assert_eq!(status["schema"], SCHEMA);
    assert!(status["now"].as_u64().is_some(), "{status}");
    let current = status["attempts"].as_array().expect("attempts");
    assert_eq!(current.len(), 1, "the current attempt only");
    assert_eq!(current[0]["attempt"], attempts);
    let full = ctl_ok(
        &data,
        &["status", "--json", "--history", &attempts.to_string()],
    );
    let history = json(&full)["history"].as_array().expect("history").clone();
    assert_eq!(history.len() as u64, attempts, "the journal has them all");
    // What `status --json` printed before (schema 1): the same snapshot
    // with every attempt in `attempts`.
    let mut before = status.clone();
    before["attempts"] = history
        .iter()
        .map(|a| {
            let mut a = a.clone();
            a.as_object_mut().expect("an attempt").remove("run");
            a
        })
        .collect();
    let before = serde_json::to_string_pretty(&before).expect("json").len() + 1;
    eprintln!(
        "status --json with {attempts} attempts: {} bytes (the whole history in it: {before} bytes); \
         status --json --history {attempts}: {} bytes",
        lean.stdout.len(),
        full.stdout.len()
    );
    assert!(
        lean.stdout.len() * 4 < before,
        "lean {} vs the whole history {before}",
        lean.stdout.len()
    );
    let human = text(&ctl_ok(&data, &["status"]).stdout);
    assert!(human.contains("Current attempt:"), "{human}");
    assert!(!human.contains("#1 failed"), "no history unasked:\n{human}");
    let human = text(&ctl_ok(&data, &["status", "--history", "3"]).stdout);
    assert!(human.contains("History (the journal's last 3):"), "{human}");

    // The daemon goes down; the journal is read from the file.
    ctl_ok(&data, &["exit"]);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
    let control = data.join(".steadfast");
    let listing = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("control dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(&control);
    let bytes = std::fs::read(control.join("journal")).expect("journal");
    let offline = ctl_ok(&data, &["journal", "--json", "-n", "1000"]);
    assert!(
        text(&offline.stderr).contains("reading"),
        "{}",
        text(&offline.stderr)
    );
    let answer = json(&offline);
    assert_eq!(answer["schema"], SCHEMA);
    assert_eq!(answer["offline"], true);
    assert_eq!(
        answer["attempts"].as_array().expect("attempts").len() as u64,
        attempts
    );
    let human = text(&ctl_ok(&data, &["journal", "-n", "2"]).stdout);
    assert!(
        human.contains("Run 1:") && human.contains("booted"),
        "{human}"
    );
    assert_eq!(listing(&control), before, "nothing created, no lock file");
    assert_eq!(
        std::fs::read(control.join("journal")).expect("journal"),
        bytes,
        "nothing written"
    );

    // A torn tail (an append cut short) is ignored.
    let mut torn = bytes.clone();
    torn.extend_from_slice(&[0x00, 0x00, 0x01, 0x00, 0xAB]);
    std::fs::write(control.join("journal"), &torn).expect("tear");
    let read = json(&ctl_ok(&data, &["journal", "--json", "-n", "1000"]));
    assert_eq!(
        read["attempts"].as_array().expect("attempts").len() as u64,
        attempts
    );
    // Corruption in the middle is reported, naming the file.
    let mut corrupt = bytes;
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xFF;
    std::fs::write(control.join("journal"), &corrupt).expect("corrupt");
    let out = processes::ctl(&data, &["journal"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("corrupt") && stderr.contains("journal"),
        "{stderr}"
    );
    // A journal reached through a link is refused, not followed.
    std::fs::remove_file(control.join("journal")).expect("rm");
    std::fs::write(tmp.path().join("elsewhere"), &torn).expect("elsewhere");
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), control.join("journal"))
        .expect("link");
    let out = processes::ctl(&data, &["journal"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}

/// `watch` is answered with the fields that changed since what the
/// connection last received, not the whole snapshot.
#[test]
fn watch_answers_only_what_changed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = processes::free_port();
    let config = config(tmp.path(), ([127, 0, 0, 1], port).into());
    let data = tmp.path().join("data");
    let mut child = processes::kvd(&data, &config, Stdio::null());
    processes::until(&data, "running", |s| state(s) == "running");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client =
            steadfast::control::ControlClient::connect_unix(steadfast::control::socket_path(&data))
                .await
                .expect("connects");
        let have = client.snapshot().await.expect("snapshot");
        let stopper = {
            let data = data.clone();
            std::thread::spawn(move || processes::ctl(&data, &["stop"]))
        };
        let changes = client
            .watch_changes(have.version, std::time::Duration::from_secs(30))
            .await
            .expect("watch");
        assert_eq!(changes.base, Some(have.version), "a diff, not a snapshot");
        let fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&changes.json).expect("an object");
        for changed in ["version", "lifecycle"] {
            assert!(fields.contains_key(changed), "{changed}: {fields:?}");
        }
        for same in ["previous_run", "pid", "identity", "schema"] {
            assert!(
                !fields.contains_key(same),
                "{same} did not change: {fields:?}"
            );
        }
        let next = changes.apply(&have).expect("applies");
        assert!(next.version > have.version);
        assert_eq!(next.pid, have.pid);
        // Exactly the fields that differ are sent (`attempts` too when the
        // drain's phases were published with the first new version).
        let before = serde_json::to_value(&have).expect("json");
        let after = serde_json::to_value(&next).expect("json");
        for (key, value) in after.as_object().expect("an object") {
            assert_eq!(
                fields.contains_key(key),
                before.get(key) != Some(value),
                "{key}: sent {fields:?}"
            );
        }
        // A whole snapshot when the connection has not sent the base.
        let other =
            steadfast::control::ControlClient::connect_unix(steadfast::control::socket_path(&data))
                .await
                .expect("connects");
        let whole = other
            .watch_changes(have.version, std::time::Duration::from_secs(30))
            .await
            .expect("watch");
        assert_eq!(whole.base, None);
        assert_eq!(
            stopper.join().expect("stop").status.code(),
            Some(0),
            "stopped"
        );
    });
    // The command line's watch follows the changes to a running state.
    let watcher = {
        let data = data.clone();
        std::thread::spawn(move || processes::ctl(&data, &["watch", "--until", "running"]))
    };
    processes::until(&data, "stopped", |s| state(s) == "stopped");
    ctl_ok(&data, &["start"]);
    let out = watcher.join().expect("watch");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("→ running"), "{stdout}");
    // resolve_config ends knowing the plan: counted in the total.
    let resolved = stdout
        .lines()
        .find(|l| l.contains("resolve_config: completed"))
        .expect("resolve_config completed");
    assert!(
        resolved.contains("phase 1/") && !resolved.contains("1/?"),
        "{stdout}"
    );
    ctl_ok(&data, &["exit"]);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// Absolute RFC 3339 times (UTC with `--utc`, else the local zone) beside
/// relative ones in `status` and `journal`; `schema` in every JSON answer;
/// `resolve_config` counted in the phase total.
#[test]
fn times_schema_and_the_phase_total() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = processes::free_port();
    let config = config(tmp.path(), ([127, 0, 0, 1], port).into());
    let data = tmp.path().join("data");
    let mut child = processes::kvd(&data, &config, Stdio::null());
    let up = processes::until(&data, "running", |s| state(s) == "running");

    // status --utc: `Since:` is the JSON's `since`, in RFC 3339, then "ago".
    let since = up["lifecycle"]["since"].as_u64().expect("since");
    let human = text(&ctl_ok(&data, &["status", "--utc"]).stdout);
    let line = human
        .lines()
        .find(|l| l.trim_start().starts_with("Since:"))
        .expect("a Since line");
    let value = line.trim_start().trim_start_matches("Since: ");
    let (absolute, relative) = value.split_once(" (").expect("absolute (relative)");
    assert!(is_rfc3339(absolute), "{line}");
    assert_eq!(absolute, utc(since), "{line}");
    assert!(relative.ends_with("ago)"), "{line}");
    // The local zone (TZ given to the child only): an offset, not `Z`.
    let local = std::process::Command::new(processes::steadfastctl())
        .env("TZ", "Asia/Kolkata")
        .arg("--data-dir")
        .arg(&data)
        .args(["journal"])
        .output()
        .expect("runs");
    let local = text(&local.stdout);
    let started = local
        .lines()
        .find_map(|l| l.split_once("(started ").map(|(_, rest)| rest.to_owned()))
        .expect("a started time");
    let stamp = started.split_once(' ').expect("stamp").0;
    assert!(is_rfc3339(stamp), "{local}");
    if std::path::Path::new("/usr/share/zoneinfo/Asia/Kolkata").exists() {
        assert!(stamp.ends_with("+05:30"), "{local}");
    }

    // resolve_config is phase 1 of the plan's total, like the others.
    let phases = up["attempts"][0]["phases"].as_array().expect("phases");
    let total = phases.last().expect("a phase")["total"]
        .as_u64()
        .expect("total");
    assert_eq!(phases[0]["phase"], "resolve_config");
    assert_eq!(phases[0]["total"], total, "{phases:?}");
    assert_eq!(total as usize, phases.len());
    let human = text(&ctl_ok(&data, &["status"]).stdout);
    assert!(
        human.contains(&format!("1/{total} resolve_config")),
        "{human}"
    );
    let journal = text(&ctl_ok(&data, &["journal"]).stdout);
    assert!(
        journal.contains(&format!("1/{total} resolve_config")),
        "{journal}"
    );

    // A schema version in every JSON answer.
    for args in [
        &["status", "--json"][..],
        &["journal", "--json"],
        &["config", "show", "--json"],
        &["config", "set", "max_connections", "8", "--json"],
    ] {
        let answer = json(&ctl_ok(&data, args));
        assert_eq!(answer["schema"], SCHEMA, "{args:?}: {answer}");
    }
    ctl_ok(&data, &["exit"]);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// A config whose unknown leaf has a newline in its (quoted) name fails
/// `resolve_config` held with an error of two lines: each continuation
/// line stays in its column.
#[test]
fn a_multi_line_error_is_indented() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = tmp.path().join("kvd.toml");
    std::fs::write(
        &config,
        "listen_addr = \"127.0.0.1:0\"\n\"no such\\nleaf\" = 1\n",
    )
    .expect("config");
    let data = tmp.path().join("data");
    let mut child = processes::kvd(&data, &config, Stdio::null());
    let failed = processes::until(&data, "a held failure", |s| state(s) == "failed");
    let error = failed["lifecycle"]["report"]["error"]
        .as_str()
        .expect("an error")
        .to_owned();
    assert!(
        error.trim_end().contains('\n'),
        "a multi-line error: {error:?}"
    );

    // (Not `ctl_ok`: `status` of a daemon that is not running may exit
    // non-zero; the rendering is what this test reads.)
    let human = text(&processes::ctl(&data, &["status"]).stdout);
    let lines: Vec<&str> = human.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with(" Last error: "))
        .expect("a Last error line");
    let continuation = error.trim_end().lines().count() - 1;
    for line in &lines[first + 1..=first + continuation] {
        assert!(
            line.starts_with(&" ".repeat(13)),
            "continuation not indented: {line:?}\n{human}"
        );
    }
    // The phase line's error too: under the outcome column.
    let phase = lines
        .iter()
        .position(|l| l.contains("resolve_config") && l.contains("failed:"))
        .expect("the failed phase");
    assert!(
        lines[phase + 1].starts_with(&" ".repeat(44)),
        "{:?}\n{human}",
        lines[phase + 1]
    );
    ctl_ok(&data, &["exit"]);
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}
