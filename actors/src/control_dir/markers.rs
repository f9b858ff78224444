//! The markers (`run`, `hold`, `identity`, `overrides`): what each holds,
//! and their bytes, `magic | len: u32 LE | crc32c: u32 LE | bincode
//! payload`, encoded and checked (a damaged marker reads as
//! [`MarkerRead::Unreadable`], never as a default). Writing one atomically
//! is [`ControlDir`]'s.
use super::*;

/// The run marker: whether a daemon holds the data dir, or released it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunMarker {
    /// A daemon is running (or crashed while running).
    Holding {
        /// Its process id.
        pid: u32,
        /// The boot attempt it was on.
        attempt: u32,
    },
    /// The last daemon stopped cleanly.
    Released {
        /// When, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// The epoch it released.
        epoch: u64,
    },
}

impl RunMarker {
    /// What a failpoint says is being written: `run holding`, `run released`.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Holding { .. } => "run holding",
            Self::Released { .. } => "run released",
        }
    }
}

/// How the previous daemon on this data dir ended (the snapshot's type; see
/// [`previous_run_from`]).
pub use steadfast_protocol::snapshot::PreviousRun;

/// What a run marker read at open says about the previous run.
#[must_use]
pub fn previous_run_from(marker: &MarkerRead<RunMarker>) -> PreviousRun {
    match marker {
        MarkerRead::Missing => PreviousRun::FirstEver,
        MarkerRead::Valid(RunMarker::Released { at_ms, epoch }) => PreviousRun::CleanStop {
            at: steadfast_protocol::Timestamp(*at_ms),
            epoch: *epoch,
        },
        MarkerRead::Valid(RunMarker::Holding { pid, attempt }) => PreviousRun::Crashed {
            pid: Some(*pid),
            attempt: Some(*attempt),
        },
        MarkerRead::Unreadable(_) => PreviousRun::Crashed {
            pid: None,
            attempt: None,
        },
    }
}

/// The previous run of a data dir whose lock was handed over by
/// `incumbent`: [`PreviousRun::HandedOver`], with the attempt its run
/// marker recorded (the incumbent writes its current attempt before it
/// starts a candidate), never `Crashed`. The pid is the marker's, else the
/// handover's. Without a pid from either it stays what the marker said.
#[must_use]
pub fn handed_over_run(marker: &PreviousRun, incumbent: Option<u32>) -> PreviousRun {
    match (marker, incumbent) {
        (
            PreviousRun::Crashed {
                pid: Some(pid),
                attempt,
            },
            _,
        ) => PreviousRun::HandedOver {
            pid: *pid,
            attempt: *attempt,
        },
        (PreviousRun::Crashed { pid: None, .. } | PreviousRun::FirstEver, Some(pid)) => {
            PreviousRun::HandedOver { pid, attempt: None }
        }
        (other, _) => other.clone(),
    }
}

/// The data dir's identity, created by the first successful boot; it outlives
/// the process and proves liveness in replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// 32 lowercase hex characters from `/dev/urandom`.
    pub id: String,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// What reading a marker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerRead<T> {
    /// No such file.
    Missing,
    /// The marker, intact.
    Valid(T),
    /// The file exists but is not an intact marker; the reason says why.
    Unreadable(String),
}

pub(super) fn marker_options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(u64::from(MAX_MARKER_PAYLOAD))
}

