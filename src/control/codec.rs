//! The control plane's frame codec: bincode 1.3.3 inside length-delimited
//! frames, with a byte limit on both sides.
//!
//! Invariants:
//! - No frame longer than [`MAX_FRAME_LEN`] is read or written: the length
//!   prefix is checked by [`LengthDelimitedCodec`] before anything is
//!   buffered, and bincode decodes with the same byte limit, so a hostile
//!   length inside a frame cannot allocate either. Checked by
//!   `tests/control.rs::a_frame_over_the_limit_closes_that_connection_only`
//!   and `tests/control.rs::random_frames_do_not_hurt_the_daemon`.
//! - A request's deadline travels as an absolute wall-clock time: every
//!   client → server frame starts with 8 bytes, the request's deadline in
//!   milliseconds since the Unix epoch (little-endian; 0 in a frame that is
//!   not a request), taken when the client encodes the frame from tarpc's
//!   relative deadline. The server turns it back into what is *left* of it
//!   when it decodes the frame (none, if it passed while the daemon was
//!   stopped or the frame sat in the socket), so tarpc's relative deadline
//!   never restarts on a late read; the service drops a request with
//!   nothing left before it runs (`server`). Both ends are on this machine
//!   (or across loopback): one wall clock.
//!   `codec::tests::the_deadline_travels_as_an_absolute_time`,
//!   `tests/control_hostile.rs::an_abandoned_exit_of_a_connected_client_is_dropped`.
//! - What is left of a deadline is clamped to [`MAX_DEADLINE`] *before*
//!   tarpc turns it into an `Instant` (tarpc adds the relative deadline to
//!   `Instant::now()`, which panics on overflow). Checked by
//!   `codec::tests::an_absurd_deadline_is_clamped` and
//!   `tests/control.rs::a_deadline_of_u64_max_seconds_is_still_answered`.

use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bincode::Options;
use serde::Serialize;
use serde::de::DeserializeOwned;
use steadfast_protocol::control::MAX_FRAME_LEN;
use tarpc::tokio_serde::{Deserializer, Serializer};
use tarpc::tokio_util::bytes::{Bytes, BytesMut};
use tarpc::tokio_util::codec::{Framed, LengthDelimitedCodec};
use tokio::io::{AsyncRead, AsyncWrite};

/// The longest deadline the server honours; a longer one is cut to this.
pub const MAX_DEADLINE: Duration = Duration::from_secs(3600);

/// The bytes before tarpc's bincode in a client → server frame: the
/// request's absolute deadline, milliseconds since the Unix epoch (u64,
/// little-endian).
pub const DEADLINE_PREFIX_LEN: usize = 8;

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A frame that is not a message (or is over the byte limit) reads as
/// [`io::ErrorKind::InvalidData`]: tarpc then closes that connection.
fn invalid(error: bincode::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// bincode 1.3.3 with the control plane's limit, for one side of a
/// connection.
#[derive(Debug)]
pub struct Bincode1<Item, SinkItem> {
    /// The server's side: decoded frames are client requests that carry
    /// an absolute deadline before their bincode. The client's side
    /// encodes that deadline (and decodes responses, which have none).
    server: bool,
    _types: PhantomData<fn(SinkItem) -> Item>,
}

impl<Item, SinkItem> Bincode1<Item, SinkItem> {
    /// The server's codec: decodes requests, clamping their deadlines.
    #[must_use]
    pub const fn server() -> Self {
        Self {
            server: true,
            _types: PhantomData,
        }
    }

    /// The client's codec.
    #[must_use]
    pub const fn client() -> Self {
        Self {
            server: false,
            _types: PhantomData,
        }
    }
}

/// The bincode options of every frame.
#[must_use]
pub fn options() -> impl Options + Copy {
    bincode::DefaultOptions::new().with_limit(MAX_FRAME_LEN as u64)
}

/// Length-delimited framing with the control plane's limit.
pub fn framed<S: AsyncRead + AsyncWrite>(io: S) -> Framed<S, LengthDelimitedCodec> {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME_LEN)
        .new_framed(io)
}

impl<Item, SinkItem: Serialize> Serializer<SinkItem> for Bincode1<Item, SinkItem> {
    type Error = io::Error;

    fn serialize(self: Pin<&mut Self>, item: &SinkItem) -> Result<Bytes, io::Error> {
        let body = options().serialize(item).map_err(invalid)?;
        if self.server {
            return Ok(body.into());
        }
        let deadline = request_deadline(&body).map_or(0, |relative| {
            now_ms().saturating_add(u64::try_from(relative.as_millis()).unwrap_or(u64::MAX))
        });
        let mut frame = Vec::with_capacity(DEADLINE_PREFIX_LEN + body.len());
        frame.extend_from_slice(&deadline.to_le_bytes());
        frame.extend_from_slice(&body);
        Ok(frame.into())
    }
}

impl<Item: DeserializeOwned, SinkItem> Deserializer<Item> for Bincode1<Item, SinkItem> {
    type Error = io::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> Result<Item, io::Error> {
        if !self.server {
            return options().deserialize(src).map_err(invalid);
        }
        let Some((prefix, body)) = src.split_first_chunk::<DEADLINE_PREFIX_LEN>() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a frame shorter than its deadline",
            ));
        };
        let deadline = u64::from_le_bytes(*prefix);
        let left = Duration::from_millis(deadline.saturating_sub(now_ms())).min(MAX_DEADLINE);
        match with_request_deadline(body, left) {
            Some(rewritten) => options().deserialize(&rewritten).map_err(invalid),
            // A request whose deadline does not even parse is not decoded:
            // tarpc would add it to `Instant::now()` as it is.
            None if read_varint(body).is_some_and(|(variant, _)| variant == 0) => {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a request without a valid deadline",
                ))
            }
            None => options().deserialize(body).map_err(invalid),
        }
    }
}

