//! The control plane's frame codec: bincode 1.3.3 inside length-delimited
//! frames, with a byte limit on both sides.
//!
//! Invariants:
//! - No frame longer than [`MAX_FRAME_LEN`] is read or written: the length
//!   prefix is checked by [`LengthDelimitedCodec`] before anything is
//!   buffered, and bincode decodes with the same byte limit, so a hostile
//!   length inside a frame cannot allocate either. Checked by
//!   `tests/it/control.rs::a_frame_over_the_limit_closes_that_connection_only`
//!   and `tests/it/control.rs::random_frames_do_not_hurt_the_daemon`.
//! - A request's deadline travels as the time *left* (tarpc's own relative
//!   deadline, in its bincode), and the server measures it from the
//!   frame's arrival on its own monotonic clock: no wall clock takes part,
//!   so a client whose clock is off by any amount is served alike.
//!   `tests/it/control_hostile.rs::a_client_whose_clock_is_off_is_answered`.
//! - Time a frame spent waiting (in the socket while the daemon was
//!   stopped, behind a full socket) is taken off what it has left: every
//!   client → server frame starts with 8 bytes, [`STAMPED`] (the top bit)
//!   over the client's monotonic send time in milliseconds (63 bits,
//!   wrapping); the server keeps, per connection, the smallest gap between
//!   its own monotonic arrival time and that stamp (the clocks' constant
//!   offset plus the quickest delivery), and a frame's *lag* is how much
//!   longer than that it took. A request whose lag ate its time arrives
//!   with nothing left and is never executed (`server`), and its error
//!   says how long it waited. The first frame of a connection sets the
//!   baseline (its lag is 0): an abandoned first frame is covered by the
//!   greeting instead (`spec/control.md`).
//!   `codec::tests::the_deadline_travels_as_the_time_left`,
//!   `tests/it/control_hostile.rs::an_abandoned_exit_of_a_connected_client_is_dropped`.
//! - An older client's frame (top bit clear) carries its absolute
//!   wall-clock deadline (milliseconds since the Unix epoch; 0 in a frame
//!   that is not a request) and is served as before: what is left is
//!   measured against the daemon's wall clock, and a request that arrives
//!   past it gets an error naming the client's clock.
//!   `codec::tests::an_older_clients_absolute_deadline_is_still_served`.
//! - What is left of a deadline is clamped to [`MAX_DEADLINE`] *before*
//!   tarpc turns it into an `Instant` (tarpc adds the relative deadline to
//!   `Instant::now()`, which panics on overflow). Checked by
//!   `codec::tests::an_absurd_deadline_is_clamped` and
//!   `tests/it/control.rs::a_deadline_of_u64_max_seconds_is_still_answered`.

use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// The bytes before tarpc's bincode in a client → server frame (u64,
/// little-endian): [`STAMPED`] over the client's monotonic send time in
/// milliseconds; from an older client, without [`STAMPED`], the request's
/// absolute deadline in milliseconds since the Unix epoch.
pub const DEADLINE_PREFIX_LEN: usize = 8;

/// The prefix's top bit: the frame's deadline is tarpc's relative one (the
/// time left) and the rest of the prefix the client's send time. An
/// absolute deadline in milliseconds since the epoch never has it, and a
/// server that reads it as one sees a deadline far off (clamped to
/// [`MAX_DEADLINE`]), so either end may be the older one.
pub const STAMPED: u64 = 1 << 63;

/// The stamp's bits.
const STAMP_MASK: u64 = STAMPED - 1;

/// `x` (63 bits, wrapping) as a signed difference.
fn signed63(x: u64) -> i64 {
    let x = x & STAMP_MASK;
    if x >= 1 << 62 {
        i64::try_from(x).unwrap_or(i64::MAX) - i64::MAX - 1
    } else {
        i64::try_from(x).unwrap_or(i64::MAX)
    }
}

/// Why a request arrived with no time left, for its error (`server`), in
/// the order they arrived on one connection.
#[derive(Debug, Default)]
pub(crate) struct ArrivalNotes(std::sync::Mutex<std::collections::VecDeque<String>>);

