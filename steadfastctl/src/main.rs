//! `steadfastctl`: the control plane's command line (`spec/control.md`).
//!
//! It owns the operator's view: which daemon to call (`--socket`, or the
//! socket under `--data-dir`, or a TCP port with `--tcp` and its
//! `--token-file`), how a snapshot reads to a human (like
//! `systemctl status`) or a script (`--json`), and the exit codes:
//! 0 accepted, 1 cannot connect (or the call failed on the way), 2 usage
//! (clap's), 3 refused (the reason on stderr), 4 a replacement failed. `probe` is silent unless
//! `--verbose` and exits 0 or 1 only.
//!
//! Checked by `tests/ctl.rs`, which runs this binary against a real
//! in-process supervisor.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use steadfast::control::{ClientError, ControlClient, Endpoint, Token};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{
    AttemptRecord, AttemptResult, PhaseOutcome, PreviousRun, Snapshot,
};
use steadfast::{ExitIntent, Hold};

/// Drive and watch a steadfast daemon over its control socket (or its TCP
/// control port).
///
/// Exit codes: 0 accepted, 1 cannot connect (or the token was refused), 2
/// usage, 3 refused, 4 a replacement failed.
#[derive(Debug, Parser)]
#[command(name = "steadfastctl", version)]
struct Cli {
    /// The daemon's data directory; its socket is
    /// `<DIR>/.steadfast/control.sock` (default: the current directory).
    #[arg(long, value_name = "DIR", global = true, conflicts_with = "socket")]
    data_dir: Option<PathBuf>,
    /// The control socket's path (instead of --data-dir).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    /// The daemon's TCP control address, IP:PORT (e.g. 127.0.0.1:7433),
    /// instead of the socket; needs --token-file.
    #[arg(
        long,
        value_name = "ADDR",
        global = true,
        conflicts_with_all = ["data_dir", "socket"],
        requires = "token_file"
    )]
    tcp: Option<SocketAddr>,
    /// The token file for --tcp: the daemon's token (64 hex digits), in a
    /// file only its owner may read (mode 0600; a looser file is refused).
    #[arg(long, value_name = "PATH", global = true, requires = "tcp")]
    token_file: Option<PathBuf>,
    /// Print JSON for scripts: the snapshot (the shape of `spec/control.md`),
    /// or the value a command answers (journal, config show, reinit).
    #[arg(long, global = true)]
    json: bool,
    /// Say more (for `probe`: say why it failed).
    #[arg(long, short, global = true)]
    verbose: bool,
    /// Give up after this many seconds (connecting, waiting out a busy
    /// daemon, and the call); a command whose deadline passed before the
    /// daemon could run it is dropped there, never run later.
    #[arg(long, value_name = "SECS", global = true, default_value_t = 120.0)]
    timeout: f64,
    /// What to do.
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Show the daemon's state, its previous run and its recent attempts.
    Status,
    /// Boot a stopped runtime (clears a hold).
    Start,
    /// Stop the runtime; returns once the drain has settled.
    Stop {
        /// Keep it stopped across a relaunch of the daemon.
        #[arg(long)]
        hold: bool,
    },
    /// Stop the runtime and boot it again. The daemon resolves the new
    /// config first: one that does not resolve is refused (exit 3,
    /// `config_invalid` and the error) and the runtime keeps serving.
    Restart {
        /// Drain even when the new config does not resolve (the next boot
        /// then fails held in `resolve_config`).
        #[arg(long)]
        force: bool,
    },
    /// Retry a failed boot now.
    Retry,
    /// End the daemon's process after a drain (exit 0: stays down).
    Exit {
        /// Exit 75 instead, so the service manager starts it again.
        #[arg(long)]
        relaunch: bool,
    },
    /// Print each transition and each boot phase as they happen.
    Watch {
        /// Return (exit 0) once the daemon reaches this state.
        #[arg(long, value_name = "STATE")]
        until: Option<StateName>,
    },
    /// Exit 0 when the daemon is ready (running) or live (answering), 1
    /// otherwise; silent unless --verbose.
    Probe {
        /// Which probe.
        what: ProbeKind,
    },
    /// Print the daemon's metrics in OpenMetrics text format (what a
    /// Prometheus scrape reads; `--json` does not apply).
    Metrics,
    /// Show the attempts the journal records (across relaunches), with each
    /// phase's outcome and duration.
    Journal {
        /// How many of the most recent attempts.
        #[arg(long, short = 'n', default_value_t = 20, value_name = "N")]
        limit: u32,
    },
    /// Read or change the override tier (the highest config tier, kept in
    /// the control directory across relaunches).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Destroy the stopped runtime's data (the service's wipe step). Without
    /// --confirm, prints the confirmation token; it is valid until the
    /// runtime next boots.
    Reinit {
        /// The token a previous `steadfastctl reinit` printed.
        #[arg(long, value_name = "TOKEN")]
        confirm: Option<String>,
    },
    /// Replace the daemon's binary (issue 7): print each step as it happens
    /// and end with the outcome. Exit 0 when it completed (or nothing needed
    /// replacing), 4 when it failed (the message says whether the candidate
    /// was committed anyway).
    Replace {
        /// The candidate binary (a path on the daemon's machine).
        #[arg(long, value_name = "PATH")]
        binary: PathBuf,
        /// Overlap: the candidate starts beside the incumbent; exclusive:
        /// the incumbent drains first.
        #[arg(long, value_enum)]
        mode: ReplaceMode,
        /// Seconds shared by the setup steps (restarted after a drain).
        #[arg(long, value_name = "SECS", default_value_t = 30.0)]
        setup_budget: f64,
        /// Seconds the drain (and retire) may take; unbounded when absent.
        #[arg(long, value_name = "SECS")]
        drain_budget: Option<f64>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Set a leaf: a running runtime applies it in place or reports that a
    /// restart is needed; a held failure is retried.
    Set {
        /// The dotted leaf, e.g. `log.level`.
        leaf: String,
        /// The value as TOML (`8080`, `-1`, `true`, `"text"`, `[1, 2]`); a
        /// bare word is a string.
        #[arg(allow_negative_numbers = true)]
        value: String,
    },
    /// Remove a leaf from the override tier (the lower tiers show again).
    Unset {
        /// The dotted leaf.
        leaf: String,
    },
    /// Show the override tier and the effective config (or one leaf).
    Show {
        /// Only this dotted leaf.
        leaf: Option<String>,
    },
}

