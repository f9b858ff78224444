//! Time per event through `lifecycle::step` (and `Lifecycle::ready`, the
//! same step with what the shell does for it) over a realistic mixed sequence:
//! boots with their phases, a failure and its backoff retry, config changes
//! applied in place, a runtime that ends, stop/start and restart, and the
//! refusals an operator's stray commands meet. Report: the median of
//! `mixed_sequence` (or `ready_sequence`) divided by `EVENTS_PER_ROUND` (criterion prints the
//! per-element rate too, from the declared throughput).
//!
//! Run: `cargo bench -p steadfast-protocol --bench lifecycle`.

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use steadfast_protocol::Timestamp;
use steadfast_protocol::lifecycle::{
    FailureClass, FailureReport, Lifecycle, LifecycleEvent as E, Origin, PendingApply, Phase,
    StoreOutcome,
};

/// One round of a daemon's life, in events; every round starts and ends in
/// `stopped`, so rounds chain. Attempt-bound events are filled in as the
/// round runs.
fn round(now: u64) -> Vec<Template> {
    use Template::*;
    let at = |d: u64| Timestamp(now + d);
    vec![
        Plain(E::Start { at: at(0) }),
        Plain(E::Phase {
            phase: Phase::new("open_store"),
            at: at(1),
        }),
        Plain(E::Phase {
            phase: Phase::new("replay_log"),
            at: at(2),
        }),
        Plain(E::BootFailed {
            report: FailureReport {
                phase: Phase::new("bind_listener"),
                error: "address in use".into(),
                at: at(3),
            },
            class: FailureClass::Backoff,
            store: StoreOutcome::Released,
        }),
        Plain(E::Start { at: at(4) }), // refused: runtime_not_stopped
        Plain(E::RetryDue { at: at(1_003) }),
        Plain(E::Phase {
            phase: Phase::new("open_store"),
            at: at(1_004),
        }),
        Plain(E::Phase {
            phase: Phase::new("bind_listener"),
            at: at(1_005),
        }),
        Plain(E::Booted { at: at(1_006) }),
        Stable(at(31_006)),
        Plain(E::ConfigChanged { at: at(31_007) }),
        Plain(E::ConfigApplied {
            pending: PendingApply::RestartNeeded {
                leaves: vec!["listen_addr".into()],
            },
        }),
        Plain(E::Start { at: at(31_008) }), // refused: runtime_running
        Plain(E::Restart {
            at: at(31_009),
            preflight: steadfast_protocol::lifecycle::Preflight::Ok,
        }),
        Plain(E::Drained {
            at: at(31_010),
            store: StoreOutcome::Released,
        }),
        Plain(E::Phase {
            phase: Phase::new("open_store"),
            at: at(31_011),
        }),
        Plain(E::Booted { at: at(31_012) }),
        Ended(at(31_013)),
        Plain(E::Drained {
            at: at(31_014),
            store: StoreOutcome::Released,
        }),
        Plain(E::RetryDue { at: at(32_014) }),
        Plain(E::Booted { at: at(32_015) }),
        Plain(E::Stop { at: at(32_016) }),
        Plain(E::Stop { at: at(32_017) }), // refused: lifecycle_busy
        Plain(E::Drained {
            at: at(32_018),
            store: StoreOutcome::Released,
        }),
    ]
}

enum Template {
    Plain(E),
    Stable(Timestamp),
    Ended(Timestamp),
}

const EVENTS_PER_ROUND: u64 = 24;

fn events_for(m: &Lifecycle, t: &Template) -> E {
    let attempt = NonZeroU32::new(m.attempts().max(1)).expect("nonzero");
    match t {
        Template::Plain(e) => e.clone(),
        Template::Stable(at) => E::Stable { attempt, at: *at },
        Template::Ended(at) => E::RuntimeEnded {
            attempt,
            at: *at,
            error: "serve task ended".into(),
        },
    }
}

fn bench(c: &mut Criterion) {
    let templates = round(0);
    assert_eq!(templates.len() as u64, EVENTS_PER_ROUND);
    // Resolve the attempt-bound events once, outside the timed loop, by
    // walking the round from its starting state.
    let mut start = Lifecycle::at(Timestamp(0));
    start = start.step(&E::Start { at: Timestamp(0) }).expect("start").0;
    start = start.step(&E::Stop { at: Timestamp(0) }).expect("stop").0;
    start = start
        .step(&E::Drained {
            at: Timestamp(0),
            store: StoreOutcome::Released,
        })
        .expect("drained")
        .0;
    let mut events = Vec::new();
    let mut m = start.clone();
    let mut refused = 0;
    for t in &templates {
        let e = events_for(&m, t);
        match m.step(&e) {
            Ok((next, _, _)) => m = next,
            Err(_) => refused += 1,
        }
        events.push(e);
    }
    assert_eq!(refused, 3, "the round meets three refusals");
    assert_eq!(m.state.name(), "stopped", "rounds chain");

    let mut group = c.benchmark_group("lifecycle");
    group.throughput(Throughput::Elements(EVENTS_PER_ROUND));
    group.bench_function("mixed_sequence", |b| {
        b.iter(|| {
            let mut m = start.clone();
            for e in &events {
                if let Ok((next, effect, _)) = black_box(&m).step(black_box(e)) {
                    black_box(effect);
                    m = next;
                }
            }
            m
        });
    });
    // The same sequence through `ready`: the step plus what the shell does
    // for it (records, journaling, reply, publish, entered, settled).
    group.bench_function("ready_sequence", |b| {
        b.iter(|| {
            let mut m = start.clone();
            for e in &events {
                if let Ok(ready) = black_box(&m).ready(black_box(e), Origin::Fact) {
                    black_box((ready.effect, ready.records, ready.journaling));
                    m = ready.next;
                }
            }
            m
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
