//! The handover between the incumbent of a replacement and its candidate:
//! open files (the data dir's lock; in overlap, listening sockets) passed
//! over a Unix socket with `SCM_RIGHTS`.
//!
//! The incumbent binds `<data_dir>/.steadfast/handover.sock` (in the 0700
//! control directory) before it starts the candidate, and tells the candidate
//! where it is in the [`HANDOVER_ENV`] environment variable. It serves one
//! connection, and only from the candidate's pid (checked with
//! `SO_PEERCRED`): one message, the names of the files as a line of text,
//! the files themselves as ancillary data. A failed accept (out of
//! descriptors) pauses the loop and accepts again
//! (`steadfast_actors::accept::AcceptBackoff`): it never gives the
//! handover up while the candidate's connection waits in the queue.
//!
//! The message starts with a header naming the data dir it is for (its
//! `(st_dev, st_ino)`, `DirKey`), taken by the incumbent from its open
//! control directory's parent.
//!
//! The candidate receives it once, when its first supervisor is built
//! (`SupervisorBuilder::build`), and keeps what it received by that data
//! dir until the supervisor of that data dir is built: that supervisor
//! takes the lock (the same open file as the incumbent's, so the lock is
//! held throughout and outlives the incumbent: there is no moment at which
//! a third daemon could take the data dir) and the files, into its own
//! [`Handover`]. A process that runs several supervisors gives each its
//! own, and the one a handover does not name opens its data dir as an
//! ordinary daemon; the application takes its files by name from its
//! supervisor's [`Handover`] (`StepContext::handover`).
//!
//! What to hand over in overlap (a listening socket, a store's lock) is
//! offered by the application with [`Handover::share`] when it opens it,
//! and withdrawn with [`Handover::withdraw`] when it closes it; a
//! replacement hands over its own supervisor's offers only, and they go
//! with the supervisor. Exclusive hands over the lock only.
//!
//! The connection stays open after the files were handed over, until the
//! incumbent settles the replacement: it is the candidate's way back to
//! its incumbent while it is not yet selected (`Incumbent`). An `exit`
//! the candidate is asked for then (its control socket already has the
//! incumbent's name) is a stop *of the replacement*: the candidate sends it
//! back (`stop exit halt`, `stop exit relaunch`), the incumbent takes it
//! (`taken`) and decides it as a stop that arrived at the incumbent
//! (`protocol/src/replacement.rs`, "A stop during a replace"); once the
//! incumbent has committed (or is gone) the connection is closed and the
//! candidate carries its stops out itself. A signal is never sent back: a
//! candidate is signalled by its incumbent's roll-back.
//!
//! Checked by the unit tests here (`the_expected_peer_receives_the_lock_and_the_shared_files`,
//! `a_candidate_hands_an_exit_back_until_the_offer_is_dropped`,
//! `another_peer_gets_nothing`, `no_socket_is_not_found`,
//! `two_supervisors_in_a_candidate_each_get_their_own_lock`: a real
//! candidate process with two data dirs), by `embedding.rs`'s
//! `a_later_supervisor_of_the_same_data_dir_offers_nothing_of_an_earlier_one`
//! and by
//! `tests/it/replace.rs` (real kvd processes). A [`HANDOVER_ENV`] naming a
//! socket nobody serves (an inherited environment, a dead incumbent) hands
//! nothing over: the data dir's lock alone decides who runs.

use std::collections::HashMap;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use steadfast_actors::handover::LOCK;
pub use steadfast_actors::handover::{Handover, HandoverError};
use steadfast_protocol::lifecycle::ExitIntent;
use steadfast_protocol::replacement::Stop;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use steadfast_actors::accept::AcceptBackoff;

/// The environment variable that tells a candidate where the handover
/// socket is.
pub const HANDOVER_ENV: &str = "STEADFAST_HANDOVER";

/// The most files one handover carries.
pub const MAX_FILES: usize = 16;

fn invalid(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.into())
}

/// A data dir's identity: its `(st_dev, st_ino)`, which a handover names
/// and the candidate's supervisors are matched by (a path may be spelled
/// two ways; the directory is one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DirKey {
    dev: u64,
    ino: u64,
}

