//! Kubernetes (`examples/kubernetes/`): a ConfigMap
//! mounted as the declared file is updated by the kubelet swapping the
//! volume's `..data` link, and a real kvd follows the swap — a daemon held
//! on a bad config boots on the fix with no SIGHUP and no restart.
//!
//! The layout is the one the kubelet's atomic writer makes: `kvd.toml ->
//! ..data/kvd.toml`, `..data -> ..<timestamp>`, an update written to a new
//! `..<timestamp>` directory, linked as `..data_tmp`, renamed over `..data`
//! (atomically), the old directory removed. No event of the swap names
//! `kvd.toml`; before the watcher followed the links it went unseen.
//!
//! The manifest itself is checked as a cluster would take it: schema-valid
//! for the current Kubernetes (`kubernetes-validate --strict`, from PyPI)
//! and admitted under the "restricted" Pod Security Standard, with the
//! project's own rules for a daemon's pod (`scripts/pod_security.py`: a
//! read-only root, requests and limits, probe timeouts longer than the
//! `--timeout` they pass, `STEADFAST_SERVICE_MANAGER=container`). In CI a
//! missing validator fails the test; elsewhere it skips, saying why.

use crate::support::processes;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use processes::{ctl, free_port, kv, tool, until, wait_exit};

/// One update of the ConfigMap volume at `dir`, as the kubelet makes it.
fn kubelet_update(dir: &Path, name: &str, content: &str, serial: u32) {
    let stamp = format!("..2026_12_01_10_00_{serial:02}.{serial:09}");
    let versioned = dir.join(&stamp);
    std::fs::create_dir(&versioned).expect("mkdir the timestamped dir");
    std::fs::write(versioned.join(name), content).expect("write the new version");
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(&stamp, &tmp).expect("link ..data_tmp");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    let user = dir.join(name);
    if std::fs::symlink_metadata(&user).is_err() {
        std::os::unix::fs::symlink(Path::new("..data").join(name), &user).expect("link the file");
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).expect("remove the old version");
    }
}

fn state(s: &serde_json::Value) -> &str {
    s["lifecycle"]["state"].as_str().unwrap_or("")
}

/// A held daemon boots on a ConfigMap fix; a later update applies in
/// place (`max_connections`) — both through `..data` swaps only.
#[test]
fn a_configmap_swap_boots_a_held_kvd_and_applies_in_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mount = tmp.path().join("etc-kvd");
    std::fs::create_dir(&mount).expect("mount dir");
    kubelet_update(&mount, "kvd.toml", "listen_addr = [broken\n", 1);
    let config = mount.join("kvd.toml");
    assert!(
        std::fs::symlink_metadata(&config)
            .expect("the file")
            .file_type()
            .is_symlink(),
        "the declared file is a link, as in a ConfigMap volume"
    );

    let mut daemon = processes::kvd(&data, &config, Stdio::null());
    let held = until(&data, "a held failure", |s| state(s) == "failed");
    assert_eq!(held["lifecycle"]["retry"]["class"], "hold", "{held:#}");
    assert_eq!(held["lifecycle"]["report"]["phase"], "resolve_config");

    // The fix, as `kubectl apply` of the ConfigMap lands it.
    let port = free_port();
    kubelet_update(
        &mount,
        "kvd.toml",
        &format!("listen_addr = \"127.0.0.1:{port}\"\nmax_connections = 64\n"),
        2,
    );
    until(&data, "running on the fixed ConfigMap", |s| {
        state(s) == "running"
    });
    assert_eq!(kv(port, "SET k v"), "OK");

    // A later edit of a leaf that applies in place: no restart.
    let attempt =
        until(&data, "running", |s| state(s) == "running")["lifecycle"]["attempt"].clone();
    kubelet_update(
        &mount,
        "kvd.toml",
        &format!("listen_addr = \"127.0.0.1:{port}\"\nmax_connections = 1\n"),
        3,
    );
    until(&data, "max_connections applied", |_| {
        let out = ctl(&data, &["config", "show", "max_connections"]);
        String::from_utf8_lossy(&out.stdout).contains("max_connections = 1")
    });
    let after = until(&data, "still running", |s| state(s) == "running");
    assert_eq!(after["lifecycle"]["attempt"], attempt, "applied in place");
    assert_eq!(kv(port, "GET k"), "v");

    assert_eq!(ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(wait_exit(&mut daemon), Some(steadfast::daemon::EXIT_HALT));
}

fn manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes/kvd.yaml")
}

/// Run the Pod Security check on `file`: its exit status and output.
fn pod_security(file: &Path) -> Option<(bool, String)> {
    let python = tool("python3")?;
    let has_yaml = Command::new(&python)
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_yaml {
        assert!(
            std::env::var_os("CI").is_none(),
            "PyYAML is not installed; .ci/run installs it with kubernetes-validate"
        );
        eprintln!("skipped: PyYAML is not installed");
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pod_security.py");
    let out = Command::new(python)
        .arg(script)
        .arg(file)
        .output()
        .expect("run pod_security.py");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), text))
}

/// The shipped manifest is valid for the API server, strictly (no unknown
/// field, which a typo in a security setting would be).
#[test]
fn the_manifest_is_valid_kubernetes() {
    let Some(validate) = tool("kubernetes-validate") else {
        return;
    };
    let out = Command::new(validate)
        .arg("--strict")
        .arg(manifest())
        .output()
        .expect("run kubernetes-validate");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubernetes-validate --strict: {text}");
    for kind in ["configmap/kvd-config", "service/kvd", "statefulset/kvd"] {
        assert!(
            text.contains(&format!("passed for resource {kind}")),
            "{kind}: {text}"
        );
    }
}

/// The pod passes the restricted Pod Security Standard and the project's
/// rules; and the check is one that fails: the same manifest without
/// `allowPrivilegeEscalation: false` and with the kubelet's 1 s probe
/// timeout is refused, naming both.
#[test]
fn the_pod_is_restricted_and_its_probes_outlast_their_timeout() {
    let Some((passed, text)) = pod_security(&manifest()) else {
        return;
    };
    assert!(passed, "scripts/pod_security.py: {text}");
    assert!(
        text.contains("1 pod template(s) checked, 0 violation(s)"),
        "{text}"
    );

    let original = std::fs::read_to_string(manifest()).expect("read the manifest");
    let weakened = original
        .replace(
            "allowPrivilegeEscalation: false",
            "allowPrivilegeEscalation: true",
        )
        .replacen("timeoutSeconds: 6", "timeoutSeconds: 1", 1);
    assert_ne!(
        weakened, original,
        "the manifest has the settings this test weakens"
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let copy = tmp.path().join("kvd.yaml");
    std::fs::write(&copy, weakened).expect("write the weakened copy");
    let (passed, text) = pod_security(&copy).expect("the checker ran above");
    assert!(!passed, "a weakened manifest passed: {text}");
    assert!(
        text.contains("allowPrivilegeEscalation must be false"),
        "{text}"
    );
    assert!(
        text.contains("Probe.timeoutSeconds (1) must exceed its --timeout (5)"),
        "{text}"
    );
}
