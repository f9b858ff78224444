//! The control directory journal: its record types and their framing, as pure
//! functions over bytes.
//!
//! This module owns what a journal file *means*; it never opens one. The
//! journal actor reads the file, hands the bytes to [`decode`], truncates to
//! [`Decoded::valid_len`] (keeping a `.broken` copy) or refuses to start, and
//! appends what [`encode_header`] and [`encode_record`] return (the on-disk
//! format and its rules are `spec/control-dir.md` in the repository).
//!
//! # Format (version [`FORMAT_VERSION`])
//! ```text
//! header : magic "STFDJRNL" (8 bytes) | format version: u32 LE          (HEADER_LEN = 12)
//! record : len: u32 LE | crc32c(payload): u32 LE | payload (len bytes)  (repeated)
//! payload: bincode 1.3.3, DefaultOptions (varint, little endian, trailing bytes
//!          rejected) limited to MAX_RECORD_LEN bytes, of one `Record`
//! ```
//! An empty input is a fresh journal ([`Tail::Empty`]: write the header); a
//! strict prefix of the header is a torn header ([`Tail::Torn`] at 0). Checked
//! by `journal_framing::every_variant_round_trips`,
//! `journal_framing::empty_input_is_fresh_and_a_partial_header_is_torn` and the
//! unit tests `header_layout_is_fixed` and `bad_headers_are_refused`.
//!
//! # Invariants
//! - **Longest valid prefix.** [`decode`] returns exactly the records wholly and
//!   validly present before the first bad one, and never returns a record that
//!   was not written as it is returned (a frame is good only if its length is
//!   plausible, its CRC matches *and* its payload decodes with nothing left
//!   over). Checked by `journal_framing::every_prefix_decodes_to_the_records_it_holds`.
//! - **Torn vs corrupt.** A torn write only damages the end of the file. So a
//!   bad record with no good frame at *any* later byte offset is a torn tail
//!   ([`Tail::Torn`], truncate at its offset), while a bad record followed by a
//!   good frame anywhere is mid-file corruption ([`JournalError::Corrupt`],
//!   never truncated silently). Checked by
//!   `journal_framing::overwritten_tails_are_torn_never_corrupt`,
//!   `journal_framing::every_bit_flip_in_a_middle_record_is_corrupt`,
//!   `journal_framing::every_bit_flip_in_the_last_record_is_torn`,
//!   `journal_framing::hostile_length_prefixes_are_refused` and the property
//!   test `journal_framing::damage_never_yields_a_foreign_record`. The rule errs on
//!   the safe side: a torn record whose own bytes happen to contain a whole
//!   well-formed frame (say a checkpoint payload holding journal bytes) is
//!   refused as corrupt rather than truncated.
//! - **Allocation.** A length prefix is checked against [`MIN_RECORD_LEN`],
//!   [`MAX_RECORD_LEN`] and the bytes left *before* anything is allocated; a
//!   payload is a sub-slice of the input, never a buffer sized from the wire.
//!   Inside a payload, bincode's limit and the slice bound every string and
//!   byte buffer before it is allocated (`ResourceRecord::payload` is read as
//!   one byte buffer, not an element-by-element sequence). Checked by
//!   `journal_framing::hostile_length_prefixes_are_refused`, which measures
//!   the largest allocation with a counting allocator, and the unit tests
//!   `huge_inner_lengths_are_refused_without_allocating` and
//!   `oversized_records_are_refused_at_encode` (the writer side).
//! - **No panic.** No input makes [`decode`] panic: every read is a checked
//!   slice and every offset sum is checked. Checked by the property tests
//!   `journal_framing::arbitrary_bytes_after_a_header_never_panic` and
//!   `journal_framing::arbitrary_bytes_never_panic`.
//!
//! [`decode`] is linear for a healthy journal; after a bad record it scans
//! every later offset, which costs at most a CRC of [`MAX_RECORD_LEN`] bytes
//! per offset whose length prefix is plausible.

use std::num::NonZeroU32;

use bincode::Options;
use serde::{Deserialize, Serialize};

/// The first eight bytes of every journal file.
pub const MAGIC: [u8; 8] = *b"STFDJRNL";

/// The format version this module writes and the only one it reads.
pub const FORMAT_VERSION: u32 = 1;

