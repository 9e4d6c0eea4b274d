//! Property tests of the trace reader (the only format it reads: the binary trace): traces
//! built from arbitrary fields and written by [`Trace::to_bytes`], valid traces mutated and
//! their checksum fixed, and raw bytes after a valid header. Whatever is accepted must hold
//! every bound the format promises (checked here independently, in 128-bit arithmetic), round
//! trip (to the same bytes, unless the command was not UTF-8: it is kept lossily), and plan
//! within the files' sizes; nothing may panic.
//!
//! The normal suite runs [`CASES`] inputs per property (a second or two). To fuzz for long:
//! `PAGEWISE_FUZZ_SECS=600 cargo test --release -p pagewise-core trace::format::fuzz` runs
//! each property for that many seconds with fresh random seeds and prints the inputs tried.

use super::*;
use crate::fuzzing::fuzz;
use crate::replay::MAX_EXTRA_REQUESTS;
use crate::trace::file_ranges;
use proptest::prelude::*;

/// Inputs per property in the normal test suite.
const CASES: u32 = 400;

/// Values where bounds break: 0, 1, powers of two and their neighbours, the maximum.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..70,
        (0u32..64, -2i64..=2).prop_map(|(s, d)| (1u64 << s).wrapping_add(d as u64)),
        Just(u64::MAX),
        Just(i64::MAX as u64),
    ]
}

fn edgy_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..70,
        (0u32..32, -2i32..=2).prop_map(|(s, d)| (1u32 << s).wrapping_add(d as u32)),
        Just(u32::MAX),
    ]
}

fn arb_file() -> impl Strategy<Value = TraceFile> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        edgy_u64(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
        any::<bool>(),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 5..=132)),
    )
        .prop_map(
            |(dev_major, dev_minor, ino, size, path, deleted, handle)| TraceFile {
                dev_major,
                dev_minor,
                ino,
                size,
                path: path
                    .as_ref()
                    .map(|p| String::from_utf8_lossy(p).into_owned()),
                path_bytes: path,
                deleted,
                handle,
            },
        )
}

fn arb_trace() -> impl Strategy<Value = Trace> {
    let event = (any::<u64>(), 0u32..5, any::<u32>(), edgy_u64(), edgy_u32()).prop_map(
        |(ts_ns, file, pid, index, pages)| Event {
            ts_ns,
            file,
            pid,
            index,
            pages,
        },
    );
    let fault =
        (any::<u64>(), 0u32..5, any::<u32>(), edgy_u64()).prop_map(|(ts_ns, file, pid, index)| {
            Fault {
                ts_ns,
                file,
                pid,
                index,
            }
        });
    (
        prop_oneof![
            Just(4096u32),
            Just(512),
            Just(65536),
            Just(1 << 21),
            edgy_u32()
        ],
        proptest::collection::vec(proptest::collection::vec(any::<char>(), 0..6), 0..3),
        proptest::collection::vec(arb_file(), 0..4),
        proptest::collection::vec(event, 0..10),
        proptest::option::of(proptest::collection::vec(fault, 0..6)),
        any::<(u64, u64, u64)>(),
    )
        .prop_map(
            |(page_size, command, files, events, faults, (lost, started, dur))| Trace {
                version: VERSION,
                page_size,
                lost_events: lost,
                started_unix_ns: started,
                duration_ns: dur,
                command: command.into_iter().map(String::from_iter).collect(),
                files,
                events,
                faults,
            },
        )
}

/// The bounds, computed independently of the reader (128-bit, no checked arithmetic).
fn within_bounds(t: &Trace) -> bool {
    let page = t.page_size as u128;
    let max = i64::MAX as u128;
    let n = t.files.len() as u64;
    t.version == VERSION
        && t.page_size.is_power_of_two()
        && (512..=1 << 21).contains(&t.page_size)
        && t.files.iter().all(|f| (f.size as u128) <= max)
        && t.events.iter().all(|e| {
            (e.file as u64) < n
                && e.pages.is_power_of_two()
                && e.pages <= 1 << 20
                && (e.index as u128 + e.pages as u128) * page <= max + 1
        })
        && t.faults
            .iter()
            .flatten()
            .all(|f| (f.file as u64) < n && (f.index as u128 + 1) * page <= max + 1)
}

