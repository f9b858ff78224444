//! Supervised children: what one restart costs beside a bare spawn, beside
//! restarting the whole runtime, and what a runtime with 1,000 children
//! costs.
//!
//! Group `restart`, measured in one run:
//! - `bare_task_spawn`: `tokio::spawn` a task that says it started, and
//!   wait for that: the floor a task child's restart is held to.
//! - `task_child_restart`: a permanent task child of a one_for_one group
//!   fails (returns an error when told), and the time until its next
//!   incarnation says it started: the group's actor hears of the end, asks
//!   the pure machine, starts the factory's new future, writes nothing
//!   (a bare runtime has no journal). Goal: ≤ 2× `bare_task_spawn`.
//! - `bare_actor_spawn`: `Actor::spawn` of a ractor actor and its
//!   `pre_start`, then its stop: the floor of an actor child's restart.
//! - `actor_child_restart`: that actor as a child; it panics on a message,
//!   and the time until the handle reaches its next incarnation (its
//!   `pre_start` done). Goal: ≤ 2× `bare_actor_spawn`.
//! - `ractor_respawn`: the same panic, restarted by a hand-written ractor
//!   supervisor that spawns a new one linked on `ActorFailed`: what ractor
//!   alone costs for the same restart (the panic, its unwinding and the
//!   supervision event included), so `actor_child_restart ÷
//!   ractor_respawn` is what the group adds.
//! - `runtime_restart`: a supervisor's `restart` of a one-step runtime
//!   until it runs again (drain, journal, boot): what restarting the
//!   runtime instead of the child would cost.
//!
//! `thousand_children` (printed, not a criterion group): a runtime starts
//! one group of 1,000 task children and stops it; the time to start them
//! all, to stop them all (last first), and the heap per running child.
//!
//! Run: `cargo bench --bench children`.
#![allow(clippy::disallowed_methods)] // a benchmark times real work

use std::sync::Arc;
use std::time::{Duration, Instant};

mod support;

use criterion::{Criterion, criterion_group, criterion_main};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use steadfast::Runtime;
use steadfast::children::{Child, Children, Handle};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::{Supervisor, SupervisorHandle};
use support::{Noop, empty_source};
use tokio::sync::{Notify, mpsc};

/// An actor that tells `started` when its `pre_start` ran, and panics on
/// any message.
struct Brittle;

impl Actor for Brittle {
    type Msg = ();
    type State = ();
    type Arguments = mpsc::UnboundedSender<()>;
    async fn pre_start(
        &self,
        _: ActorRef<()>,
        started: mpsc::UnboundedSender<()>,
    ) -> Result<(), ActorProcessingErr> {
        let _ = started.send(());
        Ok(())
    }
    async fn handle(&self, _: ActorRef<()>, (): (), (): &mut ()) -> Result<(), ActorProcessingErr> {
        panic!("told to fail")
    }
}

/// A hand-written ractor supervisor: on its child's failure it spawns a
/// new one, linked, and hands it out.
struct Respawner;

struct RespawnerState {
    started: mpsc::UnboundedSender<()>,
    current: std::sync::Arc<std::sync::Mutex<Option<ActorRef<()>>>>,
}

impl Actor for Respawner {
    type Msg = ();
    type State = RespawnerState;
    type Arguments = RespawnerState;
    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        state: RespawnerState,
    ) -> Result<RespawnerState, ActorProcessingErr> {
        let (child, _) =
            Actor::spawn_linked(None, Brittle, state.started.clone(), myself.get_cell()).await?;
        *state.current.lock().expect("lock") = Some(child);
        Ok(state)
    }
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: ractor::SupervisionEvent,
        state: &mut RespawnerState,
    ) -> Result<(), ActorProcessingErr> {
        if let ractor::SupervisionEvent::ActorFailed(..) = event {
            let (child, _) =
                Actor::spawn_linked(None, Brittle, state.started.clone(), myself.get_cell())
                    .await?;
            *state.current.lock().expect("lock") = Some(child);
        }
        Ok(())
    }
}

/// Enough restarts within a millisecond that a benchmark never melts down.
fn tireless() -> Children {
    Children::one_for_one().intensity(u32::MAX, Duration::from_millis(1))
}

/// `iters` runs of `one`, on `rt`, timed together.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, mut one: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            one().await;
        }
        start.elapsed()
    })
}

async fn running(handle: &SupervisorHandle) {
    let mut rx = handle.watch();
    loop {
        if matches!(
            rx.borrow_and_update().lifecycle,
            LifecycleState::Running { .. }
        ) {
            return;
        }
        rx.changed().await.expect("alive");
    }
}

#[path = "support/counting.rs"]
mod counting;

