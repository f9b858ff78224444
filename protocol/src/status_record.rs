//! The status record's framing (`.steadfast/status`, `spec/control-dir.md`,
//! "The status record"): what `steadfastctl status` reads instead of asking
//! the daemon, as runit's `sv status` reads `supervise/status`.
//!
//! ```text
//! magic "SFSTAT2\n" (8)
//! | writer: pid u32 | start_time u64 | socket_dev u64 | socket_ino u64 | crc32c(writer) u32  (32)
//! | len: u32 LE | crc32c(writer's 28 bytes of fields ‖ body): u32 LE
//! | body (len bytes)
//! ```
//!
//! All integers little-endian. The writer block ([`Writer`]) says which
//! process wrote the record (its pid and its start time, so a reader can
//! tell that pid from a later process that reuses it) and which control
//! socket file that process serves (its `(st_dev, st_ino)`, both zero while
//! it serves none). A reader trusts the record only when those still hold
//! (`steadfastctl/src/record.rs`); this module only frames them.
//!
//! The body is the lean snapshot's JSON exactly as the snapshot RPC carries
//! it, without `now`. The daemon rewrites the record in place with one
//! write at offset 0 and never truncates it, so a reader racing a write can
//! see the head of one record and the tail of another: [`decode`] refuses
//! anything whose length or checksums do not hold (the body's checksum
//! covers the writer block too, so a writer of one record with the body of
//! another is refused), and bytes past `len` (the tail of a longer, earlier
//! record) are ignored.
//!
//! Invariants, checked by this module's tests: [`decode`] gives back what
//! [`encode`] framed (`a_record_round_trips`); a truncated, torn, padded
//! or garbage record is refused or read whole, never misread
//! (`a_torn_record_is_refused`, `a_torn_writer_is_refused`,
//! `garbage_is_refused`); [`start_time_of`] reads field 22 of any
//! `/proc/<pid>/stat`, whatever the process's name holds, and refuses what
//! is not one (`start_time_reads_past_any_comm`); [`exited`] tells a zombie
//! by its state (`an_exited_process_is_told_by_its_state`).

/// The record's first bytes.
pub const MAGIC: [u8; 8] = *b"SFSTAT2\n";

/// The writer block's length: pid, start time, socket dev and inode, and
/// the block's checksum.
pub const WRITER_LEN: usize = 32;

/// The header's length: the magic, the writer block, `len` and the
/// checksum.
pub const HEADER_LEN: usize = MAGIC.len() + WRITER_LEN + 8;

/// The largest body a reader accepts (the control plane's frame limit).
pub const MAX_BODY_LEN: usize = 1 << 20;

/// Who wrote a record: what a reader checks against the live system before
/// it trusts the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Writer {
    /// The writing process's id (the snapshot's `pid` must be the same).
    pub pid: u32,
    /// That process's start time (field 22 of `/proc/<pid>/stat`, clock
    /// ticks since boot): a pid reused by a later process has another.
    pub start_time: u64,
    /// The control socket file the writer serves, as `(st_dev, st_ino)` of
    /// the path (not of the socket's descriptor); `None` until it serves it
    /// and again once it no longer does (handed over, closed). Framed as
    /// two zeros, so `Some((0, 0))` reads back as `None`.
    pub socket: Option<(u64, u64)>,
}

impl Writer {
    /// The writer block's bytes.
    fn to_bytes(self) -> [u8; WRITER_LEN] {
        let (dev, ino) = self.socket.unwrap_or((0, 0));
        let mut block = [0u8; WRITER_LEN];
        block[0..4].copy_from_slice(&self.pid.to_le_bytes());
        block[4..12].copy_from_slice(&self.start_time.to_le_bytes());
        block[12..20].copy_from_slice(&dev.to_le_bytes());
        block[20..28].copy_from_slice(&ino.to_le_bytes());
        let crc = CASTAGNOLI.checksum(&block[..28]);
        block[28..32].copy_from_slice(&crc.to_le_bytes());
        block
    }