/// Length of the file header: [`MAGIC`] then [`FORMAT_VERSION`] as u32 LE.
pub const HEADER_LEN: usize = MAGIC.len() + 4;

/// Length of a record's frame header: `len: u32 LE | crc32c: u32 LE`.
pub const FRAME_HEADER_LEN: usize = 8;

/// The largest payload a record may have, in bytes. A length prefix above it
/// is bad before anything is read or allocated.
pub const MAX_RECORD_LEN: u32 = 64 * 1024;

/// The smallest payload a record may have: every payload holds at least the
/// variant tag of a [`Record`]. A zero length (a zero-filled tail) is bad.
pub const MIN_RECORD_LEN: u32 = 1;

/// One journal record: what happened, in the order it was appended.
///
/// Externally tagged on purpose: bincode 1.3 cannot read internally tagged or
/// untagged enums. Variants and fields are appended, never reordered, within
/// a format version (bincode writes the variant index).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A boot attempt began.
    AttemptStarted {
        /// Attempt number, from 1 for the life of the daemon process.
        attempt: NonZeroU32,
        /// When it began, in milliseconds since the Unix epoch.
        at_ms: u64,
    },
    /// A phase of an attempt's plan began.
    PhaseStarted {
        /// The attempt the phase belongs to.
        attempt: NonZeroU32,
        /// The phase's name, as the service names it (the first phase of a
        /// boot is always `resolve_config`).
        phase: String,
        /// The phase's position in the plan, from 0.
        index: u32,
        /// How many phases the plan has, so progress can be shown as n/total.
        total: u32,
        /// When it began, in milliseconds since the Unix epoch.
        at_ms: u64,
    },
    /// A phase finished successfully.
    PhaseCompleted {
        /// The attempt the phase belongs to.
        attempt: NonZeroU32,
        /// The phase's name.
        phase: String,
        /// When it finished, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// How long it ran, in milliseconds.
        duration_ms: u64,
    },
    /// A phase was not run (for example its checkpoint showed it already done).
    PhaseSkipped {
        /// The attempt the phase belongs to.
        attempt: NonZeroU32,
        /// The phase's name.
        phase: String,
        /// When it was skipped, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// Why it was skipped, for the operator.
        reason: String,
        /// How long observing its resource took, in milliseconds.
        duration_ms: u64,
    },
    /// A phase failed, which fails its attempt.
    PhaseFailed {
        /// The attempt the phase belongs to.
        attempt: NonZeroU32,
        /// The phase's name.
        phase: String,
        /// When it failed, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// How long it ran before failing, in milliseconds.
        duration_ms: u64,
        /// The failure as the service reported it.
        error: String,
    },
    /// A boot attempt ended.
    AttemptEnded {
        /// The attempt that ended.
        attempt: NonZeroU32,
        /// When it ended, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// How it ended.
        result: AttemptResult,
    },
    /// The lifecycle machine moved; replaying these rebuilds its history.
    Transition {
        /// When the event was applied, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// The state before, by its wire name.
        from: String,
        /// The event applied, by its wire name.
        event: String,
        /// The state after, by its wire name.
        to: String,
    },
    /// A step acquired a resource. A step whose resource dies with the
    /// process stages it (durable with the boot's `booted` append, or an
    /// earlier one); one whose resource outlives the process has its
    /// [`Record::Intent`] durable before it runs, and stages this too, so a
    /// resumed boot can reconcile the resource against what it observes
    /// (`spec/control-dir.md`, "What a boot makes durable, and when").
    Checkpoint {
        /// The attempt that acquired it.
        attempt: NonZeroU32,
        /// The step that acquired it.
        step: String,
        /// The step's position in the plan, from 0.
        index: u32,
        /// What was acquired.
        resource: ResourceRecord,
    },
    /// A drain released a step's resource and removed its checkpoint.
    CheckpointCleared {
        /// The step whose checkpoint is gone.
        step: String,
    },
    /// A child of the running runtime was started again
    /// (`steadfast_protocol::children`). Written without an fsync of its
    /// own: a child dies with the process, so its restart waits for no
    /// fsync; the record is durable with the next group commit.
    ChildRestarted {
        /// The runtime's attempt.
        attempt: NonZeroU32,
        /// The child's name.
        child: String,
        /// The incarnation now starting (from 2).
        incarnation: u32,
        /// Why: its own end, a sibling's, or an operator's command.
        reason: String,
        /// When, in milliseconds since the Unix epoch.
        at_ms: u64,
    },
    /// A group of the runtime's children exceeded its restart intensity,
    /// which ends the runtime. Durable before the lifecycle hears of it.
    ChildrenMeltdown {
        /// The runtime's attempt.
        attempt: NonZeroU32,
        /// The child whose end was one restart too many.
        child: String,
        /// Restarts within the period, counting the one refused.
        restarts: u32,
        /// The group's period, in milliseconds.
        period_ms: u64,
        /// That child's end.
        reason: String,
        /// When, in milliseconds since the Unix epoch.
        at_ms: u64,
    },
    /// A step whose resource outlives the process is about to run: durable
    /// before it makes anything, so a crash part way through leaves the
    /// next process knowing that something of the step's may be there
    /// ([`unfinished`]) until its [`Record::Checkpoint`] or
    /// [`Record::CheckpointCleared`] follows.
    Intent {
        /// The attempt whose boot runs the step.
        attempt: NonZeroU32,
        /// The step.
        step: String,
        /// The step's position in the plan.
        index: u32,
    },
}

