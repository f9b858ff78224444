//! Each command's execution against one daemon: [`run`] dispatches the
//! parsed [`Cli`] to the command's call (status, start, stop, restart,
//! config, journal, replace, …), maps the answer or the error to the exit
//! code, and answers `status`/`probe ready` from the status record when it
//! may ([`from_record`]). How an answer reads is `render.rs`'s; waiting for
//! it to settle is `wait.rs`'s; `--inventory` is `fleet.rs`'s.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use steadfast::control::{ClientError, ControlClient};
use steadfast::protocol::control::{ReadVisitor, Reads, Registered, cmd};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{ErrorSource, SCHEMA, Snapshot};
use steadfast::{ExitIntent, Hold};

use crate::cli::{ChildCmd, Cli, Cmd, ConfigCmd, ProbeKind, ReplaceMode, generated};
use crate::connect::{Unreached, connect, connection_flags, data_dir_of, socket_path, timeout_of};
use crate::out::{self, errln, escape, out, outln};
use crate::render::{
    mode_name, print_answer, print_change, print_journal, print_json, print_json_line,
    print_status, probe_answer, say,
};
use crate::wait::{wait_settled, watch};
use crate::{Already, already, fail, fleet, record};
use crate::{
    DEFAULT_TIMEOUT, EXIT_CANNOT_CONNECT, EXIT_REFUSED, EXIT_REPLACE_FAILED, EXIT_TIMED_OUT,
    EXIT_UNKNOWN, EXIT_USAGE,
};

/// `status` and `probe ready` answered from the daemon's status record
/// ([`record`]), without a runtime or a round trip, and so is "no daemon"
/// when the socket file's checks find none to dial; `None` when the
/// command is another, or the record is not to be trusted: then it asks
/// the daemon.
pub fn from_record(cli: &Cli) -> Option<ExitCode> {
    let unix_only = cli.tcp.is_none()
        && cli.tls.is_none()
        && cli.client_config.is_none()
        && cli.token_file.is_none()
        && cli.ca.is_none()
        && cli.cert.is_none()
        && cli.key.is_none()
        && !cli.fleet.given();
    let wanted = matches!(
        cli.command,
        Cmd::Status { history: None }
            | Cmd::Probe {
                what: ProbeKind::Ready
            }
    );
    if !(unix_only && wanted) {
        return None;
    }
    let snapshot = match record::read(&socket_path(cli).ok()?) {
        record::Read::Trusted(snapshot) => snapshot,
        record::Read::NoDaemon(error) => return Some(unreached(cli, &error.to_string())),
        record::Read::Ask => return None,
    };
    Some(match cli.command {
        Cmd::Probe { what } => probe_answer(&snapshot, what, cli.verbose),
        _ => print_status(&snapshot, None, cli.json, cli.utc),
    })
}

/// No daemon was reached (`error`, said on stderr; a probe says it only
/// with `-v`): `status` exits 4 (LSB's unknown), any other command 1.
pub fn unreached(cli: &Cli, error: &str) -> ExitCode {
    if !matches!(cli.command, Cmd::Probe { .. }) || cli.verbose {
        say(&error);
    }
    ExitCode::from(if matches!(cli.command, Cmd::Status { .. }) {
        EXIT_UNKNOWN
    } else {
        EXIT_CANNOT_CONNECT
    })
}