fn bench(c: &mut Criterion) {
    support::mark_start();
    // The actor child panics on purpose each iteration: printing each
    // panic (with its backtrace) is not what is measured.
    std::panic::set_hook(Box::new(|_| {}));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("restart");

    group.bench_function("bare_task_spawn", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let (tx, mut rx) = mpsc::unbounded_channel::<()>();
                tokio::spawn(async move {
                    let _ = tx.send(());
                });
                rx.recv().await.expect("started");
            })
        });
    });

    // A task child that says it started, then fails when told.
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let fail = Arc::new(Notify::new());
    let mut runtime = rt.block_on(async {
        let mut runtime = Runtime::new();
        let fail = Arc::clone(&fail);
        runtime
            .supervise(tireless().child(Child::task("worker", move |_| {
                let (started, fail) = (started_tx.clone(), Arc::clone(&fail));
                async move {
                    let _ = started.send(());
                    fail.notified().await;
                    Err("told to fail".to_owned())
                }
            })))
            .await
            .expect("supervise");
        started.recv().await.expect("first start");
        runtime
    });
    group.bench_function("task_child_restart", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    fail.notify_one();
                    started.recv().await.expect("restarted");
                }
                start.elapsed()
            })
        });
    });

    group.bench_function("bare_actor_spawn", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                let (tx, mut rx) = mpsc::unbounded_channel();
                let (actor, join) = Actor::spawn(None, Brittle, tx).await.expect("spawn");
                rx.recv().await.expect("started");
                actor.stop(None);
                let _ = join.await;
            })
        });
    });

    let (actor_started_tx, mut actor_started) = mpsc::unbounded_channel::<()>();
    let handle: Handle<ActorRef<()>> = Handle::new();
    rt.block_on(async {
        runtime
            .supervise(tireless().child(Child::actor("brittle", &handle, move || {
                (Brittle, actor_started_tx.clone())
            })))
            .await
            .expect("supervise");
        actor_started.recv().await.expect("first start");
    });
    group.bench_function("actor_child_restart", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let old = handle.get().expect("running").get_id();
                    handle.cast(()).expect("running");
                    actor_started.recv().await.expect("restarted");
                    // Until the handle reaches the new incarnation.
                    while handle.get().expect("set").get_id() == old {
                        tokio::task::yield_now().await;
                    }
                }
                start.elapsed()
            })
        });
    });

    let (respawned_tx, mut respawned) = mpsc::unbounded_channel::<()>();
    let current = Arc::new(std::sync::Mutex::new(None::<ActorRef<()>>));
    let respawner = rt.block_on(async {
        let (respawner, _) = Actor::spawn(
            None,
            Respawner,
            RespawnerState {
                started: respawned_tx,
                current: Arc::clone(&current),
            },
        )
        .await
        .expect("spawn");
        respawned.recv().await.expect("first start");
        respawner
    });
    let child_id = || {
        current
            .lock()
            .expect("lock")
            .as_ref()
            .map(|a: &ActorRef<()>| a.get_id())
    };
    group.bench_function("ractor_respawn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let old = child_id();
                    let child = current.lock().expect("lock").clone().expect("running");
                    child.cast(()).expect("running");
                    respawned.recv().await.expect("restarted");
                    while child_id() == old {
                        tokio::task::yield_now().await;
                    }
                }
                start.elapsed()
            })
        });
    });
    respawner.stop(None);

    let tmp = tempfile::tempdir().expect("tempdir");
    let (supervisor_handle, _run) = rt.block_on(async {
        let (supervisor, handle) = Supervisor::builder(tmp.path().join("data"), Noop)
            .config(empty_source())
            .build()
            .expect("new");
        let run = tokio::spawn(supervisor.run());
        running(&handle).await;
        (handle, run)
    });
    group.bench_function("runtime_restart", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                supervisor_handle.restart().await.expect("restart");
                running(&supervisor_handle).await;
            })
        });
    });
    group.finish();
    rt.block_on(runtime.shutdown_tasks(Duration::from_secs(5)));
    support::print_ratios(
        "restart",
        &[
            ("task_child_restart", "bare_task_spawn"),
            ("actor_child_restart", "bare_actor_spawn"),
            ("actor_child_restart", "ractor_respawn"),
            ("runtime_restart", "task_child_restart"),
        ],
    );

    thousand_children(&rt);
}

/// 1,000 task children in one group: start, heap per child, stop.
fn thousand_children(rt: &tokio::runtime::Runtime) {
    const CHILDREN: usize = 1_000;
    for round in 1..=3 {
        rt.block_on(async {
            let before = counting::live();
            let mut runtime = Runtime::new();
            let group = (0..CHILDREN).fold(Children::one_for_one(), |group, i| {
                group.child(Child::task(&format!("w{i}"), |cx| async move {
                    cx.shutdown().cancelled().await;
                    Ok(())
                }))
            });
            let start = Instant::now();
            runtime.supervise(group).await.expect("supervise");
            let started = start.elapsed();
            let heap = counting::live().saturating_sub(before);
            let stop = Instant::now();
            let aborted = runtime.shutdown_tasks(Duration::from_secs(30)).await;
            let stopped = stop.elapsed();
            assert!(aborted.is_empty());
            eprintln!(
                "thousand_children round {round}: start {:.2} ms, stop {:.2} ms, heap {:.0} B a child",
                started.as_secs_f64() * 1e3,
                stopped.as_secs_f64() * 1e3,
                heap as f64 / CHILDREN as f64,
            );
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