/// A replacement's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReplaceMode {
    Overlap,
    Exclusive,
}

/// Exit code of a replacement that failed.
const EXIT_REPLACE_FAILED: u8 = 4;

/// A lifecycle state's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum StateName {
    Resolving,
    Booting,
    Running,
    Draining,
    Stopped,
    Failed,
    Wedged,
    Exiting,
    Reinitializing,
}

impl StateName {
    fn name(self) -> &'static str {
        match self {
            Self::Resolving => "resolving",
            Self::Booting => "booting",
            Self::Running => "running",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Wedged => "wedged",
            Self::Exiting => "exiting",
            Self::Reinitializing => "reinitializing",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProbeKind {
    /// The runtime is running.
    Ready,
    /// The daemon answers.
    Live,
}

const EXIT_CANNOT_CONNECT: u8 = 1;
const EXIT_REFUSED: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("steadfastctl: cannot start a runtime: {error}");
            return ExitCode::from(EXIT_CANNOT_CONNECT);
        }
    };
    runtime.block_on(run(cli))
}

fn socket_path(cli: &Cli) -> PathBuf {
    match (&cli.socket, &cli.data_dir) {
        (Some(socket), _) => socket.clone(),
        (None, Some(dir)) => steadfast::control::socket_path(dir),
        (None, None) => steadfast::control::socket_path(std::path::Path::new(".")),
    }
}

/// Connect over TCP (`--tcp`, `--token-file`) or the Unix socket.
async fn connect(cli: &Cli) -> Result<ControlClient, String> {
    let timeout = Duration::try_from_secs_f64(cli.timeout)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            format!(
                "--timeout {}: give a positive number of seconds",
                cli.timeout
            )
        })?;
    let endpoint = match (cli.tcp, &cli.token_file) {
        (Some(addr), Some(token_file)) => {
            let token = Token::read_file(token_file).map_err(|e| e.to_string())?;
            Endpoint::Tcp { addr, token }
        }
        // clap requires both together; this is only a guard.
        (Some(_), None) => return Err("--tcp needs --token-file".to_owned()),
        _ => Endpoint::Unix(socket_path(cli)),
    };
    ControlClient::connect_within(endpoint, timeout)
        .await
        .map_err(|e| e.to_string())
}