    /// The writer in `block`, if its checksum holds.
    fn from_bytes(block: &[u8; WRITER_LEN]) -> Option<Self> {
        let u32_at = |at: usize| {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&block[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        if CASTAGNOLI.checksum(&block[..28]) != u32_at(28) {
            return None;
        }
        let (dev, ino) = (u64_at(12), u64_at(20));
        Some(Self {
            pid: u32_at(0),
            start_time: u64_at(4),
            socket: (dev, ino).ne(&(0, 0)).then_some((dev, ino)),
        })
    }
}

/// Why a record was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Shorter than its header says (empty, or a write in progress).
    #[error("the status record is shorter than its header says")]
    Short,
    /// Not a status record of this format.
    #[error("the status record does not start with its magic")]
    BadMagic,
    /// A body longer than [`MAX_BODY_LEN`].
    #[error("the status record's length is over the limit")]
    TooLong,
    /// The writer block or the body does not match its checksum (a torn
    /// read).
    #[error("the status record's checksum does not match")]
    Checksum,
}

/// `body` framed as a record written by `writer`.
#[must_use]
pub fn encode(writer: &Writer, body: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER_LEN + body.len());
    encode_into(writer, body, &mut record);
    record
}

/// `body` framed as a record written by `writer` into `out` (cleared
/// first), reusing its allocation.
///
/// A body over 4 GiB (no snapshot makes one) does not fit `len`, and is
/// then framed with a length no reader accepts.
pub fn encode_into(writer: &Writer, body: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let block = writer.to_bytes();
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let crc = body_crc(&block, body);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&block);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(body);
}

/// The record's checksum: of the writer's fields (not of the block's own
/// checksum, after which any valid block would leave the same CRC state)
/// and the body.
fn body_crc(block: &[u8; WRITER_LEN], body: &[u8]) -> u32 {
    let mut digest = CASTAGNOLI.digest();
    digest.update(&block[..WRITER_LEN - 4]);
    digest.update(body);
    digest.finalize()
}

/// CRC-32C (Castagnoli), the journal's checksum, summed from a 1 KiB
/// table. The `crc32c` crate picks its SSE 4.2 path by probing the CPU
/// once per process (`CPUID`, trapped by a hypervisor: ~27 µs in a VM),
/// more than a short command line (`steadfastctl status`, a few hundred
/// bytes to sum) spends on the rest of its checksum work; a daemon that
/// also writes its journal pays the probe once either way.
pub(crate) const CASTAGNOLI: crc::Crc<u32, crc::Table<1>> =
    crc::Crc::<u32, crc::Table<1>>::new(&crc::CRC_32_ISCSI);

/// The writer and the body of the record at the start of `bytes`.
///
/// # Errors
/// [`RecordError`] when `bytes` does not start with a whole record.
pub fn decode(bytes: &[u8]) -> Result<(Writer, &[u8]), RecordError> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        let head = &bytes[..bytes.len().min(MAGIC.len())];
        return Err(if MAGIC.starts_with(head) {
            RecordError::Short
        } else {
            RecordError::BadMagic
        });
    };
    let (magic, header) = header.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(RecordError::BadMagic);
    }
    let (block, tail) = header.split_at(WRITER_LEN);
    let block: &[u8; WRITER_LEN] = block.try_into().map_err(|_| RecordError::Short)?;
    let writer = Writer::from_bytes(block).ok_or(RecordError::Checksum)?;
    let len = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let crc = u32::from_le_bytes([tail[4], tail[5], tail[6], tail[7]]);
    let len = usize::try_from(len).map_err(|_| RecordError::TooLong)?;
    if len > MAX_BODY_LEN {
        return Err(RecordError::TooLong);
    }
    let body = rest.get(..len).ok_or(RecordError::Short)?;
    if body_crc(block, body) != crc {
        return Err(RecordError::Checksum);
    }
    Ok((writer, body))
}

/// A process's start time (field 22, `starttime`, clock ticks since boot)
/// from the bytes of its `/proc/<pid>/stat`; `None` when they are not such
/// a line. Fields are counted after the *last* `)`: the second field is the
/// process's name in parentheses, and a name may hold `)`, spaces and
/// anything else.
#[must_use]
pub fn start_time_of(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    // After the name: field 3 (`state`) onward, so field 22 is the 20th.
    let field = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .filter(|field| !field.is_empty())
        .nth(22 - 3)?;
    if !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(field).ok()?.parse().ok()
}

