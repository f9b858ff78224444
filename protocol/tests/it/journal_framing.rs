//! The journal framing held to DESIGN.md "Durability rules": every prefix of a
//! journal decodes to exactly the records it wholly holds; an overwritten tail
//! is torn, never corrupt, and never yields a damaged record; a damaged record
//! followed by good ones is corruption at that record's offset; hostile length
//! prefixes are refused without allocating from them; no input panics.
//!
//! Pseudo-random data comes from a seeded splitmix64 (no `rand` dependency),
//! so every run checks the same cases. A counting global allocator measures
//! the largest single allocation made while decoding hostile input.

use crate::support::nz;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use steadfast_protocol::journal::{
    AttemptResult, Decoded, FRAME_HEADER_LEN, HEADER_LEN, JournalError, MAX_RECORD_LEN, Record,
    ResourceRecord, Tail, decode, encode_header, encode_record,
};

// ---------------------------------------------------------------- allocator

/// Forwards to the system allocator and, on threads that asked, remembers the
/// largest single allocation. `unsafe` is denied workspace-wide; implementing
/// `GlobalAlloc` needs it, and it is the only way to *check* (not just claim)
/// that a hostile length is never allocated.
struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: thread-local storage may be gone while a thread exits.
    if TRACKING.try_with(Cell::get).unwrap_or(false) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

#[allow(unsafe_code)]
// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the bookkeeping only touches const-initialised thread-locals,
// which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Run `f` and return its result with the largest single allocation it made
/// on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    let out = f();
    TRACKING.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------- fixtures

/// splitmix64: a tiny seeded generator, good enough for test data.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn text(&mut self, max: u64) -> String {
        let n = self.below(max + 1) as usize;
        // Mostly ASCII, with some multi-byte characters.
        (0..n)
            .map(|_| match self.below(10) {
                0 => 'é',
                1 => '→',
                _ => char::from(b'a' + self.below(26) as u8),
            })
            .collect()
    }
}

/// One of each variant, with small and edge values, so the round trip covers
/// them all; `variant_index` makes adding a variant a compile error here.
fn every_variant() -> Vec<Record> {
    vec![
        Record::AttemptStarted {
            attempt: nz(1),
            at_ms: 1_700_000_000_000,
        },
        Record::PhaseStarted {
            attempt: nz(1),
            phase: "resolve_config".into(),
            index: 0,
            total: 4,
            at_ms: 1_700_000_000_001,
        },
        Record::PhaseCompleted {
            attempt: nz(1),
            phase: "resolve_config".into(),
            at_ms: 2,
            duration_ms: 0,
        },
        Record::PhaseSkipped {
            attempt: nz(u32::MAX),
            phase: "open_store".into(),
            at_ms: u64::MAX,
            reason: "checkpoint observed".into(),
            duration_ms: u64::MAX,
        },
        Record::PhaseFailed {
            attempt: nz(2),
            phase: "bind".into(),
            at_ms: 3,
            duration_ms: u64::MAX,
            error: "address in use → ünïcode".into(),
        },
        Record::AttemptEnded {
            attempt: nz(1),
            at_ms: 4,
            result: AttemptResult::Succeeded,
        },
        Record::AttemptEnded {
            attempt: nz(2),
            at_ms: 5,
            result: AttemptResult::Failed,
        },
        Record::AttemptEnded {
            attempt: nz(3),
            at_ms: 6,
            result: AttemptResult::Cancelled,
        },
        Record::Transition {
            at_ms: 7,
            from: "booting".into(),
            event: "boot_succeeded".into(),
            to: "running".into(),
        },
        Record::Checkpoint {
            attempt: nz(1),
            step: "open_store".into(),
            index: 1,
            resource: ResourceRecord {
                kind: "store".into(),
                id: "/data/store".into(),
                payload: vec![],
            },
        },
        Record::Checkpoint {
            attempt: nz(1),
            step: "bind".into(),
            index: 2,
            resource: ResourceRecord {
                kind: "listener".into(),
                id: "[::]:8080".into(),
                payload: (0..=255).collect(),
            },
        },
        Record::CheckpointCleared {
            step: String::new(),
        },
        Record::ChildRestarted {
            attempt: nz(u32::MAX),
            child: "compactor".into(),
            incarnation: u32::MAX,
            reason: "panicked: a \"quoted\" line".into(),
            at_ms: u64::MAX,
        },
        Record::ChildrenMeltdown {
            attempt: nz(1),
            child: String::new(),
            restarts: 0,
            period_ms: 0,
            reason: String::new(),
            at_ms: 0,
        },
        Record::Intent {
            attempt: nz(u32::MAX),
            step: "lease".into(),
            index: u32::MAX,
        },
    ]
}

