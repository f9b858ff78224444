//! The config layer over real files and a real `notify` watcher (inotify on
//! Linux): DESIGN.md "Config".
//!
//! What it checks, one test each: the watcher fires on a write and on a
//! rename-over of the declared file, stays silent for sibling files and for
//! the reads `on_change` makes, fires a burst once it is over and after its
//! last write, fires on `Poke`, and refuses to start without a parent
//! directory; a fix written while a resolve is failing shows in the
//! fingerprint (seed 004 `a_change_that_lands_during_a_failing_boot_is_not_lost`);
//! and a change to the file lets a held resolve succeed (seed 004
//! `a_change_to_the_declared_file_retries_a_held_boot`); a declared file
//! that is missing fails the resolve naming it until it is created (only
//! an optional one is an empty tier); and a resolve that blocks is given up
//! at its deadline with a typed error.
//!
//! Waits poll with a generous timeout and never assert an upper bound on
//! time. A "does not fire" check waits a settling period first, so on a
//! slow machine it can only pass vacuously, never fail spuriously.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use steadfast_actors::config::{ConfigError, ConfigSource, Fingerprint, TomlFileSource};
use steadfast_actors::testing::{
    ConfigWatcherActor, ConfigWatcherArgs, ConfigWatcherMsg, DEFAULT_DEBOUNCE, WRITER_PATIENCE,
};
use tokio::task::JoinHandle;

/// How long a positive wait may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);
/// How long a negative check waits for an event that should not come.
const SETTLE: Duration = Duration::from_millis(400);

/// What `on_change` saw: how often it ran and what the file held each time.
#[derive(Clone, Default)]
struct Probe {
    fired: Arc<AtomicUsize>,
    reads: Arc<Mutex<Vec<Option<String>>>>,
}

impl Probe {
    fn fired(&self) -> usize {
        self.fired.load(Ordering::SeqCst)
    }

    fn last_read(&self) -> Option<Option<String>> {
        self.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last()
            .cloned()
    }
}

struct Watching {
    actor: ActorRef<ConfigWatcherMsg>,
    join: JoinHandle<()>,
    probe: Probe,
}

impl Watching {
    async fn stop(self) {
        self.actor.stop(None);
        self.join.await.expect("the watcher stops cleanly");
    }
}

/// Spawns a watcher on `file` whose `on_change` counts and reads the file.
async fn watch(file: &Path, debounce: Duration) -> Watching {
    let probe = Probe::default();
    let seen = probe.clone();
    let read_path = file.to_path_buf();
    let on_change = Arc::new(move || {
        let content = std::fs::read_to_string(&read_path).ok();
        seen.reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(content);
        seen.fired.fetch_add(1, Ordering::SeqCst);
    });
    let (on_watching, in_place) = watching_flag();
    let (actor, join) = Actor::spawn(
        None,
        ConfigWatcherActor,
        ConfigWatcherArgs {
            path: file.to_path_buf(),
            debounce,
            on_change,
            on_watching,
        },
    )
    .await
    .expect("the watcher starts");
    until("the watch in place", || in_place.load(Ordering::SeqCst)).await;
    Watching { actor, join, probe }
}

/// An `on_watching` and the flag it raises.
fn watching_flag() -> (Arc<dyn Fn() + Send + Sync>, Arc<AtomicBool>) {
    let in_place = Arc::new(AtomicBool::new(false));
    let raised = Arc::clone(&in_place);
    let on_watching = Arc::new(move || raised.store(true, Ordering::SeqCst));
    (on_watching, in_place)
}

/// Polls `done` until it holds, failing the test after [`PATIENCE`].
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until a firing of `watching` has read `content` (`what` names
/// the wait in a failure).
async fn until_read(what: &str, watching: &Watching, content: &str) {
    until(what, || {
        watching.probe.last_read().flatten().as_deref() == Some(content)
    })
    .await;
}

fn declared(dir: &tempfile::TempDir) -> PathBuf {
    let file = dir.path().join("service.toml");
    std::fs::write(&file, "a = 0\n").expect("write the declared file");
    file
}

/// A plain `std::fs::write` (truncate + write in place) fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_to_the_declared_file_fires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    std::fs::write(&file, "a = 1\n").expect("write");
    until_read("a firing that reads the write", &watching, "a = 1\n").await;
    watching.stop().await;
}