/// Whether the `/proc/<pid>/stat` bytes `stat` are those of a process that
/// has exited (state `Z`, a zombie its parent has not reaped, or `X`), or
/// are not such a line: its pid names no running process.
#[must_use]
pub fn exited(stat: &[u8]) -> bool {
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return true;
    };
    let state = stat[close + 1..]
        .split(u8::is_ascii_whitespace)
        .find(|field| !field.is_empty());
    !matches!(
        state,
        Some([b'R' | b'S' | b'D' | b'T' | b't' | b'W' | b'P' | b'I'])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITER: Writer = Writer {
        pid: 4242,
        start_time: 123_456_789,
        socket: Some((0x803, 77)),
    };

    proptest::proptest! {
        /// The table sums what the `crc32c` crate (the journal's checksum)
        /// sums, whole and in two parts: the record's format is unchanged,
        /// and one written with `crc32c` decodes.
        #[test]
        fn the_table_sums_what_crc32c_sums(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            split in 0usize..2048,
        ) {
            let split = split.min(bytes.len());
            proptest::prop_assert_eq!(CASTAGNOLI.checksum(&bytes), crc32c::crc32c(&bytes));
            let mut digest = CASTAGNOLI.digest();
            digest.update(&bytes[..split]);
            digest.update(&bytes[split..]);
            proptest::prop_assert_eq!(
                digest.finalize(),
                crc32c::crc32c_append(crc32c::crc32c(&bytes[..split]), &bytes[split..])
            );
        }
    }

    #[test]
    fn a_record_round_trips() {
        let body = br#"{"version":3}"#;
        let record = encode(&WRITER, body);
        assert_eq!(record.len(), HEADER_LEN + body.len());
        assert_eq!(decode(&record), Ok((WRITER, &body[..])));
        // Bytes past the record (the tail of a longer, earlier one) are not read.
        let mut padded = record.clone();
        padded.extend_from_slice(b"tail of an older, longer record");
        assert_eq!(decode(&padded), Ok((WRITER, &body[..])));
        assert_eq!(decode(&encode(&WRITER, b"")), Ok((WRITER, &b""[..])));
        // No socket yet.
        let unbound = Writer {
            socket: None,
            ..WRITER
        };
        assert_eq!(decode(&encode(&unbound, body)), Ok((unbound, &body[..])));
        let zero = Writer {
            socket: Some((0, 0)),
            ..WRITER
        };
        assert_eq!(decode(&encode(&zero, body)), Ok((unbound, &body[..])));
    }

    /// Every cut of `new` written over `old` is refused, or reads as one of
    /// the two whole.
    fn torn_is_refused(old: &[u8], new: &[u8]) {
        for cut in 0..new.len() {
            let mut torn: Vec<u8> = new[..cut].to_vec();
            torn.extend_from_slice(old.get(cut..).unwrap_or_default());
            if torn.starts_with(old) || torn.starts_with(new) {
                continue;
            }
            assert!(decode(&torn).is_err(), "cut at {cut}: {:?}", decode(&torn));
        }
        for cut in 0..new.len() {
            assert!(decode(&new[..cut]).is_err(), "prefix of {cut}");
        }
    }

    #[test]
    fn a_torn_record_is_refused() {
        let old = encode(&WRITER, br#"{"version":3,"lifecycle":"stopped-and-more"}"#);
        let new = encode(&WRITER, br#"{"version":4,"lifecycle":"running"}"#);
        torn_is_refused(&old, &new);
        torn_is_refused(&new, &old);
    }

    #[test]
    fn a_torn_writer_is_refused() {
        // The same body, the socket set (after the bind) or cleared (at a
        // handover): a reader sees one writer whole, never a mix, nor one
        // writer with the other's body.
        let unbound = Writer {
            socket: None,
            ..WRITER
        };
        let body = br#"{"version":3,"lifecycle":"running"}"#;
        torn_is_refused(&encode(&unbound, body), &encode(&WRITER, body));
        torn_is_refused(&encode(&WRITER, body), &encode(&unbound, body));
        let other = Writer {
            pid: 1,
            start_time: 2,
            socket: Some((3, 4)),
        };
        torn_is_refused(
            &encode(&WRITER, br#"{"version":9}"#),
            &encode(&other, br#"{"version":10,"x":1}"#),
        );
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(decode(b""), Err(RecordError::Short));
        assert_eq!(decode(b"SFSTAT2\n\x01"), Err(RecordError::Short));
        assert_eq!(decode(b"SFST"), Err(RecordError::Short));
        assert_eq!(decode(b"XFST"), Err(RecordError::BadMagic));
        assert_eq!(
            decode(b"{\"version\":1,\"lifecycle\":{}}"),
            Err(RecordError::BadMagic)
        );
        // The previous format is not this one.
        let mut v1 = encode(&WRITER, b"{}");
        v1[..8].copy_from_slice(b"SFSTAT1\n");
        assert_eq!(decode(&v1), Err(RecordError::BadMagic));
        let mut long = encode(&WRITER, b"x");
        long[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&long), Err(RecordError::TooLong));
        let mut flipped = encode(&WRITER, b"{\"a\":1}");
        let last = flipped.len() - 2;
        flipped[last] ^= 1;
        assert_eq!(decode(&flipped), Err(RecordError::Checksum));
        // Any bit of the writer block flipped: refused, never another writer.
        let record = encode(&WRITER, b"{\"a\":1}");
        for at in MAGIC.len()..MAGIC.len() + WRITER_LEN {
            for bit in 0..8 {
                let mut forged = record.clone();
                forged[at] ^= 1 << bit;
                assert_eq!(decode(&forged), Err(RecordError::Checksum), "byte {at}");
            }
        }
        // A writer block whose own checksum holds, but the body's does not
        // cover it (spliced from another record).
        let mut spliced = encode(&WRITER, b"{\"a\":1}");
        let other = encode(&Writer::default(), b"{\"a\":1}");
        spliced[8..40].copy_from_slice(&other[8..40]);
        assert_eq!(decode(&spliced), Err(RecordError::Checksum));
    }

    /// A `/proc/<pid>/stat` line of a process named `comm` started at
    /// `start` ticks.
    fn stat_line(comm: &[u8], start: u64) -> Vec<u8> {
        let mut line = b"1234 (".to_vec();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") S 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 {start} 2150400 \
                 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    #[test]
    fn an_exited_process_is_told_by_its_state() {
        let line = stat_line(b"x) Z (", 5);
        assert!(!exited(&line), "running (S), whatever its name says");
        let zombie = String::from_utf8_lossy(&line).replacen(") S ", ") Z ", 1);
        // The name's own `) Z` comes first: only the last `)` counts.
        assert!(exited(zombie.as_bytes()));
        assert!(exited(b"1 (a) X 0"));
        assert!(!exited(b"1 (a) T 0"), "stopped is alive");
        assert!(exited(b"1 (a)"));
        assert!(exited(b"garbage"));
    }

    #[test]
    fn start_time_reads_past_any_comm() {
        for comm in [
            &b"kvd"[..],
            b"a b c",
            b") S 1 2 3 4 5",
            b"))",
            b"(",
            b"x) 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 (",
            b"new\nline",
            b"",
            b"\xff\xfe",
        ] {
            assert_eq!(
                start_time_of(&stat_line(comm, 987_654_321)),
                Some(987_654_321),
                "{}",
                String::from_utf8_lossy(comm)
            );
        }
        assert_eq!(start_time_of(&stat_line(b"kvd", 0)), Some(0));
        for garbage in [
            &b""[..],
            b"1234 kvd S 1 2 3",
            b"1234 (kvd) S 1 2",
            b"1234 (kvd)",
            b"1234 (kvd) S 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 -5 1",
            b"1234 (kvd) S 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 +5 1",
            b"1234 (kvd) S 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 99999999999999999999999 1",
        ] {
            assert_eq!(
                start_time_of(garbage),
                None,
                "{}",
                String::from_utf8_lossy(garbage)
            );
        }
    }
}
