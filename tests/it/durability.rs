//! Step deadlines and journal compaction (`spec/control-dir.md`,
//! "Compaction"; DESIGN.md, "per-phase deadlines that a step extends by
//! reporting progress"), over real files.

use crate::support::common;
use crate::support::common::nz;

use std::time::Duration;

use common::{Switch, until};
use steadfast::protocol::journal::{Record, ResourceRecord as Res, attempts_in, outstanding};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::PhaseOutcome;
use steadfast::supervisor::Timings;
use steadfast::{ExitIntent, Plan, Resource, Service, Step, StepContext, StepError, Supervisor};
use steadfast_actors::control_dir::{COMPACT_TMP_NAME, ControlDir};

/// One step, `work`, that takes 1.2 s: silent, or reporting progress every
/// 50 ms, as the config's `report` says.
struct Slow;

/// The service of one step, [`Slow`].
struct SlowService;

impl Step for Slow {
    const NAME: &'static str = "work";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        let report = cx.config.get("report").and_then(toml::Value::as_bool) == Some(true);
        for _ in 0..24 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if report {
                cx.progress.report();
            }
        }
        Ok(Resource::new("work", "done", ()))
    }
}

impl Service for SlowService {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Slow)
    }
}

fn slow_supervisor(
    dir: &std::path::Path,
    report: bool,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    steadfast::SupervisorHandle,
) {
    let source = Switch::new(Some(common::config(&format!("report = {report}")))).source();
    let (supervisor, handle) = Supervisor::builder(dir, SlowService)
        .config(source)
        .timings(Timings {
            // Generous against the 50 ms between reports on a loaded
            // machine, and well under the step's 1.2 s.
            step_deadline: Duration::from_millis(400),
            ..common::test_timings()
        })
        .build()
        .expect("starts");
    (tokio::spawn(supervisor.run()), handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_deadline_fails_unless_it_reports_progress() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = slow_supervisor(tmp.path(), false);
    let failed = until(&handle, "a failed boot", common::failed).await;
    let LifecycleState::Failed {
        retry,
        report: last,
        ..
    } = &failed.lifecycle
    else {
        unreachable!("until returned a failed snapshot")
    };
    assert!(
        matches!(
            retry,
            steadfast::protocol::lifecycle::RetryClass::Backoff { .. }
        ),
        "{retry:?}"
    );
    assert_eq!(last.phase.to_string(), "work");
    assert!(
        last.error.contains("`work`") && last.error.contains("deadline of 400ms"),
        "{}",
        last.error
    );
    common::exit(run, &handle, ExitIntent::Halt).await;

    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = slow_supervisor(tmp.path(), true);
    let running = until(&handle, "running", common::running).await;
    let phase = running.attempts[0]
        .phases
        .iter()
        .find(|p| p.phase.to_string() == "work")
        .expect("the work phase");
    assert_eq!(phase.outcome, PhaseOutcome::Completed);
    assert!(phase.duration_ms.is_some_and(|ms| ms >= 1200), "{phase:?}");
    common::exit(run, &handle, ExitIntent::Halt).await;
}

fn checkpoint(attempt: u32, step: &str) -> Record {
    Record::Checkpoint {
        attempt: nz(attempt),
        step: step.into(),
        index: 2,
        resource: Res {
            kind: "file".into(),
            id: format!("{step}-{attempt}"),
            payload: vec![0; 64],
        },
    }
}

#[test]
fn the_journal_stays_bounded_and_keeps_what_a_resume_needs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let keep = 3;
    let mut sizes = Vec::new();
    {
        let control = ControlDir::open(tmp.path())
            .expect("open")
            .with_journal_keep(keep);
        let (mut journal, _, _) = control.open_journal().expect("journal");
        // A checkpoint no drain ever clears (attempt 1's, written ahead of
        // its start: an attempt counts from 1), then 200 attempts that each
        // checkpoint and clear a step of their own.
        journal.append(&[checkpoint(1, "prepare")]).expect("append");
        for attempt in 1..=200u32 {
            journal
                .append(&[
                    Record::AttemptStarted {
                        attempt: nz(attempt),
                        at_ms: u64::from(attempt),
                    },
                    checkpoint(attempt, "serve"),
                    Record::CheckpointCleared {
                        step: "serve".into(),
                    },
                ])
                .expect("append");
            if journal.wants_compaction() {
                journal.compact().expect("compacts");
            }
            sizes.push(journal.len());
        }
        assert!(!journal.is_poisoned());
    }
    // Uncompacted, 200 attempts would be some 30 times this; compacted, the
    // journal never holds more than 2 × keep + 1 attempts (the last one's
    // numbers are a varint byte or so longer than the early ones').
    let bound = 2 * sizes[2 * keep];
    assert!(
        sizes.iter().all(|s| *s <= bound),
        "the journal grew past its bound {bound}: {:?}",
        sizes.iter().max()
    );
    // A stale temp file from a compaction that died before its rename is
    // removed at open; the journal itself decodes cleanly.
    let control_path = ControlDir::under(tmp.path());
    std::fs::write(control_path.join(COMPACT_TMP_NAME), b"half a journal").expect("write");
    let control = ControlDir::open(tmp.path()).expect("reopen");
    assert!(!control_path.join(COMPACT_TMP_NAME).exists());
    let (_journal, records, _) = control.open_journal().expect("journal");
    assert!(
        attempts_in(&records) <= 2 * keep,
        "{}",
        attempts_in(&records)
    );
    let left = outstanding(&records);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].step, "prepare");
    assert_eq!(left[0].resource.id, "prepare-1");
    let last = records.last().expect("records");
    assert!(
        matches!(last, Record::CheckpointCleared { .. }),
        "the newest records are kept: {last:?}"
    );
}
