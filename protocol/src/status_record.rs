//! The status record's framing (`.steadfast/status`, `spec/control-dir.md`,
//! "The status record"): what `steadfastctl status` reads instead of asking
//! the daemon, as runit's `sv status` reads `supervise/status`.
//!
//! ```text
//! magic "SFSTAT1\n" (8) | len: u32 LE | crc32c(body): u32 LE | body (len bytes)
//! ```
//!
//! The body is the lean snapshot's JSON exactly as the snapshot RPC carries
//! it, without `now`. The daemon rewrites the record in place with one
//! write at offset 0 and never truncates it, so a reader racing a write can
//! see the head of one record and the tail of another: [`decode`] refuses
//! anything whose length or checksum does not hold, and bytes past `len`
//! (the tail of a longer, earlier record) are ignored.
//!
//! Invariants, checked by this module's tests: [`decode`] gives back what
//! [`encode`] framed (`a_record_round_trips`); a truncated, torn, padded
//! or garbage record is refused or read whole, never misread
//! (`a_torn_record_is_refused`, `garbage_is_refused`).

/// The record's first bytes.
pub const MAGIC: [u8; 8] = *b"SFSTAT1\n";

/// The header's length: the magic, `len` and the checksum.
pub const HEADER_LEN: usize = 16;

/// The largest body a reader accepts (the control plane's frame limit).
pub const MAX_BODY_LEN: usize = 1 << 20;

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
    /// The body does not match its checksum (a torn read).
    #[error("the status record's checksum does not match")]
    Checksum,
}

/// `body` framed as a record.
#[must_use]
pub fn encode(body: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER_LEN + body.len());
    encode_into(body, &mut record);
    record
}

/// `body` framed as a record into `out` (cleared first), reusing its
/// allocation.
///
/// # Panics
/// Never for a body a snapshot makes: over 4 GiB does not fit `len`, and is
/// then framed with a length no reader accepts.
pub fn encode_into(body: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(body);
}

/// The body of the record at the start of `bytes`.
///
/// # Errors
/// [`RecordError`] when `bytes` does not start with a whole record.
pub fn decode(bytes: &[u8]) -> Result<&[u8], RecordError> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(if bytes.len() < MAGIC.len() || bytes.starts_with(&MAGIC) {
            RecordError::Short
        } else {
            RecordError::BadMagic
        });
    };
    if header[..8] != MAGIC {
        return Err(RecordError::BadMagic);
    }
    let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    let len = usize::try_from(len).map_err(|_| RecordError::TooLong)?;
    if len > MAX_BODY_LEN {
        return Err(RecordError::TooLong);
    }
    let body = rest.get(..len).ok_or(RecordError::Short)?;
    if crc32c::crc32c(body) != crc {
        return Err(RecordError::Checksum);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let body = br#"{"version":3}"#;
        let record = encode(body);
        assert_eq!(decode(&record), Ok(&body[..]));
        // Bytes past the record (the tail of a longer, earlier one) are not read.
        let mut padded = record.clone();
        padded.extend_from_slice(b"tail of an older, longer record");
        assert_eq!(decode(&padded), Ok(&body[..]));
        assert_eq!(decode(&encode(b"")), Ok(&b""[..]));
    }

    #[test]
    fn a_torn_record_is_refused() {
        let old = encode(br#"{"version":3,"lifecycle":"stopped-and-more"}"#);
        let new = encode(br#"{"version":4,"lifecycle":"running"}"#);
        for cut in 0..new.len() {
            let torn: Vec<u8> = new[..cut].iter().chain(&old[cut..]).copied().collect();
            if torn == old || torn[..new.len()] == new[..] {
                continue;
            }
            assert!(decode(&torn).is_err(), "cut at {cut}: {:?}", decode(&torn));
        }
        for cut in 0..new.len() {
            assert!(decode(&new[..cut]).is_err(), "prefix of {cut}");
        }
    }

    #[test]
    fn garbage_is_refused() {
        assert_eq!(decode(b""), Err(RecordError::Short));
        assert_eq!(decode(b"SFSTAT1\n\x01"), Err(RecordError::Short));
        assert_eq!(
            decode(b"{\"version\":1,\"lifecycle\":{}}"),
            Err(RecordError::BadMagic)
        );
        let mut long = encode(b"x");
        long[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&long), Err(RecordError::TooLong));
        let mut flipped = encode(b"{\"a\":1}");
        let last = flipped.len() - 2;
        flipped[last] ^= 1;
        assert_eq!(decode(&flipped), Err(RecordError::Checksum));
    }
}