/// One bincode varint: its value and how many bytes it took.
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let (&first, rest) = bytes.split_first()?;
    let take = |n: usize| -> Option<u64> {
        let raw = rest.get(..n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(raw);
        Some(u64::from_le_bytes(buf))
    };
    match first {
        0..=250 => Some((u64::from(first), 1)),
        251 => Some((take(2)?, 3)),
        252 => Some((take(4)?, 5)),
        253 => Some((take(8)?, 9)),
        // 254 is a u128: a deadline's seconds are a u64, so this is not one.
        _ => None,
    }
}

/// A tarpc `ClientMessage::Request` frame starts with its variant (0), then
/// the context's deadline as a relative `Duration` (seconds, a varint u64,
/// then nanoseconds, a varint u32). Where that deadline ends, and its
/// value; `None` when the frame is not a request.
fn parse_request_deadline(frame: &[u8]) -> Option<(usize, usize, Duration)> {
    let (variant, tag_len) = read_varint(frame)?;
    if variant != 0 {
        return None;
    }
    let (secs, secs_len) = read_varint(frame.get(tag_len..)?)?;
    let (nanos, nanos_len) = read_varint(frame.get(tag_len + secs_len..)?)?;
    let nanos = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
    Some((
        tag_len,
        tag_len + secs_len + nanos_len,
        Duration::new(secs, nanos),
    ))
}

/// The relative deadline of a request frame (`None`: not a request).
fn request_deadline(frame: &[u8]) -> Option<Duration> {
    parse_request_deadline(frame).map(|(_, _, deadline)| deadline)
}

/// A request frame with its relative deadline replaced by `left`; `None`
/// when the frame is not a request (decode it as it is).
fn with_request_deadline(frame: &[u8], left: Duration) -> Option<Vec<u8>> {
    let (start, end, _) = parse_request_deadline(frame)?;
    let mut rewritten = Vec::with_capacity(frame.len() + 8);
    rewritten.extend_from_slice(&frame[..start]);
    rewritten.extend_from_slice(&options().serialize(&left).ok()?);
    rewritten.extend_from_slice(&frame[end..]);
    Some(rewritten)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    /// tarpc's request frame, with the deadline as the raw `Duration` it
    /// travels as.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum Frame {
        Request {
            deadline: Duration,
            rest: u64,
        },
        #[allow(dead_code)]
        Cancel(u64),
    }

    fn request(deadline: Duration) -> Vec<u8> {
        options()
            .serialize(&Frame::Request { deadline, rest: 77 })
            .expect("encodes")
    }

    /// What the server decodes from a client frame: the deadline left.
    fn decoded(client_frame: &[u8]) -> Frame {
        let mut server = Bincode1::<Frame, ()>::server();
        Deserializer::deserialize(Pin::new(&mut server), &BytesMut::from(client_frame))
            .expect("decodes")
    }

    fn encoded(body: &[u8]) -> Vec<u8> {
        let mut client = Bincode1::<(), Raw>::client();
        Serializer::serialize(Pin::new(&mut client), &Raw(body.to_vec()))
            .expect("encodes")
            .to_vec()
    }

    /// Bytes already bincode-encoded, serialized as themselves.
    struct Raw(Vec<u8>);

    impl Serialize for Raw {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeTuple;
            let mut t = s.serialize_tuple(self.0.len())?;
            for b in &self.0 {
                t.serialize_element(b)?;
            }
            t.end()
        }
    }

    #[test]
    fn an_absurd_deadline_is_clamped() {
        let mut frame = u64::MAX.to_le_bytes().to_vec();
        frame.extend_from_slice(&request(Duration::from_secs(1)));
        let Frame::Request { deadline, rest } = decoded(&frame) else {
            panic!("not a request");
        };
        assert_eq!(deadline, MAX_DEADLINE);
        assert_eq!(rest, 77);
        assert_eq!(with_request_deadline(&[], MAX_DEADLINE), None);
        assert_eq!(with_request_deadline(&[0, 253, 1], MAX_DEADLINE), None);
        let cancel = options().serialize(&Frame::Cancel(3)).expect("encodes");
        assert_eq!(with_request_deadline(&cancel, MAX_DEADLINE), None);
    }

    #[test]
    fn the_deadline_travels_as_an_absolute_time() {
        // The client stamps now + the relative deadline.
        let before = now_ms();
        let frame = encoded(&request(Duration::from_secs(30)));
        let after = now_ms();
        let stamped = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
        assert!((before + 30_000..=after + 30_000).contains(&stamped));
        let Frame::Request { deadline, .. } = decoded(&frame) else {
            panic!("not a request");
        };
        assert!(deadline <= Duration::from_secs(30) && deadline > Duration::from_secs(25));

        // A deadline that passed while the frame waited: nothing is left.
        let mut late = (now_ms() - 1_000).to_le_bytes().to_vec();
        late.extend_from_slice(&request(Duration::from_secs(30)));
        let Frame::Request { deadline, rest } = decoded(&late) else {
            panic!("not a request");
        };
        assert_eq!(deadline, Duration::ZERO);
        assert_eq!(rest, 77);

        // A frame that is not a request carries 0 and decodes as it is.
        let cancel = options().serialize(&Frame::Cancel(3)).expect("encodes");
        let framed = encoded(&cancel);
        assert_eq!(&framed[..8], &[0u8; 8]);
        assert!(matches!(decoded(&framed), Frame::Cancel(3)));
    }
}
