//! Round trips, every truncation, bad magic and version, and a deterministic fuzzer.

use super::*;

fn sample() -> Trace {
    Trace {
        version: VERSION,
        page_size: 4096,
        lost_events: 3,
        started_unix_ns: 1_700_000_000_000_000_000,
        duration_ns: 123_456,
        command: vec!["python3".into(), "-c".into(), "import json".into()],
        files: vec![
            TraceFile {
                dev_major: 254,
                dev_minor: 0,
                ino: 42,
                size: 1 << 20,
                path: Some("/usr/lib/x.so".into()),
                path_bytes: Some(b"/usr/lib/x.so".to_vec()),
                deleted: false,
                handle: Some(vec![1, 0, 0, 0, 42, 0, 0, 0, 7, 7, 7, 7]),
            },
            TraceFile {
                dev_major: 0,
                dev_minor: 25,
                ino: 7,
                size: 0,
                path: None,
                path_bytes: None,
                deleted: true,
                handle: None,
            },
        ],
        events: (0..50)
            .map(|i| Event {
                ts_ns: i * 1000,
                file: (i % 2) as u32,
                pid: 100,
                index: i * 4,
                pages: 1 << (i % 3),
            })
            .collect(),
        faults: Some(
            (0..20)
                .map(|i| Fault {
                    ts_ns: i * 700,
                    file: (i % 2) as u32,
                    pid: 101,
                    index: i * 3,
                })
                .collect(),
        ),
    }
}

#[test]
fn round_trips() {
    let t = sample();
    let b = t.to_bytes();
    assert_eq!(Trace::from_bytes(&b).unwrap(), t);
    let mut t = sample();
    t.faults = None;
    assert_eq!(Trace::from_bytes(&t.to_bytes()).unwrap(), t);
    // A fault section without the header flag (or the flag without the section) is refused.
    let mut b = t.to_bytes();
    b[12] = 1;
    let n = b.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    assert!(Trace::from_bytes(&b).is_err());
}

