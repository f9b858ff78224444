//! The Replacement actor (`actors/src/replacement.rs`): one transaction at a
//! time, the upgrade lock held until the driver settled, the report
//! published step by step. Drivers here are scripted and gated by the test.

use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::Actor;
use steadfast_actors::clock::Clock;
use steadfast_actors::replace_runner::{AsyncDriver, StepFuture};
use steadfast_actors::replacement::{
    DriverError, ReplaceDriver, ReplaceJob, ReplaceRequest, ReplacementActor, ReplacementArgs,
    Request, SettleFuture, StopAnswer, upgrade_lock_path,
};
use steadfast_protocol::lifecycle::ExitIntent;
use steadfast_protocol::replacement::{
    Budgets, Failure, Mode, Outcome, Progress, ReasonKind, ReplaceRefusal, Report, Step, Stop,
    TransactionEnd,
};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

/// Answers done to everything except `fail_at`; waits for a permit at
/// `gate_at` and in `settle` (when `gate_settle`).
struct Gated {
    gate: Arc<Semaphore>,
    gate_at: Option<Step>,
    gate_settle: bool,
    fail_at: Option<Step>,
    /// Told of every settle (whether it saw a stop's abort) and forward.
    seen: Option<mpsc::UnboundedSender<String>>,
}

impl AsyncDriver for Gated {
    type Error = DriverError;
    fn perform(&mut self, step: Step, _deadline: Option<Instant>) -> StepFuture<'_, DriverError> {
        Box::pin(async move {
            if self.gate_at == Some(step) {
                let _permit = self.gate.acquire().await;
            }
            if self.fail_at == Some(step) {
                return Err(format!("scripted failure at {step}").into());
            }
            Ok(Progress::Done)
        })
    }
}