fn variant_index(r: &Record) -> usize {
    match r {
        Record::AttemptStarted { .. } => 0,
        Record::PhaseStarted { .. } => 1,
        Record::PhaseCompleted { .. } => 2,
        Record::PhaseSkipped { .. } => 3,
        Record::PhaseFailed { .. } => 4,
        Record::AttemptEnded { .. } => 5,
        Record::Transition { .. } => 6,
        Record::Checkpoint { .. } => 7,
        Record::CheckpointCleared { .. } => 8,
        Record::ChildRestarted { .. } => 9,
        Record::ChildrenMeltdown { .. } => 10,
        Record::Intent { .. } => 11,
    }
}
const VARIANTS: usize = 12;

/// `n` varied records: every variant, string lengths 0..=40 (one phase name of
/// 300), resource payloads up to 600 bytes, full-range numbers.
fn varied_records(n: usize, seed: u64) -> Vec<Record> {
    let mut g = SplitMix(seed);
    (0..n)
        .map(|i| {
            let attempt = (g.next() as u32).max(1);
            let at_ms = g.next() >> g.below(64);
            match i % VARIANTS {
                0 => Record::AttemptStarted {
                    attempt: nz(attempt),
                    at_ms,
                },
                1 => Record::PhaseStarted {
                    attempt: nz(attempt),
                    phase: if i == 10 { "p".repeat(300) } else { g.text(40) },
                    index: g.below(10) as u32,
                    total: 10,
                    at_ms,
                },
                2 => Record::PhaseCompleted {
                    attempt: nz(attempt),
                    phase: g.text(40),
                    at_ms,
                    duration_ms: g.next(),
                },
                3 => Record::PhaseSkipped {
                    attempt: nz(attempt),
                    phase: g.text(40),
                    at_ms,
                    reason: g.text(40),
                    duration_ms: at_ms,
                },
                4 => Record::PhaseFailed {
                    attempt: nz(attempt),
                    phase: g.text(40),
                    at_ms,
                    duration_ms: g.below(100_000),
                    error: g.text(40),
                },
                5 => Record::AttemptEnded {
                    attempt: nz(attempt),
                    at_ms,
                    result: [
                        AttemptResult::Succeeded,
                        AttemptResult::Failed,
                        AttemptResult::Cancelled,
                    ][g.below(3) as usize],
                },
                6 => Record::Transition {
                    at_ms,
                    from: g.text(20),
                    event: g.text(20),
                    to: g.text(20),
                },
                7 => {
                    let len = g.below(601) as usize;
                    Record::Checkpoint {
                        attempt: nz(attempt),
                        step: g.text(40),
                        index: g.below(10) as u32,
                        resource: ResourceRecord {
                            kind: g.text(10),
                            id: g.text(30),
                            payload: g.bytes(len),
                        },
                    }
                }
                8 => Record::CheckpointCleared { step: g.text(40) },
                9 => Record::ChildRestarted {
                    attempt: nz(attempt),
                    child: g.text(40),
                    incarnation: g.next() as u32,
                    reason: g.text(40),
                    at_ms,
                },
                10 => Record::ChildrenMeltdown {
                    attempt: nz(attempt),
                    child: g.text(40),
                    restarts: g.next() as u32,
                    period_ms: g.next(),
                    reason: g.text(40),
                    at_ms,
                },
                _ => Record::Intent {
                    attempt: nz(attempt),
                    step: g.text(40),
                    index: g.below(10) as u32,
                },
            }
        })
        .collect()
}

/// A journal file of `records`, and the byte offset where each record starts
/// (plus one final entry: the file's length).
fn journal(records: &[Record]) -> (Vec<u8>, Vec<usize>) {
    let mut file = encode_header().to_vec();
    let mut bounds = vec![file.len()];
    for r in records {
        file.extend_from_slice(&encode_record(r).expect("fixture records fit"));
        bounds.push(file.len());
    }
    (file, bounds)
}

