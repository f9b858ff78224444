//! The handover between the incumbent of a replacement and its candidate:
//! open files (the data dir's lock; in overlap, listening sockets) passed
//! over a Unix socket with `SCM_RIGHTS`.
//!
//! The incumbent binds `<data_dir>/.steadfast/handover.sock` (in the 0700
//! control directory) before it starts the candidate, and tells the candidate
//! where it is in the [`HANDOVER_ENV`] environment variable. It serves one
//! connection, and only from the candidate's pid (checked with
//! `SO_PEERCRED`): one message, the names of the files as a line of text,
//! the files themselves as ancillary data.
//!
//! The candidate receives it once, on first use ([`take_lock`], [`take`],
//! [`take_listener`]): `Supervisor::new` takes the lock (the same open file
//! as the incumbent's, so the lock is held throughout and outlives the
//! incumbent: there is no moment at which a third daemon could take the data
//! dir); the application takes its files by name.
//!
//! What to hand over in overlap (a listening socket, a store's lock) is
//! offered by the application with [`share`] when it opens it, and withdrawn
//! with [`withdraw`] when it closes it. Exclusive hands over the lock only.
//!
//! Checked by the unit tests here (`the_expected_peer_receives_the_lock_and_the_shared_files`,
//! `another_peer_gets_nothing`, `no_socket_is_not_found`) and by
//! `tests/replace.rs` (real kvd processes). A [`HANDOVER_ENV`] naming a
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

/// What this process received as a candidate (empty when it is not one).
static RECEIVED: OnceLock<Mutex<HashMap<String, OwnedFd>>> = OnceLock::new();

/// The incumbent that handed this process its files (its pid, from the
/// handover socket's peer credentials).
static INCUMBENT: OnceLock<u32> = OnceLock::new();

/// The pid of the incumbent this candidate took over from, once
/// [`take_lock`] received the handover.
#[must_use]
pub fn incumbent_pid() -> Option<u32> {
    INCUMBENT.get().copied()
}

/// Listeners this process offers to a successor, by name.
static SHARED: OnceLock<Mutex<HashMap<String, OwnedFd>>> = OnceLock::new();

fn received() -> Result<&'static Mutex<HashMap<String, OwnedFd>>, HandoverError> {
    // One receiver at a time: the incumbent serves one connection only.
    static RECEIVING: Mutex<()> = Mutex::new(());
    let _receiving = RECEIVING.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(files) = RECEIVED.get() {
        return Ok(files);
    }
    let files = match std::env::var_os(HANDOVER_ENV) {
        Some(path) => match receive(Path::new(&path)) {
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
                HashMap::new()
            }
            other => other?,
        },
        None => HashMap::new(),
    };
    Ok(RECEIVED.get_or_init(|| Mutex::new(files)))
}

/// Connect to the incumbent's handover socket and receive its files.
fn receive(path: &Path) -> Result<HashMap<String, OwnedFd>, HandoverError> {
    let stream = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if let Ok(cred) = rustix::net::sockopt::socket_peercred(&stream)
        && let Ok(pid) = u32::try_from(cred.pid.as_raw_nonzero().get())
    {
        let _ = INCUMBENT.set(pid);
    }
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
    let names: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    if names.len() != fds.len() {
        return Err(invalid(format!(
            "the handover named {} files but carried {}",
            names.len(),
            fds.len()
        ))
        .into());
    }
    Ok(names.into_iter().map(String::from).zip(fds).collect())
}

/// The data dir's lock, when this process is a candidate the incumbent
/// handed it to. Called by `Supervisor::new`.
///
/// # Errors
/// [`HANDOVER_ENV`] is set but the handover could not be received.
pub fn take_lock() -> Result<Option<File>, HandoverError> {
    let files = received()?;
    let mut files = files.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(files.remove(LOCK).map(File::from))
}

/// The file the incumbent handed over as `name` (see [`share`]), if this
/// process is a candidate that received one. Taken once.
///
/// # Errors
/// As [`take_lock`].
pub fn take(name: &str) -> Result<Option<OwnedFd>, HandoverError> {
    let files = received()?;
    let mut files = files.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(files.remove(name))
}

/// The listening socket the incumbent handed over as `name`, as a std
/// listener (blocking: set it non-blocking before giving it to tokio).
///
/// # Errors
/// As [`take_lock`].
pub fn take_listener(name: &str) -> Result<Option<std::net::TcpListener>, HandoverError> {
    Ok(take(name)?.map(std::net::TcpListener::from))
}

/// Offer `file` (a listening socket, a store's lock) to the candidate of an
/// overlap replacement as `name`; the offer holds a duplicate of it until
/// [`withdraw`]n, and a candidate receives a duplicate of that.
///
/// # Errors
/// `name` is reserved or not one line, or the file could not be duplicated.
pub fn share(name: &str, file: &impl AsFd) -> Result<(), HandoverError> {
    if name == LOCK || name.is_empty() || name.contains('\n') {
        return Err(invalid(format!("{name:?} cannot name a handed-over file")).into());
    }
    let fd = file.as_fd().try_clone_to_owned()?;
    let shared = SHARED.get_or_init(Mutex::default);
    shared
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), fd);
    Ok(())
}

/// Withdraw the file offered as `name` (its duplicate is closed).
pub fn withdraw(name: &str) {
    if let Some(shared) = SHARED.get() {
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// Duplicates of every file offered now, with their names.
pub(crate) fn shared_files() -> Result<Vec<(String, OwnedFd)>, HandoverError> {
    let Some(shared) = SHARED.get() else {
        return Ok(Vec::new());
    };
    let shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out = Vec::new();
    for (name, fd) in shared.iter() {
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
    /// `listeners` to the peer named later with [`Offer::expect_pid`].
    pub(crate) fn bind(
        control_dir: &Path,
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
        let mut names = String::from(LOCK);
        names.push('\n');
        let mut fds = vec![lock];
        for (name, fd) in listeners {
            names.push_str(&name);
            names.push('\n');
            fds.push(fd);
        }
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
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
        let offer = Offer::bind(dir, lock.as_fd().try_clone_to_owned().expect("dup"), shared)
            .expect("bind");
        (offer, listener, lock)
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_expected_peer_receives_the_lock_and_the_shared_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (offer, listener, lock) = offer_in(dir.path());
        offer.expect_pid(std::process::id());
        let path = offer.path().to_owned();
        let mut files = tokio::task::spawn_blocking(move || receive(&path))
            .await
            .expect("join")
            .expect("received");
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
        assert!(share(LOCK, &file).is_err());
        assert!(share("a\nb", &file).is_err());
        assert!(share("", &file).is_err());
    }
}
