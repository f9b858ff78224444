//! Root's supervision of the journal and the config watcher (the table in
//! ARCHITECTURE.md): a child killed from outside is restarted, the daemon
//! keeps working through the new child, and a journal that keeps dying ends
//! the process with intent relaunch instead of running on without
//! durability. And what is not a child: a running supervisor keeps no idle
//! Replacement actor, and a boot or a drain is no actor at all.

use crate::support::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use steadfast::{ExitIntent, Hold};
use steadfast_actors::root::{RESTARTS, child_name};

/// Wait until the named child is registered and has finished starting.
async fn await_running(data_dir: &Path, role: &str, generation: u32) -> ractor::ActorCell {
    let name = child_name(data_dir, role, generation);
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(cell) = ractor::registry::where_is(name.clone())
                && cell.get_status() == ractor::ActorStatus::Running
            {
                return cell;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{role} generation {generation} is not running"))
}

/// Kill the named child and wait until its successor runs.
async fn kill_and_await_successor(data_dir: &Path, role: &str, generation: u32) {
    await_running(data_dir, role, generation).await.kill();
    await_running(data_dir, role, generation + 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_journal_is_restarted_and_writes_go_on() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    kill_and_await_successor(tmp.path(), "journal", 0).await;

    // A stop and a start go through the new journal (each is acknowledged
    // only after its fsync), and land in the file.
    let stopped = handle
        .stop(Hold::None)
        .await
        .expect("stop through the new journal");
    assert!(stopped.error.is_none(), "{:?}", stopped.error);
    handle.start().await.expect("start");
    until(&handle, "running again", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
    let bytes = std::fs::read(tmp.path().join(".steadfast").join("journal")).expect("journal");
    let records = steadfast::protocol::journal::decode(&bytes)
        .expect("decodes")
        .records;
    let stops = records
        .iter()
        .filter(|r| matches!(r, steadfast::protocol::journal::Record::Transition { event, .. } if event == "stop"))
        .count();
    assert_eq!(stops, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_that_keeps_dying_ends_the_process_for_a_relaunch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    for generation in 0..RESTARTS {
        kill_and_await_successor(tmp.path(), "journal", generation).await;
    }
    let last = ractor::registry::where_is(child_name(tmp.path(), "journal", RESTARTS))
        .expect("the last journal");
    last.kill();
    let intent = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the process ends")
        .expect("task");
    assert_eq!(intent, ExitIntent::Relaunch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_config_watcher_is_restarted_and_still_watches() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (declared, run, handle) = held_on_declared_file(tmp.path()).await;
    kill_and_await_successor(tmp.path(), "config_watcher", 0).await;
    std::fs::write(&declared, "fixed\n").expect("fix the file");
    until(&handle, "running after the fix", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A change to the declared file that no watch saw (the watcher's watch
/// was not in place yet) is settled once one is: the Lifecycle actor is
/// told `Watching` and compares the file with its boot's fingerprint. Here
/// the watcher is killed past its restarts, so nothing watches while the
/// fix is written and the held boot stays held; `Watching`, as a new
/// watcher sends it once its watch is in place, then retries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edit_made_while_nothing_watched_is_settled_once_watching() {
    use steadfast_actors::lifecycle::LifecycleMsg;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (declared, run, handle) = held_on_declared_file(tmp.path()).await;
    for generation in 0..RESTARTS {
        kill_and_await_successor(tmp.path(), "config_watcher", generation).await;
    }
    await_running(tmp.path(), "config_watcher", RESTARTS)
        .await
        .kill();
    let last = child_name(tmp.path(), "config_watcher", RESTARTS);
    tokio::time::timeout(PATIENCE, async {
        while ractor::registry::where_is(last.clone()).is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the last watcher is gone");
    std::fs::write(&declared, "fixed\n").expect("fix the file");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !running(&handle.snapshot()),
        "nothing watches: the fix is not seen yet"
    );
    ractor::registry::where_is(child_name(tmp.path(), "lifecycle", 0))
        .expect("the lifecycle actor")
        .send_message(LifecycleMsg::Watching)
        .expect("told");
    until(&handle, "running after the fix", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Root's children, by name, sorted.
fn children_of(root: &ractor::ActorCell) -> Vec<String> {
    let mut names: Vec<String> = root
        .get_children()
        .iter()
        .map(|child| child.get_name().unwrap_or_else(|| "(unnamed)".into()))
        .collect();
    names.sort();
    names
}

/// Wait until Root's children are exactly `expected` (roles at generations).
async fn await_children(root: &ractor::ActorCell, data_dir: &Path, expected: &[(&str, u32)]) {
    let mut want: Vec<String> = expected
        .iter()
        .map(|(role, generation)| child_name(data_dir, role, *generation))
        .collect();
    want.sort();
    let waited = tokio::time::timeout(PATIENCE, async {
        while children_of(root) != want {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "Root's children: {:?}, expected {want:?}",
        children_of(root)
    );
}

/// A running supervisor holds no idle child (memory per
/// supervisor), and a stop and a start spawn no actor at all: the boot and
/// the drain run in tasks of the Lifecycle actor's (the wake-ups
/// of a spawn, a stop and a supervision event per stop+start), and the
/// Replacement actor is not started before a replacement is asked for.
/// Root's children while running, and after a stop and a start, are the
/// Journal and the Lifecycle actors, and no boot or drain name was ever
/// registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_supervisor_keeps_no_idle_boot_drain_or_replacement_actor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    let root = await_running(tmp.path(), "journal", 0)
        .await
        .try_get_supervisor()
        .expect("the journal's supervisor is Root");
    let settled = [("journal", 0), ("lifecycle", 0)];
    await_children(&root, tmp.path(), &settled).await;

    handle.stop(Hold::None).await.expect("stop");
    assert_eq!(children_of(&root).len(), 2, "{:?}", children_of(&root));
    handle.start().await.expect("start");
    until(&handle, "running again", running).await;
    await_children(&root, tmp.path(), &settled).await;
    // Neither a boot nor a drain is an actor: none was ever registered.
    for (role, generation) in [("boot", 0), ("boot", 1), ("drain", 0)] {
        assert!(
            ractor::registry::where_is(child_name(tmp.path(), role, generation)).is_none(),
            "{role} {generation} is registered"
        );
    }
    exit(run, &handle, ExitIntent::Halt).await;
}