impl DirKey {
    /// The identity of the directory `data_dir` names now.
    pub(crate) fn of(data_dir: &Path) -> Result<Self, HandoverError> {
        let stat = rustix::fs::stat(data_dir).map_err(|e| {
            std::io::Error::new(
                std::io::Error::from(e).kind(),
                format!("{}: {e}", data_dir.display()),
            )
        })?;
        Ok(Self::from_stat(&stat))
    }

    /// The identity of the directory `stat` describes.
    pub(crate) fn from_stat(stat: &rustix::fs::Stat) -> Self {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        Self {
            dev: stat.st_dev as u64,
            ino: stat.st_ino as u64,
        }
    }

    /// The identity of the directory `meta` describes.
    pub(crate) const fn from_meta(meta: &steadfast_actors::fsx::Meta) -> Self {
        Self {
            dev: meta.dev,
            ino: meta.ino,
        }
    }

    /// The header line a handover starts with.
    fn header(self) -> String {
        format!("{DATA_DIR} {} {}\n", self.dev, self.ino)
    }

    fn parse_header(line: &str) -> Option<Self> {
        let mut words = line.strip_prefix(DATA_DIR)?.split_whitespace();
        let key = Self {
            dev: words.next()?.parse().ok()?,
            ino: words.next()?.parse().ok()?,
        };
        words.next().is_none().then_some(key)
    }
}

/// The header word naming the data dir a handover is for.
const DATA_DIR: &str = "steadfast:data-dir";

/// What one handover carried, for the supervisor of one data dir.
#[derive(Debug, Default)]
struct Handed {
    /// The incumbent that sent it (its pid, from the handover socket's
    /// peer credentials).
    incumbent: Option<u32>,
    files: HashMap<String, OwnedFd>,
    /// The connection it came on, the way back to the incumbent.
    back: Option<std::os::unix::net::UnixStream>,
}

/// A candidate's way back to its incumbent while it is not yet selected:
/// the handover's connection (module doc). Empty in a daemon that is no
/// candidate, and once the incumbent closed it.
#[derive(Debug, Default)]
pub(crate) struct Incumbent(Mutex<Option<std::os::unix::net::UnixStream>>);

impl Incumbent {
    /// Whether the way back is open: this process is a candidate its
    /// incumbent has not let go of yet.
    pub(crate) fn is_open(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Hand `stop` to the incumbent; whether it took it (then the stop is
    /// the replacement's to decide, and this process does nothing more for
    /// it). `false` once the incumbent closed the connection (it committed,
    /// or is gone): carry the stop out here. Blocking: call it off the
    /// runtime's workers.
    pub(crate) fn hand_back(&self, stop: Stop) -> bool {
        use std::io::{BufRead, Write};
        let mut back = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(stream) = back.as_mut() else {
            return false;
        };
        let taken = (|| {
            stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
            stream.write_all(format!("{}\n", stop_line(stop)).as_bytes())?;
            let mut answer = String::new();
            std::io::BufReader::new(&*stream).read_line(&mut answer)?;
            Ok::<_, std::io::Error>(answer.trim_end() == TAKEN)
        })()
        .unwrap_or(false);
        if !taken {
            // Closed or broken: from now on this process is on its own.
            *back = None;
        }
        taken
    }
}

/// The incumbent's answer to a stop it took.
const TAKEN: &str = "taken";

/// A stop as a line of the back channel.
fn stop_line(stop: Stop) -> &'static str {
    match stop {
        Stop::Signal => "stop signal",
        Stop::Exit(ExitIntent::Halt) => "stop exit halt",
        Stop::Exit(ExitIntent::Relaunch) => "stop exit relaunch",
    }
}

/// The stop a line of the back channel names; `None` for anything else.
fn parse_stop_line(line: &str) -> Option<Stop> {
    [
        Stop::Signal,
        Stop::Exit(ExitIntent::Halt),
        Stop::Exit(ExitIntent::Relaunch),
    ]
    .into_iter()
    .find(|&stop| stop_line(stop) == line)
}

/// What this process received as a candidate, by the data dir each
/// handover was for (empty when it is not one). Read once, from
/// [`HANDOVER_ENV`]; each supervisor takes only what names its data dir.
static RECEIVED: OnceLock<Mutex<HashMap<DirKey, Handed>>> = OnceLock::new();

fn received() -> Result<&'static Mutex<HashMap<DirKey, Handed>>, HandoverError> {
    // One receiver at a time: the incumbent serves one connection only.
    static RECEIVING: Mutex<()> = Mutex::new(());
    let _receiving = RECEIVING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(files) = RECEIVED.get() {
        return Ok(files);
    }
    let mut by_dir = HashMap::new();
    if let Some(path) = std::env::var_os(HANDOVER_ENV) {
        match receive(Path::new(&path)) {
            Ok((key, handed)) => {
                by_dir.insert(key, handed);
            }
            // Nothing listens there (any more): an environment inherited
            // from an old replacement, or an incumbent that died. Nothing
            // is handed over; the data dir's lock decides who runs.
            Err(HandoverError(error))
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                tracing::warn!(%error, "no handover: starting as an ordinary daemon");
            }
            Err(error) => return Err(error),
        }
    }
    Ok(RECEIVED.get_or_init(|| Mutex::new(by_dir)))
}