/// What every accepted trace must be: within bounds, the same bytes written back, and every
/// plan of it within the files' ends, non-empty, and bounded in count.
fn accepted(t: &Trace, bytes: &[u8], ends_seed: &[u64]) -> Result<(), TestCaseError> {
    prop_assert!(within_bounds(t), "accepted out of bounds: {t:?}");
    prop_assert!(t.check().is_ok());
    // Written back, it reads the same; byte for byte unless an argument of the command was
    // not UTF-8 (kept lossily, as documented: found by this test).
    let again = t.to_bytes();
    let reread = Trace::from_bytes(&again);
    prop_assert_eq!(reread.as_ref(), Ok(t));
    if again != bytes {
        prop_assert!(t
            .command
            .iter()
            .any(|a| a.contains(char::REPLACEMENT_CHARACTER)));
    }
    let _ = t.bytes();
    let mut sink = std::io::sink();
    crate::trace::write_text(t, true, &mut sink).unwrap();
    let ends: Vec<u64> = (0..t.files.len())
        .map(|i| ends_seed.get(i).copied().unwrap_or(u64::MAX))
        .collect();
    for gap in [0, 4096, u64::MAX] {
        let ranges = file_ranges(t, gap, &ends).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(ranges.len() <= t.events.len());
        for &(f, off, len) in &ranges {
            prop_assert!(len > 0 && off.checked_add(len).is_some_and(|e| e <= ends[f as usize]));
        }
    }
    for order in [crate::replay::Order::Recorded, crate::replay::Order::File] {
        for max_request in [1u64 << 20, 64 << 20] {
            let settings = crate::replay::Settings {
                order,
                direct: false,
                merge_gap: 0,
                depth: None,
                max_request,
            };
            plan_bounded(t, &ends, &settings)?;
        }
    }
    Ok(())
}

/// The plan of `t` with `settings`, unless too large, is within the files' `ends`, non-empty,
/// and bounded in count and request size.
fn plan_bounded(
    t: &Trace,
    ends: &[u64],
    settings: &crate::replay::Settings,
) -> Result<(), TestCaseError> {
    let files = crate::trace::OpenFiles::default();
    let reqs = match crate::replay::plan_within(t, &files, ends, settings) {
        Ok(reqs) => reqs,
        Err(crate::Error::Trace(TraceError::TooLarge(_))) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(e.to_string())),
    };
    let limit = t.events.len() as u64 + MAX_EXTRA_REQUESTS;
    prop_assert!(reqs.len() as u64 <= limit);
    for r in &reqs {
        let max = settings.max_request.max(t.page_size as u64);
        prop_assert!(r.len > 0 && r.len <= max);
        prop_assert!(r.off + r.len <= ends[r.file as usize]);
    }
    Ok(())
}