impl ArrivalNotes {
    /// Keep `note` (a handful at most: the oldest go first).
    fn push(&self, note: String) {
        let mut notes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if notes.len() >= 64 {
            notes.pop_front();
        }
        notes.push_back(note);
    }

    /// The oldest note not taken yet.
    pub(crate) fn take(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }
}

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
    /// The server's side: decoded frames are client frames with a stamp
    /// (or an older client's absolute deadline) before their bincode. The
    /// client's side writes that stamp (and decodes responses, which have
    /// none).
    server: bool,
    /// Client only: milliseconds added to the client's clock readings (a
    /// test's stand-in for a client machine whose clock is off).
    clock_offset_ms: i64,
    /// The monotonic clock's origin for this connection's stamps (set at
    /// the first frame).
    epoch: Option<Instant>,
    /// Server only: the smallest (arrival − stamp) seen on this
    /// connection, 63 bits wrapping.
    base: Option<u64>,
    /// Server only: where a request that arrives with no time left says
    /// why.
    notes: Option<std::sync::Arc<ArrivalNotes>>,
    _types: PhantomData<fn(SinkItem) -> Item>,
}

impl<Item, SinkItem> Bincode1<Item, SinkItem> {
    /// The server's codec: decodes requests, clamping their deadlines.
    #[must_use]
    pub const fn server() -> Self {
        Self {
            server: true,
            clock_offset_ms: 0,
            epoch: None,
            base: None,
            notes: None,
            _types: PhantomData,
        }
    }

    /// The server's codec, noting in `notes` why a request arrived with no
    /// time left.
    pub(crate) fn server_noting(notes: std::sync::Arc<ArrivalNotes>) -> Self {
        Self {
            notes: Some(notes),
            ..Self::server()
        }
    }

    /// Milliseconds on this connection's monotonic clock, shifted by the
    /// clock offset (63 bits, wrapping).
    fn monotonic_ms(&mut self) -> u64 {
        let epoch = *self.epoch.get_or_insert_with(Instant::now);
        let elapsed = i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX);
        elapsed.wrapping_add(self.clock_offset_ms).cast_unsigned() & STAMP_MASK
    }

    /// How much longer than this connection's quickest frame a frame
    /// stamped `stamp` took to arrive (and the baseline moves to it when
    /// it was quicker).
    fn lag(&mut self, stamp: u64) -> Duration {
        let gap = self.monotonic_ms().wrapping_sub(stamp) & STAMP_MASK;
        let lag = self.base.map_or(0, |base| signed63(gap.wrapping_sub(base)));
        if lag <= 0 {
            self.base = Some(gap);
            return Duration::ZERO;
        }
        Duration::from_millis(lag.cast_unsigned())
    }

    /// Keep `note` for the request's error.
    fn note(&self, note: String) {
        if let Some(notes) = &self.notes {
            notes.push(note);
        }
    }

    /// The client's codec.
    #[must_use]
    pub const fn client() -> Self {
        Self::client_with_clock_offset(0)
    }

    /// The client's codec, its clock read `offset_ms` milliseconds off
    /// (negative: behind). For tests of a client whose clock is skewed.
    #[doc(hidden)]
    #[must_use]
    pub const fn client_with_clock_offset(offset_ms: i64) -> Self {
        Self {
            server: false,
            clock_offset_ms: offset_ms,
            epoch: None,
            base: None,
            notes: None,
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
        let this = self.get_mut();
        let body = options().serialize(item).map_err(invalid)?;
        if this.server {
            return Ok(body.into());
        }
        let stamp = STAMPED | this.monotonic_ms();
        let mut frame = Vec::with_capacity(DEADLINE_PREFIX_LEN + body.len());
        frame.extend_from_slice(&stamp.to_le_bytes());
        frame.extend_from_slice(&body);
        Ok(frame.into())
    }
}