/// Take all that was handed over for `data_dir` (its lock among the
/// files); `None` when this process is not a candidate for `data_dir`.
fn take_received(data_dir: &Path) -> Result<Option<Handed>, HandoverError> {
    let received = received()?;
    let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
    if received.is_empty() {
        return Ok(None);
    }
    match DirKey::of(data_dir) {
        Ok(key) => Ok(received.remove(&key)),
        // A data dir that does not exist yet was handed over by no one.
        Err(HandoverError(error)) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Connect to the incumbent's handover socket and receive its files.
fn receive(path: &Path) -> Result<(DirKey, Handed), HandoverError> {
    let stream = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let incumbent = rustix::net::sockopt::socket_peercred(&stream)
        .ok()
        .and_then(|cred| u32::try_from(cred.pid.as_raw_nonzero().get()).ok());
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let mut bytes = [0u8; 4096];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FILES))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if got.bytes == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the incumbent closed the handover without handing anything over",
        )
        .into());
    }
    let text = bytes
        .get(..got.bytes)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(|| invalid("the handover's names are not text"))?;
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let key = lines
        .next()
        .and_then(DirKey::parse_header)
        .ok_or_else(|| invalid("the handover does not name its data dir"))?;
    let names: Vec<&str> = lines.collect();
    if names.len() != fds.len() {
        return Err(invalid(format!(
            "the handover named {} files but carried {}",
            names.len(),
            fds.len()
        ))
        .into());
    }
    let files = names.into_iter().map(String::from).zip(fds).collect();
    stream.set_read_timeout(None)?;
    Ok((
        key,
        Handed {
            incumbent,
            files,
            back: Some(stream),
        },
    ))
}