fn fix_checksum(b: &mut [u8]) {
    if b.len() >= 8 {
        let n = b.len() - 8;
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
        b[n..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Small ends: most traced pages past them (files that shrank), some inside.
fn arb_ends() -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(prop_oneof![Just(0u64), 0u64..1 << 24, edgy_u64()], 0..5)
}

/// A trace of arbitrary fields, as pagewise's writer writes it: accepted exactly when every
/// field is within bounds, and then round-trips.
#[test]
fn written_traces_are_accepted_exactly_within_bounds() {
    fuzz("written", CASES, (arb_trace(), arb_ends()), |(t, ends)| {
        let b = t.to_bytes();
        match Trace::from_bytes(&b) {
            Ok(got) => {
                prop_assert_eq!(&got.events, &t.events);
                accepted(&got, &b, &ends)
            }
            Err(e) => {
                prop_assert!(!within_bounds(&t), "refused within bounds: {e}: {t:?}");
                prop_assert!(t.check().is_err());
                Ok(())
            }
        }
    });
}

/// One change to a trace's bytes: a field overwritten with an edge value, a byte flipped,
/// bytes inserted or cut.
#[derive(Debug, Clone)]
enum Mutation {
    U32(usize, u32),
    U64(usize, u64),
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Truncate(usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), edgy_u32()).prop_map(|(i, v)| Mutation::U32(i, v)),
        3 => (any::<usize>(), edgy_u64()).prop_map(|(i, v)| Mutation::U64(i, v)),
        2 => (any::<usize>(), 1u8..=255).prop_map(|(i, v)| Mutation::Flip(i, v)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(b: &mut Vec<u8>, m: &Mutation) {
    let n = b.len().max(1);
    match *m {
        Mutation::U32(i, v) if b.len() >= 4 => {
            let i = i % (b.len() - 3);
            b[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::U64(i, v) if b.len() >= 8 => {
            let i = i % (b.len() - 7);
            b[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::Flip(i, v) if !b.is_empty() => b[i % n] ^= v,
        Mutation::Insert(i, ref v) => {
            let i = i % (b.len() + 1);
            b.splice(i..i, v.iter().copied());
        }
        Mutation::Truncate(i) => b.truncate(i % n),
        _ => {}
    }
}

/// A valid trace, mutated, its checksum fixed (as an attacker would): an error, or a trace
/// within bounds that is exactly those bytes.
#[test]
fn mutated_traces_with_a_fixed_checksum_are_refused_or_within_bounds() {
    let valid = (arb_trace(), any::<u64>()).prop_map(|(mut t, seed)| {
        // Make it valid: a real page size, events and faults on its files, within bounds.
        t.page_size = 4096;
        let n = t.files.len() as u32;
        for f in &mut t.files {
            f.size %= 1 << 40;
        }
        for (i, e) in t.events.iter_mut().enumerate() {
            e.file = if n == 0 { 0 } else { e.file % n };
            e.pages = 1 << ((seed >> (i % 60)) % 21);
            e.index %= 1 << 30;
        }
        for f in t.faults.iter_mut().flatten() {
            f.file = if n == 0 { 0 } else { f.file % n };
            f.index %= 1 << 30;
        }
        if n == 0 {
            t.events.clear();
            t.faults = t.faults.map(|_| Vec::new());
        }
        t
    });
    let input = (
        valid,
        proptest::collection::vec(arb_mutation(), 1..5),
        any::<bool>(),
        arb_ends(),
    );
    fuzz("mutated", CASES, input, |(t, ms, fix, ends)| {
        let mut b = t.to_bytes();
        prop_assert!(Trace::from_bytes(&b).is_ok(), "the base is valid");
        for m in &ms {
            mutate(&mut b, m);
        }
        if fix {
            fix_checksum(&mut b);
        }
        if let Ok(got) = Trace::from_bytes(&b) {
            accepted(&got, &b, &ends)?;
        }
        Ok(())
    });
}

/// Arbitrary bytes after a valid magic and version (and a fixed checksum): no panic, and
/// anything accepted is within bounds.
#[test]
fn raw_bytes_after_a_valid_header_never_panic() {
    let input = (
        proptest::collection::vec(any::<u8>(), 0..400),
        any::<u32>(),
        arb_ends(),
    );
    fuzz("raw", CASES, input, |(tail, page_size, ends)| {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        // A valid page size half the time, so the parser goes past the header.
        let page = if page_size & 1 == 0 { 4096 } else { page_size };
        b.extend_from_slice(&page.to_le_bytes());
        b.extend_from_slice(&tail);
        fix_checksum(&mut b);
        if let Ok(got) = Trace::from_bytes(&b) {
            accepted(&got, &b, &ends)?;
        }
        Ok(())
    });
}