async fn run(cli: Cli) -> ExitCode {
    let client = match connect(&cli).await {
        Ok(client) => client,
        Err(error) => {
            if !matches!(cli.command, Cmd::Probe { .. }) || cli.verbose {
                eprintln!("steadfastctl: {error}");
            }
            return ExitCode::from(EXIT_CANNOT_CONNECT);
        }
    };
    let answer = match &cli.command {
        Cmd::Status => client.snapshot().await,
        Cmd::Start => client.start().await,
        Cmd::Stop { hold } => client.stop(Hold::from(*hold)).await,
        Cmd::Restart { force: false } => client.restart().await,
        Cmd::Restart { force: true } => client.restart_forced().await,
        Cmd::Retry => client.retry().await,
        Cmd::Exit { relaunch } => {
            let intent = if *relaunch {
                ExitIntent::Relaunch
            } else {
                ExitIntent::Halt
            };
            client.exit(intent).await
        }
        Cmd::Watch { until } => return watch(&client, *until, cli.json).await,
        Cmd::Probe { what } => return probe(&client, *what, cli.verbose).await,
        Cmd::Journal { limit } => return journal(&client, *limit, cli.json).await,
        Cmd::Metrics => return metrics(&client).await,
        Cmd::Config(ConfigCmd::Show { leaf }) => {
            return config_show(&client, leaf.as_deref(), cli.json).await;
        }
        Cmd::Config(ConfigCmd::Set { leaf, value }) => client.config_set(leaf, value).await,
        Cmd::Config(ConfigCmd::Unset { leaf }) => client.config_unset(leaf).await,
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
    match answer {
        Ok(snapshot) => {
            if cli.json {
                print_json(&snapshot);
            } else {
                print!("{}", render_status(&snapshot, now_ms()));
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

fn fail(error: &ClientError) -> ExitCode {
    eprintln!("steadfastctl: {error}");
    if error.is_refusal() {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::from(EXIT_CANNOT_CONNECT)
    }
}

fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(json) => println!("{json}"),
        Err(error) => eprintln!("steadfastctl: {error}"),
    }
}

async fn probe(client: &ControlClient, what: ProbeKind, verbose: bool) -> ExitCode {
    match client.snapshot().await {
        Ok(snapshot) => {
            let ok = match what {
                ProbeKind::Live => true,
                ProbeKind::Ready => matches!(snapshot.lifecycle, LifecycleState::Running { .. }),
            };
            if verbose {
                eprintln!(
                    "steadfastctl: {} ({})",
                    if ok { "ok" } else { "not ready" },
                    snapshot.lifecycle.name()
                );
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            if verbose {
                eprintln!("steadfastctl: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn metrics(client: &ControlClient) -> ExitCode {
    match client.metrics().await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

async fn journal(client: &ControlClient, limit: u32, json: bool) -> ExitCode {
    match client.journal(limit).await {
        Ok(attempts) if json => {
            print_json(&attempts);
            ExitCode::SUCCESS
        }
        Ok(attempts) => {
            if attempts.is_empty() {
                println!("The journal records no attempt.");
            }
            let now = now_ms();
            let mut run = None;
            for entry in &attempts {
                if run != Some(entry.run) {
                    run = Some(entry.run);
                    println!("Run {}:", entry.run);
                }
                print!("{}", render_attempt(&entry.attempt, now));
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

async fn config_show(client: &ControlClient, leaf: Option<&str>, json: bool) -> ExitCode {
    match client.config_show(leaf).await {
        Ok(view) if json => {
            print_json(&view);
            ExitCode::SUCCESS
        }
        Ok(view) => {
            if view.overrides.is_empty() {
                println!("# override tier: empty");
            } else {
                println!("# override tier");
                for (leaf, value) in &view.overrides {
                    println!("{leaf} = {value}");
                }
            }
            match (&view.effective, &view.error, leaf) {
                (_, Some(error), _) => println!("\n# effective: does not resolve: {error}"),
                (Some(value), None, Some(leaf)) => println!("\n# effective\n{leaf} = {value}"),
                (Some(config), None, None) => println!("\n# effective\n{}", config.trim_end()),
                (None, None, Some(leaf)) => println!("\n# effective: {leaf} is not set"),
                (None, None, None) => {}
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// The flags that reach the daemon this invocation reached, as a shell
/// would take them back (`--data-dir DIR`, `--socket PATH`, or `--tcp ADDR
/// --token-file PATH`), so a printed command runs as written.
fn connection_flags(cli: &Cli) -> String {
    let mut flags = Vec::new();
    if let Some(dir) = &cli.data_dir {
        flags.extend(["--data-dir".to_owned(), shell_word(&dir.to_string_lossy())]);
    }
    if let Some(socket) = &cli.socket {
        flags.extend(["--socket".to_owned(), shell_word(&socket.to_string_lossy())]);
    }
    if let Some(tcp) = &cli.tcp {
        flags.extend(["--tcp".to_owned(), tcp.to_string()]);
    }
    if let Some(token) = &cli.token_file {
        flags.extend([
            "--token-file".to_owned(),
            shell_word(&token.to_string_lossy()),
        ]);
    }
    flags.join(" ")
}

/// `word` as one shell word: as it is when it holds only characters no
/// shell treats specially, else in single quotes.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@%,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

async fn reinit_prepare(client: &ControlClient, flags: &str, json: bool) -> ExitCode {
    match client.reinit_prepare().await {
        Ok(prepared) if json => {
            print_json(&serde_json::json!({
                "token": prepared.token,
                "epoch": prepared.epoch,
            }));
            ExitCode::SUCCESS
        }
        Ok(prepared) => {
            println!(
                "This destroys the stopped runtime's data (the service's wipe step).\n\
                 To confirm, run within this epoch ({}; any boot makes the token stale):\n\n  \
                 steadfastctl {flags}{}reinit --confirm {}",
                prepared.epoch,
                if flags.is_empty() { "" } else { " " },
                prepared.token
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// Follow the daemon with the long-poll, printing what changed.
async fn watch(client: &ControlClient, until: Option<StateName>, json: bool) -> ExitCode {
    let mut last: Option<Snapshot> = None;
    loop {
        let after = last.as_ref().map_or(0, |s| s.version);
        let next = if last.is_none() {
            client.snapshot().await
        } else {
            client.watch(after, Duration::from_secs(30)).await
        };
        let snapshot = match next {
            Ok(snapshot) => snapshot,
            Err(error) => return fail(&error),
        };
        if last.as_ref().map(|s| s.version) != Some(snapshot.version) {
            if json {
                match serde_json::to_string(&snapshot) {
                    Ok(line) => println!("{line}"),
                    Err(error) => eprintln!("steadfastctl: {error}"),
                }
            } else {
                for line in changes(last.as_ref(), &snapshot) {
                    println!("{line}");
                }
            }
        }
        if until.is_some_and(|state| snapshot.lifecycle.name() == state.name()) {
            return ExitCode::SUCCESS;
        }
        if matches!(snapshot.lifecycle, LifecycleState::Exiting { .. }) && until.is_none() {
            return ExitCode::SUCCESS;
        }
        last = Some(snapshot);
    }
}

/// The lines `watch` prints for the step from `before` to `now`: a
/// transition, and each phase that started or ended.
fn changes(before: Option<&Snapshot>, now: &Snapshot) -> Vec<String> {
    let mut lines = Vec::new();
    let state_changed = before.is_none_or(|b| b.lifecycle != now.lifecycle);
    for attempt in &now.attempts {
        let old = before.and_then(|b| b.attempts.iter().find(|a| a.attempt == attempt.attempt));
        for (i, phase) in attempt.phases.iter().enumerate() {
            let old_phase = old.and_then(|a| a.phases.get(i));
            if old_phase == Some(phase) {
                continue;
            }
            let position = if phase.total > 0 {
                format!("{}/{}", phase.index, phase.total)
            } else {
                format!("{}", phase.index)
            };
            let line = match (&phase.outcome, phase.duration_ms) {
                (PhaseOutcome::Running, _) => {
                    format!(
                        "attempt {} phase {position} {}: started",
                        attempt.attempt, phase.phase
                    )
                }
                (outcome, duration) => format!(
                    "attempt {} phase {position} {}: {}{}",
                    attempt.attempt,
                    phase.phase,
                    outcome_text(outcome),
                    duration
                        .map(|ms| format!(" in {ms} ms"))
                        .unwrap_or_default()
                ),
            };
            lines.push(line);
        }
    }
    if state_changed {
        lines.push(format!("→ {}", state_line(now)));
    }
    lines
}

fn outcome_text(outcome: &PhaseOutcome) -> String {
    match outcome {
        PhaseOutcome::Running => "running".into(),
        PhaseOutcome::Completed => "completed".into(),
        PhaseOutcome::Skipped => "skipped (still present)".into(),
        PhaseOutcome::Failed { error } => format!("failed: {error}"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ago(now: u64, at: u64) -> String {
    let ms = now.saturating_sub(at);
    if ms < 1_000 {
        format!("{ms} ms ago")
    } else if ms < 120_000 {
        format!("{:.1} s ago", ms as f64 / 1000.0)
    } else {
        format!("{} min ago", ms / 60_000)
    }
}

fn state_line(snapshot: &Snapshot) -> String {
    steadfast::daemon::status_line(snapshot)
}

fn since(lifecycle: &LifecycleState) -> Option<u64> {
    match lifecycle {
        LifecycleState::Resolving { since }
        | LifecycleState::Booting { since, .. }
        | LifecycleState::Running { since, .. }
        | LifecycleState::Stopped { since, .. }
        | LifecycleState::Wedged { since, .. }
        | LifecycleState::Reinitializing { since, .. } => Some(since.as_millis()),
        LifecycleState::Failed { report, .. } => Some(report.at.as_millis()),
        _ => None,
    }
}

fn attempt_of(lifecycle: &LifecycleState) -> Option<u32> {
    match lifecycle {
        LifecycleState::Booting { attempt, .. }
        | LifecycleState::Running { attempt, .. }
        | LifecycleState::Draining { attempt, .. }
        | LifecycleState::Failed { attempt, .. } => Some(attempt.get()),
        _ => None,
    }
}

/// The restart budget: how much of it the machine has counted, or off.
fn budget_line(snapshot: &Snapshot) -> String {
    let spent = matches!(
        snapshot.lifecycle,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    );
    match snapshot.budget {
        None => "off (failed boots retry on backoff forever)".to_owned(),
        Some(b) => format!(
            "{} of {} failed automatic boots within {} s{}",
            b.failures,
            b.max_failures,
            b.window_ms / 1000,
            if spent {
                " — spent: `steadfastctl retry` or a config change resumes"
            } else {
                ""
            }
        ),
    }
}

/// The human status, like `systemctl status`.
fn render_status(snapshot: &Snapshot, now: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "● steadfast daemon (pid {}) — {}",
        snapshot.pid,
        snapshot.lifecycle.name()
    );
    let _ = writeln!(out, "      State: {}", state_line(snapshot));
    if let Some(at) = since(&snapshot.lifecycle) {
        let _ = writeln!(out, "      Since: {}", ago(now, at));
    }
    if let Some(attempt) = attempt_of(&snapshot.lifecycle) {
        let _ = writeln!(
            out,
            "    Attempt: {attempt} (failure streak {})",
            snapshot.streak
        );
    }
    let _ = writeln!(out, "     Budget: {}", budget_line(snapshot));
    let previous = match &snapshot.previous_run {
        PreviousRun::FirstEver => "first ever".to_owned(),
        PreviousRun::CleanStop { at, epoch } => {
            format!("clean stop {} (epoch {epoch})", ago(now, at.as_millis()))
        }
        PreviousRun::Crashed { pid, attempt } => format!(
            "crashed (pid {}, attempt {})",
            pid.map_or("?".into(), |p| p.to_string()),
            attempt.map_or("?".into(), |a| a.to_string())
        ),
        PreviousRun::HandedOver { pid, attempt } => format!(
            "handed over (by pid {pid}, on attempt {})",
            attempt.map_or("?".into(), |a| a.to_string())
        ),
    };
    let _ = writeln!(out, "   Previous: {previous}");
    let pending = match &snapshot.pending {
        steadfast::protocol::lifecycle::PendingApply::InSync => "in sync".to_owned(),
        steadfast::protocol::lifecycle::PendingApply::RestartNeeded { leaves } => {
            format!("restart needed for {}", leaves.join(", "))
        }
    };
    let _ = writeln!(out, "    Pending: {pending}");
    if snapshot.hold {
        let _ = writeln!(out, "       Hold: held across relaunch");
    }
    if let Some(identity) = &snapshot.identity {
        let _ = writeln!(out, "   Identity: {identity}");
    }
    let _ = writeln!(out, "      Epoch: {}", snapshot.epoch);
    let last_error = match &snapshot.lifecycle {
        LifecycleState::Failed { report, .. } => {
            Some(format!("{}: {}", report.phase, report.error))
        }
        _ => None,
    }
    .or_else(|| snapshot.error.clone());
    if let Some(error) = last_error {
        let _ = writeln!(out, " Last error: {error}");
    }
    if !snapshot.attempts.is_empty() {
        let _ = writeln!(out, "\nRecent attempts:");
        for attempt in &snapshot.attempts {
            out.push_str(&render_attempt(attempt, now));
        }
    }
    out
}

/// One attempt and its phases, as `status` and `journal` print it.
fn render_attempt(attempt: &AttemptRecord, now: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let result = match attempt.result {
        AttemptResult::InProgress => "in progress",
        AttemptResult::Succeeded => "succeeded",
        AttemptResult::Failed => "failed",
        AttemptResult::Cancelled => "cancelled",
    };
    let _ = writeln!(
        out,
        "  #{} {} (started {})",
        attempt.attempt,
        result,
        ago(now, attempt.started_at.as_millis())
    );
    for phase in &attempt.phases {
        let duration = phase
            .duration_ms
            .map_or_else(|| "…".to_owned(), |ms| format!("{ms} ms"));
        let _ = writeln!(
            out,
            "     {:<20} {:>10}  {}",
            phase.phase.to_string(),
            duration,
            outcome_text(&phase.outcome)
        );
    }
    out
}

/// Seconds (from the command line) as milliseconds; `None` when negative or
/// not a number.
fn secs_to_ms(secs: f64) -> Option<u64> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Start a replacement and follow it to its end.
async fn replace(
    client: &ControlClient,
    binary: &std::path::Path,
    mode: ReplaceMode,
    setup_budget: f64,
    drain_budget: Option<f64>,
    json: bool,
) -> ExitCode {
    use steadfast::protocol::control::ReplaceRequest;
    use steadfast::protocol::replacement::{Ended, Mode, Step};
    let Some(setup_budget_ms) = secs_to_ms(setup_budget).filter(|&ms| ms > 0) else {
        eprintln!("steadfastctl: --setup-budget must be a positive number of seconds");
        return ExitCode::from(2);
    };
    let drain_budget_ms = match drain_budget.map(secs_to_ms) {
        None => None,
        Some(Some(ms)) => Some(ms),
        Some(None) => {
            eprintln!("steadfastctl: --drain-budget must be a number of seconds");
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
        eprintln!("steadfastctl: the daemon started no replacement");
        return ExitCode::from(EXIT_CANNOT_CONNECT);
    };
    let serial = report.serial;
    if !json {
        println!(
            "replacing pid {} by {} ({} mode)",
            started.pid,
            report.target,
            mode_name(report.mode)
        );
    }
    let mut printed = 0;
    loop {
        for event in report.events.iter().skip(printed) {
            if json {
                match serde_json::to_string(event) {
                    Ok(line) => println!("{line}"),
                    Err(error) => eprintln!("steadfastctl: {error}"),
                }
            } else {
                match event.answer {
                    None => println!("  {} ...", event.step),
                    Some(answer) => println!("  {} {answer:?}", event.step),
                }
            }
        }
        printed = report.events.len();
        if let Some(ended) = &report.ended {
            if json {
                match serde_json::to_string(ended) {
                    Ok(line) => println!("{line}"),
                    Err(error) => eprintln!("steadfastctl: {error}"),
                }
            }
            return match ended {
                Ended::Outcome(outcome) => {
                    if !json {
                        println!("outcome: {outcome:?}");
                    }
                    ExitCode::SUCCESS
                }
                Ended::Failed {
                    step,
                    committed,
                    message,
                    ..
                } => {
                    eprintln!(
                        "steadfastctl: the replacement failed at {step} (committed: {committed}): {message}"
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
                    eprintln!("steadfastctl: the daemon lost track of the replacement");
                    return ExitCode::from(EXIT_CANNOT_CONNECT);
                }
            },
            Err(error) if committed => {
                // The incumbent handed over and exited before the last word.
                println!("committed; the incumbent has exited ({error})");
                return ExitCode::SUCCESS;
            }
            Err(error) => return fail(&error),
        }
    }
}

const fn mode_name(mode: steadfast::protocol::replacement::Mode) -> &'static str {
    match mode {
        steadfast::protocol::replacement::Mode::Overlap => "overlap",
        steadfast::protocol::replacement::Mode::Exclusive => "exclusive",
    }
}
