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
//! The candidate receives it once, on first use (`SupervisorBuilder::build`,
//! [`take`], [`take_listener`]), and keeps what it received by that data
//! dir: `SupervisorBuilder::build` takes the lock only when its own data dir is the
//! one named (the same open file as the incumbent's, so the lock is held
//! throughout and outlives the incumbent: there is no moment at which a
//! third daemon could take the data dir), so a process that runs several
//! supervisors gives each its own lock, and the one a handover does not
//! name opens its data dir as an ordinary daemon; the application takes its
//! files by data dir and name.
//!
//! What to hand over in overlap (a listening socket, a store's lock) is
//! offered by the application with [`share`] for its data dir when it opens
//! it, and withdrawn with [`withdraw`] when it closes it; a replacement of
//! one data dir's supervisor hands over that data dir's offers only.
//! Exclusive hands over the lock only.
//!
//! Checked by the unit tests here (`the_expected_peer_receives_the_lock_and_the_shared_files`,
//! `another_peer_gets_nothing`, `no_socket_is_not_found`,
//! `two_supervisors_in_a_candidate_each_get_their_own_lock`: a real
//! candidate process with two data dirs) and by
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

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use steadfast_actors::accept::AcceptBackoff;

/// The environment variable that tells a candidate where the handover
/// socket is.
pub const HANDOVER_ENV: &str = "STEADFAST_HANDOVER";

/// The name under which the data dir's lock travels (reserved).
const LOCK: &str = "steadfast:lock";

/// The most files one handover carries.
pub const MAX_FILES: usize = 16;

/// A handover could not be received or offered.
#[derive(Debug, thiserror::Error)]
#[error("handover: {0}")]
pub struct HandoverError(#[source] pub std::io::Error);

impl From<std::io::Error> for HandoverError {
    fn from(error: std::io::Error) -> Self {
        Self(error)
    }
}

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
}

/// What this process received as a candidate, by the data dir each
/// handover was for (empty when it is not one). Read once, from
/// [`HANDOVER_ENV`]; each supervisor takes only what names its data dir.
static RECEIVED: OnceLock<Mutex<HashMap<DirKey, Handed>>> = OnceLock::new();

/// Files this process offers to a successor, by data dir, then by name.
static SHARED: OnceLock<Mutex<HashMap<DirKey, HashMap<String, OwnedFd>>>> = OnceLock::new();

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