pub async fn run(cli: Cli) -> ExitCode {
    if cli.fleet.given() {
        return fleet::run(&cli).await;
    }
    let client = match connect(&cli).await {
        Ok(client) => client,
        Err(Unreached::Usage(error)) => {
            say(&error);
            return ExitCode::from(EXIT_USAGE);
        }
        Err(Unreached::Connect(error, true))
            if matches!(cli.command, Cmd::Stop { .. })
                || matches!(cli.command, Cmd::Watch { .. }) && cli.timeout.is_some() =>
        {
            let secs = cli.timeout.unwrap_or(DEFAULT_TIMEOUT.as_secs_f64());
            errln!(
                "steadfastctl: timed out after {secs} s: nothing was sent ({})",
                escape(&error)
            );
            return ExitCode::from(EXIT_TIMED_OUT);
        }
        Err(Unreached::Connect(error, _)) => {
            if let Cmd::Journal { limit } = cli.command
                && cli.socket.is_none()
                && cli.tcp.is_none()
                && cli.tls.is_none()
                && cli.client_config.is_none()
            {
                let dir = data_dir_of(&cli).unwrap_or_else(|_| PathBuf::from("."));
                return journal_offline(&dir, limit, &error, cli.json, cli.utc);
            }
            return unreached(&cli, &error);
        }
    };
    let answer = match &cli.command {
        Cmd::Status { history } => {
            return status(&client, *history, cli.json, cli.utc).await;
        }
        Cmd::Start { strict, .. } => match client.start().await {
            Err(error) if !strict && already(&error, Already::Running) => {
                return already_there(&client, &cli, Already::Running).await;
            }
            answer => answer,
        },
        Cmd::Stop {
            hold,
            strict,
            no_block,
        } => return stop(&client, *hold, *strict, *no_block, &cli).await,
        Cmd::Reload => client.reload().await,
        Cmd::Restart { force, .. } => client.command(cmd::Restart { force: *force }).await,
        Cmd::Retry { .. } => client.retry().await,
        Cmd::Exit { relaunch } => {
            let intent = if *relaunch {
                ExitIntent::Relaunch
            } else {
                ExitIntent::Halt
            };
            client.exit(intent).await
        }
        Cmd::Watch { until } => {
            // Only a `--timeout` given bounds a watch; without one it
            // follows the daemon until it exits.
            let deadline = match cli.timeout.map(|_| timeout_of(&cli)) {
                None => None,
                Some(Ok(timeout)) => Some((tokio::time::Instant::now() + timeout, timeout)),
                Some(Err(error)) => {
                    say(&error);
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            return watch(&client, *until, cli.json, cli.utc, deadline).await;
        }
        Cmd::Probe { what } => return probe(&client, *what, cli.verbose).await,
        Cmd::Read(read) => {
            return read
                .clone()
                .visit(PrintRead {
                    client: &client,
                    json: cli.json,
                })
                .await;
        }
        Cmd::Journal { limit } => return journal(&client, *limit, cli.json, cli.utc).await,
        Cmd::Metrics => return metrics(&client).await,
        Cmd::Config(ConfigCmd::Show { leaf }) => {
            return config_show(&client, leaf.as_deref(), cli.json).await;
        }
        Cmd::Config(ConfigCmd::Set { leaf, value }) => {
            let answer = client.config_set(leaf, value).await;
            return config_changed(leaf, true, answer, &cli);
        }
        Cmd::Config(ConfigCmd::Unset { leaf }) => {
            // Whether the override tier sets it: an unset of a leaf it does
            // not set changes nothing (and publishes nothing).
            let was_set = client
                .config_show(Some(leaf))
                .await
                .map_or(true, |view| view.overrides.iter().any(|(l, _)| l == leaf));
            let answer = client.config_unset(leaf).await;
            if !was_set && answer.is_ok() {
                return config_unchanged(leaf, answer.ok(), &cli);
            }
            return config_changed(leaf, false, answer, &cli);
        }
        Cmd::Child(child) => return crate::run::child(&client, child, cli.json).await,
        Cmd::Completions { .. } | Cmd::Man { .. } => {
            // Answered in `main` before anything is dialed.
            return generated(&cli.command).unwrap_or(ExitCode::SUCCESS);
        }
        Cmd::Reinit { confirm: None } => {
            return reinit_prepare(&client, &connection_flags(&cli), cli.json).await;
        }
        Cmd::Reinit {
            confirm: Some(token),
        } => client.reinit(token).await,
        Cmd::Replace {
            binary,
            mode,
            setup_budget,
            drain_budget,
        } => {
            return replace(
                &client,
                binary,
                *mode,
                *setup_budget,
                *drain_budget,
                cli.json,
            )
            .await;
        }
    };
    let wait = matches!(
        cli.command,
        Cmd::Start {
            no_block: false,
            ..
        } | Cmd::Restart {
            no_block: false,
            ..
        } | Cmd::Retry { wait: true }
    );
    match answer {
        Ok(snapshot) if wait => wait_settled(&client, snapshot, &cli).await,
        Ok(snapshot) => {
            print_answer(&snapshot, &cli);
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// `child list|restart|stop|start`: the list from the snapshot (the read
/// role's); a command answered with the child as it now stands.
async fn child(client: &ControlClient, command: &ChildCmd, json: bool) -> ExitCode {
    use steadfast::protocol::children::ChildOp;
    let (name, op) = match command {
        ChildCmd::List => {
            return match client.snapshot().await {
                Ok(snapshot) => {
                    if json {
                        outln!("{}", serde_json::json!({ "children": snapshot.children }));
                    } else {
                        out!("{}", crate::render::render_children(&snapshot.children));
                    }
                    ExitCode::SUCCESS
                }
                Err(error) => fail(&error),
            };
        }
        ChildCmd::Restart { name, .. } => (name, ChildOp::Restart),
        ChildCmd::Stop { name, .. } => (name, ChildOp::Stop),
        ChildCmd::Start { name, .. } => (name, ChildOp::Start),
    };
    match client.child(name, op).await {
        Ok(view) => {
            if json {
                outln!("{}", serde_json::json!({ "child": view }));
            } else {
                outln!(
                    "child {}: {} (incarnation {})",
                    crate::out::escape(&view.name),
                    view.state.as_str(),
                    view.incarnation
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// What became of a `config set` / `config unset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The running runtime took it in place.
    InPlace,
    /// The running runtime needs a restart for these leaves (the change's
    /// among them).
    AtRestart(Vec<String>),
    /// The runtime is not running (the state): its next boot reads it.
    AtNextBoot(&'static str),
    /// The runtime could not take it: the daemon's error.
    Refused(String),
}

impl Applied {
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::InPlace => "in_place",
            Self::AtRestart(_) => "at_restart",
            Self::AtNextBoot(_) => "at_next_boot",
            Self::Refused(_) => "not_applied",
        }
    }
}

/// `config set` / `config unset` (`set`: which) says in one line what
/// became of the change: applied in place, at the next restart (naming
/// the leaves a restart needs: the snapshot's `pending`), at the next boot
/// (not running), or not taken (the daemon's error). `--json`: the
/// snapshot, with `change: {leaf, applied, restart_needed}` added.
///
/// The daemon answers a change to a running runtime once the runtime has
/// applied it and the outcome is stepped, so the answer's `pending` is
/// the outcome; an apply that failed answers with its error in the
/// snapshot's `config_apply` error slot.
pub fn config_changed(
    leaf: &str,
    set: bool,
    answer: Result<Snapshot, ClientError>,
    cli: &Cli,
) -> ExitCode {
    let settled = match answer {
        Ok(snapshot) => snapshot,
        Err(error) => return fail(&error),
    };
    let not_applied = settled
        .errors
        .iter()
        .find(|slot| slot.source == ErrorSource::ConfigApply)
        .map(|slot| slot.error.clone());
    let applied = match (&settled.lifecycle, &settled.pending, not_applied) {
        (LifecycleState::Running { .. }, _, Some(error)) => Applied::Refused(error),
        (
            LifecycleState::Running { .. },
            steadfast::protocol::lifecycle::PendingApply::RestartNeeded { leaves },
            _,
        ) if leaves.iter().any(|l| l == leaf) => Applied::AtRestart(leaves.clone()),
        (LifecycleState::Running { .. }, _, _) => Applied::InPlace,
        (other, _, _) => Applied::AtNextBoot(other.name()),
    };
    if cli.json {
        return print_change(&settled, leaf, applied.kind());
    }
    let done = if set { "set" } else { "unset" };
    let leaf = escape(leaf);
    match applied {
        Applied::InPlace => outln!("{leaf}: {done}; applied in place"),
        Applied::AtRestart(leaves) => outln!(
            "{leaf}: {done}; takes effect at the next restart (restart needed: {})",
            escape(&leaves.join(", "))
        ),
        Applied::AtNextBoot(state) => {
            outln!("{leaf}: {done}; the runtime is {state}: takes effect when it next boots");
        }
        Applied::Refused(error) => outln!(
            "{leaf}: {done}; the running runtime did not take it: {}",
            out::block(&error, 4)
        ),
    }
    ExitCode::SUCCESS
}

/// `config unset` of a leaf the override tier does not set: nothing
/// changed, said so (`--json`: the answer, `applied: unchanged`).
pub fn config_unchanged(leaf: &str, answered: Option<Snapshot>, cli: &Cli) -> ExitCode {
    match answered {
        Some(snapshot) if cli.json => print_change(&snapshot, leaf, "unchanged"),
        _ => {
            outln!(
                "{}: unchanged (the override tier does not set it)",
                escape(leaf)
            );
            ExitCode::SUCCESS
        }
    }
}

/// What the daemon this invocation reached is called in a one-line answer:
/// as the command line named it (its data directory, socket, address, or
/// client config file).
pub fn daemon_name(cli: &Cli) -> String {
    let named = if let Some(socket) = &cli.socket {
        socket.display().to_string()
    } else if let Some(addr) = &cli.tcp {
        addr.to_string()
    } else if let Some(addr) = &cli.tls {
        addr.clone()
    } else if let Some(file) = &cli.client_config {
        file.display().to_string()
    } else {
        data_dir_of(cli).map_or_else(|_| ".".to_owned(), |d| d.display().to_string())
    };
    escape(&named).into_owned()
}

/// A `start` or `stop` found the runtime already `target`: exit 0 as
/// `systemctl start` of a started unit does, saying so in one line
/// (`NAME: already running`), or with `--json` printing the snapshot as
/// an accepted command does (and `start --wait` its settled one).
pub async fn already_there(client: &ControlClient, cli: &Cli, target: Already) -> ExitCode {
    let snapshot = match client.snapshot().await {
        Ok(snapshot) => snapshot,
        Err(error) => return fail(&error),
    };
    if cli.json {
        print_json(&snapshot);
    } else {
        outln!(
            "{}: already {}{}",
            daemon_name(cli),
            target.name(),
            if target == Already::Stopped && snapshot.hold {
                " (held across relaunch)"
            } else {
                ""
            }
        );
    }
    ExitCode::SUCCESS
}

/// `stop [--hold] [--strict]`: answered once the drain settled; with
/// `--timeout`, exit 5 when it has not settled by then. A runtime already
/// stopped is exit 0 (`--strict`: 3) — but not for `--hold` when it is not
/// held: the hold asked for was not taken, and that is a refusal.
pub async fn stop(
    client: &ControlClient,
    hold: bool,
    strict: bool,
    no_block: bool,
    cli: &Cli,
) -> ExitCode {
    let stopped = if no_block {
        stop_taken(client, hold).await
    } else {
        client.stop(Hold::from(hold)).await
    };
    match stopped {
        Ok(snapshot) => {
            print_answer(&snapshot, cli);
            ExitCode::SUCCESS
        }
        Err(error) if !strict && already(&error, Already::Stopped) => {
            if hold {
                match client.snapshot().await {
                    Ok(snapshot) if snapshot.hold => {}
                    Ok(_) => {
                        say(&format!(
                            "{error} (already stopped but not held: `stop --hold` holds a \
                             runtime it stops; `start`, then `stop --hold`, to hold this one)"
                        ));
                        return ExitCode::from(EXIT_REFUSED);
                    }
                    Err(error) => return fail(&error),
                }
            }
            already_there(client, cli, Already::Stopped).await
        }
        Err(error) if error.is_deadline() => {
            let secs = cli.timeout.unwrap_or(DEFAULT_TIMEOUT.as_secs_f64());
            errln!(
                "steadfastctl: timed out after {secs} s: the stop was not answered in time \
                 (a stop the daemon took goes on draining; one it could not take in time was \
                 dropped unrun): `steadfastctl status` says which"
            );
            ExitCode::from(EXIT_TIMED_OUT)
        }
        Err(error) => fail(&error),
    }
}

/// `stop --no-block`: the stop's answer if it comes first (a runtime
/// already stopped, a refusal), else the first snapshot that shows the
/// drain begun (or past it): the daemon took the stop and goes on
/// draining when this process ends.
async fn stop_taken(client: &ControlClient, hold: bool) -> Result<Snapshot, ClientError> {
    let mut have = client.snapshot().await?;
    let asked = client.clone();
    let mut answer = tokio::spawn(async move { asked.stop(Hold::from(hold)).await });
    loop {
        tokio::select! {
            answered = &mut answer => {
                // The call is never aborted: a join error is its panic.
                return answered.unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()));
            }
            next = client.watch(&have, Duration::from_secs(30)) => {
                have = next?;
                if matches!(
                    have.lifecycle,
                    LifecycleState::Draining { .. } | LifecycleState::Stopped { .. }
                ) {
                    return Ok(have);
                }
            }
        }
    }
}

/// `status`: the lean snapshot, and with `--history N` the journal's last
/// N attempts.
pub async fn status(
    client: &ControlClient,
    history: Option<u32>,
    json: bool,
    utc: bool,
) -> ExitCode {
    let snapshot = match client.snapshot().await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            say(&error);
            return ExitCode::from(EXIT_UNKNOWN);
        }
    };
    let attempts = match history {
        None => None,
        Some(limit) => match client.journal(limit).await {
            Ok(attempts) => Some(attempts),
            Err(error) => return fail(&error),
        },
    };
    print_status(&snapshot, attempts, json, utc)
}

pub async fn probe(client: &ControlClient, what: ProbeKind, verbose: bool) -> ExitCode {
    match client.snapshot().await {
        Ok(snapshot) => probe_answer(&snapshot, what, verbose),
        Err(error) => {
            if verbose {
                say(&error);
            }
            ExitCode::FAILURE
        }
    }
}

/// A command answered from the snapshot: called, and its answer printed
/// as its own `Display` says, or with `--json` as JSON.
struct PrintRead<'a> {
    client: &'a ControlClient,
    json: bool,
}

impl<'a> ReadVisitor for PrintRead<'a> {
    type Output = std::pin::Pin<Box<dyn Future<Output = ExitCode> + 'a>>;

    fn visit<C>(self, command: C) -> Self::Output
    where
        C: Reads + Registered + Sync + 'static,
        C::Reply: std::fmt::Display,
    {
        Box::pin(async move {
            match self.client.call(command).await {
                Ok(reply) if self.json => {
                    print_json(&reply);
                    ExitCode::SUCCESS
                }
                Ok(reply) => {
                    outln!("{reply}");
                    ExitCode::SUCCESS
                }
                Err(error) => fail(&error),
            }
        })
    }
}

pub async fn metrics(client: &ControlClient) -> ExitCode {
    match client.metrics().await {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

pub async fn journal(client: &ControlClient, limit: u32, json: bool, utc: bool) -> ExitCode {
    match client.journal(limit).await {
        Ok(attempts) => {
            print_journal(&attempts, json, false, utc);
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// `journal` when no daemon answers: the file under `data_dir`, read-only.
pub fn journal_offline(
    data_dir: &std::path::Path,
    limit: u32,
    why: &str,
    json: bool,
    utc: bool,
) -> ExitCode {
    let limit = limit.min(steadfast::protocol::control::MAX_JOURNAL_ATTEMPTS) as usize;
    match steadfast::control::read_journal(data_dir, limit) {
        Ok(attempts) => {
            errln!(
                "steadfastctl: no daemon answers ({}); reading {} directly",
                escape(why),
                data_dir.join(".steadfast/journal").display()
            );
            print_journal(&attempts, json, true, utc);
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!(
                "steadfastctl: no daemon answers ({}), and the journal cannot be read: {}",
                escape(why),
                escape(&error.to_string())
            );
            ExitCode::from(EXIT_CANNOT_CONNECT)
        }
    }
}

pub async fn config_show(client: &ControlClient, leaf: Option<&str>, json: bool) -> ExitCode {
    match client.config_show(leaf).await {
        Ok(view) if json => {
            print_json(&view);
            ExitCode::SUCCESS
        }
        Ok(view) => {
            if view.overrides.is_empty() {
                outln!("# override tier: empty");
            } else {
                outln!("# override tier");
                for (leaf, value) in &view.overrides {
                    outln!("{} = {}", escape(leaf), escape(&value.to_string()));
                }
            }
            match (&view.effective, &view.error, leaf) {
                (_, Some(error), _) => {
                    outln!("\n# effective: does not resolve: {}", escape(error));
                }
                (Some(value), None, Some(leaf)) => {
                    outln!("\n# effective\n{} = {}", escape(leaf), escape(value));
                }
                (Some(config), None, None) => outln!("\n# effective\n{}", config.trim_end()),
                (None, None, Some(leaf)) => outln!("\n# effective: {leaf} is not set"),
                (None, None, None) => {}
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

pub async fn reinit_prepare(client: &ControlClient, flags: &str, json: bool) -> ExitCode {
    match client.reinit_prepare().await {
        Ok(prepared) if json => {
            print_json(&serde_json::json!({
                "schema": SCHEMA,
                "token": prepared.token,
                "epoch": prepared.epoch,
            }));
            ExitCode::SUCCESS
        }
        Ok(prepared) => {
            outln!(
                "This destroys the stopped runtime's data (the service's wipe step).\n\
                 To confirm, run within this epoch ({}; any boot makes the token stale):\n\n  \
                 steadfastctl {flags}{}reinit --confirm {}",
                prepared.epoch,
                if flags.is_empty() { "" } else { " " },
                escape(&prepared.token)
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// Seconds (from the command line) as milliseconds; `None` when negative or
/// not a number.
pub fn secs_to_ms(secs: f64) -> Option<u64> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Start a replacement and follow it to its end.
pub async fn replace(
    client: &ControlClient,
    binary: &std::path::Path,
    mode: ReplaceMode,
    setup_budget: f64,
    drain_budget: Option<f64>,
    json: bool,
) -> ExitCode {
    use steadfast::protocol::control::ReplaceRequest;
    use steadfast::protocol::replacement::{Mode, Step, TransactionEnd};
    let Some(setup_budget_ms) = secs_to_ms(setup_budget).filter(|&ms| ms > 0) else {
        errln!("steadfastctl: --setup-budget must be a positive number of seconds");
        return ExitCode::from(2);
    };
    let drain_budget_ms = match drain_budget.map(secs_to_ms) {
        None => None,
        Some(Some(ms)) => Some(ms),
        Some(None) => {
            errln!("steadfastctl: --drain-budget must be a number of seconds");
            return ExitCode::from(2);
        }
    };
    // Relative paths are the operator's: resolve them here.
    let binary = std::path::absolute(binary).unwrap_or_else(|_| binary.to_path_buf());
    let request = ReplaceRequest {
        binary: binary.display().to_string(),
        mode: match mode {
            ReplaceMode::Overlap => Mode::Overlap,
            ReplaceMode::Exclusive => Mode::Exclusive,
        },
        setup_budget_ms,
        drain_budget_ms,
    };
    let started = match client.replace(request).await {
        Ok(status) => status,
        Err(error) => return fail(&error),
    };
    let Some(mut report) = started.report else {
        errln!("steadfastctl: the daemon started no replacement");
        return ExitCode::from(EXIT_CANNOT_CONNECT);
    };
    let serial = report.serial;
    if !json {
        outln!(
            "replacing pid {} by {} ({} mode)",
            started.pid,
            escape(&report.target),
            mode_name(report.mode)
        );
    }
    let mut printed = 0;
    loop {
        for event in report.events.iter().skip(printed) {
            if json {
                print_json_line(event);
            } else {
                match event.answer {
                    None => outln!("  {} ...", event.step),
                    Some(answer) => outln!("  {} {answer:?}", event.step),
                }
            }
        }
        printed = report.events.len();
        if let Some(ended) = &report.ended {
            if json {
                print_json_line(ended);
            }
            return match ended {
                TransactionEnd::Outcome(outcome) => {
                    if !json {
                        outln!("outcome: {outcome:?}");
                    }
                    ExitCode::SUCCESS
                }
                TransactionEnd::Failed {
                    step,
                    committed,
                    message,
                    ..
                } => {
                    errln!(
                        "steadfastctl: the replacement failed at {step} (committed: {committed}): {}",
                        escape(message)
                    );
                    ExitCode::from(EXIT_REPLACE_FAILED)
                }
            };
        }
        let committed = report
            .events
            .iter()
            .any(|e| e.step == Step::Commit && e.answer.is_some());
        match client
            .replace_status(report.seq, Duration::from_secs(30))
            .await
        {
            Ok(status) => match status.report {
                Some(next) if next.serial == serial => report = next,
                _ => {
                    errln!("steadfastctl: the daemon lost track of the replacement");
                    return ExitCode::from(EXIT_CANNOT_CONNECT);
                }
            },
            Err(error) if committed => {
                // The incumbent handed over and exited before the last word.
                outln!(
                    "committed; the incumbent has exited ({})",
                    escape(&error.to_string())
                );
                return ExitCode::SUCCESS;
            }
            Err(error) => return fail(&error),
        }
    }
}
