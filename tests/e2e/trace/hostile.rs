//! End-to-end tests of traces pagewise cannot trust: corrupt or crafted files (every field
//! bounded, nothing outside the named pages touched), oversized traces and page counts, traces
//! with nothing to do (exit 3), and traced files replaced by FIFOs (refused, never blocked on).

use crate::common::*;
use pagewise_core::trace::Trace;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::Command;

#[test]
fn corrupt_traces_are_rejected_with_a_clear_error() {
    let t = tmp();
    let bad = t.path().join("bad.trace");
    fs::write(&bad, b"PWTRACE\0\x01\x00\x00\x00trunc").unwrap();
    for args in [
        vec!["replay"],
        vec!["show"],
        vec!["evict", "--trace"],
        vec!["load", "--trace"],
    ] {
        let out = run(bin().args(&args).arg(&bad));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("truncated trace"),
            "{args:?}"
        );
    }
    fs::write(&bad, b"not a trace at all").unwrap();
    let out = run(bin().arg("replay").arg(&bad));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pagewise trace"));
}

/// A trace naming `file` as it is now (device, inode, size, path) with the given events
/// `(index, pages)`, as bytes written by pagewise's own writer (valid checksum).
fn crafted(file: &Path, events: &[(u64, u32)]) -> Trace {
    use pagewise_core::trace::{Event, TraceFile};
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(file).unwrap();
    Trace {
        page_size: PAGE as u32,
        files: vec![TraceFile {
            dev_major: libc::major(m.dev()),
            dev_minor: libc::minor(m.dev()),
            ino: m.ino(),
            size: m.size(),
            path: Some(file.to_string_lossy().into_owned()),
            path_bytes: Some(file.to_string_lossy().into_owned().into_bytes()),
            deleted: false,
            handle: None,
        }],
        events: events
            .iter()
            .enumerate()
            .map(|(i, &(index, pages))| Event {
                ts_ns: i as u64 * 1000,
                file: 0,
                pid: 1,
                index,
                pages,
            })
            .collect(),
        ..Trace::default()
    }
}

/// Byte offset of event `i`'s fields in a trace without a fault section: the events are the
/// last section, 28 bytes each, before the 8-byte checksum.
fn event_at(b: &[u8], nevents: usize, i: usize) -> usize {
    b.len() - 8 - (nevents - i) * 28
}

/// Sets the checksum as the format computes it: xxh3-64 of every byte before it.
fn fix_checksum(b: &mut [u8]) {
    let n = b.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
}

/// A trace of `file` with events `(index, pages)` set in the bytes (as an attacker would:
/// pagewise's writer writes placeholder events, the fields are altered after), the checksum
/// fixed.
fn altered(file: &Path, events: &[(u64, u32)]) -> Vec<u8> {
    let placeholder: Vec<(u64, u32)> = events.iter().map(|_| (0, 1)).collect();
    let mut b = crafted(file, &placeholder).to_bytes();
    let n = events.len();
    for (i, &(index, pages)) in events.iter().enumerate() {
        let at = event_at(&b, n, i);
        b[at + 16..at + 24].copy_from_slice(&index.to_le_bytes());
        b[at + 24..at + 28].copy_from_slice(&pages.to_le_bytes());
    }
    fix_checksum(&mut b);
    b
}