/// Take the file named `name` from what was handed over for `data_dir`.
fn take_for(data_dir: &Path, name: &str) -> Result<Option<(OwnedFd, Option<u32>)>, HandoverError> {
    let received = received()?;
    let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
    if received.is_empty() {
        return Ok(None);
    }
    let key = match DirKey::of(data_dir) {
        Ok(key) => key,
        // A data dir that does not exist yet was handed over by no one.
        Err(HandoverError(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(error) => return Err(error),
    };
    Ok(received
        .get_mut(&key)
        .and_then(|handed| Some((handed.files.remove(name)?, handed.incumbent))))
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
    Ok((key, Handed { incumbent, files }))
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
/// is its candidate, else by taking the lock. A handover for another data
/// dir is left to that data dir's supervisor.
///
/// # Errors
/// [`HANDOVER_ENV`] is set but the handover could not be received; the
/// control directory could not be opened (or another daemon holds it).
pub(crate) fn open_control_dir(
    data_dir: &Path,
) -> Result<steadfast_actors::control_dir::ControlDir, OpenError> {
    use steadfast_actors::control_dir::ControlDir;
    Ok(match take_for(data_dir, LOCK)? {
        Some((lock, incumbent)) => {
            ControlDir::open_handed_over(data_dir, File::from(lock), incumbent)?
        }
        None => ControlDir::open(data_dir)?,
    })
}

/// The file the incumbent handed over as `name` (see [`share`]) for the
/// supervisor of `data_dir`, if this process is a candidate that received
/// one. Taken once.
///
/// # Errors
/// [`HANDOVER_ENV`] is set but the handover could not be received, or
/// `data_dir` cannot be examined.
pub fn take(data_dir: &Path, name: &str) -> Result<Option<OwnedFd>, HandoverError> {
    Ok(take_for(data_dir, name)?.map(|(fd, _)| fd))
}

/// The listening socket the incumbent handed over as `name` for the
/// supervisor of `data_dir`, as a std listener (blocking: set it
/// non-blocking before giving it to tokio).
///
/// # Errors
/// As [`take`].
pub fn take_listener(
    data_dir: &Path,
    name: &str,
) -> Result<Option<std::net::TcpListener>, HandoverError> {
    Ok(take(data_dir, name)?.map(std::net::TcpListener::from))
}

/// Offer `file` (a listening socket, a store's lock) to the candidate of an
/// overlap replacement of the supervisor of `data_dir` as `name`; the offer
/// holds a duplicate of it until [`withdraw`]n, and a candidate receives a
/// duplicate of that.
///
/// # Errors
/// `name` is reserved or not one line, `data_dir` cannot be examined, or
/// the file could not be duplicated.
pub fn share(data_dir: &Path, name: &str, file: &impl AsFd) -> Result<(), HandoverError> {
    if name == LOCK || name.is_empty() || name.contains('\n') {
        return Err(invalid(format!("{name:?} cannot name a handed-over file")).into());
    }
    let key = DirKey::of(data_dir)?;
    let fd = file.as_fd().try_clone_to_owned()?;
    let shared = SHARED.get_or_init(Mutex::default);
    shared
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(key)
        .or_default()
        .insert(name.to_owned(), fd);
    Ok(())
}

/// Withdraw the file offered as `name` for `data_dir` (its duplicate is
/// closed).
///
/// # Errors
/// `data_dir` cannot be examined (nothing is withdrawn).
pub fn withdraw(data_dir: &Path, name: &str) -> Result<(), HandoverError> {
    let key = DirKey::of(data_dir)?;
    if let Some(shared) = SHARED.get()
        && let Some(files) = shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)
    {
        files.remove(name);
    }
    Ok(())
}

/// Duplicates of every file offered now for the data dir `key`, with their
/// names.
pub(crate) fn shared_files(key: DirKey) -> Result<Vec<(String, OwnedFd)>, HandoverError> {
    let Some(shared) = SHARED.get() else {
        return Ok(Vec::new());
    };
    let shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out = Vec::new();
    for (name, fd) in shared.get(&key).into_iter().flatten() {
        out.push((name.clone(), fd.try_clone()?));
    }
    Ok(out)
}

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
        )
        .expect("bind");
        (offer, listener, lock)
    }

    #[tokio::test(flavor = "multi_thread")]
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

    #[test]
    fn reserved_and_multiline_names_are_refused() {
        let file = File::open("/dev/null").expect("open");
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(share(dir.path(), LOCK, &file).is_err());
        assert!(share(dir.path(), "a\nb", &file).is_err());
        assert!(share(dir.path(), "", &file).is_err());
    }

    /// Two supervisors of one process offer files under the same name: a
    /// replacement of either hands over its own data dir's offer only, and
    /// one withdrawing leaves the other's in place.
    #[test]
    fn two_supervisors_in_one_process_offer_apart() {
        use std::os::unix::fs::MetadataExt;
        let dirs = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dirs.path().join("a"), dirs.path().join("b"));
        std::fs::create_dir(&a).expect("a");
        std::fs::create_dir(&b).expect("b");
        let file_a = File::create(a.join("store")).expect("a's file");
        let file_b = File::create(b.join("store")).expect("b's file");
        share(&a, "app:store", &file_a).expect("a offers");
        share(&b, "app:store", &file_b).expect("b offers");
        let ino = |fd: &OwnedFd| {
            File::from(fd.try_clone().expect("dup"))
                .metadata()
                .expect("stat")
                .ino()
        };
        let offered = |dir: &Path| -> Vec<(String, u64)> {
            shared_files(DirKey::of(dir).expect("key"))
                .expect("offers")
                .iter()
                .map(|(name, fd)| (name.clone(), ino(fd)))
                .collect()
        };
        let (ino_a, ino_b) = (
            file_a.metadata().expect("a").ino(),
            file_b.metadata().expect("b").ino(),
        );
        assert_eq!(offered(&a), vec![("app:store".to_owned(), ino_a)]);
        assert_eq!(offered(&b), vec![("app:store".to_owned(), ino_b)]);
        withdraw(&a, "app:store").expect("a withdraws");
        assert_eq!(offered(&a), Vec::new());
        assert_eq!(offered(&b), vec![("app:store".to_owned(), ino_b)]);
        withdraw(&b, "app:store").expect("b withdraws");
    }

    /// Set in the candidate `two_supervisors_in_a_candidate_each_get_their_own_lock`
    /// runs (this test binary again): the directory holding data dirs `a`
    /// and `b`.
    const CHILD_ENV: &str = "STEADFAST_TEST_HANDOVER_CHILD";

    fn lock_ino(dir: &steadfast_actors::control_dir::ControlDir) -> u64 {
        use std::os::unix::fs::MetadataExt;
        dir.lock_file().metadata().expect("lock metadata").ino()
    }

    /// A candidate process that runs two supervisors, with a handover for
    /// data dir `a`: the supervisor of `b` opens first and takes `b`'s own
    /// lock (not `a`'s), and `a`'s then gets the handed-over lock.
    #[tokio::test(flavor = "multi_thread")]
    async fn two_supervisors_in_a_candidate_each_get_their_own_lock() {
        if let Some(dirs) = std::env::var_os(CHILD_ENV) {
            // The candidate (the env is the child's own, set at its spawn).
            let dirs = PathBuf::from(dirs);
            let b = open_control_dir(&dirs.join("b")).expect("b opens with its own lock");
            let a = open_control_dir(&dirs.join("a")).expect("a opens with the handed lock");
            println!("candidate: a {} b {}", lock_ino(&a), lock_ino(&b));
            return;
        }
        let dirs = tempfile::tempdir().expect("tempdir");
        let incumbent = steadfast_actors::control_dir::ControlDir::open(&dirs.path().join("a"))
            .expect("the incumbent opens a");
        let key = DirKey::of(&dirs.path().join("a")).expect("key");
        let lock = incumbent.lock_file().try_clone().expect("dup");
        let offer = Offer::bind(incumbent.path(), key, lock.into(), Vec::new()).expect("bind");
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
