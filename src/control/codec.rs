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
//! - A request's deadline is clamped to [`MAX_DEADLINE`] *before* tarpc
//!   turns it into an `Instant` (tarpc adds the relative deadline to
//!   `Instant::now()`, which panics on overflow). Checked by
//!   `codec::tests::an_absurd_deadline_is_clamped` and
//!   `tests/control.rs::a_deadline_of_u64_max_seconds_is_still_answered`.

use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

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

/// A frame that is not a message (or is over the byte limit) reads as
/// [`io::ErrorKind::InvalidData`]: tarpc then closes that connection.
fn invalid(error: bincode::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// bincode 1.3.3 with the control plane's limit, for one side of a
/// connection.
#[derive(Debug)]
pub struct Bincode1<Item, SinkItem> {
    /// Whether decoded frames are client requests whose deadline must be
    /// clamped (the server's side); a client decodes responses, which have
    /// no deadline.
    clamp_deadlines: bool,
    _types: PhantomData<fn(SinkItem) -> Item>,
}

impl<Item, SinkItem> Bincode1<Item, SinkItem> {
    /// The server's codec: decodes requests, clamping their deadlines.
    #[must_use]
    pub const fn server() -> Self {
        Self {
            clamp_deadlines: true,
            _types: PhantomData,
        }
    }

    /// The client's codec.
    #[must_use]
    pub const fn client() -> Self {
        Self {
            clamp_deadlines: false,
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
        Ok(options().serialize(item).map_err(invalid)?.into())
    }
}

impl<Item: DeserializeOwned, SinkItem> Deserializer<Item> for Bincode1<Item, SinkItem> {
    type Error = io::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> Result<Item, io::Error> {
        if self.clamp_deadlines
            && let Some(clamped) = clamp_request_deadline(src)
        {
            return options().deserialize(&clamped).map_err(invalid);
        }
        options().deserialize(src).map_err(invalid)
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
/// then nanoseconds). If those seconds exceed [`MAX_DEADLINE`], return the
/// frame with them cut to it; otherwise `None` (decode the frame as is).
fn clamp_request_deadline(frame: &[u8]) -> Option<Vec<u8>> {
    let (variant, tag_len) = read_varint(frame)?;
    if variant != 0 {
        return None;
    }
    let (secs, secs_len) = read_varint(&frame[tag_len..])?;
    let max = MAX_DEADLINE.as_secs();
    if secs <= max {
        return None;
    }
    let mut clamped = Vec::with_capacity(frame.len());
    clamped.extend_from_slice(&frame[..tag_len]);
    clamped.extend_from_slice(&options().serialize(&max).ok()?);
    clamped.extend_from_slice(&frame[tag_len + secs_len..]);
    Some(clamped)
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

    #[test]
    fn an_absurd_deadline_is_clamped() {
        for (asked, expected) in [
            (Duration::new(u64::MAX, 999_999_999), MAX_DEADLINE),
            (Duration::from_secs(3601), MAX_DEADLINE),
            (Duration::from_secs(70_000), MAX_DEADLINE),
        ] {
            let frame = options()
                .serialize(&Frame::Request {
                    deadline: asked,
                    rest: 77,
                })
                .expect("encodes");
            let clamped = clamp_request_deadline(&frame).expect("clamped");
            let back: Frame = options().deserialize(&clamped).expect("decodes");
            let Frame::Request { deadline, rest } = back else {
                panic!("not a request");
            };
            assert_eq!(Duration::from_secs(deadline.as_secs()), expected);
            assert_eq!(rest, 77);
        }
        let fine = options()
            .serialize(&Frame::Request {
                deadline: Duration::from_secs(10),
                rest: 1,
            })
            .expect("encodes");
        assert_eq!(clamp_request_deadline(&fine), None);
        assert_eq!(clamp_request_deadline(&[]), None);
        assert_eq!(clamp_request_deadline(&[0, 253, 1]), None);
    }
}