/// What a decode must return when the first `good` records are intact and
/// everything from `bounds[good]` on is damaged (or absent).
fn expected(records: &[Record], bounds: &[usize], good: usize) -> Decoded {
    let valid_len = bounds[good];
    let tail = if good == records.len() {
        Tail::Clean
    } else {
        Tail::Torn { offset: valid_len }
    };
    Decoded {
        records: records[..good].to_vec(),
        valid_len,
        tail,
    }
}

/// How many leading records of the original are byte-for-byte unchanged in
/// `damaged`.
fn intact_records(original: &[u8], damaged: &[u8], bounds: &[usize]) -> usize {
    bounds
        .windows(2)
        .take_while(|w| damaged.get(w[0]..w[1]) == Some(&original[w[0]..w[1]]))
        .count()
}

// ---------------------------------------------------------------- tests

/// DESIGN.md "Durability rules": a torn write leaves a prefix; the decode of
/// every prefix is the records it wholly holds, Clean exactly at boundaries.
#[test]
fn every_prefix_decodes_to_the_records_it_holds() {
    let records = varied_records(50, 0x5eed);
    let (file, bounds) = journal(&records);
    let mut cases = 0;
    let mut clean = 0;
    for cut in 0..=file.len() {
        let got = decode(&file[..cut]).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
        let want = if cut == 0 {
            Decoded {
                records: vec![],
                valid_len: 0,
                tail: Tail::Empty,
            }
        } else if cut < HEADER_LEN {
            Decoded {
                records: vec![],
                valid_len: 0,
                tail: Tail::Torn { offset: 0 },
            }
        } else {
            let whole = bounds.iter().filter(|&&b| b <= cut).count() - 1;
            let mut want = expected(&records, &bounds, whole);
            if bounds[whole] == cut {
                want.tail = Tail::Clean;
                clean += 1;
            }
            want
        };
        assert_eq!(got, want, "cut at {cut}");
        cases += 1;
    }
    assert_eq!(cases, file.len() + 1);
    assert_eq!(
        clean,
        records.len() + 1,
        "Clean at the header's end and after each record"
    );
    eprintln!(
        "every_prefix_decodes_to_the_records_it_holds: {cases} cuts of a {}-byte journal",
        file.len()
    );
}

/// DESIGN.md "Durability rules": a torn tail (whatever the disk left after the
/// cut: zeros or garbage) is truncated at the first damaged record, is never
/// reported as corruption, and never yields a damaged record.
#[test]
fn overwritten_tails_are_torn_never_corrupt() {
    let records = varied_records(50, 0xfeed);
    let (file, bounds) = journal(&records);
    let mut g = SplitMix(0xdead_beef);
    let mut cases = 0;
    for from in HEADER_LEN..=file.len() {
        let zeros = {
            let mut f = file.clone();
            f[from..].fill(0);
            f
        };
        let noise = {
            let mut f = file.clone();
            let n = f.len() - from;
            f[from..].copy_from_slice(&g.bytes(n));
            f
        };
        for (what, damaged) in [("zeros", zeros), ("noise", noise)] {
            let good = intact_records(&file, &damaged, &bounds);
            // Records wholly before the overwrite are intact; the one it
            // starts in may be too, if the bytes it wrote were already there.
            assert!(bounds[good] >= from || bounds[good + 1] > from);
            let got = decode(&damaged).unwrap_or_else(|e| panic!("{what} from {from}: {e}"));
            assert_eq!(got, expected(&records, &bounds, good), "{what} from {from}");
            cases += 1;
        }
    }
    assert_eq!(cases, 2 * (file.len() - HEADER_LEN + 1));
    eprintln!("overwritten_tails_are_torn_never_corrupt: {cases} overwrites");
}

/// DESIGN.md "Durability rules": a bad record followed by good ones is
/// corruption, reported at the bad record's offset, never a shorter journal.
/// Every bit of every byte (len, crc and payload) of three middle records.
#[test]
fn every_bit_flip_in_a_middle_record_is_corrupt() {
    let records = varied_records(50, 0xb17);
    let (file, bounds) = journal(&records);
    let mut cases = 0;
    // The first record, a record with a 300-byte string, and a middle checkpoint.
    for victim in [0, 10, 25] {
        let (start, end) = (bounds[victim], bounds[victim + 1]);
        for byte in start..end {
            for bit in 0..8 {
                let mut damaged = file.clone();
                damaged[byte] ^= 1 << bit;
                assert_eq!(
                    decode(&damaged),
                    Err(JournalError::Corrupt { offset: start }),
                    "record {victim}, byte {byte}, bit {bit}"
                );
                cases += 1;
            }
        }
    }
    let flipped_bytes =
        (bounds[1] - bounds[0]) + (bounds[11] - bounds[10]) + (bounds[26] - bounds[25]);
    assert_eq!(cases, 8 * flipped_bytes);
    eprintln!("every_bit_flip_in_a_middle_record_is_corrupt: {cases} flips");
}