impl ReplaceDriver for Gated {
    fn settle<'a>(
        &'a mut self,
        result: &'a Result<Outcome, Failure<DriverError>>,
    ) -> SettleFuture<'a> {
        Box::pin(async move {
            if self.gate_settle {
                let _permit = self.gate.acquire().await;
            }
            if let Some(seen) = &self.seen {
                let how = match result {
                    Ok(_) => "settled committed".to_owned(),
                    Err(failure) => format!(
                        "settled {} at {} (committed: {})",
                        failure.reason.kind().name(),
                        failure.step,
                        failure.committed
                    ),
                };
                let _ = seen.send(how);
            }
        })
    }

    fn forward(&mut self, stop: Stop) -> SettleFuture<'_> {
        Box::pin(async move {
            if let Some(seen) = &self.seen {
                let _ = seen.send(format!("forwarded {stop:?}"));
            }
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    data_dir: std::path::PathBuf,
    requests: mpsc::UnboundedSender<ReplaceRequest>,
    reports: watch::Receiver<Option<Report>>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().to_path_buf();
    std::fs::create_dir_all(data_dir.join(".steadfast")).expect("control dir");
    let (requests, requests_rx) = mpsc::unbounded_channel();
    let (reports_tx, reports) = watch::channel(None);
    Actor::spawn(
        None,
        ReplacementActor,
        ReplacementArgs {
            data_dir: data_dir.clone(),
            clock: Clock::start(),
            reports: Arc::new(reports_tx),
            requests: requests_rx,
            metrics: Arc::new(steadfast_actors::metrics::Metrics::new()),
        },
    )
    .await
    .expect("spawn");
    Fixture {
        _dir: dir,
        data_dir,
        requests,
        reports,
    }
}

fn job(driver: Gated) -> ReplaceJob {
    ReplaceJob {
        mode: Mode::Overlap,
        budgets: Budgets {
            setup: Duration::from_secs(60),
            drain: None,
        },
        target: "candidate".into(),
        driver: Box::new(driver),
    }
}

async fn request(fx: &Fixture, driver: Gated) -> Result<Report, ReplaceRefusal> {
    let (tx, rx) = oneshot::channel();
    fx.requests
        .send(Box::new(Request::Replace(job(driver), tx.into())))
        .expect("send");
    rx.await.expect("answer")
}

/// Send a stop, and wait for its answer.
async fn stop(fx: &Fixture, stop: Stop) -> StopAnswer {
    let (tx, rx) = oneshot::channel();
    fx.requests
        .send(Box::new(Request::Stop(stop, tx.into())))
        .expect("send");
    tokio::time::timeout(Duration::from_secs(10), rx)
        .await
        .expect("answered in time")
        .expect("answer")
}

async fn ended(fx: &Fixture, serial: u64) -> Report {
    let mut reports = fx.reports.clone();
    let report = tokio::time::timeout(
        Duration::from_secs(10),
        reports.wait_for(|r| {
            r.as_ref()
                .is_some_and(|r| r.serial == serial && r.ended.is_some())
        }),
    )
    .await
    .expect("ended in time")
    .expect("reports");
    report.clone().expect("report")
}

fn gated(gate: &Arc<Semaphore>, at: Option<Step>, settle: bool) -> Gated {
    Gated {
        gate: Arc::clone(gate),
        gate_at: at,
        gate_settle: settle,
        fail_at: None,
        seen: None,
    }
}

#[tokio::test]
async fn a_second_replacement_is_refused_while_one_runs() {
    let fx = fixture().await;
    let gate = Arc::new(Semaphore::new(0));
    let first = request(&fx, gated(&gate, Some(Step::Verify), false))
        .await
        .expect("first starts");
    assert_eq!(first.serial, 1);
    assert_eq!(
        request(&fx, gated(&gate, None, false)).await,
        Err(ReplaceRefusal::InProgress)
    );
    gate.add_permits(1);
    let report = ended(&fx, 1).await;
    assert_eq!(
        report.ended,
        Some(TransactionEnd::Outcome(Outcome::Complete))
    );
    // Once it ended, the next one is accepted.
    let third = request(&fx, gated(&gate, None, false))
        .await
        .expect("third starts");
    assert_eq!(third.serial, 2);
    assert_eq!(
        ended(&fx, 2).await.ended,
        Some(TransactionEnd::Outcome(Outcome::Complete))
    );
}

#[tokio::test]
async fn another_process_holding_the_upgrade_lock_refuses() {
    let fx = fixture().await;
    let path = upgrade_lock_path(&fx.data_dir);
    std::fs::write(&path, b"").expect("lock file");
    // A real other process holds the lock: flock(1) until we kill it.
    // flock(1) and its `sleep` get a process group of their own, so the
    // whole holder (the sleep inherits the locked file) is ended together.
    let mut holder = std::process::Command::new("flock")
        .arg(&path)
        .args(["sleep", "60"])
        .process_group(0)
        .spawn()
        .expect("flock(1)");
    // Wait until it holds it (observed: our own try_lock fails).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let file = std::fs::File::open(&path).expect("open");
        match file.try_lock() {
            Ok(()) => drop(file),
            Err(_) => break,
        }
        assert!(Instant::now() < deadline, "flock(1) never took the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gate = Arc::new(Semaphore::new(0));
    match request(&fx, gated(&gate, None, false)).await {
        Err(ReplaceRefusal::Locked(p)) => assert_eq!(p, path.display().to_string()),
        other => panic!("expected locked, got {other:?}"),
    }
    let group = format!("-{}", holder.id());
    let killed = std::process::Command::new("kill")
        .args(["-KILL", "--", &group])
        .status()
        .expect("kill(1)");
    assert!(killed.success());
    holder.wait().expect("wait");
    // The sleep may outlive flock(1) by a moment: wait for the lock to free.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let file = std::fs::File::open(&path).expect("open");
        if file.try_lock().is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the holder never let go");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = request(&fx, gated(&gate, None, false))
        .await
        .expect("starts once the other holder is gone");
    assert_eq!(
        ended(&fx, report.serial).await.ended,
        Some(TransactionEnd::Outcome(Outcome::Complete))
    );
}

#[tokio::test]
async fn the_upgrade_lock_is_held_until_the_transaction_settles() {
    let fx = fixture().await;
    let gate = Arc::new(Semaphore::new(0));
    let report = request(&fx, gated(&gate, None, true))
        .await
        .expect("starts");
    // Every step is done, but settle waits on the gate: still locked, and
    // the report has no end yet.
    let mut reports = fx.reports.clone();
    reports
        .wait_for(|r| {
            r.as_ref().is_some_and(|r| {
                r.events
                    .iter()
                    .any(|e| e.step == Step::Retire && e.answer.is_some())
            })
        })
        .await
        .expect("reports");
    let path = upgrade_lock_path(&fx.data_dir);
    let probe = std::fs::File::open(&path).expect("open");
    assert!(probe.try_lock().is_err(), "held while settling");
    assert_eq!(
        fx.reports.borrow().as_ref().and_then(|r| r.ended.clone()),
        None
    );
    gate.add_permits(1);
    ended(&fx, report.serial).await;
    // The task drops the lock right after publishing the end.
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe.try_lock().is_err() {
        assert!(
            Instant::now() < deadline,
            "the upgrade lock was never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_report_follows_every_step() {
    let fx = fixture().await;
    let gate = Arc::new(Semaphore::new(0));
    let mut driver = gated(&gate, None, false);
    driver.fail_at = Some(Step::Validate);
    let report = request(&fx, driver).await.expect("starts");
    let report = ended(&fx, report.serial).await;
    let asked: Vec<Step> = report
        .events
        .iter()
        .filter(|e| e.answer.is_none())
        .map(|e| e.step)
        .collect();
    assert_eq!(
        asked,
        [
            Step::Recheck,
            Step::Prepare,
            Step::Start,
            Step::Verify,
            Step::Validate
        ]
    );
    assert_eq!(
        report.ended,
        Some(TransactionEnd::Failed {
            step: Step::Validate,
            committed: false,
            reason: ReasonKind::Adapter,
            message: "scripted failure at validate".into(),
        })
    );
    // seq grew with every change: start, 9 events, the end.
    assert_eq!(report.seq, 1 + 9 + 1);
}

#[tokio::test]
async fn a_zero_setup_budget_is_invalid() {
    let fx = fixture().await;
    let gate = Arc::new(Semaphore::new(0));
    let (tx, rx) = oneshot::channel();
    let mut job = job(gated(&gate, None, false));
    job.budgets.setup = Duration::ZERO;
    fx.requests
        .send(Box::new(Request::Replace(job, tx.into())))
        .expect("send");
    assert!(matches!(
        rx.await.expect("answer"),
        Err(ReplaceRefusal::Invalid(_))
    ));
}

/// `protocol/src/replacement.rs`, "A stop during a replace": a stop while
/// the candidate is verified (the step held by the gate) aborts the
/// transaction — it ends `failed` at verify, `stopped`, uncommitted — and
/// is answered `carry_out` only once the driver settled (rolled back); a
/// stop with no transaction running is carried out at once; after it, no
/// replacement starts.
#[tokio::test]
async fn a_stop_before_commit_aborts_and_is_carried_out_here() {
    let fx = fixture().await;
    assert_eq!(stop(&fx, Stop::Signal).await, StopAnswer::CarryOut);
    let fx = fixture().await;
    let (gate, mut seen) = held_at(&fx, Step::Verify).await;
    let answer = stop(&fx, Stop::Exit(ExitIntent::Halt)).await;
    assert_eq!(answer, StopAnswer::CarryOut);
    // Answered after the settle, never before.
    assert_eq!(
        seen.try_recv().ok().as_deref(),
        Some("settled stopped at verify (committed: false)")
    );
    let report = ended(&fx, 1).await;
    assert!(matches!(
        report.ended,
        Some(TransactionEnd::Failed {
            step: Step::Verify,
            committed: false,
            reason: ReasonKind::Stopped,
            ..
        })
    ));
    assert_eq!(
        request(&fx, gated(&gate, None, false)).await,
        Err(ReplaceRefusal::Unavailable)
    );
}

/// A transaction started with a driver held by its gate at `step`, once
/// `step` was asked: the gate (a permit lets the step end) and what the
/// driver saw.
async fn held_at(fx: &Fixture, step: Step) -> (Arc<Semaphore>, mpsc::UnboundedReceiver<String>) {
    let gate = Arc::new(Semaphore::new(0));
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let mut driver = gated(&gate, Some(step), false);
    driver.seen = Some(seen_tx);
    request(fx, driver).await.expect("started");
    let mut reports = fx.reports.clone();
    reports
        .wait_for(|r| {
            r.as_ref()
                .is_some_and(|r| r.events.last().is_some_and(|e| e.step == step))
        })
        .await
        .expect("the step asked");
    (gate, seen)
}

/// A stop while the incumbent retires (after commit, the step held by the
/// gate) lets the transaction complete and is forwarded to the successor
/// (the driver's `forward`), after the settle; so is any later stop.
#[tokio::test]
async fn a_stop_after_commit_is_forwarded() {
    let fx = fixture().await;
    let (gate, mut seen) = held_at(&fx, Step::Retire).await;
    let stopping = tokio::spawn({
        let requests = fx.requests.clone();
        async move {
            let (tx, rx) = oneshot::channel();
            requests
                .send(Box::new(Request::Stop(Stop::Signal, tx.into())))
                .expect("send");
            rx.await.expect("answer")
        }
    });
    // The stop waits for the transaction; then the gate lets retire end.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !stopping.is_finished(),
        "answered before the transaction ended"
    );
    gate.add_permits(1);
    assert_eq!(stopping.await.expect("join"), StopAnswer::Forwarded);
    assert_eq!(seen.recv().await.as_deref(), Some("settled committed"));
    assert_eq!(seen.recv().await.as_deref(), Some("forwarded Signal"));
    let report = ended(&fx, 1).await;
    assert_eq!(
        report.ended,
        Some(TransactionEnd::Outcome(Outcome::Complete))
    );
    // A later stop is forwarded too.
    assert_eq!(
        stop(&fx, Stop::Exit(ExitIntent::Relaunch)).await,
        StopAnswer::Forwarded
    );
    assert_eq!(
        seen.recv().await.as_deref(),
        Some("forwarded Exit(Relaunch)")
    );
}