/// A writer that truncates the file and writes it later (a shell's
/// `echo … > file` that is descheduled between its open and its write, a
/// program that creates the file and then renders into it) is not reported
/// half done: the empty file is not read, and the firing comes once the
/// writer closes the file and reads what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_held_open_fires_once_the_writer_closes() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    let mut writer = std::fs::File::create(&file).expect("truncate");
    // Far longer than the quiet period: a watcher that waits only for quiet
    // fires here and reads an empty file.
    tokio::time::sleep(SETTLE).await;
    assert_eq!(
        watching.probe.fired(),
        0,
        "fired while the writer still held the file open (read {:?})",
        watching.probe.last_read()
    );
    writer.write_all(b"a = 5\n").expect("write");
    drop(writer);
    until_read(
        "a firing that reads the finished write",
        &watching,
        "a = 5\n",
    )
    .await;
    assert_eq!(watching.probe.fired(), 1, "one write, one firing");
    watching.stop().await;
}

/// A writer that keeps the file open does not hide its change: the firing
/// comes after [`WRITER_PATIENCE`] and reads what was written so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_that_never_closes_fires_after_its_patience() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    let mut writer = std::fs::File::create(&file).expect("truncate");
    writer.write_all(b"a = 6\n").expect("write");
    writer.flush().expect("flush");
    let what =
        format!("a firing {WRITER_PATIENCE:?} after a write whose writer holds the file open");
    until_read(&what, &watching, "a = 6\n").await;
    assert_eq!(watching.probe.fired(), 1, "one write, one firing");
    drop(writer);
    watching.stop().await;
}

/// Writing a temp file and renaming it over the declared file (what editors
/// and Nix activation do) fires — and keeps firing: a watch on the replaced
/// inode would see the first rename and then nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rename_over_the_declared_file_fires() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    let temp = dir.path().join(".service.toml.tmp");
    for content in ["a = 2\n", "a = 3\n", "a = 4\n"] {
        std::fs::write(&temp, content).expect("write temp");
        std::fs::rename(&temp, &file).expect("rename over");
        until_read(
            &format!("a firing that reads {content:?}"),
            &watching,
            content,
        )
        .await;
    }
    watching.stop().await;
}

/// Writes, creations and renames of other files in the same directory do not
/// fire; a write to the declared file afterwards does (the watch was live).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_to_a_sibling_file_do_not_fire() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    let sibling = dir.path().join("service.toml.bak");
    for i in 0..10 {
        std::fs::write(&sibling, format!("b = {i}\n")).expect("write sibling");
    }
    std::fs::rename(&sibling, dir.path().join("other.toml")).expect("rename sibling");
    std::fs::create_dir(dir.path().join("service")).expect("mkdir sibling");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(watching.probe.fired(), 0, "a sibling fired on_change");

    std::fs::write(&file, "a = 3\n").expect("write");
    until("a firing", || watching.probe.fired() >= 1).await;
    watching.stop().await;
}

/// `on_change` reading the file makes inotify report an open and a close;
/// those are not changes, so one write fires once, not forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reading_the_file_in_on_change_does_not_fire_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    // A long quiet period, so the one write cannot split into two bursts.
    let watching = watch(&file, Duration::from_millis(200)).await;
    std::fs::write(&file, "a = 4\n").expect("write");
    until("a firing", || watching.probe.fired() >= 1).await;
    tokio::time::sleep(SETTLE + Duration::from_millis(200)).await;
    assert_eq!(watching.probe.fired(), 1, "the read in on_change refired");
    watching.stop().await;
}