/// The other side of the rule: damage to the last record is a torn tail.
#[test]
fn every_bit_flip_in_the_last_record_is_torn() {
    let records = varied_records(20, 0x1a57);
    let (file, bounds) = journal(&records);
    let last = records.len() - 1;
    let mut cases = 0;
    for byte in bounds[last]..file.len() {
        for bit in 0..8 {
            let mut damaged = file.clone();
            damaged[byte] ^= 1 << bit;
            assert_eq!(
                decode(&damaged),
                Ok(expected(&records, &bounds, last)),
                "byte {byte}, bit {bit}"
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 8 * (file.len() - bounds[last]));
}

/// DESIGN.md "Durability rules": a length is checked against the maximum and
/// the bytes left before anything is allocated.
#[test]
fn hostile_length_prefixes_are_refused() {
    let records = varied_records(5, 0x1e9);
    let (file, bounds) = journal(&records);
    let after = encode_record(&Record::CheckpointCleared {
        step: "after".into(),
    })
    .unwrap();
    let hostile = [
        u32::MAX,
        MAX_RECORD_LEN + 1,
        MAX_RECORD_LEN,
        0,
        // Longer than what is left, even with a good record after it.
        u32::try_from(after.len() + 1).unwrap(),
    ];
    // The meter works: it sees an allocation it should.
    let (_, seen) = largest_allocation(|| vec![0u8; 100_000]);
    assert!(
        seen >= 100_000,
        "the counting allocator saw only {seen} bytes"
    );
    let mut cases = 0;
    for len in hostile {
        let mut frame = len.to_le_bytes().to_vec();
        frame.extend_from_slice(&[0xab; 4]); // a crc
        frame.extend_from_slice(&[0xcd; 3]); // a few payload bytes

        // As the last thing in the file: torn.
        let mut torn = file.clone();
        torn.extend_from_slice(&frame);
        let (got, largest) = largest_allocation(|| decode(&torn));
        assert_eq!(
            got,
            Ok(expected(&records, &bounds, records.len()).with_torn_tail()),
            "len {len}"
        );
        assert!(largest < 4096, "len {len}: allocated {largest} bytes");

        // Followed by a good record: corrupt.
        let mut corrupt = torn.clone();
        corrupt.extend_from_slice(&after);
        let (got, largest) = largest_allocation(|| decode(&corrupt));
        assert_eq!(
            got,
            Err(JournalError::Corrupt { offset: file.len() }),
            "len {len}"
        );
        assert!(largest < 4096, "len {len}: allocated {largest} bytes");

        // Written over a middle record's length: corrupt at that record.
        let mut overwritten = file.clone();
        overwritten[bounds[2]..bounds[2] + 4].copy_from_slice(&len.to_le_bytes());
        let (got, largest) = largest_allocation(|| decode(&overwritten));
        assert_eq!(
            got,
            Err(JournalError::Corrupt { offset: bounds[2] }),
            "len {len}"
        );
        assert!(largest < 4096, "len {len}: allocated {largest} bytes");
        cases += 3;
    }
    // A CRC-valid frame whose checkpoint claims a 2^40-byte resource payload:
    // refused inside the payload before a buffer is sized from the claim.
    let mut payload = vec![7u8, 1, 1, b's', 0, 1, b'k', 1, b'i']; // Checkpoint{..}
    payload.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 1, 0, 0]); // varint 2^40
    let mut inner = file.clone();
    inner.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_le_bytes());
    inner.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    inner.extend_from_slice(&payload);
    let (got, largest) = largest_allocation(|| decode(&inner));
    assert_eq!(
        got,
        Ok(expected(&records, &bounds, records.len()).with_torn_tail())
    );
    assert!(largest < 4096, "inner length: allocated {largest} bytes");
    cases += 1;

    // A frame header cut short (fewer than FRAME_HEADER_LEN bytes) is torn.
    for n in 1..FRAME_HEADER_LEN {
        let mut short = file.clone();
        short.resize(file.len() + n, 0xff);
        assert_eq!(
            decode(&short),
            Ok(expected(&records, &bounds, records.len()).with_torn_tail())
        );
        cases += 1;
    }
    assert_eq!(cases, 3 * hostile.len() + 1 + FRAME_HEADER_LEN - 1);
}

