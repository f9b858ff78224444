//! Calling the daemons: every call under the fleet's deadline or its own
//! `--timeout`, at most `--parallel` at once, each answer or failure kept
//! in inventory order.

use std::sync::Arc;
use std::time::Duration;

use steadfast::Hold;
use steadfast::control::{ClientError, ControlClient};
use steadfast::protocol::control::{ReadVisitor, Reads, Registered, cmd};
use steadfast::protocol::snapshot::Snapshot;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::out::errln;

use super::inventory::{Entry, Target, endpoint_of};
use super::{Answer, Ask, Failure, one_line};

/// Call every chosen daemon, at most `parallel` at once: a query under one
/// deadline `timeout` from now, a command with `timeout` for each call.
/// The replies in the entries' order.
pub(super) async fn call_all(
    entries: &[Entry],
    ask: &Ask,
    timeout: Duration,
    parallel: usize,
) -> Vec<Result<Answer, Failure>> {
    let deadline = Instant::now() + timeout;
    let permits = Arc::new(Semaphore::new(parallel));
    let mut calls = JoinSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let target = entry.target.clone();
        let permits = Arc::clone(&permits);
        let ask = ask.clone();
        calls.spawn(async move {
            let reply = if ask.is_command() {
                // A command waits its turn, then has its own `timeout`.
                match permits.acquire_owned().await {
                    Ok(_permit) => {
                        let waits = ask.waits();
                        match tokio::time::timeout(timeout, call(&target, ask, timeout)).await {
                            Ok(reply) => reply,
                            Err(_) => Err(Failure::Deadline(format!(
                                "no answer within {} s{} (a command the daemon took goes on; \
                                 `status` says where it is)",
                                timeout.as_secs_f64(),
                                if waits {
                                    ", or its boot did not settle"
                                } else {
                                    ""
                                }
                            ))),
                        }
                    }
                    Err(_) => Err(Failure::Unreachable("not sent".to_owned())),
                }
            } else {
                let within = async {
                    let _permit = permits.acquire_owned().await.ok();
                    let left = deadline.saturating_duration_since(Instant::now());
                    call(&target, ask, left).await
                };
                match tokio::time::timeout_at(deadline, within).await {
                    Ok(reply) => reply,
                    Err(_) => Err(Failure::Deadline(format!(
                        "no answer within the deadline ({} s)",
                        timeout.as_secs_f64()
                    ))),
                }
            };
            (i, reply)
        });
    }
    let mut replies: Vec<Option<Result<Answer, Failure>>> = std::iter::repeat_with(|| None)
        .take(entries.len())
        .collect();
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok((i, reply)) => replies[i] = Some(reply),
            Err(error) => errln!("steadfastctl: a call's task ended: {error}"),
        }
    }
    replies
        .into_iter()
        .map(|reply| reply.unwrap_or_else(|| Err(Failure::Unreachable("no reply".to_owned()))))
        .collect()
}

/// Call one daemon.
pub(super) async fn call(target: &Target, ask: Ask, timeout: Duration) -> Result<Answer, Failure> {
    let endpoint = endpoint_of(target).await.map_err(Failure::Unreachable)?;
    let client = match ControlClient::connect_within(endpoint, timeout).await {
        Ok(client) => client,
        Err(error) => {
            // As the single `journal`: no daemon answers, read the file.
            if let (Ask::Journal(limit), Target::DataDir(dir)) = (ask, target) {
                let limit = limit.min(steadfast::protocol::control::MAX_JOURNAL_ATTEMPTS) as usize;
                return match steadfast::control::read_journal(dir, limit) {
                    Ok(attempts) => Ok(Answer::Journal {
                        attempts,
                        offline: Some(one_line(&error.to_string())),
                    }),
                    Err(read) => Err(Failure::Unreachable(format!(
                        "{}; and the journal cannot be read: {}",
                        one_line(&error.to_string()),
                        one_line(&read.to_string())
                    ))),
                };
            }
            return Err(Failure::of(&error));
        }
    };
    let snapshot = |answer: Result<Snapshot, ClientError>| {
        answer
            .map(|s| Answer::Snapshot(Box::new(s)))
            .map_err(|e| Failure::of(&e))
    };
    match ask {
        Ask::Status | Ask::Probe(_) => snapshot(client.snapshot().await),
        Ask::Metrics => client
            .metrics()
            .await
            .map(Answer::Metrics)
            .map_err(|e| Failure::of(&e)),
        Ask::Journal(limit) => client
            .journal(limit)
            .await
            .map(|attempts| Answer::Journal {
                attempts,
                offline: None,
            })
            .map_err(|e| Failure::of(&e)),
        Ask::Exit(relaunch) => snapshot(
            client
                .exit(if relaunch {
                    steadfast::ExitIntent::Relaunch
                } else {
                    steadfast::ExitIntent::Halt
                })
                .await,
        ),
        Ask::Stop(hold, strict) => match client.stop(Hold::from(hold)).await {
            Err(error) if !strict && crate::already(&error, crate::Already::Stopped) => {
                let now = client.snapshot().await.map_err(|e| Failure::of(&e))?;
                if hold && !now.hold {
                    return Err(Failure::Refused(format!(
                        "{} (already stopped but not held: `stop --hold` holds a runtime it \
                         stops)",
                        one_line(&error.to_string())
                    )));
                }
                Ok(Answer::Already(Box::new(now)))
            }
            answer => snapshot(answer),
        },
        Ask::Read(read) => read.visit(FleetRead { client: &client }).await,
        Ask::Start(..) | Ask::Restart(..) | Ask::Retry(_) => {
            let answer = match ask {
                Ask::Restart(force, _) => client.command(cmd::Restart { force }).await,
                Ask::Retry(_) => client.retry().await,
                _ => client.start().await,
            };
            match answer {
                Err(error)
                    if matches!(ask, Ask::Start(_, false))
                        && crate::already(&error, crate::Already::Running) =>
                {
                    client
                        .snapshot()
                        .await
                        .map(|s| Answer::Already(Box::new(s)))
                        .map_err(|e| Failure::of(&e))
                }
                Ok(answered) if ask.waits() => snapshot(settled(&client, answered).await),
                answer => snapshot(answer),
            }
        }
    }
}

/// `--wait`: follow the boot a command started (its answer is a booting or
/// draining snapshot) to the first settled state — running, failed,
/// wedged, stopped, or exiting — as the single `--wait` does; the call's
/// timeout bounds it.
pub(super) async fn settled(
    client: &ControlClient,
    answered: Snapshot,
) -> Result<Snapshot, ClientError> {
    let mut have = answered;
    loop {
        if have.lifecycle.settlement().is_some() {
            return Ok(have);
        }
        have = client.watch(&have, Duration::from_secs(30)).await?;
    }
}

/// A command answered from the snapshot, called on one daemon: its answer
/// as its own `Display` prints it, and as JSON.
struct FleetRead<'a> {
    client: &'a ControlClient,
}

impl<'a> ReadVisitor for FleetRead<'a> {
    type Output = std::pin::Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send + 'a>>;

    fn visit<C>(self, command: C) -> Self::Output
    where
        C: Reads + Registered + Sync + 'static,
        C::Reply: std::fmt::Display,
    {
        Box::pin(async move {
            let reply = self
                .client
                .call(command)
                .await
                .map_err(|e| Failure::of(&e))?;
            Ok(Answer::Read {
                text: reply.to_string(),
                json: serde_json::to_value(&reply).unwrap_or(serde_json::Value::Null),
            })
        })
    }
}