/// 200 rapid writes fire far fewer than 200 times, and the last firing comes
/// after the last write: it reads the last content written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_writes_fires_after_the_last_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    let last = "n = 199\n".to_owned();
    for i in 0..200 {
        std::fs::write(&file, format!("n = {i}\n")).expect("write");
    }
    until_read("a firing that reads the last write", &watching, &last).await;
    tokio::time::sleep(SETTLE).await;
    let fired = watching.probe.fired();
    assert!(
        (1..=200).contains(&fired),
        "fired {fired} times for 200 writes"
    );
    assert_eq!(
        watching.probe.last_read(),
        Some(Some(last)),
        "a firing after the last one read something else"
    );
    watching.stop().await;
}

/// `Poke` fires without any change to the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poke_fires_now() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = declared(&dir);
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    watching.actor.cast(ConfigWatcherMsg::Poke).expect("poke");
    until("a firing", || watching.probe.fired() >= 1).await;
    watching.actor.cast(ConfigWatcherMsg::Poke).expect("poke");
    until("a second firing", || watching.probe.fired() >= 2).await;
    assert_eq!(watching.probe.last_read(), Some(Some("a = 0\n".to_owned())));
    watching.stop().await;
}

/// Without a parent directory there is nothing to watch: the actor does not
/// start, and the error names the directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_parent_directory_fails_to_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-dir");
    let result = Actor::spawn(
        None,
        ConfigWatcherActor,
        ConfigWatcherArgs {
            path: missing.join("service.toml"),
            debounce: DEFAULT_DEBOUNCE,
            on_change: Arc::new(|| {}),
            on_watching: Arc::new(|| {}),
        },
    )
    .await;
    let Err(error) = result else {
        panic!("a watcher over a missing directory started");
    };
    let text = error.to_string();
    assert!(text.contains("no-such-dir"), "{text}");
}

/// seed 004 `a_change_that_lands_during_a_failing_boot_is_not_lost`: the
/// supervisor fingerprints the declared file before a boot resolves; a fix
/// written while that resolve fails makes the file's fingerprint differ when
/// the failure lands, and no write leaves it equal (the hold stands).
#[test]
fn a_fix_written_during_a_failing_resolve_changes_the_fingerprint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.toml");
    std::fs::write(&file, "broken = \n").expect("write");
    let source = TomlFileSource::new().required_file(&file).into_source();

    let before = Fingerprint::of_file(&file);
    let failed = source
        .resolve()
        .expect_err("the broken file does not parse");
    assert!(matches!(failed, ConfigError::Parse { .. }), "{failed:?}");
    assert_eq!(Fingerprint::of_file(&file), before, "no write: stay held");

    let before = Fingerprint::of_file(&file);
    let failed = source.resolve().expect_err("still broken");
    std::fs::write(&file, "fixed = true\n").expect("the fix lands mid-boot");
    assert!(matches!(failed, ConfigError::Parse { .. }), "{failed:?}");
    assert_ne!(
        Fingerprint::of_file(&file),
        before,
        "the fix is seen: retry"
    );

    let resolved = source.resolve().expect("the retry reads the fix");
    assert_eq!(resolved.fingerprint, Some(Fingerprint::of_file(&file)));
    assert_eq!(
        resolved.config.get("fixed"),
        Some(&toml::Value::Boolean(true))
    );
}

/// seed 004 `a_change_to_the_declared_file_retries_a_held_boot`, at this
/// layer: the watcher's `on_change` retries a resolve that failed, and the
/// fix written to the file lets it succeed, with no one asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_to_the_declared_file_lets_a_held_resolve_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.toml");
    std::fs::write(&file, "[server\n").expect("write");
    let source = TomlFileSource::new()
        .defaults_toml("[server]\nworkers = 1\n")
        .required_file(&file)
        .into_source();
    source.resolve().expect_err("held on a broken file");

    resolved_once_written(&source, &file).await;
}