trait WithTornTail {
    fn with_torn_tail(self) -> Self;
}

impl WithTornTail for Decoded {
    /// The same valid prefix, followed by a torn record at its end.
    fn with_torn_tail(mut self) -> Self {
        self.tail = Tail::Torn {
            offset: self.valid_len,
        };
        self
    }
}

/// Every variant survives encode → frame → decode unchanged, alone and all
/// together in one journal.
#[test]
fn every_variant_round_trips() {
    let all = every_variant();
    let mut seen = [false; VARIANTS];
    for r in &all {
        seen[variant_index(r)] = true;
        let (file, _) = journal(std::slice::from_ref(r));
        let got = decode(&file).unwrap();
        assert_eq!(
            got,
            Decoded {
                records: vec![r.clone()],
                valid_len: file.len(),
                tail: Tail::Clean
            }
        );
    }
    assert!(
        seen.iter().all(|&s| s),
        "a variant is missing from every_variant()"
    );
    let (file, _) = journal(&all);
    assert_eq!(decode(&file).unwrap().records, all);
}

/// Empty input is a fresh journal, distinct from a torn header.
#[test]
fn empty_input_is_fresh_and_a_partial_header_is_torn() {
    assert_eq!(
        decode(&[]),
        Ok(Decoded {
            records: vec![],
            valid_len: 0,
            tail: Tail::Empty
        })
    );
    let header = encode_header();
    for n in 1..HEADER_LEN {
        assert_eq!(
            decode(&header[..n]),
            Ok(Decoded {
                records: vec![],
                valid_len: 0,
                tail: Tail::Torn { offset: 0 }
            })
        );
    }
    assert_eq!(decode(b"SQLite format 3\0"), Err(JournalError::BadMagic));
    let mut v2 = header.to_vec();
    v2[HEADER_LEN - 4..].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(decode(&v2), Err(JournalError::UnsupportedVersion(2)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No byte string after a valid header makes decode panic, and whatever
    /// it returns is self-consistent.
    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut file = encode_header().to_vec();
        file.extend_from_slice(&tail);
        if let Ok(d) = decode(&file) {
            prop_assert!(d.valid_len >= HEADER_LEN && d.valid_len <= file.len());
            match d.tail {
                Tail::Clean => prop_assert_eq!(d.valid_len, file.len()),
                Tail::Torn { offset } => prop_assert_eq!(offset, d.valid_len),
                Tail::Empty => prop_assert!(false, "non-empty input decoded as empty"),
            }
        }
    }

    /// No input at all (header or not) makes decode panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    /// Damage anywhere in a valid journal (overwrite a span, then maybe cut)
    /// never yields a record that was not written: the records returned are
    /// always a prefix of the originals.
    #[test]
    fn damage_never_yields_a_foreign_record(
        seed in any::<u64>(),
        at in any::<proptest::sample::Index>(),
        junk in proptest::collection::vec(any::<u8>(), 1..64),
        cut in any::<proptest::sample::Index>(),
    ) {
        let records = varied_records(12, seed);
        let (mut file, _) = journal(&records);
        let at = at.index(file.len());
        let end = (at + junk.len()).min(file.len());
        // The first byte the junk really changes (junk may repeat what was
        // there): damage starts here, not at `at`.
        let changed = (at..end).find(|&i| file[i] != junk[i - at]);
        file[at..end].copy_from_slice(&junk[..end - at]);
        let cut = cut.index(file.len() + 1);
        match decode(&file[..cut]) {
            Ok(d) => prop_assert_eq!(&d.records[..], &records[..d.records.len()]),
            Err(JournalError::Corrupt { offset }) => {
                let first = changed.ok_or_else(|| TestCaseError::fail("corrupt without damage"))?;
                prop_assert!(offset <= first, "corrupt at {} after the damage at {}", offset, first);
            }
            Err(e) => prop_assert!(
                changed.is_some_and(|first| first < HEADER_LEN),
                "header error {} without header damage", e
            ),
        }
    }
}
