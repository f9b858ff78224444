//! Backoff and the stable period under tokio's paused time: the whole tree
//! runs on a virtual clock (`protocol/spec/lifecycle.md`, "Backoff"; invariant 8), so
//! seconds of backoff and a 30-second stable period pass without sleeping
//! real seconds, and every retry starts exactly when the machine said it
//! would. File I/O runs on blocking threads, which hold the virtual clock
//! still while they work.

mod common;

use std::time::Duration;

use common::*;
use steadfast::{ExitIntent, LifecycleState, RetryClass, Snapshot};

fn failed_attempt(s: &Snapshot, attempt: u32) -> bool {
    matches!(&s.lifecycle, LifecycleState::Failed { attempt: a, .. } if a.get() == attempt)
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_and_the_streak_resets_after_the_stable_period_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let (run, handle) = supervise(
        tmp.path(),
        Switch::new(Some(config(&format!("listen_addr = \"{addr}\"")))).source(),
        None,
    );

    let mut delays = Vec::new();
    for attempt in 1..=3 {
        let failure = until(&handle, "a failed bind", |s| failed_attempt(s, attempt)).await;
        let LifecycleState::Failed { report, retry, .. } = &failure.lifecycle else {
            unreachable!()
        };
        let RetryClass::Backoff {
            next_retry_at,
            delay_ms,
        } = retry
        else {
            panic!("{retry:?}")
        };
        assert_eq!(
            next_retry_at.since(report.at),
            Duration::from_millis(*delay_ms)
        );
        assert_eq!(failure.streak, attempt);
        delays.push(*delay_ms);
        if attempt == 3 {
            drop(squatter);
            break;
        }
        // The next attempt starts when the backoff says, to the millisecond
        // (the timer is set one millisecond past `next_retry_at`).
        let next = until(&handle, "the retry", |s| {
            s.attempts.len() > attempt as usize
        })
        .await;
        let started = next.attempts[attempt as usize].started_at;
        assert_eq!(
            started.since(*next_retry_at),
            Duration::from_millis(1),
            "retried on time"
        );
    }
    assert_eq!(delays, [1_000, 2_000, 4_000]);

    let up = until(&handle, "running once the port frees", running).await;
    assert_eq!(up.streak, 3, "reaching running does not reset the streak");
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(handle.snapshot().streak, 3, "not yet stable");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stable = until(&handle, "the stable period", |s| s.streak == 0).await;
    assert!(running(&stable));
    exit(run, &handle, ExitIntent::Halt).await;
}