/// How a boot attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttemptResult {
    /// Every phase completed; the runtime is running.
    Succeeded,
    /// A phase failed.
    Failed,
    /// The attempt was cancelled (a stop, a drain, a config change) before it
    /// finished.
    Cancelled,
}

/// A resource a step acquired, as its checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ResourceRecord {
    /// The kind of resource (named by the service), so teardown knows how to
    /// release it.
    pub kind: String,
    /// Which one: the identity reconciliation observes on resume.
    pub id: String,
    /// The service's own opaque data about it.
    #[serde(with = "byte_buf")]
    pub payload: Vec<u8>,
}

/// What [`decode`] found in a journal file's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The records of the longest valid prefix, in file order.
    pub records: Vec<Record>,
    /// Byte length of the header plus that prefix: where to truncate the file.
    /// Zero when there is no complete header (fresh or torn header): write
    /// [`encode_header`] from offset 0.
    pub valid_len: usize,
    /// What follows the valid prefix.
    pub tail: Tail,
}

/// What follows the valid prefix of a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tail {
    /// The input was empty: a fresh journal with no header yet.
    Empty,
    /// The input ends exactly after the last valid record (or the header).
    Clean,
    /// A bad last record (or a partial header at offset 0) with nothing valid
    /// after it: a torn write, to be truncated at `offset` (== `valid_len`).
    Torn {
        /// Byte offset where the bad record (or header) starts.
        offset: usize,
    },
}

/// Why the journal framing refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// The file does not start with [`MAGIC`]: not a steadfast journal.
    #[error("not a steadfast journal: bad magic")]
    BadMagic,
    /// The header names a format version this build cannot read. A partial
    /// header that cannot be a prefix of a version-1 header reports the
    /// version bytes present (low bytes first, missing bytes as zero).
    #[error("unsupported journal format version {0}")]
    UnsupportedVersion(u32),
    /// A bad record is followed by a valid one: mid-file corruption, not a
    /// torn write. Refuse to start; never truncate.
    #[error("journal corrupt at byte offset {offset}: a bad record is followed by valid records")]
    Corrupt {
        /// Byte offset where the first bad record starts.
        offset: usize,
    },
    /// A record's payload would exceed [`MAX_RECORD_LEN`]; it was not encoded.
    #[error("record payload of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// The payload's encoded length.
        len: u64,
        /// The limit, [`MAX_RECORD_LEN`].
        max: u32,
    },
    /// bincode refused to encode a record (not expected for these types).
    #[error("record could not be encoded: {0}")]
    Encode(String),
}

/// The bincode options of a payload: defaults (varint, little endian, trailing
/// bytes rejected) with reads and writes limited to [`MAX_RECORD_LEN`].
fn payload_options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(u64::from(MAX_RECORD_LEN))
}

/// The 12-byte file header: [`MAGIC`] then [`FORMAT_VERSION`] as u32 LE.
#[must_use]
pub fn encode_header() -> [u8; HEADER_LEN] {
    let mut header = [0; HEADER_LEN];
    let (magic, version) = header.split_at_mut(MAGIC.len());
    magic.copy_from_slice(&MAGIC);
    version.copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header
}