/// The same trace in the version-1 layout: no handle field after each path.
fn version_1_bytes(t: &Trace) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    b.extend_from_slice(&VERSION_1.to_le_bytes());
    let flags = if t.faults.is_some() { HAS_FAULTS } else { 0 };
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(&t.page_size.to_le_bytes());
    for v in [t.lost_events, t.started_unix_ns, t.duration_ns] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&(t.command.len() as u32).to_le_bytes());
    for a in &t.command {
        put_bytes(&mut b, a.as_bytes());
    }
    b.extend_from_slice(&(t.files.len() as u32).to_le_bytes());
    for f in &t.files {
        b.extend_from_slice(&(((f.dev_major as u64) << 32) | f.dev_minor as u64).to_le_bytes());
        b.extend_from_slice(&f.ino.to_le_bytes());
        b.extend_from_slice(&f.size.to_le_bytes());
        let flags = if f.path_bytes.is_some() {
            FILE_PATH_KNOWN
        } else {
            0
        } | if f.deleted { FILE_DELETED } else { 0 };
        b.extend_from_slice(&flags.to_le_bytes());
        put_bytes(&mut b, f.path_bytes.as_deref().unwrap_or(b""));
    }
    write_section(&mut b, &t.events);
    if let Some(faults) = &t.faults {
        write_section(&mut b, faults);
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

#[test]
fn version_1_traces_are_still_read_and_handles_are_kept_in_version_2() {
    let t = sample();
    assert_eq!(t.files[0].handle.as_ref().map(Vec::len), Some(12));
    let got = Trace::from_bytes(&t.to_bytes()).unwrap();
    assert_eq!(got.version, VERSION);
    assert_eq!(got.files[0].handle, t.files[0].handle);
    let old = Trace::from_bytes(&version_1_bytes(&t)).unwrap();
    assert_eq!(old.version, VERSION_1);
    assert_eq!(old.files[0].handle, None);
    assert_eq!(old.files[0].path_bytes, t.files[0].path_bytes);
    assert_eq!(old.events, t.events);
    // A version-1 file with the handle flag is refused (the flag did not exist then).
    let mut v1 = sample();
    v1.files[0].deleted = false;
    let mut b = version_1_bytes(&v1);
    // The first file's flags: after the header (44 bytes), the command and nfiles, then its
    // device, inode and size.
    let command: usize = v1.command.iter().map(|a| 4 + a.len()).sum();
    let flags_at = 44 + 4 + command + 4 + 24;
    assert_eq!(b[flags_at], FILE_PATH_KNOWN as u8);
    b[flags_at] |= FILE_HANDLE_KNOWN as u8;
    let n = b.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    assert!(Trace::from_bytes(&b).is_err());
}

#[test]
fn every_truncation_is_rejected() {
    let b = sample().to_bytes();
    for n in 0..b.len() {
        assert!(
            Trace::from_bytes(&b[..n]).is_err(),
            "truncated at {n} accepted"
        );
    }
}

#[test]
fn bad_magic_and_version() {
    let mut b = sample().to_bytes();
    b[0] = b'X';
    assert_eq!(Trace::from_bytes(&b), Err(TraceError::BadMagic));
    let mut b = sample().to_bytes();
    b[8] = 9;
    assert_eq!(
        Trace::from_bytes(&b),
        Err(TraceError::UnsupportedVersion(9))
    );
}

/// A deterministic fuzzer: random byte flips, insertions and garbage must give an error (or,
/// for flips that keep the checksum valid — practically never — a valid trace), never a panic
/// or a huge allocation.
#[test]
fn fuzz_mutations_never_panic() {
    let base = sample().to_bytes();
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let mut b = base.clone();
        match rnd() % 4 {
            0 => {
                let i = (rnd() as usize) % b.len();
                b[i] ^= 1 << (rnd() % 8);
            }
            1 => {
                let i = (rnd() as usize) % b.len();
                b.insert(i, rnd() as u8);
            }
            2 => {
                let i = (rnd() as usize) % b.len();
                b.truncate(i);
            }
            _ => {
                // Huge counts in the length fields.
                let i = 8 + (rnd() as usize) % (b.len() - 12);
                b[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }
        if let Ok(t) = Trace::from_bytes(&b) {
            assert_eq!(t.to_bytes(), b, "only a checksum-valid file parses");
        }
    }
    for len in 0..64 {
        let garbage: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        assert!(Trace::from_bytes(&garbage).is_err());
    }
}

/// Fields with a valid checksum that no recording can hold: a page whose byte offset wraps
/// past 2^64 or lies past 2^63, a page count that is not a folio's, a file larger than any
/// file. Each is refused, naming the record.
#[test]
fn fields_that_cannot_be_true_are_refused_with_a_valid_checksum() {
    let refused = |t: &Trace, what: &str| {
        assert!(t.check().is_err(), "{what}: check");
        match Trace::from_bytes(&t.to_bytes()) {
            Err(TraceError::Corrupt(m)) => assert!(m.contains(what), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        }
    };
    for (index, pages) in [
        (1u64 << 62, 1u32),
        ((1 << 52) + 10, 1),
        ((1 << 51) - 1, 2),
        (u64::MAX, 1),
        (0, u32::MAX),
        (0, 1 << 31),
        (0, (1 << 20) * 2),
        (0, 3),
        (0, 0),
    ] {
        let mut t = sample();
        t.events[7].index = index;
        t.events[7].pages = pages;
        refused(&t, "event 7");
    }
    let mut t = sample();
    t.faults.as_mut().unwrap()[3].index = 1 << 52;
    refused(&t, "fault 3");
    let mut t = sample();
    t.files[1].size = 1 << 63;
    refused(&t, "file 1");
    // The largest that can be: the last page below 2^63 (Linux's largest page index with
    // 4 KiB pages), a folio of 2^20 pages.
    let mut t = sample();
    t.events[7].index = (1 << 51) - 1;
    t.events[7].pages = 1;
    t.events[8].pages = 1 << 20;
    assert_eq!(Trace::from_bytes(&t.to_bytes()), Ok(t));
}