/// Watch `file` with the real watcher, resolving `source` again on each
/// change (as a held boot is retried), write `workers = 8` to it, and wait
/// until a resolve reads it.
async fn resolved_once_written(source: &ConfigSource, file: &Path) {
    let outcome: Arc<Mutex<Option<Result<i64, String>>>> = Arc::default();
    let seen = outcome.clone();
    let retry = source.clone();
    let (on_watching, in_place) = watching_flag();
    let (actor, join) = Actor::spawn(
        None,
        ConfigWatcherActor,
        ConfigWatcherArgs {
            path: file.to_owned(),
            debounce: DEFAULT_DEBOUNCE,
            on_change: Arc::new(move || {
                let result = retry
                    .resolve()
                    .map(|r| r.config["server"]["workers"].as_integer().unwrap_or(-1))
                    .map_err(|e| e.to_string());
                *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
            }),
            on_watching,
        },
    )
    .await
    .expect("the watcher starts (on the directory of a missing file, too)");
    until("the watch in place", || in_place.load(Ordering::SeqCst)).await;
    std::fs::write(file, "[server]\nworkers = 8\n").expect("write the file");
    until("a resolve that reads the written file", || {
        matches!(
            *outcome.lock().unwrap_or_else(PoisonError::into_inner),
            Some(Ok(8))
        )
    })
    .await;
    actor.stop(None);
    join.await.expect("the watcher stops cleanly");
}

/// A declared file at a wrong path is never run on the defaults: the
/// resolve fails with `Missing`, naming the path (what the boot holds on
/// and `status` shows); `required_file` is the same. Created, the watcher
/// sees it appear and the held resolve succeeds with no one asking. Only
/// `optional_file` reads a missing file as an empty tier. Before, a
/// `declared_file` with a typo ran on the defaults without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_declared_file_holds_until_it_appears_unless_optional() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.toml");
    let defaults = "[server]\nworkers = 1\n";
    for source in [
        TomlFileSource::new()
            .defaults_toml(defaults)
            .declared_file(&file),
        TomlFileSource::new()
            .defaults_toml(defaults)
            .required_file(&file),
    ] {
        match source.resolve() {
            Err(error @ ConfigError::Missing { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&file.display().to_string()), "{message}");
                assert!(message.contains("does not exist"), "{message}");
            }
            other => panic!("a missing declared file resolved: {other:?}"),
        }
    }
    let optional = TomlFileSource::new()
        .defaults_toml(defaults)
        .optional_file(&file)
        .resolve()
        .expect("an optional file may be missing");
    assert_eq!(optional.config["server"]["workers"].as_integer(), Some(1));

    let source = TomlFileSource::new()
        .defaults_toml(defaults)
        .declared_file(&file)
        .into_source();
    assert_eq!(source.declared_path(), Some(file.as_path()), "watched");
    resolved_once_written(&source, &file).await;
}

/// `steadfastctl config set` values: TOML where the text is TOML, else the
/// text as a string; and back to the same text.
#[test]
fn operator_values_parse_as_toml_or_as_a_string_and_print_back() {
    use steadfast_actors::config::{Overrides, parse_value, value_text};
    use toml::Value;
    assert_eq!(parse_value("8080"), Value::Integer(8080));
    assert_eq!(parse_value("true"), Value::Boolean(true));
    assert_eq!(parse_value("\"quoted\""), Value::String("quoted".into()));
    assert_eq!(parse_value("debug"), Value::String("debug".into()));
    // Not one value: the whole text is the string, nothing else is set.
    assert_eq!(
        parse_value("1\nother = 2"),
        Value::String("1\nother = 2".into())
    );
    for text in ["8080", "true", "\"quoted\"", "[1, 2]", "{ a = 1 }", "1.5"] {
        assert_eq!(value_text(&parse_value(text)), text, "{text}");
    }
    let tier = Overrides::new();
    tier.load_text(&[("a.b".into(), "[1, 2]".into())]).unwrap();
    assert_eq!(tier.to_text(), [("a.b".to_owned(), "[1, 2]".to_owned())]);
    assert!(tier.load_text(&[("a..b".into(), "1".into())]).is_err());
    assert!(tier.load_text(&[("c".into(), "not toml".into())]).is_err());
    assert_eq!(tier.list().len(), 1, "a failed load sets nothing");
}