/// One framed record, `len | crc32c | payload`, ready to append.
///
/// # Errors
/// [`JournalError::RecordTooLarge`] if the payload would exceed
/// [`MAX_RECORD_LEN`] (checked before encoding); [`JournalError::Encode`] if
/// bincode refuses.
pub fn encode_record(record: &Record) -> Result<Vec<u8>, JournalError> {
    let size = bincode::DefaultOptions::new()
        .serialized_size(record)
        .map_err(|e| JournalError::Encode(e.to_string()))?;
    if size > u64::from(MAX_RECORD_LEN) {
        return Err(JournalError::RecordTooLarge {
            len: size,
            max: MAX_RECORD_LEN,
        });
    }
    let payload = payload_options()
        .serialize(record)
        .map_err(|e| JournalError::Encode(e.to_string()))?;
    let len = u32::try_from(payload.len()).map_err(|_| JournalError::RecordTooLarge {
        len: size,
        max: MAX_RECORD_LEN,
    })?;
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Decode a whole journal file: its header and the longest valid prefix of
/// records, and whether what follows is clean, torn or corrupt.
///
/// - empty input: a fresh journal, [`Tail::Empty`], `valid_len` 0;
/// - a strict prefix of a valid header: a torn header, [`Tail::Torn`] at 0;
/// - a bad record followed by nothing valid: [`Tail::Torn`] at its offset;
/// - a bad record followed by any valid frame: [`JournalError::Corrupt`].
///
/// # Errors
/// [`JournalError::BadMagic`], [`JournalError::UnsupportedVersion`] for a bad
/// header; [`JournalError::Corrupt`] for mid-file corruption.
pub fn decode(bytes: &[u8]) -> Result<Decoded, JournalError> {
    if bytes.is_empty() {
        return Ok(Decoded {
            records: Vec::new(),
            valid_len: 0,
            tail: Tail::Empty,
        });
    }
    if !check_header(bytes)? {
        return Ok(Decoded {
            records: Vec::new(),
            valid_len: 0,
            tail: Tail::Torn { offset: 0 },
        });
    }
    let mut records = Vec::new();
    let mut pos = HEADER_LEN;
    loop {
        if pos >= bytes.len() {
            return Ok(Decoded {
                records,
                valid_len: pos,
                tail: Tail::Clean,
            });
        }
        match frame_at(bytes, pos) {
            Some((record, end)) => {
                records.push(record);
                pos = end;
            }
            None if any_frame_after(bytes, pos) => {
                return Err(JournalError::Corrupt { offset: pos });
            }
            None => {
                return Ok(Decoded {
                    records,
                    valid_len: pos,
                    tail: Tail::Torn { offset: pos },
                });
            }
        }
    }
}

/// `Ok(true)` if `bytes` starts with a whole valid header, `Ok(false)` if it is
/// a strict prefix of one (torn), an error otherwise.
fn check_header(bytes: &[u8]) -> Result<bool, JournalError> {
    let expected = encode_header();
    let seen = bytes.get(..HEADER_LEN).unwrap_or(bytes);
    let magic_seen = seen.get(..MAGIC.len()).unwrap_or(seen);
    if MAGIC.get(..magic_seen.len()) != Some(magic_seen) {
        return Err(JournalError::BadMagic);
    }
    if expected.get(..seen.len()) == Some(seen) {
        return Ok(seen.len() == HEADER_LEN);
    }
    // The magic matches, so the mismatch is in the version bytes.
    let mut version = [0u8; 4];
    for (dst, src) in version
        .iter_mut()
        .zip(seen.get(MAGIC.len()..).unwrap_or_default())
    {
        *dst = *src;
    }
    Err(JournalError::UnsupportedVersion(u32::from_le_bytes(
        version,
    )))
}

/// The record framed at `offset` and the offset just past it, if the frame is
/// good: plausible length (checked before anything else, so nothing is
/// allocated from it), CRC match, and a payload that decodes exactly.
fn frame_at(bytes: &[u8], offset: usize) -> Option<(Record, usize)> {
    let rest = bytes.get(offset..)?;
    let (head, after) = rest.split_first_chunk::<FRAME_HEADER_LEN>()?;
    let [l0, l1, l2, l3, c0, c1, c2, c3] = *head;
    let len = u32::from_le_bytes([l0, l1, l2, l3]);
    if !(MIN_RECORD_LEN..=MAX_RECORD_LEN).contains(&len) {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    let payload = after.get(..len)?;
    if crc32c::crc32c(payload) != u32::from_le_bytes([c0, c1, c2, c3]) {
        return None;
    }
    let record = payload_options().deserialize::<Record>(payload).ok()?;
    let end = offset.checked_add(FRAME_HEADER_LEN)?.checked_add(len)?;
    Some((record, end))
}

/// Whether a good frame starts at any byte offset after `bad`.
fn any_frame_after(bytes: &[u8], bad: usize) -> bool {
    let Some(first) = bad.checked_add(1) else {
        return false;
    };
    let last = bytes.len().saturating_sub(FRAME_HEADER_LEN);
    (first..=last).any(|offset| frame_at(bytes, offset).is_some())
}

/// Serde for a `Vec<u8>` as one byte buffer rather than a sequence of `u8`:
/// the same bincode bytes (length then bytes), but bincode checks the length
/// against its limit and the bytes left before allocating, where a sequence
/// would preallocate from the claimed length.
mod byte_buf {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::ser::Serializer;

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(ByteBufVisitor)
    }

    struct ByteBufVisitor;

    impl<'de> Visitor<'de> for ByteBufVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte buffer")
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        // Self-describing formats (JSON) hand bytes over as a sequence; grow
        // as elements arrive instead of trusting a size hint.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::new();
            while let Some(byte) = seq.next_element::<u8>()? {
                out.push(byte);
            }
            Ok(out)
        }
    }
}