impl<Item: DeserializeOwned, SinkItem> Deserializer<Item> for Bincode1<Item, SinkItem> {
    type Error = io::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> Result<Item, io::Error> {
        let this = self.get_mut();
        if !this.server {
            return options().deserialize(src).map_err(invalid);
        }
        let Some((prefix, body)) = src.split_first_chunk::<DEADLINE_PREFIX_LEN>() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a frame shorter than its deadline",
            ));
        };
        let prefix = u64::from_le_bytes(*prefix);
        let sent = request_deadline(body);
        let left = if prefix & STAMPED == STAMPED {
            let lag = this.lag(prefix & STAMP_MASK);
            sent.map(|sent| {
                let left = sent.saturating_sub(lag);
                if left.is_zero() {
                    this.note(format!(
                        "its deadline had passed when it arrived: it took {} ms longer to arrive \
                         than this connection's quickest request, past the {} ms it had left \
                         (the daemon was stopped or overloaded; deadlines travel as the time \
                         left, measured on the daemon's clock, so the client's clock plays no \
                         part)",
                        lag.as_millis(),
                        sent.as_millis()
                    ));
                }
                left
            })
        } else {
            // An older client: an absolute deadline on its wall clock.
            let now = now_ms();
            sent.map(|_| {
                let left = Duration::from_millis(prefix.saturating_sub(now));
                if left.is_zero() {
                    this.note(format!(
                        "its deadline, sent as the client's wall-clock time (a client older \
                         than this daemon), had passed {:.1} s before it arrived by the daemon's \
                         clock: the client's clock is behind the daemon's by about that much, \
                         or the daemon was stopped; a current client sends the time left, which \
                         clock skew does not affect",
                        Duration::from_millis(now.saturating_sub(prefix)).as_secs_f64()
                    ));
                }
                left
            })
        };
        let Some(left) = left else {
            // Not a request (or one whose deadline does not parse).
            if read_varint(body).is_some_and(|(variant, _)| variant == 0) {
                // A request whose deadline does not even parse is not
                // decoded: tarpc would add it to `Instant::now()` as it is.
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a request without a valid deadline",
                ));
            }
            return options().deserialize(body).map_err(invalid);
        };
        match with_request_deadline(body, left.min(MAX_DEADLINE)) {
            Some(rewritten) => options().deserialize(&rewritten).map_err(invalid),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a request without a valid deadline",
            )),
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
        decoded_by(&mut Bincode1::<Frame, ()>::server(), client_frame)
    }

    /// What `server` (one connection's codec) decodes from a client frame.
    fn decoded_by(server: &mut Bincode1<Frame, ()>, client_frame: &[u8]) -> Frame {
        Deserializer::deserialize(Pin::new(server), &BytesMut::from(client_frame)).expect("decodes")
    }

    fn prefixed(prefix: u64, body: &[u8]) -> Vec<u8> {
        let mut frame = prefix.to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        frame
    }

    fn deadline_of(frame: Frame) -> Duration {
        let Frame::Request { deadline, rest } = frame else {
            panic!("not a request");
        };
        assert_eq!(rest, 77);
        deadline
    }

    fn encoded(body: &[u8]) -> Vec<u8> {
        encoded_off(body, 0)
    }

    /// Encoded by a client whose clock is `offset_ms` off.
    fn encoded_off(body: &[u8], offset_ms: i64) -> Vec<u8> {
        let mut client = Bincode1::<(), Raw>::client_with_clock_offset(offset_ms);
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
        let absurd = request(Duration::new(u64::MAX, 999_999_999));
        assert_eq!(deadline_of(decoded(&encoded(&absurd))), MAX_DEADLINE);
        assert_eq!(
            deadline_of(decoded(&prefixed(u64::MAX, &absurd))),
            MAX_DEADLINE
        );
        // An older client's absolute deadline, as far off as it goes.
        let one_second = request(Duration::from_secs(1));
        assert_eq!(
            deadline_of(decoded(&prefixed(STAMP_MASK, &one_second))),
            MAX_DEADLINE
        );
        assert_eq!(with_request_deadline(&[], MAX_DEADLINE), None);
        assert_eq!(with_request_deadline(&[0, 253, 1], MAX_DEADLINE), None);
        let cancel = options().serialize(&Frame::Cancel(3)).expect("encodes");
        assert_eq!(with_request_deadline(&cancel, MAX_DEADLINE), None);
    }

    #[test]
    fn the_deadline_travels_as_the_time_left() {
        // Whatever the client's clock says, the time left is what it sent.
        for offset_ms in [0, -3_000, -121_000, 121_000, i64::MIN, i64::MAX] {
            let frame = encoded_off(&request(Duration::from_secs(30)), offset_ms);
            let prefix = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
            assert_eq!(prefix & STAMPED, STAMPED);
            let deadline = deadline_of(decoded(&frame));
            assert!(
                deadline == Duration::from_secs(30),
                "{offset_ms}: {deadline:?}"
            );
        }

        // On one connection, a frame that took 2 s longer than the
        // quickest (stamped 2 s before one that arrived earlier) has 2 s
        // less; one with less than that left arrives with none, and says
        // why.
        let notes = std::sync::Arc::new(ArrivalNotes::default());
        let mut server = Bincode1::<Frame, ()>::server_noting(std::sync::Arc::clone(&notes));
        let quick = STAMPED | 1_000_000;
        let late = STAMPED | (1_000_000 - 2_000);
        let first = deadline_of(decoded_by(
            &mut server,
            &prefixed(quick, &request(Duration::from_secs(30))),
        ));
        assert_eq!(first, Duration::from_secs(30));
        let second = deadline_of(decoded_by(
            &mut server,
            &prefixed(late, &request(Duration::from_secs(30))),
        ));
        assert!(
            second <= Duration::from_secs(28) && second > Duration::from_secs(25),
            "{second:?}"
        );
        assert_eq!(notes.take(), None);
        let expired = deadline_of(decoded_by(
            &mut server,
            &prefixed(late, &request(Duration::from_secs(1))),
        ));
        assert_eq!(expired, Duration::ZERO);
        let note = notes.take().expect("a note");
        assert!(note.contains("had passed when it arrived"), "{note}");
        assert!(note.contains("clock plays no part"), "{note}");
        // A quicker frame moves the baseline: nothing lags behind it.
        let quicker = STAMPED | (1_000_000 + 5_000);
        let fresh = deadline_of(decoded_by(
            &mut server,
            &prefixed(quicker, &request(Duration::from_secs(30))),
        ));
        assert_eq!(fresh, Duration::from_secs(30));

        // A frame that is not a request decodes as it is.
        let cancel = options().serialize(&Frame::Cancel(3)).expect("encodes");
        assert!(matches!(decoded(&encoded(&cancel)), Frame::Cancel(3)));
    }

    #[test]
    fn an_older_clients_absolute_deadline_is_still_served() {
        let ahead = prefixed(now_ms() + 30_000, &request(Duration::from_secs(30)));
        let deadline = deadline_of(decoded(&ahead));
        assert!(deadline <= Duration::from_secs(30) && deadline > Duration::from_secs(25));

        // Passed by the daemon's clock on arrival: nothing left, and the
        // note names the client's clock.
        let notes = std::sync::Arc::new(ArrivalNotes::default());
        let mut server = Bincode1::<Frame, ()>::server_noting(std::sync::Arc::clone(&notes));
        let behind = prefixed(now_ms() - 3_000, &request(Duration::from_secs(2)));
        assert_eq!(
            deadline_of(decoded_by(&mut server, &behind)),
            Duration::ZERO
        );
        let note = notes.take().expect("a note");
        assert!(note.contains("client's clock is behind"), "{note}");

        // A frame that is not a request carries 0 and decodes as it is.
        let cancel = options().serialize(&Frame::Cancel(3)).expect("encodes");
        assert!(matches!(decoded(&prefixed(0, &cancel)), Frame::Cancel(3)));
    }
}
