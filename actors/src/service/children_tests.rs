//! The Children actor carrying out its machine's decisions over real tokio
//! tasks and ractor actors, in a bare runtime (no supervisor). These tests
//! live under `service` because they start the children through a
//! [`Runtime`], which uses `children`: from `children` they would make an
//! import circle.

use std::sync::Arc;
use std::sync::Mutex as StdMutex;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use steadfast_protocol::children::{ChildExit, ChildOp, ChildState};

use crate::children::*;
use crate::service::Runtime;

/// Who started and stopped, in order.
#[derive(Clone, Default)]
struct Trace(Arc<StdMutex<Vec<String>>>);

impl Trace {
    fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A task child that logs its start and its stop, and panics when told
/// to through `fail` (once per incarnation that sees it set).
fn worker(name: &str, trace: &Trace, fail: &Arc<tokio::sync::Notify>) -> Child {
    let trace = trace.clone();
    let fail = Arc::clone(fail);
    Child::task(name, move |cx| {
        let trace = trace.clone();
        let fail = Arc::clone(&fail);
        async move {
            trace.push(format!("start {}#{}", cx.name(), cx.incarnation()));
            tokio::select! {
                () = cx.shutdown().cancelled() => {
                    trace.push(format!("stop {}#{}", cx.name(), cx.incarnation()));
                    Ok(())
                }
                () = fail.notified() => panic!("{} failed", cx.name()),
            }
        }
    })
}

async fn until(mut check: impl FnMut() -> bool) {
    for _ in 0..2_000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the condition never held");
}

fn state_of(runtime: &Runtime, name: &str) -> (ChildState, u32, u64) {
    let view = runtime
        .children()
        .into_iter()
        .find(|v| v.name == name)
        .expect("the child is listed");
    (view.state, view.incarnation, view.restarts_total)
}

#[tokio::test]
async fn a_transient_child_that_returns_is_not_restarted_and_the_runtime_runs_on() {
    let mut runtime = Runtime::new();
    let mut ended = runtime.take_ended().unwrap();
    runtime
        .supervise(
            Children::one_for_one()
                .child(Child::task("once", |_| async { Ok(()) }).restart(Restart::Transient)),
        )
        .await
        .unwrap();
    until(|| state_of(&runtime, "once").0 == ChildState::Ended(ChildExit::Normal)).await;
    assert_eq!(state_of(&runtime, "once").1, 1);
    assert!(ended.try_recv().is_err(), "the runtime did not end");
    assert!(
        runtime
            .shutdown_tasks(Duration::from_secs(1))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn one_for_one_restarts_the_panicking_child_alone() {
    let trace = Trace::default();
    let fail_a = Arc::new(tokio::sync::Notify::new());
    let fail_b = Arc::new(tokio::sync::Notify::new());
    let mut runtime = Runtime::new();
    runtime
        .supervise(
            Children::one_for_one()
                .intensity(5, Duration::from_secs(60))
                .child(worker("a", &trace, &fail_a))
                .child(worker("b", &trace, &fail_b).restart(Restart::Transient)),
        )
        .await
        .unwrap();
    until(|| trace.lines().len() == 2).await;
    fail_b.notify_one();
    until(|| state_of(&runtime, "b").1 == 2).await;
    until(|| trace.lines().contains(&"start b#2".to_owned())).await;
    assert_eq!(state_of(&runtime, "a"), (ChildState::Running, 1, 0));
    assert_eq!(state_of(&runtime, "b"), (ChildState::Running, 2, 1));
    assert!(!trace.lines().iter().any(|l| l.starts_with("stop a")));
    runtime.shutdown_tasks(Duration::from_secs(1)).await;
    // Stopped last declared first.
    let lines = trace.lines();
    assert_eq!(&lines[lines.len() - 2..], ["stop b#2", "stop a#1"]);
}

#[tokio::test]
async fn a_temporary_child_that_panics_is_never_restarted_even_under_one_for_all() {
    let trace = Trace::default();
    let fail = Arc::new(tokio::sync::Notify::new());
    let never = Arc::new(tokio::sync::Notify::new());
    let mut runtime = Runtime::new();
    runtime
        .supervise(
            Children::one_for_all()
                .child(worker("keeper", &trace, &never))
                .child(worker("temp", &trace, &fail).restart(Restart::Temporary)),
        )
        .await
        .unwrap();
    until(|| trace.lines().len() == 2).await;
    fail.notify_one();
    until(|| {
        matches!(
            state_of(&runtime, "temp").0,
            ChildState::Ended(ChildExit::Panicked(_))
        )
    })
    .await;
    assert_eq!(state_of(&runtime, "keeper"), (ChildState::Running, 1, 0));
    assert_eq!(state_of(&runtime, "temp").1, 1);
}

#[tokio::test]
async fn one_for_all_stops_in_reverse_and_starts_in_order_rest_for_one_spares_earlier() {
    for (children, failing, expect) in [
        (
            Children::one_for_all(),
            1,
            vec![
                "stop c#1",
                "stop a#1",
                "start a#2",
                "start b#2",
                "start c#2",
            ],
        ),
        (
            Children::rest_for_one(),
            1,
            vec!["stop c#1", "start b#2", "start c#2"],
        ),
    ] {
        let trace = Trace::default();
        let fails: Vec<_> = (0..3)
            .map(|_| Arc::new(tokio::sync::Notify::new()))
            .collect();
        let mut runtime = Runtime::new();
        let group = ["a", "b", "c"].iter().zip(&fails).fold(
            children.intensity(5, Duration::from_secs(60)),
            |g, (n, f)| g.child(worker(n, &trace, f)),
        );
        runtime.supervise(group).await.unwrap();
        until(|| trace.lines().len() == 3).await;
        fails[failing].notify_one();
        until(|| trace.lines().len() == 3 + expect.len()).await;
        assert_eq!(trace.lines()[3..], expect[..]);
        runtime.shutdown_tasks(Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn the_restart_past_the_intensity_ends_the_runtime_naming_the_child() {
    let mut runtime = Runtime::new();
    let mut ended = runtime.take_ended().unwrap();
    runtime
        .supervise(
            Children::one_for_one()
                .intensity(2, Duration::from_secs(60))
                .child(Child::task("flaky", |_| async {
                    Err("disk full".to_owned())
                })),
        )
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), ended.recv())
        .await
        .expect("the runtime ends")
        .expect("an end");
    assert!(end.child);
    assert_eq!(
        end.to_string(),
        "the runtime ended: 3 restarts within 60 s, one more than the group allows: child flaky failed: disk full"
    );
    assert_eq!(state_of(&runtime, "flaky").2, 2);
}

#[tokio::test]
async fn a_factory_that_fails_every_start_melts_down_instead_of_looping() {
    let mut runtime = Runtime::new();
    let mut ended = runtime.take_ended().unwrap();
    let handle: Handle<ActorRef<()>> = Handle::new();
    runtime
        .supervise(
            Children::one_for_one()
                .intensity(3, Duration::from_secs(60))
                .child(Child::actor("never", &handle, || -> (Refuses, ()) {
                    (Refuses, ())
                })),
        )
        .await
        .unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), ended.recv())
        .await
        .expect("the runtime ends")
        .expect("an end");
    assert!(end.error.contains("4 restarts within 60 s"), "{end}");
    assert!(end.error.contains("could not start"), "{end}");
}

struct Refuses;

impl Actor for Refuses {
    type Msg = ();
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<()>, (): ()) -> Result<(), ActorProcessingErr> {
        Err("no config".into())
    }
}

/// An actor that answers its incarnation's number, and panics on `Boom`.
struct Counter(u32);

enum CounterMsg {
    Who(ractor::RpcReplyPort<u32>),
    Boom,
}

impl Actor for Counter {
    type Msg = CounterMsg;
    type State = u32;
    type Arguments = u32;
    async fn pre_start(&self, _: ActorRef<CounterMsg>, n: u32) -> Result<u32, ActorProcessingErr> {
        Ok(n)
    }
    async fn handle(
        &self,
        _: ActorRef<CounterMsg>,
        message: CounterMsg,
        state: &mut u32,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CounterMsg::Who(reply) => {
                let _ = reply.send(*state + self.0);
            }
            CounterMsg::Boom => panic!("boom"),
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_ractor_child_that_panics_is_back_and_the_handle_reaches_it() {
    let handle: Handle<ActorRef<CounterMsg>> = Handle::new();
    let made = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut runtime = Runtime::new();
    let counter = Arc::clone(&made);
    runtime
        .supervise(
            Children::one_for_one().child(Child::actor("counter", &handle, move || {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                (Counter(0), n)
            })),
        )
        .await
        .unwrap();
    let given_out = handle.clone();
    let who = |h: Handle<ActorRef<CounterMsg>>| async move {
        ractor::call!(h.get().unwrap(), CounterMsg::Who).unwrap()
    };
    assert_eq!(who(given_out.clone()).await, 1);
    given_out.cast(CounterMsg::Boom).unwrap();
    until(|| state_of(&runtime, "counter").1 == 2).await;
    assert_eq!(
        who(given_out.clone()).await,
        2,
        "the handle reaches incarnation 2"
    );
    assert_eq!(state_of(&runtime, "counter").0, ChildState::Running);
    runtime.shutdown_tasks(Duration::from_secs(1)).await;
    until(|| given_out.cast(CounterMsg::Boom).is_err()).await;
}

#[tokio::test]
async fn a_child_that_ignores_its_shutdown_is_aborted_at_its_timeout_and_named() {
    let mut runtime = Runtime::new();
    runtime
        .supervise(
            Children::one_for_one()
                .child(Child::task("polite", |cx| async move {
                    cx.shutdown().cancelled().await;
                    Ok(())
                }))
                .child(
                    Child::task("stubborn", |_| std::future::pending())
                        .shutdown(Duration::from_millis(50)),
                ),
        )
        .await
        .unwrap();
    let aborted = runtime.shutdown_tasks(Duration::from_secs(30)).await;
    assert_eq!(aborted, ["stubborn"]);
}

#[tokio::test]
async fn an_operator_restarts_one_child_and_nothing_else() {
    let trace = Trace::default();
    let never = Arc::new(tokio::sync::Notify::new());
    let mut runtime = Runtime::new();
    runtime
        .supervise(
            Children::one_for_all()
                .child(worker("a", &trace, &never))
                .child(worker("b", &trace, &never)),
        )
        .await
        .unwrap();
    until(|| trace.lines().len() == 2).await;
    let view = runtime.operate_child("a", ChildOp::Restart).await.unwrap();
    assert_eq!((view.state, view.incarnation), (ChildState::Running, 2));
    until(|| trace.lines().len() == 4).await;
    assert_eq!(trace.lines()[2..], ["stop a#1", "start a#2"]);
    assert!(matches!(
        runtime.operate_child("a", ChildOp::Start).await,
        Err(ChildOpError::Refused { .. })
    ));
    assert!(matches!(
        runtime.operate_child("zed", ChildOp::Stop).await,
        Err(ChildOpError::Unknown(_))
    ));
    runtime.operate_child("b", ChildOp::Stop).await.unwrap();
    assert_eq!(state_of(&runtime, "b").0, ChildState::Stopped);
    runtime.operate_child("b", ChildOp::Start).await.unwrap();
    assert_eq!(state_of(&runtime, "b"), (ChildState::Running, 2, 1));
}

#[tokio::test]
async fn names_are_unique_in_the_runtime_and_printable() {
    let mut runtime = Runtime::new();
    runtime
        .supervise(Children::one_for_one().child(Child::task("w", |_| std::future::pending())))
        .await
        .unwrap();
    assert_eq!(
        runtime
            .supervise(Children::one_for_one().child(Child::task("w", |_| std::future::pending())))
            .await,
        Err(ChildrenError::Spec(SpecError::DuplicateName("w".into())))
    );
    let bad = runtime
        .supervise(Children::one_for_one().child(Child::task("x\ny", |_| std::future::pending())))
        .await
        .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "invalid children: child name \"x\\ny\" holds a control character or whitespace"
    );
}