/// A checkpoint no drain has cleared: what a resumed boot reconciles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outstanding {
    /// The attempt that acquired it (of the daemon process that wrote it).
    pub attempt: NonZeroU32,
    /// The step that acquired it.
    pub step: String,
    /// The step's position in that attempt's plan.
    pub index: u32,
    /// What was acquired.
    pub resource: ResourceRecord,
}

/// An [`Record::Intent`] no checkpoint or clear followed: a step whose
/// resource outlives the process began in a process that did not finish
/// it, so what it made, if anything, is for the step's next run to adopt or
/// remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    /// The attempt whose boot ran the step.
    pub attempt: NonZeroU32,
    /// The step.
    pub step: String,
    /// The step's position in that attempt's plan.
    pub index: u32,
}

/// What `records` leave for a resumed boot to reconcile, step by step: the
/// outstanding checkpoints and the unfinished intents, in the order their
/// steps last wrote one. A step has at most one entry: each
/// [`Record::Checkpoint`] or [`Record::Intent`] replaces the entry of its
/// step, a [`Record::CheckpointCleared`] removes it.
fn left(records: &[Record]) -> Vec<Result<Outstanding, Unfinished>> {
    let mut out: Vec<Result<Outstanding, Unfinished>> = Vec::new();
    let step_of = |entry: &Result<Outstanding, Unfinished>| match entry {
        Ok(o) => o.step.clone(),
        Err(u) => u.step.clone(),
    };
    for record in records {
        let entry = match record {
            Record::Checkpoint {
                attempt,
                step,
                index,
                resource,
            } => Ok(Outstanding {
                attempt: *attempt,
                step: step.clone(),
                index: *index,
                resource: resource.clone(),
            }),
            Record::Intent {
                attempt,
                step,
                index,
            } => Err(Unfinished {
                attempt: *attempt,
                step: step.clone(),
                index: *index,
            }),
            Record::CheckpointCleared { step } => {
                out.retain(|e| step_of(e) != *step);
                continue;
            }
            _ => continue,
        };
        let step = step_of(&entry);
        out.retain(|e| step_of(e) != step);
        out.push(entry);
    }
    out
}

/// The checkpoints `records` leave outstanding, in the order their steps
/// were last checkpointed: a [`Record::Checkpoint`] adds (or replaces) its
/// step's entry; a [`Record::CheckpointCleared`] removes it, and so does a
/// later [`Record::Intent`] of the step (it ran again: see [`unfinished`]).
/// Every other record is ignored. Checked by
/// `journal_resume::outstanding_follows_checkpoints_and_clears`.
#[must_use]
pub fn outstanding(records: &[Record]) -> Vec<Outstanding> {
    left(records).into_iter().filter_map(Result::ok).collect()
}