/// `magic | len: u32 LE | crc32c(payload): u32 LE | payload`.
/// Refuses (with the reason) a payload bincode cannot encode within
/// [`MAX_MARKER_PAYLOAD`].
pub(super) fn encode_marker<T: Serialize>(magic: [u8; 8], value: &T) -> Result<Vec<u8>, String> {
    let payload = marker_options()
        .serialize(value)
        .map_err(|e| format!("payload does not encode: {e}"))?;
    let len = u32::try_from(payload.len()).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(MARKER_HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The marker in `bytes`, or why it is not one.
pub(super) fn decode_marker<T: DeserializeOwned>(
    magic: [u8; 8],
    bytes: &[u8],
) -> Result<T, String> {
    let Some((head, payload)) = bytes.split_first_chunk::<MARKER_HEADER_LEN>() else {
        return Err(format!(
            "{} bytes is shorter than a marker header",
            bytes.len()
        ));
    };
    let [
        m0,
        m1,
        m2,
        m3,
        m4,
        m5,
        m6,
        m7,
        l0,
        l1,
        l2,
        l3,
        c0,
        c1,
        c2,
        c3,
    ] = *head;
    if [m0, m1, m2, m3, m4, m5, m6, m7] != magic {
        return Err("bad magic".to_owned());
    }
    let len = u32::from_le_bytes([l0, l1, l2, l3]);
    if len > MAX_MARKER_PAYLOAD || usize::try_from(len).ok() != Some(payload.len()) {
        return Err(format!(
            "payload length {len} does not match the {} bytes present",
            payload.len()
        ));
    }
    if crc32c::crc32c(payload) != u32::from_le_bytes([c0, c1, c2, c3]) {
        return Err("crc mismatch".to_owned());
    }
    marker_options()
        .deserialize(payload)
        .map_err(|e| format!("payload does not decode: {e}"))
}

/// A readable `released` run marker as [`read_run_at_open`] read it: a
/// launch writes its own marker over that file in place, once it is
/// checked to be the same file, as long as these bytes
/// ([`ControlDir::write_run_settling`]), and writes these bytes back if
/// the disk refuses that write.
#[derive(Debug)]
pub(super) struct ReleasedRun {
    /// The marker's bytes: the whole file.
    pub(super) bytes: Vec<u8>,
    /// The device and inode of the file they were read from (`fstat` of
    /// the descriptor read).
    pub(super) id: (u64, u64),
}

/// Read the run marker as [`read_marker`] does and, when it is a readable
/// `released`, keep its bytes and the identity of the file read (one
/// `fstat` more, of the descriptor read, then only): what a relaunch's
/// marker written in place needs, so that it does not read `run` again.
pub(super) fn read_run_at_open(
    dir: &Dir,
) -> Result<(MarkerRead<RunMarker>, Option<ReleasedRun>), ControlDirError> {
    let cap = MARKER_HEADER_LEN as u64 + u64::from(MAX_MARKER_PAYLOAD) + 1;
    let file = match dir.open("run", Access::Read) {
        Ok(file) => file,
        Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
            return Ok((MarkerRead::Missing, None));
        }
        Err(e) => return Err(e.into()),
    };
    let path = dir.join("run");
    let mut bytes = Vec::new();
    (&file)
        .take(cap)
        .read_to_end(&mut bytes)
        .map_err(io_err(&path))?;
    let read = match decode_marker(RUN_MAGIC, &bytes) {
        Ok(value) => MarkerRead::Valid(value),
        Err(reason) => MarkerRead::Unreadable(reason),
    };
    let released = match read {
        MarkerRead::Valid(RunMarker::Released { .. }) => Some(ReleasedRun {
            id: file.meta().map_err(io_err(&path))?.id(),
            bytes,
        }),
        _ => None,
    };
    Ok((read, released))
}

/// Read a marker file: missing, valid, or unreadable (and why). Reads at
/// most one byte past the largest possible marker.
pub(super) fn read_marker<T: DeserializeOwned>(
    dir: &Dir,
    name: &str,
    magic: [u8; 8],
) -> Result<MarkerRead<T>, ControlDirError> {
    let cap = MARKER_HEADER_LEN as u64 + u64::from(MAX_MARKER_PAYLOAD) + 1;
    let Some(bytes) = dir.read(name, cap)? else {
        return Ok(MarkerRead::Missing);
    };
    Ok(match decode_marker(magic, &bytes) {
        Ok(value) => MarkerRead::Valid(value),
        Err(reason) => MarkerRead::Unreadable(reason),
    })
}