/// Why [`open_control_dir`] could not open a control directory.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The incumbent's handover could not be received.
    #[error(transparent)]
    Handover(#[from] HandoverError),
    /// The control directory could not be opened (or another daemon holds it).
    #[error(transparent)]
    ControlDir(#[from] steadfast_actors::control_dir::ControlDirError),
}

/// Open `data_dir`'s control directory, as `SupervisorBuilder::build` does: with
/// the lock the incumbent handed over for this data dir when this process
/// is its candidate, else by taking the lock; with the supervisor's
/// [`Handover`], holding the other files handed over for it. A handover for
/// another data dir is left to that data dir's supervisor.
///
/// # Errors
/// [`HANDOVER_ENV`] is set but the handover could not be received; the
/// control directory could not be opened (or another daemon holds it).
pub(crate) fn open_control_dir(
    data_dir: &Path,
) -> Result<
    (
        steadfast_actors::control_dir::ControlDir,
        Handover,
        Incumbent,
    ),
    OpenError,
> {
    use steadfast_actors::control_dir::ControlDir;
    let Handed {
        incumbent,
        mut files,
        back,
    } = take_received(data_dir)?.unwrap_or_default();
    let control = match files.remove(LOCK) {
        Some(lock) => ControlDir::open_handed_over(data_dir, File::from(lock).into(), incumbent)?,
        None => ControlDir::open(data_dir)?,
    };
    Ok((
        control,
        Handover::received(files),
        Incumbent(Mutex::new(back)),
    ))
}

/// What the incumbent does with a stop its candidate handed back: decide
/// it as its own (`SupervisorHandle::exit_by`), in a task of its own so
/// that the roll-back an abort brings (which drops the [`Offer`]) does not
/// cancel it.
pub(crate) type OnStop = Box<dyn Fn(Stop) + Send + Sync>;

/// The incumbent's side: a bound handover socket, serving the files to one
/// peer. Dropping it stops serving and removes the socket.
#[derive(Debug)]
pub(crate) struct Offer {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
    peer: tokio::sync::watch::Sender<Option<u32>>,
    served: tokio::sync::watch::Receiver<bool>,
}

impl Offer {
    /// Bind the handover socket in `control_dir`, to hand `lock` and
    /// `listeners` (for the data dir `key`) to the peer named later with
    /// [`Offer::expect_pid`].
    pub(crate) fn bind(
        control_dir: &Path,
        key: DirKey,
        lock: OwnedFd,
        listeners: Vec<(String, OwnedFd)>,
        on_stop: OnStop,
    ) -> Result<Self, HandoverError> {
        if listeners.len() + 1 > MAX_FILES {
            return Err(invalid("too many files to hand over").into());
        }
        let path = control_dir.join("handover.sock");
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let listener = tokio::net::UnixListener::bind(&path)?;
        let (peer, mut expected) = tokio::sync::watch::channel(None::<u32>);
        let (served_tx, served) = tokio::sync::watch::channel(false);
        let mut names = key.header();
        names.push_str(LOCK);
        names.push('\n');
        let mut fds = vec![lock];
        for (name, fd) in listeners {
            names.push_str(&name);
            names.push('\n');
            fds.push(fd);
        }
        let task = tokio::spawn(async move {
            let mut backoff = AcceptBackoff::new("handover socket");
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => {
                        backoff.accepted();
                        stream
                    }
                    // Out of descriptors, mostly: the candidate's
                    // connection waits in the queue; accept again after a
                    // pause, never give the handover up.
                    Err(error) => {
                        backoff.failed(&error).await;
                        continue;
                    }
                };
                let pid = stream
                    .peer_cred()
                    .ok()
                    .and_then(|cred| cred.pid())
                    .and_then(|pid| u32::try_from(pid).ok());
                // Wait until the candidate's pid is known (the spawn returns
                // after the candidate may already have connected).
                let wanted = match expected.wait_for(Option::is_some).await {
                    Ok(pid) => *pid,
                    Err(_) => return,
                };
                if pid.is_none() || pid != wanted {
                    tracing::warn!(
                        ?pid,
                        ?wanted,
                        "handover: a peer that is not the candidate was refused"
                    );
                    continue;
                }
                let Ok(stream) = stream.into_std() else {
                    return;
                };
                let sent = stream
                    .set_nonblocking(false)
                    .and_then(|()| send(&stream, &names, &fds));
                match sent {
                    Ok(()) => {
                        let _ = served_tx.send(true);
                        serve_back(stream, &on_stop).await;
                        return;
                    }
                    Err(error) => tracing::warn!(%error, "handover: sending the files failed"),
                }
            }
        });
        Ok(Self {
            path,
            task,
            peer,
            served,
        })
    }

    /// The path the candidate is told in [`HANDOVER_ENV`].
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Serve only the process `pid`.
    pub(crate) fn expect_pid(&self, pid: u32) {
        let _ = self.peer.send(Some(pid));
    }

    /// Whether the candidate has received the files.
    pub(crate) fn served(&self) -> bool {
        *self.served.borrow()
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Read the stops the candidate hands back until it closes the
/// connection (or the offer is dropped): each is handed to `on_stop` and
/// answered [`TAKEN`].
async fn serve_back(stream: std::os::unix::net::UnixStream, on_stop: &OnStop) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let Ok(stream) = stream
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(stream))
    else {
        return;
    };
    let (read, mut write) = stream.into_split();
    let mut lines = tokio::io::BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(stop) = parse_stop_line(&line) else {
            tracing::warn!(line, "handover: the candidate sent what is not a stop");
            return;
        };
        tracing::info!(?stop, "the candidate handed back a stop it was asked for");
        on_stop(stop);
        if write
            .write_all(format!("{TAKEN}\n").as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

fn send(
    stream: &std::os::unix::net::UnixStream,
    names: &str,
    fds: &[OwnedFd],
) -> std::io::Result<()> {
    let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FILES))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(invalid("the handover's files do not fit"));
    }
    let sent = sendmsg(
        stream,
        &[IoSlice::new(names.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )?;
    if sent != names.len() {
        return Err(invalid("the handover's names were cut short"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer_in(dir: &Path) -> (Offer, std::net::TcpListener, File) {
        let lock = File::create(dir.join("lock")).expect("lock file");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
        let shared = vec![(
            "app:listener".to_owned(),
            listener.as_fd().try_clone_to_owned().expect("dup"),
        )];
        let key = DirKey::of(dir).expect("key");
        let offer = Offer::bind(
            dir,
            key,
            lock.as_fd().try_clone_to_owned().expect("dup"),
            shared,
            Box::new(|_| {}),
        )
        .expect("bind");
        (offer, listener, lock)
    }

    #[tokio::test(flavor = "multi_thread")]
    #[allow(clippy::disallowed_methods)] // a real thread's send, waited for in real time
    async fn the_expected_peer_receives_the_lock_and_the_shared_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (offer, listener, lock) = offer_in(dir.path());
        offer.expect_pid(std::process::id());
        let path = offer.path().to_owned();
        let (key, handed) = tokio::task::spawn_blocking(move || receive(&path))
            .await
            .expect("join")
            .expect("received");
        assert_eq!(
            key,
            DirKey::of(dir.path()).expect("key"),
            "it names its data dir"
        );
        assert_eq!(handed.incumbent, Some(std::process::id()));
        let mut files = handed.files;
        let got = std::net::TcpListener::from(files.remove("app:listener").expect("listener"));
        assert_eq!(got.local_addr().ok(), listener.local_addr().ok());
        let got = File::from(files.remove(LOCK).expect("lock"));
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (
            got.metadata().expect("meta"),
            lock.metadata().expect("meta"),
        );
        assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
        assert!(files.is_empty());
        // The offer learns it was served just after the peer received.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !offer.served() {
            assert!(std::time::Instant::now() < deadline, "never marked served");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let socket = offer.path().to_owned();
        drop(offer);
        assert!(!socket.exists(), "dropping the offer removes its socket");
    }

    /// The way back: a candidate hands an `exit` back while its
    /// incumbent's offer stands (the incumbent takes it and decides it);
    /// once the offer is dropped (the incumbent committed, or is gone) the
    /// candidate is on its own, and says so.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_candidate_hands_an_exit_back_until_the_offer_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = File::create(dir.path().join("lock")).expect("lock file");
        let (taken_tx, mut taken) = tokio::sync::mpsc::unbounded_channel();
        let offer = Offer::bind(
            dir.path(),
            DirKey::of(dir.path()).expect("key"),
            lock.as_fd().try_clone_to_owned().expect("dup"),
            Vec::new(),
            Box::new(move |stop| {
                let _ = taken_tx.send(stop);
            }),
        )
        .expect("bind");
        offer.expect_pid(std::process::id());
        let path = offer.path().to_owned();
        let (_, handed) = tokio::task::spawn_blocking(move || receive(&path))
            .await
            .expect("join")
            .expect("received");
        let incumbent = std::sync::Arc::new(Incumbent(Mutex::new(handed.back)));
        assert!(incumbent.is_open());
        let back = std::sync::Arc::clone(&incumbent);
        let handed_back =
            tokio::task::spawn_blocking(move || back.hand_back(Stop::Exit(ExitIntent::Relaunch)))
                .await
                .expect("join");
        assert!(handed_back, "the incumbent took it");
        assert_eq!(taken.recv().await, Some(Stop::Exit(ExitIntent::Relaunch)));
        drop(offer);
        let back = std::sync::Arc::clone(&incumbent);
        let handed_back =
            tokio::task::spawn_blocking(move || back.hand_back(Stop::Exit(ExitIntent::Halt)))
                .await
                .expect("join");
        assert!(!handed_back, "no incumbent to take it");
        assert!(!incumbent.is_open());
        assert_eq!(
            parse_stop_line("stop exit halt"),
            Some(Stop::Exit(ExitIntent::Halt))
        );
        assert_eq!(parse_stop_line("stop signal"), Some(Stop::Signal));
        assert_eq!(parse_stop_line("stop everything"), None);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn another_peer_gets_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (offer, _listener, _lock) = offer_in(dir.path());
        // Not us: pid 1.
        offer.expect_pid(1);
        let path = offer.path().to_owned();
        let answer = tokio::task::spawn_blocking(move || receive(&path))
            .await
            .expect("join");
        assert!(answer.is_err(), "{answer:?}");
        assert!(!offer.served());
    }

    #[test]
    fn no_socket_is_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = receive(&dir.path().join("handover.sock")).expect_err("nothing there");
        assert_eq!(error.0.kind(), std::io::ErrorKind::NotFound);
    }

    /// Set in the candidate `two_supervisors_in_a_candidate_each_get_their_own_lock`
    /// runs (this test binary again): the directory holding data dirs `a`
    /// and `b`.
    const CHILD_ENV: &str = "STEADFAST_TEST_HANDOVER_CHILD";

    fn lock_ino(dir: &steadfast_actors::control_dir::ControlDir) -> u64 {
        dir.lock_file().meta().expect("lock metadata").ino
    }

    /// A candidate process that runs two supervisors, with a handover for
    /// data dir `a`: the supervisor of `b` opens first and takes `b`'s own
    /// lock (not `a`'s), and `a`'s then gets the handed-over lock.
    #[tokio::test(flavor = "multi_thread")]
    async fn two_supervisors_in_a_candidate_each_get_their_own_lock() {
        if let Some(dirs) = std::env::var_os(CHILD_ENV) {
            // The candidate (the env is the child's own, set at its spawn).
            let dirs = PathBuf::from(dirs);
            let (b, _, _) = open_control_dir(&dirs.join("b")).expect("b opens with its own lock");
            let (a, _, _) =
                open_control_dir(&dirs.join("a")).expect("a opens with the handed lock");
            println!("candidate: a {} b {}", lock_ino(&a), lock_ino(&b));
            return;
        }
        let dirs = tempfile::tempdir().expect("tempdir");
        let incumbent = steadfast_actors::control_dir::ControlDir::open(&dirs.path().join("a"))
            .expect("the incumbent opens a");
        let key = DirKey::of(&dirs.path().join("a")).expect("key");
        let lock = incumbent.lock_file().try_clone().expect("dup");
        let lock = lock.into_os().expect("an OS file");
        let offer = Offer::bind(
            incumbent.path(),
            key,
            lock.into(),
            Vec::new(),
            Box::new(|_| {}),
        )
        .expect("bind");
        let child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "handover::tests::two_supervisors_in_a_candidate_each_get_their_own_lock",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dirs.path())
            .env(HANDOVER_ENV, offer.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the candidate");
        offer.expect_pid(child.id());
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("wait");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the candidate failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let b_lock = std::fs::metadata(dirs.path().join("b/.steadfast/lock")).expect("b's lock");
        use std::os::unix::fs::MetadataExt;
        let expected = format!("candidate: a {} b {}", lock_ino(&incumbent), b_lock.ino());
        assert!(text.contains(&expected), "{expected:?} in {text:?}");
    }
}