/// The intents `records` leave unfinished: a [`Record::Intent`] that no
/// [`Record::Checkpoint`] or [`Record::CheckpointCleared`] of its step
/// followed. Checked by `journal_resume::an_intent_is_unfinished_until_its_checkpoint`.
#[must_use]
pub fn unfinished(records: &[Record]) -> Vec<Unfinished> {
    left(records).into_iter().filter_map(Result::err).collect()
}

/// How many [`Record::AttemptStarted`] records `records` holds.
#[must_use]
pub fn attempts_in(records: &[Record]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::AttemptStarted { .. }))
        .count()
}

/// The most [`Record::ChildRestarted`] records a compacted journal keeps
/// (the latest): a child that flaps for days must not grow the journal
/// without bound, and what an operator reads of it is the recent restarts.
pub const KEEP_CHILD_RESTARTS: usize = 256;

/// How many [`Record::ChildRestarted`] records `records` holds.
#[must_use]
pub fn child_restarts_in(records: &[Record]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::ChildRestarted { .. }))
        .count()
}

/// The records of a compacted journal that keeps the last `keep_attempts`
/// attempts and the last [`KEEP_CHILD_RESTARTS`] child restarts, or `None`
/// when `records` holds no more than that.
///
/// The result is the checkpoints outstanding and the intents unfinished
/// just before the `keep_attempts`-th last [`Record::AttemptStarted`] (as
/// [`Record::Checkpoint`]s and [`Record::Intent`]s), then every record from
/// that attempt on, unchanged, except the child restarts older than the
/// last [`KEEP_CHILD_RESTARTS`]. So [`outstanding`] and [`unfinished`] of
/// the result equal those of `records` (a resume loses nothing), and every other
/// record at or after the cut is kept in order. With `keep_attempts == 0`
/// the cut is after the last record. Checked by
/// `journal_resume::compaction_keeps_what_a_resume_needs` (a property test
/// over arbitrary record sequences) and
/// `journal_resume::compaction_keeps_the_latest_child_restarts`.
#[must_use]
pub fn compact(records: &[Record], keep_attempts: usize) -> Option<Vec<Record>> {
    let starts: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::AttemptStarted { .. }))
        .map(|(i, _)| i)
        .collect();
    let cut = if starts.len() <= keep_attempts {
        0
    } else if keep_attempts == 0 {
        records.len()
    } else {
        starts[starts.len() - keep_attempts]
    };
    let (before, after) = records.split_at(cut);
    let restarts = child_restarts_in(after);
    if starts.len() <= keep_attempts && restarts <= KEEP_CHILD_RESTARTS {
        return None;
    }
    let mut drop_restarts = restarts.saturating_sub(KEEP_CHILD_RESTARTS);
    let mut kept: Vec<Record> = left(before)
        .into_iter()
        .map(|entry| match entry {
            Ok(o) => Record::Checkpoint {
                attempt: o.attempt,
                step: o.step,
                index: o.index,
                resource: o.resource,
            },
            Err(u) => Record::Intent {
                attempt: u.attempt,
                step: u.step,
                index: u.index,
            },
        })
        .collect();
    for record in after {
        if drop_restarts > 0 && matches!(record, Record::ChildRestarted { .. }) {
            drop_restarts -= 1;
            continue;
        }
        kept.push(record.clone());
    }
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn header_layout_is_fixed() {
        assert_eq!(&encode_header(), b"STFDJRNL\x01\x00\x00\x00");
        assert_eq!(HEADER_LEN, 12);
        let d = decode(&encode_header()).unwrap();
        assert_eq!(
            d,
            Decoded {
                records: vec![],
                valid_len: HEADER_LEN,
                tail: Tail::Clean
            }
        );
    }

    #[test]
    fn empty_input_is_a_fresh_journal() {
        assert_eq!(
            decode(&[]).unwrap(),
            Decoded {
                records: vec![],
                valid_len: 0,
                tail: Tail::Empty
            }
        );
    }

    #[test]
    fn bad_headers_are_refused() {
        assert_eq!(decode(b"STFDJRNX\x01\0\0\0"), Err(JournalError::BadMagic));
        assert_eq!(decode(b"X"), Err(JournalError::BadMagic));
        assert_eq!(
            decode(b"STFDJRNL\x02\0\0\0"),
            Err(JournalError::UnsupportedVersion(2))
        );
        assert_eq!(
            decode(b"STFDJRNL\0\0\0\0"),
            Err(JournalError::UnsupportedVersion(0))
        );
        assert_eq!(
            decode(b"STFDJRNL\x01\x07"),
            Err(JournalError::UnsupportedVersion(0x0701))
        );
        let torn = Decoded {
            records: vec![],
            valid_len: 0,
            tail: Tail::Torn { offset: 0 },
        };
        assert_eq!(decode(b"STF").unwrap(), torn);
        assert_eq!(decode(b"STFDJRNL\x01\0").unwrap(), torn);
    }

    #[test]
    fn byte_buf_payload_has_the_same_bytes_as_a_plain_vec() {
        #[derive(Serialize)]
        struct Plain {
            kind: String,
            id: String,
            payload: Vec<u8>,
        }
        let r = ResourceRecord {
            kind: "k".into(),
            id: "i".into(),
            payload: (0..=255).collect(),
        };
        let p = Plain {
            kind: r.kind.clone(),
            id: r.id.clone(),
            payload: r.payload.clone(),
        };
        let opts = bincode::DefaultOptions::new();
        assert_eq!(opts.serialize(&r).unwrap(), opts.serialize(&p).unwrap());
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<ResourceRecord>(&json).unwrap(), r);
    }

    #[test]
    fn oversized_records_are_refused_at_encode() {
        let big = |n: usize| Record::CheckpointCleared {
            step: "x".repeat(n),
        };
        // tag (1) + varint length (3: marker 251 then a u16) + bytes
        let fits = MAX_RECORD_LEN as usize - 4;
        let framed = encode_record(&big(fits)).unwrap();
        assert_eq!(framed.len(), FRAME_HEADER_LEN + MAX_RECORD_LEN as usize);
        let mut file = encode_header().to_vec();
        file.extend_from_slice(&framed);
        assert_eq!(decode(&file).unwrap().records, vec![big(fits)]);
        assert_eq!(
            encode_record(&big(fits + 1)),
            Err(JournalError::RecordTooLarge {
                len: u64::from(MAX_RECORD_LEN) + 1,
                max: MAX_RECORD_LEN
            })
        );
    }

    #[test]
    fn huge_inner_lengths_are_refused_without_allocating() {
        // A CRC-valid frame whose Checkpoint claims a 2^40-byte string or
        // resource payload: bincode's limit refuses it before allocating, so
        // the frame is bad (torn, as nothing follows).
        let huge = [0xfd, 0, 0, 0, 0, 0, 1, 0, 0]; // varint u64 = 2^40
        let mut checkpoint_string = vec![7u8, 1]; // Checkpoint, attempt 1
        checkpoint_string.extend_from_slice(&huge); // step length
        let mut checkpoint_payload = vec![7u8, 1, 1, b's', 0, 1, b'k', 1, b'i'];
        checkpoint_payload.extend_from_slice(&huge); // resource payload length
        for payload in [checkpoint_string, checkpoint_payload] {
            let mut file = encode_header().to_vec();
            file.extend_from_slice(&frame(&payload));
            let d = decode(&file).unwrap();
            assert_eq!(d.tail, Tail::Torn { offset: HEADER_LEN });
            assert!(d.records.is_empty());
        }
    }

    #[test]
    fn trailing_payload_bytes_make_a_record_bad() {
        let good = encode_record(&Record::CheckpointCleared { step: "s".into() }).unwrap();
        let mut payload = good.get(FRAME_HEADER_LEN..).unwrap().to_vec();
        payload.push(0);
        let mut file = encode_header().to_vec();
        file.extend_from_slice(&frame(&payload));
        assert_eq!(
            decode(&file).unwrap().tail,
            Tail::Torn { offset: HEADER_LEN }
        );
    }

    #[test]
    fn corrupt_message_names_the_offset() {
        let msg = JournalError::Corrupt { offset: 4242 }.to_string();
        assert!(msg.contains("4242"), "{msg}");
    }
}