/// Runs pagewise with stdout to a file (never a device) and a deadline: None when it had to
/// be killed, else its status and stderr.
fn run_bounded(
    args: &[&str],
    trace: &Path,
    out: &Path,
    secs: u64,
) -> Option<(std::process::ExitStatus, String)> {
    let mut child = bin()
        .args(args)
        .arg(trace)
        .stdout(File::create(out).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            eprintln!("--- {args:?}: {status:?}\n{err}");
            return Some((status, err));
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            eprintln!("--- {args:?}: killed after {secs} s");
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A cached file of `pages` pages: every page in the page cache (checked).
fn cached_file(p: &Path, pages: u64) {
    write_pages(p, pages);
    fs::read(p).unwrap();
    assert_eq!(cached(p), pages, "set-up: all of {} cached", p.display());
}

/// Page indexes whose byte offset wraps past 2^64 (to page 0 and page 10), and one past any
/// possible file: a trace naming them cannot be true, is refused with an error naming the
/// trace, and `evict --trace` drops nothing, not the pages the offsets wrap to.
#[test]
fn evict_by_a_trace_with_wrapping_offsets_drops_nothing_else() {
    let t = tmp();
    let data = t.path().join("data");
    cached_file(&data, 64);
    let trace = t.path().join("wrap.trace");
    // Pages 0 and 10 are what 2^52 and 2^52 + 10 wrap to with 4 KiB pages.
    let cases = [
        1u64 << 52,
        (1 << 52) + 10,
        1 << 62,
        u64::MAX - 1,
        (1 << 51) + 3,
    ];
    let mut runs = Vec::new();
    for bad in cases {
        fs::write(&trace, altered(&data, &[(5, 1), (bad, 1)])).unwrap();
        fs::read(&data).unwrap();
        let (status, err) =
            run_bounded(&["evict", "--trace"], &trace, &t.path().join("out"), 15).unwrap();
        let dropped: Vec<u64> = (0..64).filter(|&p| !page_cached(&data, p)).collect();
        runs.push((bad, dropped, status, err));
    }
    // What the kernel shows first: no page outside the trace dropped, in any case.
    for (bad, dropped, _, _) in &runs {
        assert!(
            dropped.iter().all(|&p| p == 5),
            "index {bad}: pages not in the trace dropped: {dropped:?}"
        );
    }
    for (bad, _, status, err) in &runs {
        assert_eq!(status.code(), Some(1), "index {bad}: refused");
        assert!(
            err.contains(&trace.display().to_string()) && err.contains("event 1"),
            "index {bad}: the error names the trace and the event: {err}"
        );
    }
}

/// Pages past the file's end (it may have shrunk since the recording) are clipped at use
/// time: the pages of the trace inside the file are dropped, nothing else, and the report
/// counts only what lies inside the file.
#[test]
fn evict_by_a_trace_past_the_end_of_the_file_drops_only_the_pages_inside_it() {
    let t = tmp();
    let data = t.path().join("data");
    cached_file(&data, 64);
    let trace = t.path().join("eof.trace");
    fs::write(
        &trace,
        altered(&data, &[(5, 1), (1 << 40, 1), (64, 4), (62, 4)]),
    )
    .unwrap();
    let out = run(bin().args(["evict", "--json", "--trace"]).arg(&trace));
    assert_eq!(out.status.code(), Some(0));
    let dropped: Vec<u64> = (0..64).filter(|&p| !page_cached(&data, p)).collect();
    assert_eq!(dropped, vec![5, 62, 63]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bytes"].as_u64(), Some(3 * PAGE));
    assert_eq!(v["ranges"].as_u64(), Some(2), "ranges inside the file");
}

/// Page counts near 2^32 in one event (a folio is at most 1 << 20 pages): every verb refuses
/// the trace at once with an error naming it (exit 1, not a signal, not minutes of work), and
/// `evict --trace` leaves the whole file cached.
#[test]
fn huge_page_counts_are_refused_at_once() {
    let t = tmp();
    let data = t.path().join("data");
    cached_file(&data, 64);
    let trace = t.path().join("big.trace");
    for pages in [u32::MAX, 1 << 31, (1 << 20) + 1, 3] {
        let events: Vec<(u64, u32)> = (0..8).map(|i| (i << 33, pages)).collect();
        fs::write(&trace, altered(&data, &events)).unwrap();
        for args in [
            &["evict", "--trace"][..],
            &["load", "--trace"],
            &["replay", "--order", "recorded"],
            &["replay", "--order", "file"],
            &["show", "--format", "text"],
        ] {
            let got = run_bounded(args, &trace, &t.path().join("out"), 15);
            let (status, err) = got.unwrap_or_else(|| panic!("{args:?} {pages}: still running"));
            assert_eq!(
                status.code(),
                Some(1),
                "{args:?} {pages}: an error, not a signal"
            );
            assert!(
                err.contains(&trace.display().to_string()) && err.contains("pages"),
                "{args:?} {pages}: {err}"
            );
        }
        assert_eq!(cached(&data), 64, "{pages}: nothing dropped");
    }
}

/// A trace file that never ends (or is far larger than any recording) is refused with an
/// error, not read into memory until the machine runs out.
#[test]
fn an_oversized_trace_file_is_refused() {
    let t = tmp();
    let big = t.path().join("big.trace");
    let f = File::create(&big).unwrap();
    // Sparse: 1 TiB of nothing after a valid magic and version.
    f.set_len(1 << 40).unwrap();
    let mut w = &f;
    w.write_all(b"PWTRACE\0\x01\0\0\0").unwrap();
    let (status, err) = run_bounded(&["show"], &big, &t.path().join("out"), 15).unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(err.contains("big.trace") && err.contains("larger"), "{err}");
}

/// The exit code of a trace-driven verb that found nothing to act on.
const NOTHING_TO_DO: i32 = 3;

fn assert_nothing_to_do(trace: &Path, why: &str) {
    for args in [
        &["evict", "--trace"][..],
        &["evict", "--dry-run", "--trace"],
        &["load", "--trace"],
        &["load", "--json", "--trace"],
        &["replay"],
        &["replay", "--compare", "--runs", "1"],
    ] {
        let out = run(bin().args(args).arg(trace));
        assert_eq!(out.status.code(), Some(NOTHING_TO_DO), "{why}: {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("nothing to do") && err.contains(&trace.display().to_string()),
            "{why}: {args:?}: {err}"
        );
    }
}

#[test]
fn an_empty_trace_is_nothing_to_do() {
    let t = tmp();
    let trace = t.path().join("empty.trace");
    fs::write(&trace, Trace::default().to_bytes()).unwrap();
    assert_nothing_to_do(&trace, "empty");
    // show has something to show: the (empty) trace.
    assert!(run(bin().arg("show").arg(&trace)).status.success());
}

#[test]
fn a_trace_whose_files_are_all_gone_or_shrunk_is_nothing_to_do() {
    let t = tmp();
    let gone = t.path().join("gone");
    write_pages(&gone, 8);
    let trace = t.path().join("gone.trace");
    fs::write(&trace, crafted(&gone, &[(0, 1), (4, 2)]).to_bytes()).unwrap();
    fs::remove_file(&gone).unwrap();
    assert_nothing_to_do(&trace, "deleted");
    // Truncated since: every traced page now lies past its end.
    let shrunk = t.path().join("shrunk");
    write_pages(&shrunk, 8);
    let trace = t.path().join("shrunk.trace");
    fs::write(&trace, crafted(&shrunk, &[(4, 2), (6, 1)]).to_bytes()).unwrap();
    File::options()
        .write(true)
        .open(&shrunk)
        .unwrap()
        .set_len(PAGE)
        .unwrap();
    assert_nothing_to_do(&trace, "shrunk");
}

/// Recording a program whose files are all cached gives an empty trace: record says so (and
/// how to record a cold start), and the verbs that act on the trace exit 3.
#[test]
fn recording_cached_files_says_the_trace_is_empty() {
    if !can_trace() {
        return;
    }
    let t = tmp();
    let data = t.path().join("data");
    cached_file(&data, 16);
    let trace = t.path().join("hot.trace");
    // The first run brings cat and its libraries in; the recorded one reads only cached pages.
    // Its output goes to a pipe: pages written to a file would be pages added to the cache.
    let mut err = String::new();
    for _ in 0..3 {
        assert!(Command::new("cat")
            .arg(&data)
            .output()
            .unwrap()
            .status
            .success());
        let out = run(bin()
            .args(["record", "-o"])
            .arg(&trace)
            .args(["--", "cat"])
            .arg(&data));
        assert!(out.status.success());
        err = String::from_utf8_lossy(&out.stderr).into_owned();
        if Trace::from_bytes(&fs::read(&trace).unwrap())
            .unwrap()
            .events
            .is_empty()
        {
            break;
        }
    }
    assert!(
        Trace::from_bytes(&fs::read(&trace).unwrap())
            .unwrap()
            .events
            .is_empty(),
        "a recording of cached files is empty"
    );
    assert!(
        err.contains("0 pages read from disk") && err.contains("evict"),
        "record says the trace is empty and how to record a cold start: {err}"
    );
    assert_nothing_to_do(&trace, "recorded hot");
}

/// A valid trace can claim 2^20 pages per 28-byte event: `show --format text` (a line per
/// page) refuses more than 2^32 lines at once instead of printing for days; grouped shows it.
#[test]
fn show_text_of_more_pages_than_it_prints_is_refused() {
    let t = tmp();
    let data = t.path().join("data");
    write_pages(&data, 1);
    let trace = t.path().join("many.trace");
    let events: Vec<(u64, u32)> = (0..4097).map(|i| (i << 20, 1 << 20)).collect();
    fs::write(&trace, crafted(&data, &events).to_bytes()).unwrap();
    let out = t.path().join("out");
    let (status, err) = run_bounded(&["show", "--format", "text"], &trace, &out, 15)
        .expect("refused at once, not printing for days");
    assert_eq!(status.code(), Some(1));
    assert!(
        err.contains("many.trace") && err.contains("--format grouped"),
        "{err}"
    );
    let (status, _) = run_bounded(&["show", "--format", "grouped"], &trace, &out, 15).unwrap();
    assert!(status.success());
    let text = fs::read_to_string(&out).unwrap();
    assert!(
        text.contains(&format!("{} 0 {}", data.display(), 4097u64 << 32)),
        "{text}"
    );
}

/// Records `cat F`, lets `replace` put a FIFO at F, then checks that `replay --direct` and
/// `evict --trace` end within 10 s, exit 2 and say it is a FIFO.
fn fifo_case(replace: fn(&Path)) {
    let t = tmp();
    let f = t.path().join("F");
    let trace = t.path().join("T");
    cold_file(&f, 64 << 10);
    record_trace(t.path(), &trace, &f);
    replace(&f);
    let m = fs::symlink_metadata(&f).unwrap();
    assert!(
        std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()),
        "setup: F is a FIFO"
    );

    let (out, _) = run_deadline(bin().args(["replay", "--direct"]).arg(&trace), 10);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).to_lowercase().contains("fifo"),
        "{}",
        stderr(&out)
    );

    let (out, _) = run_deadline(bin().args(["evict", "--trace"]).arg(&trace), 10);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.to_lowercase().contains("fifo"), "{err}");
    assert!(!err.contains("Illegal seek"), "{err}");
}

/// `rm F; mkfifo F`: ext4 usually gives the FIFO the freed inode number again.
#[test]
fn traced_file_replaced_by_a_fifo_is_refused_without_blocking() {
    if !require_root("tracing (record)") {
        return;
    }
    fifo_case(|f| {
        fs::remove_file(f).unwrap();
        mkfifo(f);
    });
}

/// The FIFO made beside F and renamed over it: it cannot have F's inode number.
#[test]
fn traced_file_replaced_by_a_fifo_with_a_new_inode_is_refused() {
    if !require_root("tracing (record)") {
        return;
    }
    fifo_case(|f| {
        let new = f.with_file_name("F.fifo");
        mkfifo(&new);
        fs::rename(&new, f).unwrap();
    });
}
