//! Supervised children of a runtime, all three strategies, watchable from
//! outside: `cargo run --example workers -- DATA_DIR [--fail NAME:MS]…`.
//!
//! - `ticker` and `cache` (a ractor actor) are one_for_one: a failing one
//!   is restarted alone;
//! - `ingest` → `index` → `publish` are rest_for_one: a failing `index`
//!   takes `publish` with it, never `ingest`;
//! - `left` and `right` are one_for_all: either failing restarts both.
//!
//! Every group allows 3 restarts within 10 s; `--fail NAME:MS` makes child
//! NAME fail every MS milliseconds (repeat the flag for several), so
//! `steadfastctl status` shows a restart, a cascade, or, when a child
//! fails faster than its group allows, a meltdown: the runtime ends, backs
//! off and boots again, within the restart budget.
use std::collections::HashMap;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use steadfast::Supervisor;
use steadfast::children::{Child, ChildContext, Children, Handle};
use steadfast::{Plan, Resource, Service, Step, StepContext, StepError};

/// How often each named child fails (`--fail NAME:MS`).
type Failures = HashMap<String, Duration>;

/// A worker's body: it runs until its shutdown, or fails after its period.
async fn work(cx: ChildContext, fail_every: Option<Duration>) -> Result<(), String> {
    match fail_every {
        Some(every) => tokio::select! {
            () = cx.shutdown().cancelled() => Ok(()),
            () = tokio::time::sleep(every) => Err(format!("{} failed on purpose", cx.name())),
        },
        None => {
            cx.shutdown().cancelled().await;
            Ok(())
        }
    }
}

fn worker(name: &str, failures: &Failures) -> Child {
    let every = failures.get(name).copied();
    Child::task(name, move |cx| work(cx, every))
}

/// A cache actor: answers how many entries it holds (none: it is a demo).
struct Cache;

impl Actor for Cache {
    type Msg = ractor::RpcReplyPort<usize>;
    type State = ();
    type Arguments = Option<Duration>;
    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        fail_every: Option<Duration>,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(every) = fail_every {
            // Fail as a panic would: the group sees the actor fail.
            tokio::spawn(async move {
                tokio::time::sleep(every).await;
                myself.stop(Some("failed on purpose".into()));
            });
        }
        Ok(())
    }
    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        reply: Self::Msg,
        (): &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let _ = reply.send(0);
        Ok(())
    }
}

struct Workers(Failures);

impl Step for Workers {
    const NAME: &'static str = "start_workers";
    type Config = toml::Table;
    type Output = Handle<ActorRef<ractor::RpcReplyPort<usize>>>;
    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Self::Output>, StepError> {
        let f = &self.0;
        let period = Duration::from_secs(10);
        let cache = Handle::new();
        let every = f.get("cache").copied();
        let groups = [
            Children::one_for_one()
                .child(worker("ticker", f))
                .child(Child::actor("cache", &cache, move || (Cache, every))),
            Children::rest_for_one()
                .child(worker("ingest", f))
                .child(worker("index", f))
                .child(worker("publish", f)),
            Children::one_for_all()
                .child(worker("left", f))
                .child(worker("right", f)),
        ];
        for group in groups {
            let group = group.intensity(3, period);
            cx.runtime.supervise(group).await.map_err(StepError::hold)?;
        }
        Ok(Resource::new("workers", "7", cache))
    }
}

struct App(Failures);

impl Service for App {
    type Config = toml::Table;
    fn plan(&self, _: &toml::Table) -> Plan<toml::Table> {
        Plan::new().step(Workers(self.0.clone()))
    }
}

/// `workers [DATA_DIR] [--fail NAME:MS]…` and steadfast's daemon flags.
#[derive(clap::Parser)]
#[command(name = "workers")]
struct Cli {
    #[command(flatten)]
    daemon: steadfast::daemon::cli::DaemonArgs,
    /// Make child NAME fail every MS milliseconds.
    #[arg(long, value_name = "NAME:MS", value_parser = parse_failure)]
    fail: Vec<(String, Duration)>,
}

fn parse_failure(text: &str) -> Result<(String, Duration), String> {
    let (name, ms) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not NAME:MS"))?;
    let ms: u64 = ms
        .parse()
        .map_err(|_| format!("{ms:?} is not a number of milliseconds"))?;
    if ms == 0 {
        return Err("a child cannot fail every 0 ms".to_owned());
    }
    Ok((name.to_owned(), Duration::from_millis(ms)))
}

fn main() {
    // The command line (--data-dir, --config, the control and log flags), then a runtime,
    // the signals, the supervisor: a refused flag starts no thread, a SIGTERM is a drained exit.
    let cli: Cli = steadfast::daemon::cli::parse(env!("CARGO_PKG_VERSION"));
    let failures: Failures = cli.fail.into_iter().collect();
    cli.daemon
        .launch("workers")
        .main(|data_dir, config| Supervisor::builder(data_dir, App(failures)).config(config))
}