/// A resolve that blocks (a hung file system, a source
/// that waits) is given up at its deadline with a typed error; the caller
/// goes on while the blocked read stays on its own thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_blocks_is_given_up_at_the_deadline() {
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let blocked = Mutex::new(blocked);
    let source = steadfast_actors::config::ConfigSource::new(move || {
        let _ = blocked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv();
        Err(ConfigError::Invalid("released".into()))
    });
    let deadline = Duration::from_millis(50);
    match source.resolve_within(deadline).await {
        Err(error @ ConfigError::TimedOut { .. }) => {
            assert!(
                error.to_string().contains("did not finish within 50ms"),
                "{error}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    release.send(()).expect("the blocked resolve still waits");

    // The fingerprint's bounded read: a FIFO is unreadable, at once.
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.toml");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .expect("mkfifo");
    let fingerprint = Fingerprint::of_file_within(&fifo, PATIENCE).await;
    assert!(!fingerprint.is_readable());
    assert_eq!(fingerprint, Fingerprint::of_file(&fifo));
}

/// A source that reads nothing (a fixed table, defaults without a
/// declared file) resolves on the caller's thread, not on a blocking one
/// (a thread hop per boot, and a blocking pool that grows with the
/// supervisors in a process); one that may read a file still goes to a
/// blocking thread; a panic in place is still a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_reads_nothing_resolves_in_place() {
    use steadfast_actors::config::{ConfigSource, ResolvedConfig};
    let here = std::thread::current().id();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let on = |seen: &Arc<Mutex<Vec<_>>>| {
        let seen = Arc::clone(seen);
        move || {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(std::thread::current().id());
            Ok(ResolvedConfig::untracked(toml::Table::new()))
        }
    };
    ConfigSource::in_place(on(&seen))
        .resolve_within(PATIENCE)
        .await
        .expect("resolves");
    ConfigSource::new(on(&seen))
        .resolve_within(PATIENCE)
        .await
        .expect("resolves");
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(seen[0], here, "in place: on the caller's thread");
    assert_ne!(
        seen[1], here,
        "a source that may block: on a blocking thread"
    );

    let fixed = ConfigSource::fixed(toml::toml! { port = 1 })
        .resolve_within(PATIENCE)
        .await
        .expect("resolves");
    assert_eq!(fixed.config, toml::toml! { port = 1 });
    let defaults = TomlFileSource::new()
        .defaults_toml("port = 2")
        .into_source()
        .resolve_within(PATIENCE)
        .await
        .expect("resolves");
    assert_eq!(defaults.config, toml::toml! { port = 2 });
    let broken = TomlFileSource::new()
        .defaults_toml("port = ")
        .into_source()
        .resolve_within(PATIENCE)
        .await
        .expect_err("a parse error");
    assert!(matches!(broken, ConfigError::Parse { .. }), "{broken:?}");

    let panicked = ConfigSource::in_place(|| panic!("no config here"))
        .resolve_within(PATIENCE)
        .await
        .expect_err("a panic is an error");
    assert!(
        matches!(&panicked, ConfigError::Invalid(why) if why.contains("no config here")),
        "{panicked:?}"
    );
}

/// A boot's `resolve_config` fingerprints the declared file and
/// resolves in one blocking hop; the fingerprint is still the file as it
/// was *before* the source read it (a write that lands after the read makes
/// the file differ from it, so the change is not lost), it is kept when the
/// resolve passes its deadline, and there is none without a declared file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_fingerprints_the_file_before_its_source_reads_it() {
    use steadfast_actors::config::{ConfigSource, ResolvedConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.toml");
    std::fs::write(&file, "note = \"before\"\n").expect("write");
    let reads = Arc::new(AtomicUsize::new(0));
    let source = {
        let (read, reads) = (file.clone(), Arc::clone(&reads));
        ConfigSource::new(move || {
            let text = std::fs::read_to_string(&read).expect("read");
            reads.fetch_add(1, Ordering::SeqCst);
            // A change lands right after the source read the file.
            std::fs::write(&read, "note = \"after\"\n").expect("the change lands");
            Ok(ResolvedConfig::untracked(text.parse().expect("parses")))
        })
        .watching(&file)
    };
    let (fingerprint, resolved) = source.resolve_fingerprinted_within(PATIENCE).await;
    let resolved = resolved.expect("resolves");
    assert_eq!(resolved.config, toml::toml! { note = "before" });
    assert_eq!(
        fingerprint,
        Some(Fingerprint::of_bytes(b"note = \"before\"\n")),
        "taken before the read"
    );
    assert_ne!(
        fingerprint,
        Some(Fingerprint::of_file(&file)),
        "the change shows"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 1);

    // A resolve that passes its deadline keeps the fingerprint taken first.
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = Mutex::new(held);
    let stuck = ConfigSource::new(move || {
        let _ = held.lock().unwrap_or_else(PoisonError::into_inner).recv();
        Ok(ResolvedConfig::untracked(toml::Table::new()))
    })
    .watching(&file);
    let (fingerprint, resolved) = stuck
        .resolve_fingerprinted_within(Duration::from_millis(50))
        .await;
    assert!(
        matches!(resolved, Err(ConfigError::TimedOut { .. })),
        "{resolved:?}"
    );
    assert_eq!(
        fingerprint,
        Some(Fingerprint::of_bytes(b"note = \"after\"\n"))
    );
    release.send(()).expect("the stuck source is released");

    let (fingerprint, resolved) = ConfigSource::fixed(toml::toml! { port = 1 })
        .resolve_fingerprinted_within(PATIENCE)
        .await;
    assert_eq!(fingerprint, None, "no declared file, no fingerprint");
    assert_eq!(resolved.expect("resolves").config, toml::toml! { port = 1 });
}

/// A ConfigMap volume's update as the kubelet makes it: `name` is
/// `..data/name`, `..data` links to a timestamped directory; an update
/// writes a new timestamped directory, links `..data_tmp` to it, renames
/// `..data_tmp` over `..data` (atomically) and removes the old directory.
fn kubelet_update(dir: &Path, name: &str, content: &str, serial: u32) {
    let stamp = format!("..2026_12_01_10_00_{serial:02}.{serial:09}");
    let versioned = dir.join(&stamp);
    std::fs::create_dir(&versioned).expect("mkdir the timestamped dir");
    std::fs::write(versioned.join(name), content).expect("write the new version");
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(&stamp, &tmp).expect("link ..data_tmp");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    let user = dir.join(name);
    if std::fs::symlink_metadata(&user).is_err() {
        std::os::unix::fs::symlink(Path::new("..data").join(name), &user).expect("link the file");
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).expect("remove the old version");
    }
}

/// The kubelet's `..data` swap fires (none of its events names the file
/// itself: only `..data`, `..data_tmp` and the timestamped directories),
/// every time, and the firing reads the new content through the links.
/// Before, only events naming `service.toml` counted, so a ConfigMap
/// update went unseen until SIGHUP.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_configmap_style_data_swap_fires() {
    let dir = tempfile::tempdir().expect("tempdir");
    kubelet_update(dir.path(), "service.toml", "a = 0\n", 0);
    let file = dir.path().join("service.toml");
    assert_eq!(
        steadfast_actors::testing::entries_resolved_through(&file, dir.path()),
        vec![
            file.clone(),
            dir.path().join("..data"),
            dir.path().join("..2026_12_01_10_00_00.000000000"),
        ],
        "the entries the path resolves through"
    );
    let watching = watch(&file, DEFAULT_DEBOUNCE).await;
    for serial in 1..=3 {
        let content = format!("a = {serial}\n");
        kubelet_update(dir.path(), "service.toml", &content, serial);
        until_read(
            &format!("a firing that reads {content:?}"),
            &watching,
            &content,
        )
        .await;
    }
    watching.stop().await;
}
