//! An HTTP daemon on axum, kept up by steadfast: `POST /notes` appends its body as a line to
//! `notes` in the data dir (fsynced before the `201`), `GET /notes` answers them all, and a
//! worker writes how many there are to `notes.count` every `count_every_ms`. A drain lets a
//! request in flight finish within its grace and answers nothing after `stopped` (README
//! "Serve an axum router"). `cargo run --example axum --features axum -- --data-dir DIR`.
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::{Router, extract::State, http::StatusCode, routing::get};
use steadfast::children::{Child, Children};
use steadfast::fs::{Access, open_in_data_dir};
use steadfast::{Plan, Resource, Service, Step, StepContext, StepError, Supervisor};

#[derive(serde::Deserialize)]
struct Config {
    listen_addr: String,
    count_every_ms: u64,
}

/// The notes file, opened for appending (its lines are the notes).
type Notes = Arc<Mutex<std::fs::File>>;

fn lock(notes: &Notes) -> std::sync::MutexGuard<'_, std::fs::File> {
    notes.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn add(State(notes): State<Notes>, note: String) -> (StatusCode, String) {
    let line = format!("{}\n", note.replace('\n', " "));
    let mut file = lock(&notes);
    match file
        .write_all(line.as_bytes())
        .and_then(|()| file.sync_data())
    {
        Ok(()) => (StatusCode::CREATED, line),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

async fn list(State(notes): State<Notes>) -> Result<String, StatusCode> {
    read_all(&notes).map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)
}

fn read_all(notes: &Notes) -> std::io::Result<String> {
    let file = lock(notes);
    let mut all = vec![0; usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX)];
    std::os::unix::fs::FileExt::read_exact_at(&*file, &mut all, 0)?;
    Ok(String::from_utf8_lossy(&all).into_owned())
}

/// The background work: every `every`, count the notes into `notes.count`. A supervised child:
/// if it fails it is restarted alone (the API stays up); a drain stops it.
fn counter(data_dir: &std::path::Path, notes: Notes, every: Duration) -> Children {
    let count = data_dir.join("notes.count");
    Children::one_for_one().child(Child::task("count_notes", move |cx| {
        let (count, notes) = (count.clone(), notes.clone());
        async move {
            while tokio::time::timeout(every, cx.shutdown().cancelled())
                .await
                .is_err()
            {
                let lines = read_all(&notes).map_err(|e| e.to_string())?.lines().count();
                std::fs::write(&count, format!("{lines}\n")).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }))
}

/// Opens the notes file, serves the router on `listen_addr` and starts the worker.
struct Serve;

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = Config;
    type Output = ();
    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<()>, StepError> {
        let file = open_in_data_dir(cx.data_dir, "notes", Access::AppendCreate);
        let file = file
            .map_err(StepError::hold)?
            .into_os()
            .map_err(StepError::backoff)?;
        let notes: Notes = Arc::new(Mutex::new(file));
        let addr = &cx.config.listen_addr;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(StepError::backoff)?;
        let router = Router::new()
            .route("/notes", get(list).post(add))
            .with_state(notes.clone());
        // Not `axum::serve`: each connection a task of the runtime's, so the drain owns it.
        steadfast::serve::http(cx.runtime, "http", listener, router);
        let every = Duration::from_millis(cx.config.count_every_ms);
        let counter = counter(cx.data_dir, notes, every);
        cx.runtime
            .supervise(counter)
            .await
            .map_err(StepError::hold)?;
        Ok(Resource::new("listener", addr.clone(), ()))
    }
}

struct Notebook;

impl Service for Notebook {
    type Config = Config;
    fn plan(&self, _config: &Config) -> Plan<Config> {
        Plan::new().step(Serve)
    }
}

fn main() {
    // The command line (--data-dir, --config, the control and log flags), then a runtime,
    // the signals, the supervisor: a refused flag starts no thread, a SIGTERM is a drained exit.
    steadfast::daemon::cli::launch("axum", env!("CARGO_PKG_VERSION"))
        .defaults_toml("listen_addr = \"127.0.0.1:7080\"\ncount_every_ms = 1000")
        .main(|data_dir, config| Supervisor::builder(data_dir, Notebook).config(config))
}
